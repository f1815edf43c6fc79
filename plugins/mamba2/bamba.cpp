// bamba.cpp - bamba: a hybrid of Mamba-2 layers and attention layers (BambaForCausalLM).
//
// Pre-norm layers, each a Mamba-2 mixer ("mamba") or rotary attention ("self_attn") by
// attn_layer_indices, then the gated MLP ("feed_forward") after pre_ff_layernorm. The attention
// rotates half of each head (BambaConfig hardcodes partial_rotary_factor 0.5 unless
// rope_parameters says otherwise).
#include "pack.hpp"

#include <algorithm>

#include "mobius/sdk/decoder_config.hpp"

namespace mobius_mamba2 {
namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// BambaConfig's defaults (configuration_bamba.py) for keys a config.json may omit.
const mobius::DecoderDefaults kDefaults{128000, 4096, 14336, 32, 32, 8, 0, 262144, 1e-5,
                                        10000.0, 0, false, "silu", "hidden_act", 0.5};

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "bamba", kDefaults);
  // layers_block_type is computed, not stored: full attention at attn_layer_indices.
  const std::vector<int64_t> attn = r.get_ints("attn_layer_indices", std::vector<int64_t>{});
  for (int64_t i : attn)
    if (i < 0 || i >= c.num_hidden_layers)
      r.fail("attn_layer_indices", "has layer " + std::to_string(i) + ", not one of the " +
                                       std::to_string(c.num_hidden_layers) + " layers");
  c.layer_types.clear();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    c.layer_types.push_back(std::count(attn.begin(), attn.end(), i) ? "full_attention" : "linear_attention");
  c.sliding_window = 0;
  // BambaConfig passes partial_rotary_factor 0.5 whatever the top level says; only the rope's
  // own dict (rope_parameters or rope_scaling) overrides it.
  auto own = [&](const char* key) {
    const json& v = r.raw().contains(key) ? r.raw().at(key) : json();
    return v.is_object() && v.contains("partial_rotary_factor") && !v.at("partial_rotary_factor").is_null();
  };
  if (!own("rope_parameters") && !own("rope_scaling")) c.rope.partial_rotary_factor = 0.5;
  nn::Mamba2Config m = nn::read_mamba2_config(r, c.hidden_size, mamba_prefixed_keys(), mamba_prefixed_defaults());
  c.validate();
  json j = c;
  j["mamba2"] = m;
  return j;
}

void build(mobius::BuildContext& ctx, const json& j) {
  const auto cfg = j.get<ArchitectureConfig>();
  const auto mixer = j.at("mamba2").get<nn::Mamba2Config>();
  nn::DecoderSpec spec;
  spec.names.final_norm = "final_layernorm";
  spec.names.post_attention_norm = "pre_ff_layernorm";
  spec.names.feed_forward = "feed_forward";
  spec.names.mixer_by_layer_type = {{"linear_attention", "mamba"}};
  spec.mixer = nn::mixer_by_layer_type(
      {{"linear_attention", nn::mamba2_mixer(mixer)}, {"full_attention", nn::attention_mixer()}});
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

}  // namespace

void register_bamba(mobius::PluginRegistrar& r) { r.add("bamba", "text-generation", parse, build); }

}  // namespace mobius_mamba2
