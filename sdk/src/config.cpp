// config.cpp - typed config reading with key-naming errors; ArchitectureConfig's checks.
#include "mobius/sdk/config.hpp"
#include "mobius/utf8.h"

#include <climits>
#include <cmath>
#include <cstdio>

namespace mobius {

namespace {

// The limits of config text, the host's kConfigLimits (core/src/util/untrusted.hpp) restated: the
// SDK holds to them on its own, whatever host it runs in.
constexpr size_t kMaxConfigBytes = 16u << 20;
constexpr int kMaxConfigDepth = 64;
constexpr size_t kMaxConfigValues = 1u << 20;

// Size keys and their plausible ranges. The maximum of each is several times the largest value
// in released models (the `largest` column, in early 2025), so no real config comes near it,
// while everything sized by it stays cheap: 1024 layers of 131072-wide hidden states are a
// graph of some 10^5 nodes whose initializers are only declared, never allocated.
//   layers      1024      Llama 3.1 405B has 126
//   widths      131072    hidden_size: Nemotron-4 340B has 18432
//               1048576   intermediate sizes: 73728 (Nemotron-4 340B)
//   vocabulary  4194304   262208 (Gemma 3); byte-level and multilingual ones stay below 10^6
//   heads       1024      128 (query heads of the largest models), head_dim 256 (Gemma)
//   experts     4096      384 routed (Kimi K2), 2048 (Switch-C); 8 chosen, 1 or 2 shared
//   ranks       65536     MLA's kv_lora_rank 512 and q_lora_rank 1536 (DeepSeek-V3)
//   positions   2^27      10485760 (Llama 4 Scout's context)
// Products are bounded by ArchitectureConfig::validate() (parameters in total).
constexpr SizeBound kSizeBounds[] = {
    {"num_hidden_layers", 1, 1024, 126},
    {"hidden_size", 1, 1 << 17, 18432},
    {"intermediate_size", 0, 1 << 20, 73728},
    {"moe_intermediate_size", 0, 1 << 20, 20480},
    {"vocab_size", 1, 1 << 22, 262208},
    {"num_attention_heads", 1, 1024, 128},
    {"num_key_value_heads", 1, 1024, 128},
    {"head_dim", 1, 1024, 256},
    {"qk_nope_head_dim", 0, 1024, 128},
    {"qk_rope_head_dim", 0, 1024, 64},
    {"v_head_dim", 0, 1024, 128},
    {"kv_lora_rank", 0, 1 << 16, 512},
    {"q_lora_rank", 0, 1 << 16, 1536},
    {"n_routed_experts", 0, 4096, 384},
    {"num_local_experts", 0, 4096, 128},
    {"num_experts", 0, 4096, 128},
    {"n_shared_experts", 0, 256, 2},
    {"num_experts_per_tok", 0, 4096, 8},
    {"first_k_dense_replace", 0, 1024, 3},
    {"decoder_sparse_step", 1, 1024, 1},
    {"mlp_only_layers", 0, 1023, 125},  // each entry: a layer index
    {"n_group", 0, 4096, 8},
    {"topk_group", 0, 4096, 4},
    {"num_nextn_predict_layers", 0, 64, 1},
    {"max_position_embeddings", 0, 1 << 27, 10485760},
    {"original_max_position_embeddings", 0, 1 << 27, 1048576},
    {"sliding_window", 0, 1 << 27, 131072},
    {"linear_conv_kernel_dim", 1, 256, 4},
    {"linear_key_head_dim", 1, 1024, 128},
    {"linear_value_head_dim", 1, 1024, 128},
    {"linear_num_key_heads", 1, 1024, 16},
    {"linear_num_value_heads", 1, 1024, 64},
    {"full_attention_interval", 1, 1024, 4},
    {"sliding_window_pattern", 1, 1024, 6},
    {"_sliding_window_pattern", 1, 1024, 6},
    {"num_labels", 1, 1 << 20, 21843},  // image classifiers: ImageNet-21k
    {"type_vocab_size", 0, 1 << 16, 16},
    {"embedding_size", 1, 1 << 17, 4096},
    // Other spellings of the same sizes (transformers' attribute_map): GPT-2 and its kin, MPT,
    // Falcon, OPT, GPT-Neo, XGLM, BioGPT.
    {"n_embd", 1, 1 << 17, 18432},
    {"d_model", 1, 1 << 17, 18432},
    {"word_embed_proj_dim", 1, 1 << 17, 18432},
    {"n_layer", 1, 1024, 126},
    {"n_layers", 1, 1024, 126},
    {"num_layers", 1, 1024, 126},
    {"n_head", 1, 1024, 128},
    {"n_heads", 1, 1024, 128},
    {"num_heads", 1, 1024, 128},
    {"num_kv_heads", 1, 1024, 128},
    {"n_inner", 0, 1 << 20, 73728},
    {"ffn_dim", 0, 1 << 20, 73728},
    {"ffn_hidden_size", 0, 1 << 20, 73728},
    {"expansion_ratio", 1, 1024, 4},
    {"n_positions", 0, 1 << 27, 10485760},
    {"n_ctx", 0, 1 << 27, 10485760},
    {"max_seq_len", 0, 1 << 27, 10485760},
    {"rotary_dim", 0, 1024, 256},
    {"window_size", 0, 1 << 27, 131072},
};

// The most parameters a config may describe (layers times their attention and MLP, plus the
// embeddings and lm_head): 2^43, about 8.8 trillion. The largest released dense models have
// about 0.5 trillion, the largest mixtures of experts 1 to 2 trillion with their experts (which
// this count leaves out).
constexpr double kMaxParameters = 8796093022208.0;

// The most elements of the embedding table (vocab_size x hidden_size): see validate().
constexpr double kMaxEmbedding = 68719476736.0;  // 2^36

constexpr size_t kMaxShown = 120;  // bytes of a string value shown in a message

// The length of the valid UTF-8 sequence at s[i] when it is not a C1 control (U+0080..U+009F);
// 0 for a byte to escape.
size_t safe_utf8_at(std::string_view s, size_t i) {
  uint32_t c = 0;
  const size_t n = mobius_utf8_at(s.data(), s.size(), i, &c);
  return n && c > 0x9F ? n : 0;
}

std::string escaped(std::string_view s, size_t max_bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < s.size() && out.size() < max_bytes) {
    const auto u = static_cast<unsigned char>(s[i]);
    size_t n = u >= 0x80 ? safe_utf8_at(s, i) : (u < 0x20 || u == 0x7F ? 0 : 1);
    if (n == 0) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

std::string prefix(const std::string& where) { return where.empty() ? "" : where + ": "; }

}  // namespace

nlohmann::json parse_config_text(std::string_view text, const std::string& what,
                                 mobius_error_kind kind) {
  const std::string tag = kind == MOBIUS_ERROR_KIND_CONFIG ? "[config] " : "[plugin] ";
  auto fail = [&](const std::string& why) -> void {
    throw Error(kind, tag + prefix(what) + why);
  };
  if (text.size() > kMaxConfigBytes)
    fail("larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB (" +
         std::to_string(text.size()) + " bytes)");
  size_t values = 0;
  auto guard = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    using E = nlohmann::json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxConfigDepth)
      fail("values nest deeper than " + std::to_string(kMaxConfigDepth) + " levels");
    if ((event == E::value || event == E::object_start || event == E::array_start) &&
        ++values > kMaxConfigValues)
      fail("more than " + std::to_string(kMaxConfigValues) + " values");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), guard);
  } catch (const nlohmann::json::exception& e) {
    std::string_view m = e.what();
    const size_t close = m.find("] ");
    if (close != std::string_view::npos) m.remove_prefix(close + 2);
    fail("not valid JSON (" + escaped(m, 400) + ")");
  }
  return nullptr;  // not reached
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string quote_value(std::string_view s) { return "'" + escaped(s, kMaxShown) + "'"; }

std::string describe_value(const nlohmann::json& v) {
  if (v.is_string()) return quote_value(v.get_ref<const std::string&>());
  if (v.is_array()) return "a list of " + std::to_string(v.size()) + " values";
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  return v.dump();  // a number, true, false or null: short, and plain ASCII
}

const SizeBound* size_bound(std::string_view key) {
  for (const SizeBound& b : kSizeBounds)
    if (key == b.key) return &b;
  return nullptr;
}

void check_size_key(const std::string& key, int64_t value, const std::string& where) {
  const SizeBound* b = size_bound(key);
  if (!b) return;
  auto fail = [&](const std::string& why) {
    throw Error("[config] " + prefix(where) + "'" + key + "' " + why);
  };
  if (value < b->min)
    fail(std::string(b->min > 0 ? "must be positive" : "must not be negative") + ", got " +
         std::to_string(value));
  if (value > b->max)
    fail("is " + std::to_string(value) + ", larger than " + std::to_string(b->max) +
         ", the most mobius accepts (released models have at most about " +
         std::to_string(b->largest) + ")");
}

ConfigReader::ConfigReader(const nlohmann::json& j, std::string where)
    : j_(j), where_(std::move(where)) {
  if (!j_.is_object()) throw Error("[config] " + where_ + (where_.empty() ? "" : ": ") + "not a JSON object");
}

void ConfigReader::fail(const std::string& key, const std::string& why) const {
  throw Error("[config] " + prefix(where_) + "'" + key + "' " + why);
}

bool ConfigReader::has(const std::string& key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

namespace {

// The integer `v` read under `key` (every error names the key), checked against its size bound.
int64_t integer_of(const ConfigReader& r, const std::string& key, const nlohmann::json& v) {
  const SizeBound* bound = size_bound(key);
  int64_t out = 0;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    r.fail(key, "is " + v.dump() + ", larger than any integer a config may hold");
  } else if (v.is_number_integer()) {
    out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    // 1e12 is a float in JSON; an integral one within 2^53 reads as the integer it is.
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) r.fail(key, "must be an integer, got " + v.dump());
    if (std::fabs(d) >= 9e15) {
      if (bound && d > 0)
        r.fail(key, "is " + v.dump() + ", larger than " + std::to_string(bound->max) +
                        ", the most mobius accepts");
      r.fail(key, "is " + v.dump() + ", beyond the integers a config may hold");
    }
    out = static_cast<int64_t>(d);
  } else {
    r.fail(key, "must be an integer, got " + describe_value(v));
  }
  if (bound) check_size_key(key, out, r.where());
  return out;
}

}  // namespace

int64_t ConfigReader::get_int(const std::string& key, std::optional<int64_t> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  return integer_of(*this, key, j_.at(key));
}

std::vector<int64_t> ConfigReader::get_ints(const std::string& key,
                                            std::optional<std::vector<int64_t>> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (!v.is_array()) fail(key, "must be a list of integers, got " + describe_value(v));
  std::vector<int64_t> out;
  for (const auto& e : v) out.push_back(integer_of(*this, key, e));
  return out;
}

double ConfigReader::get_double(const std::string& key, std::optional<double> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (!v.is_number()) fail(key, "must be a number, got " + describe_value(v));
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
  if (!v.is_boolean()) fail(key, "must be true or false, got " + describe_value(v));
  return v.get<bool>();
}

std::string ConfigReader::get_string(const std::string& key, std::optional<std::string> def) const {
  if (!has(key)) {
    if (def) return *def;
    fail(key, "is required");
  }
  const auto& v = j_.at(key);
  if (!v.is_string()) fail(key, "must be a string, got " + describe_value(v));
  return v.get<std::string>();
}

std::vector<std::string> ConfigReader::get_strings(const std::string& key) const {
  if (!has(key)) return {};
  const auto& v = j_.at(key);
  if (!v.is_array()) fail(key, "must be a list of strings");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) fail(key, "must be a list of strings, got " + describe_value(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

const nlohmann::json& text_config(const nlohmann::json& j) {
  auto it = j.find("text_config");
  if (it != j.end() && it->is_object()) return *it;
  return j;
}

namespace {

// A longrope factor list: numbers, each finite and positive (it divides a frequency).
std::vector<double> rope_factors(const ConfigReader& s, const std::string& name) {
  if (!s.has(name)) s.fail(name, "is required for longrope");
  const nlohmann::json& v = s.raw().at(name);
  if (!v.is_array()) s.fail(name, "must be a list of numbers, got " + describe_value(v));
  std::vector<double> out;
  for (const auto& e : v) {
    if (!e.is_number()) s.fail(name, "must be a list of numbers, got " + describe_value(e));
    const double d = e.get<double>();
    if (!std::isfinite(d) || d <= 0)
      s.fail(name, "must hold positive numbers, got " + describe_value(e) + " at index " +
                       std::to_string(out.size()));
    out.push_back(d);
  }
  return out;
}

// The longrope keys of `s` (the rope_scaling / rope_parameters object named `key`).
void read_longrope(const ConfigReader& r, const ConfigReader& s, const std::string& key,
                   RopeConfig& rope) {
  rope.short_factor = rope_factors(s, "short_factor");
  rope.long_factor = rope_factors(s, "long_factor");
  // transformers' standardize_rope_params: the top-level pretraining length wins.
  const int64_t max_pos = r.get_int("max_position_embeddings", 0);
  rope.original_max_position_embeddings =
      r.has("original_max_position_embeddings")
          ? r.get_int("original_max_position_embeddings")
          : s.get_int("original_max_position_embeddings", max_pos);
  if (rope.original_max_position_embeddings < 2)
    r.fail(key, "longrope needs original_max_position_embeddings (or max_position_embeddings) of "
                "at least 2");
  if (s.has("factor")) {
    rope.factor = s.get_double("factor");
  } else {
    // Without an explicit factor, the extension is the ratio of the two lengths.
    if (max_pos <= 0) r.fail(key, "longrope needs 'factor' or 'max_position_embeddings'");
    rope.factor = static_cast<double>(max_pos) /
                  static_cast<double>(rope.original_max_position_embeddings);
  }
  if (s.has("attention_factor") && rope.attention_factor <= 0)
    s.fail("attention_factor", "must be positive");
}

}  // namespace

void check_rope_factors(const ConfigReader& r, const RopeConfig& rope, int64_t rotary_dim) {
  if (rope.type != "longrope") return;
  const std::string key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const auto pairs = static_cast<size_t>(rotary_dim / 2);
  for (const auto* list : {&rope.short_factor, &rope.long_factor}) {
    if (list->size() == pairs) continue;
    r.fail(key, std::string(list == &rope.short_factor ? "short_factor" : "long_factor") + " has " +
                    std::to_string(list->size()) + " entries; longrope needs one per rotated pair: " +
                    std::to_string(pairs) + " (" + std::to_string(rotary_dim) +
                    " rotary dims: head_dim times partial_rotary_factor)");
  }
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
    if (type != "default" && type != "linear" && type != "llama3" && type != "yarn" &&
        type != "dynamic" && type != "longrope")
      r.fail(key, "has unknown rope type " + quote_value(type) +
                      " (known: default, linear, llama3, yarn, dynamic, longrope)");
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
    if (type == "longrope") read_longrope(r, s, key, rope);
    if (type != "default" && rope.factor <= 0) r.fail(key, "factor must be positive");
    if (type == "llama3") {
      if (rope.original_max_position_embeddings <= 0)
        r.fail(key, "llama3 rope needs original_max_position_embeddings");
      // Equal factors leave no band between the two wavelengths (Llama 4 Scout's 1.0 and 1.0):
      // transformers only warns, and a frequency is then divided by the factor or kept.
      if (rope.high_freq_factor < rope.low_freq_factor)
        r.fail(key, "high_freq_factor must not be less than low_freq_factor");
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

bool ArchitectureConfig::uses_rope(int64_t layer) const {
  return position_embedding == "rope" &&
         std::find(no_rope_layers.begin(), no_rope_layers.end(), layer) == no_rope_layers.end();
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
  // Also for a config built in code, which never went through ConfigReader.
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"sliding_window", sliding_window},
  };
  for (const auto& [key, value] : sizes) check_size_key(key, value);
  // The embedding table alone: 2^36 elements, 14 times the largest (256000 x 18432).
  if (static_cast<double>(vocab_size) * static_cast<double>(hidden_size) > kMaxEmbedding)
    throw Error("[config] 'vocab_size' times 'hidden_size' (" + std::to_string(vocab_size) + " x " +
                std::to_string(hidden_size) + ") is more than the " +
                std::to_string(static_cast<int64_t>(kMaxEmbedding)) +
                " embedding elements mobius accepts (released models have at most about 5 billion)");
  // Every factor is bounded above, so these products are far from overflowing a double's
  // exact range; the count is what the dense part of the model would declare.
  const auto h = static_cast<double>(hidden_size);
  const double attention =
      h * static_cast<double>(head_dim) *
      static_cast<double>(2 * num_attention_heads + 2 * num_key_value_heads);
  const double mlp = 3.0 * h * static_cast<double>(intermediate_size);
  const double parameters = static_cast<double>(num_hidden_layers) * (attention + mlp) +
                            2.0 * static_cast<double>(vocab_size) * h;
  if (parameters > kMaxParameters) {
    char text[128];
    std::snprintf(text, sizeof(text), "about %.1f trillion parameters, more than the %.1f trillion",
                  parameters / 1e12, kMaxParameters / 1e12);
    throw Error(std::string("[config] the config describes a model of ") + text +
                " mobius accepts (released models have at most about 2 trillion): check "
                "'num_hidden_layers', 'hidden_size', 'intermediate_size', 'num_attention_heads', "
                "'head_dim' and 'vocab_size'");
  }
  if (num_attention_heads % num_key_value_heads != 0)
    throw Error("[config] 'num_key_value_heads' (" + std::to_string(num_key_value_heads) +
                ") must divide 'num_attention_heads' (" + std::to_string(num_attention_heads) + ")");
  if (rms_norm_eps <= 0) throw Error("[config] 'rms_norm_eps' must be positive");
  if (sliding_window < 0) throw Error("[config] 'sliding_window' must not be negative");
  if (!layer_types.empty() && static_cast<int64_t>(layer_types.size()) != num_hidden_layers)
    throw Error("[config] 'layer_types' has " + std::to_string(layer_types.size()) +
                " entries for " + std::to_string(num_hidden_layers) + " layers");
  if (position_embedding == "rope" && rotary_dim() <= 0)
    throw Error("[config] 'partial_rotary_factor' leaves no rotary dims");
  const char* const kinds[] = {"rope", "learned", "sinusoidal", "alibi", "none"};
  if (std::find(std::begin(kinds), std::end(kinds), position_embedding) == std::end(kinds))
    throw Error("[config] unknown position embedding '" + position_embedding +
                "' (rope, learned, sinusoidal, alibi or none)");
  if (position_offset < 0 || position_offset > 1024)
    throw Error("[config] the position offset must be from 0 to 1024, got " + std::to_string(position_offset));
  if (alibi != "bloom" && alibi != "mpt") throw Error("[config] unknown ALiBi slopes '" + alibi + "'");
  if (!(alibi_bias_max > 0) || alibi_bias_max > 1024) throw Error("[config] 'alibi_bias_max' must be in (0, 1024]");
  for (int64_t l : no_rope_layers)
    if (l < 0 || l >= num_hidden_layers)
      throw Error("[config] layer " + std::to_string(l) + " without rope is not one of the " +
                  std::to_string(num_hidden_layers) + " layers");
  if (clip_qkv < 0) throw Error("[config] 'clip_qkv' must not be negative");
  if (embedding_dim != 0) check_size_key("word_embed_proj_dim", embedding_dim);
  if (!(logits_multiplier > 0) && !(logits_multiplier < 0))
    throw Error("[config] the logits' multiplier must not be 0");
  for (const RopeConfig* r : {&rope, &sliding_rope}) {
    if (r->type != "longrope") continue;
    const auto rot = static_cast<int64_t>(static_cast<double>(head_dim) * r->partial_rotary_factor);
    const auto pairs = static_cast<size_t>(rot / 2);
    if (r->short_factor.size() != pairs || r->long_factor.size() != pairs)
      throw Error("[config] the longrope short_factor and long_factor need one entry per rotated "
                  "pair: " + std::to_string(pairs) + ", got " +
                  std::to_string(r->short_factor.size()) + " and " +
                  std::to_string(r->long_factor.size()));
    if (r->original_max_position_embeddings <= 0)
      throw Error("[config] longrope needs 'original_max_position_embeddings'");
  }
  check_size_key("num_nextn_predict_layers", num_nextn_predict_layers);
  if (moe) moe->validate();
  if (mla) {
    mla->validate();
    if (rope.partial_rotary_factor != 1.0)
      throw Error("[config] 'partial_rotary_factor' must be 1 for MLA (qk_rope_head_dim is the "
                  "rotated part)");
  }
  if (linear_attn) linear_attn->validate();
}

}  // namespace mobius
