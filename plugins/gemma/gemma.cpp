// gemma.cpp - the gemma family: gemma, gemma2, gemma3_text, vaultgemma.
//
// What Gemma shares with llama comes from the SDK (attention, MLP, decoder layers); what is
// Gemma's own is data: (1 + w) norms (OffsetRMSNorm), embeddings scaled by sqrt(hidden_size),
// query_pre_attn_scalar, soft-capping, sandwich norms, and the local/global layer pattern with
// its two rope tables.
#include <cmath>
#include <map>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_<type>.py defaults (Gemma (current transformers) reads hidden_act,
// Gemma 2 and 3 hidden_activation, with their soft-caps).
const std::map<std::string, mobius::DecoderDefaults>& defaults() {
  static const std::map<std::string, mobius::DecoderDefaults> d = {
      {"gemma", {256000, 3072, 24576, 28, 16, 16, 256, 8192, 1e-6, 10000.0, 0, true,
                 "gelu_pytorch_tanh", "hidden_act"}},
      {"gemma2", {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 10000.0, 4096, true,
                  "gelu_pytorch_tanh", "hidden_activation", 1.0, 50.0, 30.0}},
      {"gemma3_text", {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, 1000000.0, 4096, true,
                       "gelu_pytorch_tanh", "hidden_activation"}},
      {"vaultgemma", {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 10000.0, 4096, true,
                      "gelu_pytorch_tanh", "hidden_activation", 1.0, 50.0, 30.0}},
  };
  return d;
}

ArchitectureConfig parse(const std::string& type, const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, type, defaults().at(type));
  if (c.hidden_size <= 0) r.fail("hidden_size", "must be positive");
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));

  if (type == "gemma") {  // no window, layer types or soft-caps
    c.sliding_window = 0;
    c.layer_types.clear();
    c.attn_logit_softcapping = c.final_logit_softcapping = 0.0;
  } else {
    double scalar = r.get_double("query_pre_attn_scalar", 256.0);
    if (scalar <= 0) r.fail("query_pre_attn_scalar", "must be positive");
    c.attention_multiplier = 1.0 / std::sqrt(scalar);
  }
  if (type == "gemma2" || type == "vaultgemma") {
    mobius::default_layer_types(c, [](int64_t i) { return i % 2 == 0 ? "sliding_attention" : "full_attention"; });
  } else if (type == "gemma3_text") {
    // Stored in the config but not applied by transformers' Gemma 3 attention.
    c.attn_logit_softcapping = 0.0;
    c.qk_norm = "head";
    std::string key = r.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    int64_t pattern = c.layer_types.empty() ? r.get_int(key, 6) : 1;
    if (pattern <= 0) r.fail(key, "must be positive");
    mobius::default_layer_types(c, [&](int64_t i) { return (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention"; });
    if (!c.has_sliding_rope) {
      // Sliding layers: the local base frequency, never scaled (newer configs give a rope per
      // layer type instead, which read_decoder_config reads).
      c.sliding_rope = mobius::RopeConfig{};
      c.sliding_rope.theta = r.get_double("rope_local_base_freq", 10000.0);
      c.sliding_rope.partial_rotary_factor = c.rope.partial_rotary_factor;
    }
    c.has_sliding_rope = true;
  }
  mobius::check_attention_layer_types(r, c);
  c.validate();
  return c;
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  spec.norm = NormKind::OffsetRMS;
  // Gemma 1 is pre-norm (its post_attention_layernorm is the norm before the MLP); VaultGemma
  // too, with the second norm named pre_feedforward_layernorm.
  spec.placement = cfg.model_type == "gemma" || cfg.model_type == "vaultgemma" ? NormPlacement::Pre
                                                                              : NormPlacement::Sandwich;
  if (cfg.model_type == "vaultgemma") spec.names.post_attention_norm = "pre_feedforward_layernorm";
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) {
  std::vector<std::string> types;
  for (const auto& [type, d] : defaults()) types.push_back(type);
  r.add_each(types, "text-generation", [](const std::string& t, const json& raw) { return json(parse(t, raw)); },
             build);
}

}  // namespace

MOBIUS_PLUGIN("gemma", "0.1.0", "mobius", register_all)
