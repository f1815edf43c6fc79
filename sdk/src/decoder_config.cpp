// decoder_config.cpp - read_decoder_config (decoder_config.hpp).
#include "mobius/sdk/decoder_config.hpp"

#include <cmath>

#include "mobius/sdk/layers.hpp"

namespace mobius {

std::string decoder_key(const ConfigReader& r, const DecoderDefaults& d, const std::string& field) {
  auto it = d.keys.find(field);
  if (it == d.keys.end()) return field;
  if (it->second.empty()) return "";  // not read: the row's default
  for (const auto& k : it->second)
    if (r.has(k)) return k;
  return it->second.front();
}

ArchitectureConfig read_decoder_config(const ConfigReader& r, const std::string& model_type,
                                       const DecoderDefaults& d) {
  ArchitectureConfig c;
  c.model_type = model_type;
  const auto key = [&](const char* field) { return decoder_key(r, d, field); };
  c.vocab_size = r.get_int(key("vocab_size"), d.vocab_size);
  c.hidden_size = r.get_int(key("hidden_size"), d.hidden_size);
  c.intermediate_size = r.get_int(key("intermediate_size"), d.intermediate_size);
  c.num_hidden_layers = r.get_int(key("num_hidden_layers"), d.num_hidden_layers);
  const std::string heads = key("num_attention_heads");
  c.num_attention_heads = r.get_int(heads, d.num_attention_heads);
  if (c.num_attention_heads <= 0) r.fail(heads, "must be positive");
  c.num_key_value_heads = r.get_int(
      key("num_key_value_heads"), d.num_key_value_heads ? d.num_key_value_heads : c.num_attention_heads);
  if (r.has("head_dim")) {
    c.head_dim = r.get_int("head_dim");
  } else if (d.head_dim) {
    c.head_dim = d.head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail(key("hidden_size"), "(" + std::to_string(c.hidden_size) + ") is not a multiple of '" + heads +
                                     "' (" + std::to_string(c.num_attention_heads) +
                                     ") and there is no 'head_dim'");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.hidden_act = r.get_string(d.act_key, d.hidden_act);
  nn::check_activation(r, d.act_key, c.hidden_act);
  c.rms_norm_eps = r.get_double(key("rms_norm_eps"), d.rms_norm_eps);
  c.max_position_embeddings = r.get_int(key("max_position_embeddings"), d.max_position_embeddings);
  const nlohmann::json& text = r.raw();
  auto spelled = [&](const char* obj) {
    auto it = text.find(obj);
    return it != text.end() && it->is_object() && it->contains("partial_rotary_factor") &&
           !it->at("partial_rotary_factor").is_null();
  };
  auto per_type = text.find("rope_parameters");
  if (per_type != text.end() && per_type->is_object() && per_type->contains("full_attention")) {
    nlohmann::json full = text, slide = text;
    full["rope_parameters"] = per_type->at("full_attention");
    slide["rope_parameters"] =
        per_type->value("sliding_attention", nlohmann::json::object({{"rope_type", "default"}}));
    c.rope = read_rope(ConfigReader(full, "config.json"), d.rope_theta);
    c.sliding_rope = read_rope(ConfigReader(slide, "config.json"), 10000.0);
    c.has_sliding_rope = true;
  } else {
    c.rope = read_rope(r, d.rope_theta);
    if (!r.has("partial_rotary_factor") && !spelled("rope_parameters") && !spelled("rope_scaling"))
      c.rope.partial_rotary_factor = d.partial_rotary_factor;
  }
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", d.tie_word_embeddings);
  c.qkv_bias = c.o_bias = r.get_bool("attention_bias", false);
  c.mlp_bias = r.get_bool("mlp_bias", false);
  c.sliding_window = r.has("sliding_window") ? r.get_int("sliding_window") : d.sliding_window;
  if (c.sliding_window < 0) r.fail("sliding_window", "must not be negative");
  c.layer_types = r.get_strings("layer_types");
  c.attn_logit_softcapping = read_softcap(r, "attn_logit_softcapping", d.attn_logit_softcapping);
  c.final_logit_softcapping = read_softcap(r, "final_logit_softcapping", d.final_logit_softcapping);
  return c;
}

double read_softcap(const ConfigReader& r, const std::string& key, double def) {
  if (!r.raw().contains(key)) return def;
  if (r.raw().at(key).is_null()) return 0.0;
  double v = r.get_double(key);
  if (v <= 0) r.fail(key, "must be positive or null");
  return v;
}

void check_layer_types(const ConfigReader& r, const ArchitectureConfig& c,
                       std::initializer_list<const char*> known, bool any_length) {
  std::string names;
  for (const char* k : known) names += (names.empty() ? "" : ", ") + std::string(k);
  for (const auto& t : c.layer_types) {
    bool ok = false;
    for (const char* k : known) ok |= t == k;
    if (!ok) r.fail("layer_types", "has unknown layer type '" + t + "' (known: " + names + ")");
  }
  if (!any_length && static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
    r.fail("layer_types", "has " + std::to_string(c.layer_types.size()) + " entries for " +
                              std::to_string(c.num_hidden_layers) +
                              " layers ('num_hidden_layers')");
}

void check_attention_layer_types(const ConfigReader& r, const ArchitectureConfig& c) {
  check_layer_types(r, c, {"full_attention", "sliding_attention"});
}

void read_qwen_window(const ConfigReader& r, ArchitectureConfig& c) {
  if (!r.get_bool("use_sliding_window", false)) c.sliding_window = 0;
  const int64_t max_window_layers = r.get_int("max_window_layers", 28);
  default_layer_types(c, [&](int64_t i) {
    return c.sliding_window > 0 && i >= max_window_layers ? "sliding_attention" : "full_attention";
  });
  check_attention_layer_types(r, c);
}

void read_granite_multipliers(const ConfigReader& r, ArchitectureConfig& c) {
  c.embedding_multiplier = r.get_double("embedding_multiplier", 1.0);
  c.attention_multiplier = r.get_double("attention_multiplier", 1.0);
  c.residual_multiplier = r.get_double("residual_multiplier", 1.0);
  c.logits_scaling = r.get_double("logits_scaling", 1.0);
  if (c.logits_scaling == 0) r.fail("logits_scaling", "must not be 0");
}

void read_hunyuan_attention(const ConfigReader& r, ArchitectureConfig& c) {
  if (!r.has("head_dim")) r.fail("head_dim", "is required (transformers does not derive it)");
  c.qk_norm = "head";
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = r.raw().find(key);
    if (it == r.raw().end() || !it->is_object() || !it->contains("alpha")) continue;
    const nlohmann::json& a = it->at("alpha");
    if (!a.is_number() || !(a.get<double>() > 0)) r.fail(key, "alpha must be a positive number");
    if (c.rope.type == "dynamic") {
      const auto d = static_cast<double>(c.head_dim);
      c.rope.theta *= std::pow(a.get<double>(), d / (d - 2.0));
      c.rope.type = "default";
    }
  }
  check_attention_layer_types(r, c);
}

}  // namespace mobius
