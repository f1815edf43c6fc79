// gemma.cpp - the gemma family: gemma, gemma2, gemma3_text.
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
// Gemma 2 and 3 hidden_activation), and each type's soft-caps (0: none).
struct Defaults {
  mobius::DecoderDefaults decoder;
  double attn_softcap, final_softcap;
};

const std::map<std::string, Defaults>& defaults() {
  using D = mobius::DecoderDefaults;
  static const std::map<std::string, Defaults> d = {
      {"gemma", {D{256000, 3072, 24576, 28, 16, 16, 256, 8192, 1e-6, 10000.0, 0, true,
                   "gelu_pytorch_tanh", "hidden_act"}, 0, 0}},
      {"gemma2", {D{256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 10000.0, 4096, true,
                    "gelu_pytorch_tanh", "hidden_activation"}, 50.0, 30.0}},
      {"gemma3_text", {D{262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, 1000000.0, 4096, true,
                         "gelu_pytorch_tanh", "hidden_activation"}, 0, 0}},
  };
  return d;
}

// A soft-cap key: absent -> the family default, null -> none.
double softcap(const ConfigReader& r, const std::string& key, double def) {
  if (!r.raw().contains(key)) return def;
  if (r.raw().at(key).is_null()) return 0.0;
  double v = r.get_double(key);
  if (v <= 0) r.fail(key, "must be positive or null");
  return v;
}

ArchitectureConfig parse(const std::string& type, const json& raw) {
  const Defaults& d = defaults().at(type);
  const json& text = mobius::text_config(raw);
  ConfigReader r(text, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, type, d.decoder);
  if (c.hidden_size <= 0) r.fail("hidden_size", "must be positive");
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));

  // Gemma 3's newest configs give one rope per layer type under rope_parameters.
  const json* per_type = nullptr;
  if (r.has("rope_parameters") && text.at("rope_parameters").is_object() &&
      text.at("rope_parameters").contains("full_attention"))
    per_type = &text.at("rope_parameters");
  if (per_type) {
    json full = text, slide = text;
    full["rope_parameters"] = per_type->at("full_attention");
    slide["rope_parameters"] = per_type->value("sliding_attention", json::object({{"rope_type", "default"}}));
    c.rope = mobius::read_rope(ConfigReader(full, "config.json"), d.decoder.rope_theta);
    c.sliding_rope = mobius::read_rope(ConfigReader(slide, "config.json"), 10000.0);
  }

  if (type == "gemma") {
    c.sliding_window = 0;
    c.layer_types.clear();
  } else {
    double scalar = r.get_double("query_pre_attn_scalar", 256.0);
    if (scalar <= 0) r.fail("query_pre_attn_scalar", "must be positive");
    c.attention_multiplier = 1.0 / std::sqrt(scalar);
    c.final_logit_softcapping = softcap(r, "final_logit_softcapping", d.final_softcap);
  }
  if (type == "gemma2") {
    c.attn_logit_softcapping = softcap(r, "attn_logit_softcapping", d.attn_softcap);
    mobius::default_layer_types(c, [](int64_t i) { return i % 2 == 0 ? "sliding_attention" : "full_attention"; });
  } else if (type == "gemma3_text") {
    // Stored in the config but not applied by transformers' Gemma 3 attention.
    c.attn_logit_softcapping = 0.0;
    c.qk_norm = "head";
    std::string key = r.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    int64_t pattern = c.layer_types.empty() ? r.get_int(key, 6) : 1;
    if (pattern <= 0) r.fail(key, "must be positive");
    mobius::default_layer_types(c, [&](int64_t i) { return (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention"; });
    if (!per_type) {
      // Sliding layers: the local base frequency, never scaled.
      c.sliding_rope = mobius::RopeConfig{};
      c.sliding_rope.theta = r.get_double("rope_local_base_freq", 10000.0);
      c.sliding_rope.partial_rotary_factor = c.rope.partial_rotary_factor;
    }
    c.has_sliding_rope = true;
  }
  mobius::check_layer_types(r, c, {"full_attention", "sliding_attention"});
  c.validate();
  return c;
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  spec.norm = NormKind::OffsetRMS;
  // Gemma 1 is pre-norm (its post_attention_layernorm is the norm before the MLP).
  spec.placement = cfg.model_type == "gemma" ? NormPlacement::Pre : NormPlacement::Sandwich;
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
