// gemma.cpp - the gemma family: gemma, gemma2, gemma3_text.
//
// What Gemma shares with llama comes from the SDK (attention, MLP, decoder layers); what is
// Gemma's own is data: (1 + w) norms (OffsetRMSNorm), embeddings scaled by sqrt(hidden_size),
// query_pre_attn_scalar, soft-capping, sandwich norms, and the local/global layer pattern with
// its two rope tables.
#include <cmath>
#include <map>

#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_<type>.py defaults for keys a config.json may omit.
struct Defaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads, head_dim, max_position_embeddings;
  double rope_theta;
  int64_t sliding_window;
  double attn_softcap, final_softcap;  // 0: none
};

const std::map<std::string, Defaults>& defaults() {
  static const std::map<std::string, Defaults> d = {
      {"gemma", {256000, 3072, 24576, 28, 16, 16, 256, 8192, 10000.0, 0, 0, 0}},
      {"gemma2", {256000, 2304, 9216, 26, 8, 4, 256, 8192, 10000.0, 4096, 50.0, 30.0}},
      {"gemma3_text", {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1000000.0, 4096, 0, 0}},
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
  ArchitectureConfig c;
  c.model_type = type;
  c.vocab_size = r.get_int("vocab_size", d.vocab_size);
  c.hidden_size = r.get_int("hidden_size", d.hidden_size);
  c.intermediate_size = r.get_int("intermediate_size", d.intermediate_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", d.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", d.num_attention_heads);
  c.num_key_value_heads = r.get_int("num_key_value_heads", d.num_key_value_heads);
  c.head_dim = r.get_int("head_dim", d.head_dim);
  c.max_position_embeddings = r.get_int("max_position_embeddings", d.max_position_embeddings);
  c.rms_norm_eps = r.get_double("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  c.qkv_bias = c.o_bias = r.get_bool("attention_bias", false);
  // Gemma (current transformers) reads hidden_act; Gemma 2 and 3 read hidden_activation.
  c.hidden_act = type == "gemma" ? r.get_string("hidden_act", "gelu_pytorch_tanh")
                                 : r.get_string("hidden_activation", "gelu_pytorch_tanh");
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
    c.rope = mobius::read_rope(ConfigReader(full, "config.json"), d.rope_theta);
    c.sliding_rope = mobius::read_rope(ConfigReader(slide, "config.json"), 10000.0);
  } else {
    c.rope = mobius::read_rope(r, d.rope_theta);
  }

  if (type != "gemma") {
    double scalar = r.get_double("query_pre_attn_scalar", 256.0);
    if (scalar <= 0) r.fail("query_pre_attn_scalar", "must be positive");
    c.attention_multiplier = 1.0 / std::sqrt(scalar);
    c.sliding_window = r.has("sliding_window") ? r.get_int("sliding_window") : d.sliding_window;
    c.final_logit_softcapping = softcap(r, "final_logit_softcapping", d.final_softcap);
    c.layer_types = r.get_strings("layer_types");
  }
  if (type == "gemma2") {
    c.attn_logit_softcapping = softcap(r, "attn_logit_softcapping", d.attn_softcap);
    if (c.layer_types.empty())
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        c.layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  } else if (type == "gemma3_text") {
    // Stored in the config but not applied by transformers' Gemma 3 attention.
    c.attn_logit_softcapping = 0.0;
    c.qk_norm = "head";
    if (c.layer_types.empty()) {
      std::string key = r.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
      int64_t pattern = r.get_int(key, 6);
      if (pattern <= 0) r.fail(key, "must be positive");
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        c.layer_types.push_back((i + 1) % pattern == 0 ? "full_attention" : "sliding_attention");
    }
    if (!per_type) {
      // Sliding layers: the local base frequency, never scaled.
      c.sliding_rope = mobius::RopeConfig{};
      c.sliding_rope.theta = r.get_double("rope_local_base_freq", 10000.0);
      c.sliding_rope.partial_rotary_factor = c.rope.partial_rotary_factor;
    }
    c.has_sliding_rope = true;
  }
  for (const auto& t : c.layer_types)
    if (t != "full_attention" && t != "sliding_attention")
      r.fail("layer_types", "has unknown layer type '" + t + "'");
  if (c.sliding_window < 0) r.fail("sliding_window", "must not be negative");
  mobius::nn::check_activation(r, type == "gemma" ? "hidden_act" : "hidden_activation", c.hidden_act);
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
