// mobius/sdk/family_config.hpp - the typed configs of the decoder families: mixture of experts
// (MoEConfig), multi-head latent attention (MLAConfig) and Gated DeltaNet (GatedDeltaNetConfig).
//
// Each is declared once here: its fields with their meaning, its JSON form (one field list, the
// NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT line under it; ArchitectureConfig carries it
// in the normalized config), validate(), and read(), which parses it from a Hugging Face
// config.json through the family's table: one FamilyRow per model type, written in
// sdk/src/family_config.cpp beside the family's checks, holding transformers' defaults for that
// type and the keys it reads. Adding a model type to a family is adding a row.
//
// The components (mla.hpp, moe.hpp, gated_deltanet.hpp) take these fields plus the few they
// share with the whole decoder (hidden size, activation, rope), which ArchitectureConfig holds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mobius {

class ConfigReader;

// std::optional<T> in JSON: null when empty. (nlohmann_json 3.11.2, Debian 12's, has none of its own;
// ArchitectureConfig's optional family configs use this one.)
template <class T>
void to_json(nlohmann::json& j, const std::optional<T>& v) {
  if (v) j = *v;
  else j = nullptr;
}
template <class T>
void from_json(const nlohmann::json& j, std::optional<T>& v) {
  if (j.is_null()) v.reset();
  else v = j.get<T>();
}

// One field a model type reads from config.json, in a FamilyRow's `reads`:
//   "n_group"                            read from the family's spelling of the field (its name,
//                                        unless the family notes another)
//   FieldKey("n_routed_experts", "num_experts")  read from another key
//   FieldKey("n_group").null_is(1)       an explicit null means 1 (an absent key: the default)
//   FieldKey("num_experts_per_tok").required()   the key must be present (MoE: with experts)
//   FieldKey("topk_method").one_of({"greedy", ...})  a closed set of string values for this type
//   FieldKey("n_routed_experts", "num_local_experts").or_key("num_experts")  a second spelling,
//                                        read when the first is absent
// The type of the field decides how its key is read: ConfigReader::get_int (with the key's size
// bound), get_double, get_bool, get_string, or get_ints for a list of integers.
struct FieldKey {
  FieldKey(const char* f, const char* k = "") : field(f), key(k) {}
  FieldKey null_is(nlohmann::json v) const {
    FieldKey k = *this;
    k.if_null = std::move(v);
    return k;
  }
  FieldKey required() const {
    FieldKey k = *this;
    k.is_required = true;
    return k;
  }
  FieldKey one_of(std::vector<std::string> values) const {
    FieldKey k = *this;
    k.choices = std::move(values);
    return k;
  }
  // Read from `other` when the key itself is absent: transformers' attribute_map lets a config
  // spell a field two ways (Mixtral's, Qwen3-MoE's and gpt-oss' num_experts / num_local_experts).
  FieldKey or_key(std::string other) const {
    FieldKey k = *this;
    k.alias = std::move(other);
    return k;
  }

  std::string field;
  std::string key;  // empty: the family's spelling of the field
  std::string alias;  // empty: none
  std::optional<nlohmann::json> if_null;
  bool is_required = false;
  std::vector<std::string> choices;
};

// One model type's row of a family's table: transformers' configuration_<type>.py defaults for
// the fields it reads, the values its modeling code fixes for those it does not (they are not
// read, whatever config.json says), and the keys it reads.
template <class T>
struct FamilyRow {
  std::string model_type;
  T defaults;
  std::vector<FieldKey> reads;
};

// Where a family config's checks report a field: by the key the row read it from, through the
// reader (whose location prefixes the message, "config.json text_config: ..."). Empty: by the
// family's spelling, "[config] 'key' ...".
struct ConfigSite {
  const ConfigReader* reader = nullptr;
  const std::vector<FieldKey>* reads = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Mixture of experts: the router and the routed and shared experts (moe.hpp's SparseMoE).
// Rows: deepseek_v2, deepseek_v3, mixtral, qwen3_moe, gpt_oss, qwen2_moe, qwen3_next, olmoe,
// granitemoe, granitemoehybrid, phimoe, ernie4_5_moe, glm4_moe, hunyuan_v1_moe, dbrx, llama4_text.
struct MoEConfig {
  int64_t moe_intermediate_size = 0;  // the width of each routed (and shared) expert
  int64_t n_routed_experts = 0;       // 0: no MoE layer
  int64_t n_shared_experts = 0;       // 0: none; their MLP is n_shared_experts times as wide
  // The shared experts' width when it is not moe_intermediate_size * n_shared_experts
  // (Qwen2-MoE's shared_expert_intermediate_size, HunYuan's and Llama 4's intermediate_size);
  // 0: that product.
  int64_t shared_expert_intermediate_size = 0;
  // sigmoid(shared_expert_gate(x)) [tokens, 1] scales the shared experts' output (Qwen2-MoE,
  // Qwen3-Next).
  bool shared_expert_gate = false;
  int64_t num_experts_per_tok = 0;
  // Which layers are MoE (is_moe_layer): the layers moe_layers lists when it is not empty
  // (Llama 4); otherwise those from first_k_dense_replace on (DeepSeek, ERNIE's
  // moe_layer_start_index) up to last_moe_layer (ERNIE's moe_layer_end_index; -1: the last)
  // that are every decoder_sparse_step-th ((layer + 1) % step == 0) and not in mlp_only_layers
  // (Qwen-MoE). The others use the dense MLP.
  int64_t first_k_dense_replace = 0;
  int64_t last_moe_layer = -1;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers = {};
  std::vector<int64_t> moe_layers = {};
  // How the router scores, in float32 (config.json: scoring_func):
  //   softmax       a softmax over all router logits, then the top k (DeepSeek V2, Mixtral,
  //                 Qwen-MoE, OLMoE, DBRX, HunYuan, ERNIE 4.5)
  //   sigmoid       sigmoid scores (DeepSeek V3, GLM-4.5)
  //   topk_softmax  the top k logits, then a softmax over those k (gpt-oss, Granite-MoE)
  //   topk_sigmoid  the top k logits, then the sigmoid of each (Llama 4)
  //   sparsemixer   PhiMoE's two-step choice (top 2 only): the best logit, its weight the
  //                 softmax over the logits within 2 * jitter_eps of it (relative to
  //                 max(|logit|, best)); then the same over the others for the second
  std::string scoring = "softmax";
  // e_score_correction_bias [E] (float32) is added to the scores for the choice of experts only;
  // the weights are the unbiased scores (DeepSeek V3 and GLM-4.5 with sigmoid scores, ERNIE 4.5
  // with softmax ones).
  bool correction_bias = false;
  // greedy: top-k over all experts; group_limited_greedy: only in the topk_group groups of the
  // highest max score; noaux_tc: only in the topk_group groups of the highest sum of their two
  // best (biased) scores.
  std::string topk_method = "greedy";
  int64_t n_group = 1;
  int64_t topk_group = 1;
  // The k weights divided by their norm before the scaling: their sum plus 1e-20 (norm_topk_p
  // 1), or their Lp norm (DBRX's moe_normalize_expert_weights p).
  bool norm_topk_prob = false;
  double norm_topk_p = 1.0;
  double routed_scaling_factor = 1.0;
  bool router_bias = false;  // the router is a linear layer with a bias (gpt-oss)
  double jitter_eps = 0.01;  // sparsemixer's router_jitter_noise
  // The routing weight scales each expert's input rather than its output (Llama 4:
  // expert(w * x)); the experts' outputs are then summed.
  bool weight_inputs = false;
  // The clamped SwiGLU of gpt-oss' experts (moe.hpp's ClampedSwiGLUExpertBank): gate clamped
  // above and up on both sides at swiglu_limit, gate * sigmoid(swiglu_alpha * gate) * (up + 1).
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;

  bool is_moe_layer(int64_t layer) const {
    if (n_routed_experts <= 0) return false;
    if (!moe_layers.empty())
      return std::find(moe_layers.begin(), moe_layers.end(), layer) != moe_layers.end();
    return layer >= first_k_dense_replace && (last_moe_layer < 0 || layer <= last_moe_layer) &&
           decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0 &&
           std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) ==
               mlp_only_layers.end();
  }
  // The shared experts' width (0: none).
  int64_t shared_width() const {
    if (n_shared_experts <= 0) return 0;
    return shared_expert_intermediate_size > 0 ? shared_expert_intermediate_size
                                               : moe_intermediate_size * n_shared_experts;
  }
  // Throws "[config] ..." naming the key whose value cannot work.
  void validate(const ConfigSite& site = {}) const;
  // Reads config.json (the reader's object) as `model_type`'s row says, then validates. An
  // explicit null or 0 for n_group / topk_group means one group.
  static MoEConfig read(const ConfigReader& r, const std::string& model_type);
  static MoEConfig read(const ConfigReader& r, const FamilyRow<MoEConfig>& row);
  static const std::vector<FamilyRow<MoEConfig>>& rows();
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MoEConfig, moe_intermediate_size, n_routed_experts,
                                                n_shared_experts, shared_expert_intermediate_size,
                                                shared_expert_gate, num_experts_per_tok,
                                                first_k_dense_replace, last_moe_layer,
                                                decoder_sparse_step, mlp_only_layers, moe_layers,
                                                scoring, correction_bias, topk_method, n_group,
                                                topk_group, norm_topk_prob, norm_topk_p,
                                                routed_scaling_factor, router_bias, jitter_eps,
                                                weight_inputs, swiglu_limit, swiglu_alpha)

// ---------------------------------------------------------------------------------------------
// Multi-head latent attention (mla.hpp's MultiHeadLatentAttention). Rows: deepseek_v2,
// deepseek_v3.
struct MLAConfig {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (config.json: null)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // the rotated part of each query/key head
  int64_t v_head_dim = 0;
  bool attention_bias = false;  // on q_a_proj, kv_a_proj_with_mqa and o_proj only

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  void validate(const ConfigSite& site = {}) const;
  static MLAConfig read(const ConfigReader& r, const std::string& model_type);
  static MLAConfig read(const ConfigReader& r, const FamilyRow<MLAConfig>& row);
  static const std::vector<FamilyRow<MLAConfig>>& rows();
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MLAConfig, q_lora_rank, kv_lora_rank,
                                                qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                                                attention_bias)

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet, the linear-attention token mixer (gated_deltanet.hpp). The config.json keys
// are linear_*. Rows: qwen3_5, qwen3_5_text. The defaults are Qwen3.5's.
struct GatedDeltaNetConfig {
  int64_t num_k_heads = 16;   // hk, query/key heads: linear_num_key_heads
  int64_t num_v_heads = 32;   // hv, value heads, a multiple of hk: linear_num_value_heads
  int64_t k_head_dim = 128;   // dk: linear_key_head_dim
  int64_t v_head_dim = 128;   // dv: linear_value_head_dim
  int64_t conv_kernel = 4;    // K, the causal conv's width: linear_conv_kernel_dim

  void validate(const ConfigSite& site = {}) const;
  static GatedDeltaNetConfig read(const ConfigReader& r, const std::string& model_type);
  static GatedDeltaNetConfig read(const ConfigReader& r, const FamilyRow<GatedDeltaNetConfig>& row);
  static const std::vector<FamilyRow<GatedDeltaNetConfig>>& rows();
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatedDeltaNetConfig, num_k_heads, num_v_heads,
                                                k_head_dim, v_head_dim, conv_kernel)

}  // namespace mobius
