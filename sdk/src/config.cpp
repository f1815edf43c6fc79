// config.cpp - typed config reading with key-naming errors; ArchitectureConfig (de)serialization.
#include "mobius/sdk/config.hpp"

#include <cmath>

namespace mobius {

ConfigReader::ConfigReader(const nlohmann::json& j, std::string where)
    : j_(j), where_(std::move(where)) {
  if (!j_.is_object()) throw Error("[config] " + where_ + (where_.empty() ? "" : ": ") + "not a JSON object");
}

void ConfigReader::fail(const std::string& key, const std::string& why) const {
  throw Error("[config] " + (where_.empty() ? "" : where_ + ": ") + "'" + key + "' " + why);
}

bool ConfigReader::has(const std::string& key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

int64_t ConfigReader::get_int(const std::string& key, std::optional<int64_t> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  fail(key, "must be an integer, got " + v.dump());
}

double ConfigReader::get_double(const std::string& key, std::optional<double> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
  double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, "must be finite");
  return d;
}

bool ConfigReader::get_bool(const std::string& key, std::optional<bool> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (!v.is_boolean()) fail(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::string ConfigReader::get_string(const std::string& key, std::optional<std::string> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

std::vector<std::string> ConfigReader::get_strings(const std::string& key) const {
  if (!has(key)) return {};
  const auto& v = j_.at(key);
  if (!v.is_array()) fail(key, "must be a list of strings");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) fail(key, "must be a list of strings, got " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

const nlohmann::json& text_config(const nlohmann::json& j) {
  auto it = j.find("text_config");
  if (it != j.end() && it->is_object()) return *it;
  return j;
}

RopeConfig read_rope(const ConfigReader& r, double default_theta) {
  RopeConfig rope;
  rope.theta = r.get_double("rope_theta", default_theta);
  rope.partial_rotary_factor = r.get_double("partial_rotary_factor", 1.0);
  const nlohmann::json* scaling = nullptr;
  std::string key = "rope_scaling";
  if (r.has("rope_parameters")) {
    key = "rope_parameters";
    scaling = &r.raw().at("rope_parameters");
  } else if (r.has("rope_scaling")) {
    scaling = &r.raw().at("rope_scaling");
  }
  if (scaling) {
    if (!scaling->is_object()) r.fail(key, "must be an object");
    ConfigReader s(*scaling, key);
    std::string type = s.has("rope_type") ? s.get_string("rope_type") : s.get_string("type", "default");
    if (type == "su" || type == "longrope")
      r.fail(key, "rope type '" + type + "' is not supported");
    if (type != "default" && type != "linear" && type != "llama3" && type != "yarn" &&
        type != "dynamic")
      r.fail(key, "has unknown rope type '" + type +
                      "' (known: default, linear, llama3, yarn, dynamic)");
    rope.type = type;
    if (s.has("rope_theta")) rope.theta = s.get_double("rope_theta");
    if (s.has("partial_rotary_factor")) rope.partial_rotary_factor = s.get_double("partial_rotary_factor");
    rope.factor = s.get_double("factor", 1.0);
    rope.low_freq_factor = s.get_double("low_freq_factor", 1.0);
    rope.high_freq_factor = s.get_double("high_freq_factor", 4.0);
    rope.original_max_position_embeddings =
        s.get_int("original_max_position_embeddings", r.get_int("max_position_embeddings", 0));
    rope.beta_fast = s.get_double("beta_fast", 32.0);
    rope.beta_slow = s.get_double("beta_slow", 1.0);
    rope.mscale = s.get_double("mscale", 1.0);
    rope.mscale_all_dim = s.get_double("mscale_all_dim", 0.0);
    rope.attention_factor = s.get_double("attention_factor", 0.0);
    rope.truncate = s.get_bool("truncate", true);
    if (type != "default" && rope.factor <= 0) r.fail(key, "factor must be positive");
    if (type == "llama3") {
      if (rope.original_max_position_embeddings <= 0)
        r.fail(key, "llama3 rope needs original_max_position_embeddings");
      if (rope.high_freq_factor <= rope.low_freq_factor)
        r.fail(key, "high_freq_factor must be greater than low_freq_factor");
    }
  }
  if (rope.theta <= 0) r.fail("rope_theta", "must be positive");
  if (rope.partial_rotary_factor <= 0 || rope.partial_rotary_factor > 1)
    r.fail("partial_rotary_factor", "must be in (0, 1]");
  return rope;
}

int64_t ArchitectureConfig::rotary_dim() const {
  auto d = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  return d - d % 2;
}

bool ArchitectureConfig::is_sliding(int64_t layer) const {
  if (sliding_window <= 0) return false;
  if (layer_types.empty()) return true;
  return layer_types.at(static_cast<size_t>(layer)) == "sliding_attention";
}

void ArchitectureConfig::validate() const {
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0) throw Error(std::string("[config] '") + key + "' must be positive, got " + std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  if (intermediate_size < 0) positive("intermediate_size", intermediate_size);
  if (num_attention_heads % num_key_value_heads != 0)
    throw Error("[config] 'num_key_value_heads' (" + std::to_string(num_key_value_heads) +
                ") must divide 'num_attention_heads' (" + std::to_string(num_attention_heads) + ")");
  if (rms_norm_eps <= 0) throw Error("[config] 'rms_norm_eps' must be positive");
  if (sliding_window < 0) throw Error("[config] 'sliding_window' must not be negative");
  if (!layer_types.empty() && static_cast<int64_t>(layer_types.size()) != num_hidden_layers)
    throw Error("[config] 'layer_types' has " + std::to_string(layer_types.size()) +
                " entries for " + std::to_string(num_hidden_layers) + " layers");
  if (rotary_dim() <= 0) throw Error("[config] 'partial_rotary_factor' leaves no rotary dims");
  if (num_hidden_layers > 4096 || num_attention_heads > 65536 || hidden_size > (1 << 20) ||
      vocab_size > (1 << 24))
    throw Error("[config] sizes are out of any sane range (hidden_size, heads, layers, vocab)");
}

void to_json(nlohmann::json& j, const RopeConfig& r) {
  j = {{"type", r.type},
       {"theta", r.theta},
       {"factor", r.factor},
       {"low_freq_factor", r.low_freq_factor},
       {"high_freq_factor", r.high_freq_factor},
       {"original_max_position_embeddings", r.original_max_position_embeddings},
       {"partial_rotary_factor", r.partial_rotary_factor},
       {"beta_fast", r.beta_fast},
       {"beta_slow", r.beta_slow},
       {"mscale", r.mscale},
       {"mscale_all_dim", r.mscale_all_dim},
       {"attention_factor", r.attention_factor},
       {"truncate", r.truncate},
       {"interleaved", r.interleaved}};
}

void from_json(const nlohmann::json& j, RopeConfig& r) {
  r.type = j.at("type");
  r.theta = j.at("theta");
  r.factor = j.at("factor");
  r.low_freq_factor = j.at("low_freq_factor");
  r.high_freq_factor = j.at("high_freq_factor");
  r.original_max_position_embeddings = j.at("original_max_position_embeddings");
  r.partial_rotary_factor = j.at("partial_rotary_factor");
  r.beta_fast = j.at("beta_fast");
  r.beta_slow = j.at("beta_slow");
  r.mscale = j.at("mscale");
  r.mscale_all_dim = j.at("mscale_all_dim");
  r.attention_factor = j.at("attention_factor");
  r.truncate = j.at("truncate");
  r.interleaved = j.at("interleaved");
}

void to_json(nlohmann::json& j, const ArchitectureConfig& c) {
  j = {{"model_type", c.model_type},
       {"vocab_size", c.vocab_size},
       {"hidden_size", c.hidden_size},
       {"intermediate_size", c.intermediate_size},
       {"num_hidden_layers", c.num_hidden_layers},
       {"num_attention_heads", c.num_attention_heads},
       {"num_key_value_heads", c.num_key_value_heads},
       {"head_dim", c.head_dim},
       {"hidden_act", c.hidden_act},
       {"rms_norm_eps", c.rms_norm_eps},
       {"max_position_embeddings", c.max_position_embeddings},
       {"rope", c.rope},
       {"has_sliding_rope", c.has_sliding_rope},
       {"sliding_rope", c.sliding_rope},
       {"qkv_bias", c.qkv_bias},
       {"o_bias", c.o_bias},
       {"mlp_bias", c.mlp_bias},
       {"tie_word_embeddings", c.tie_word_embeddings},
       {"sliding_window", c.sliding_window},
       {"layer_types", c.layer_types},
       {"qk_norm", c.qk_norm},
       {"post_norm", c.post_norm},
       {"embedding_multiplier", c.embedding_multiplier},
       {"attention_multiplier", c.attention_multiplier},
       {"residual_multiplier", c.residual_multiplier},
       {"logits_scaling", c.logits_scaling},
       {"attn_logit_softcapping", c.attn_logit_softcapping},
       {"final_logit_softcapping", c.final_logit_softcapping},
       {"extra", c.extra}};
}

void from_json(const nlohmann::json& j, ArchitectureConfig& c) {
  c.model_type = j.at("model_type");
  c.vocab_size = j.at("vocab_size");
  c.hidden_size = j.at("hidden_size");
  c.intermediate_size = j.at("intermediate_size");
  c.num_hidden_layers = j.at("num_hidden_layers");
  c.num_attention_heads = j.at("num_attention_heads");
  c.num_key_value_heads = j.at("num_key_value_heads");
  c.head_dim = j.at("head_dim");
  c.hidden_act = j.at("hidden_act");
  c.rms_norm_eps = j.at("rms_norm_eps");
  c.max_position_embeddings = j.at("max_position_embeddings");
  c.rope = j.at("rope");
  c.has_sliding_rope = j.at("has_sliding_rope");
  c.sliding_rope = j.at("sliding_rope");
  c.qkv_bias = j.at("qkv_bias");
  c.o_bias = j.at("o_bias");
  c.mlp_bias = j.at("mlp_bias");
  c.tie_word_embeddings = j.at("tie_word_embeddings");
  c.sliding_window = j.at("sliding_window");
  c.layer_types = j.at("layer_types").get<std::vector<std::string>>();
  c.qk_norm = j.at("qk_norm");
  c.post_norm = j.at("post_norm");
  c.embedding_multiplier = j.at("embedding_multiplier");
  c.attention_multiplier = j.at("attention_multiplier");
  c.residual_multiplier = j.at("residual_multiplier");
  c.logits_scaling = j.at("logits_scaling");
  c.attn_logit_softcapping = j.at("attn_logit_softcapping");
  c.final_logit_softcapping = j.at("final_logit_softcapping");
  c.extra = j.value("extra", nlohmann::json::object());
}

}  // namespace mobius
