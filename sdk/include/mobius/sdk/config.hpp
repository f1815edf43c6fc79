// mobius/sdk/config.hpp - ArchitectureConfig: a Hugging Face config.json read with each model
// type's defaults, validated with errors that name the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/error.hpp"
#include "mobius/sdk/family_config.hpp"

namespace mobius {

// Parses config text (config.json, or the normalized config a parser produced) within the same
// limits the host enforces before a plugin sees the text: at most 16 MiB, values nested at most
// 64 levels deep, at most 2^20 values. Nesting is refused as it opens, so nothing later (a copy,
// dump(), a comparison: nlohmann recurses in all of them) ever meets a deep value. Throws
// mobius::Error "[config] <what>: <reason>", or "[plugin] ..." with `kind` PLUGIN.
nlohmann::json parse_config_text(std::string_view text, const std::string& what,
                                 mobius_error_kind kind = MOBIUS_ERROR_KIND_CONFIG);

// A config value as messages show it: numbers and booleans as written, strings quoted with
// control and non-ASCII characters escaped and cut after 120 bytes, lists and objects by their
// size alone (never their contents, which may be long or deep).
std::string describe_value(const nlohmann::json& v);
// A string from a config, quoted for a message: 'text' with control bytes (C0, DEL, C1) and
// invalid UTF-8 escaped as \xNN, cut after 120 bytes ("...").
std::string quote_value(std::string_view s);
// A tensor's shape for a message: "[2, 64]".
std::string shape_text(const std::vector<int64_t>& dims);

// The plausible range of a size key: every integer ConfigReader::get_int reads under one of
// these names, and ArchitectureConfig::validate() for the fields it holds, is checked against
// it, so an absurd config (num_hidden_layers: 1e12) is refused before anything is sized by it.
struct SizeBound {
  const char* key;
  int64_t min;      // 1: "must be positive"; 0: "must not be negative"
  int64_t max;      // generous: several times the largest released model's value
  int64_t largest;  // about the largest value in released models, for the message
};
// The bound of `key`, or nullptr when it is not a size key.
const SizeBound* size_bound(std::string_view key);
// Throws "[config] <where>: 'key' ..." when `value` is outside `key`'s bound.
void check_size_key(const std::string& key, int64_t value, const std::string& where = "");

// Typed access to a config object; every error names the key, e.g.
// "[config] 'num_key_value_heads' (3) must divide 'num_attention_heads' (4)".
class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& j, std::string where = "");
  bool has(const std::string& key) const;  // present and not null
  int64_t get_int(const std::string& key, std::optional<int64_t> def = std::nullopt) const;
  double get_double(const std::string& key, std::optional<double> def = std::nullopt) const;
  bool get_bool(const std::string& key, std::optional<bool> def = std::nullopt) const;
  std::string get_string(const std::string& key,
                         std::optional<std::string> def = std::nullopt) const;
  std::vector<std::string> get_strings(const std::string& key) const;  // [] when absent
  // A list of integers, each read as get_int reads one (the key's size bound applies to each).
  std::vector<int64_t> get_ints(const std::string& key,
                                std::optional<std::vector<int64_t>> def = std::nullopt) const;
  const std::string& where() const { return where_; }
  const nlohmann::json& raw() const { return j_; }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;

 private:
  const nlohmann::json& j_;
  std::string where_;
};

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | yarn | dynamic | longrope
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  double partial_rotary_factor = 1.0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;  // 0: derived from factor (and mscale/mscale_all_dim)
  bool truncate = true;
  // Layout: rotate_half over the two halves (false) or adjacent pairs (true).
  bool interleaved = false;
  // longrope (Phi-3): one factor per rotated pair, dividing that pair's frequency. A forward call
  // whose largest position id reaches original_max_position_embeddings uses long_factor, any
  // other short_factor (transformers picks per call, not per token). `factor` is the context
  // extension (max_position_embeddings / original_max_position_embeddings unless the config
  // gives one); cos and sin are multiplied by attention_factor, or when that is 0 by
  // sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) (1 for factor <= 1).
  std::vector<double> short_factor, long_factor;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RopeConfig, type, theta, factor, low_freq_factor,
                                                high_freq_factor, original_max_position_embeddings,
                                                partial_rotary_factor, beta_fast, beta_slow,
                                                mscale, mscale_all_dim, attention_factor, truncate,
                                                interleaved, short_factor, long_factor)

// What the SDK's decoder components read: the decoder's fields, and the typed config of each
// family a model uses (family_config.hpp), empty when it does not. The whole normalized config
// is passed back to the plugin's builder as this struct's JSON (the field list under it); a
// plugin with keys of its own adds them beside these (from_json skips keys it does not know).
struct ArchitectureConfig {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  RopeConfig rope;
  // Sliding-window layers with a rope of their own (Gemma 3's local base frequency).
  bool has_sliding_rope = false;
  RopeConfig sliding_rope;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  int64_t sliding_window = 0;             // 0: none
  std::vector<std::string> layer_types;   // per layer: full_attention | sliding_attention | ...
  std::string qk_norm = "none";           // none | head (per head, after reshape) | full
  double embedding_multiplier = 1.0;
  double attention_multiplier = 0.0;      // 0: head_dim ** -0.5
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  double attn_logit_softcapping = 0.0;    // 0: none
  double final_logit_softcapping = 0.0;   // 0: none
  // Multi-token-prediction layers the checkpoint keeps after the decoder's (DeepSeek-V3's
  // layer 61): not part of the graph, their tensors are ignored.
  int64_t num_nextn_predict_layers = 0;
  // How a decoder knows positions: "rope" (rotary, in attention), "learned" (a table of
  // max_position_embeddings + position_offset rows added to the token embeddings at position_ids
  // + position_offset: GPT-2, OPT and BioGPT with offset 2), "sinusoidal" (XGLM's fixed table,
  // the same indexing, computed in the graph), "alibi" (a per-head linear bias on the attention
  // scores: BLOOM, MPT, Falcon-RW) or "none".
  std::string position_embedding = "rope";
  int64_t position_offset = 0;
  // ALiBi's per-head slopes: "bloom" (BLOOM's and Falcon's build_alibi_tensor) or "mpt" (MPT's,
  // with alibi_bias_max).
  std::string alibi = "bloom";
  double alibi_bias_max = 8.0;
  // Layers whose attention applies no rope (Cohere 2's and EXAONE 4's global layers, SmolLM3's
  // no_rope_layers); 0-based.
  std::vector<int64_t> no_rope_layers;
  // Scores divided by (layer + 1) too (GPT-2's scale_attn_by_inverse_layer_idx).
  bool attention_scale_by_layer = false;
  // q, k and v clamped to [-clip_qkv, clip_qkv] after their projections (OLMo, MPT); 0: none.
  double clip_qkv = 0.0;
  // The token embeddings' width when it differs from hidden_size (OPT's word_embed_proj_dim,
  // with project_in and project_out); 0: hidden_size.
  int64_t embedding_dim = 0;
  bool lm_head_bias = false;  // GPT-J, CodeGen, Phi
  // Logits multiplied by this (Cohere's logit_scale), as logits_scaling divides them.
  double logits_multiplier = 1.0;
  // The families' typed configs: mixture-of-experts MLPs, latent attention, Gated DeltaNet.
  std::optional<MoEConfig> moe;
  std::optional<MLAConfig> mla;
  std::optional<GatedDeltaNetConfig> linear_attn;

  int64_t rotary_dim() const;  // head_dim * partial_rotary_factor, even
  bool is_sliding(int64_t layer) const;
  // Whether `layer`'s attention rotates q and k: a rope model, and not one of no_rope_layers.
  bool uses_rope(int64_t layer) const;
  // Checks every size field against its SizeBound, the relations between fields, and the size
  // of the whole model (about 8.8 trillion parameters at most), then each family config present;
  // throws naming the key.
  void validate() const;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    ArchitectureConfig, model_type, vocab_size, hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, head_dim, hidden_act, rms_norm_eps,
    max_position_embeddings, rope, has_sliding_rope, sliding_rope, qkv_bias, o_bias, mlp_bias,
    tie_word_embeddings, sliding_window, layer_types, qk_norm, embedding_multiplier,
    attention_multiplier, residual_multiplier, logits_scaling, attn_logit_softcapping,
    final_logit_softcapping, num_nextn_predict_layers, position_embedding, position_offset, alibi,
    alibi_bias_max, no_rope_layers, attention_scale_by_layer, clip_qkv, embedding_dim, lm_head_bias,
    logits_multiplier, moe, mla, linear_attn)

// Reads rope settings the way transformers does: `rope_scaling` ({"type"} or {"rope_type"}),
// or the newer `rope_parameters`, with `rope_theta` and `partial_rotary_factor`. For longrope,
// a top-level `original_max_position_embeddings` wins over the rope's own, as transformers
// standardizes it (Phi-3 keeps the pretraining length there).
RopeConfig read_rope(const ConfigReader& r, double default_theta);

// Throws "[config] ... 'rope_scaling' (or 'rope_parameters') ..." when a longrope's short_factor
// or long_factor does not hold one entry per rotated pair of `rotary_dim` dims. read_rope cannot
// check it: the rotary width depends on head_dim, which the family's defaults decide.
// ArchitectureConfig::validate() checks the same for a config built in code.
void check_rope_factors(const ConfigReader& r, const RopeConfig& rope, int64_t rotary_dim);

// The text part of a config: `text_config` when the top level nests one, else the top level.
const nlohmann::json& text_config(const nlohmann::json& j);

}  // namespace mobius
