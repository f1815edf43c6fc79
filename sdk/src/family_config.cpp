// family_config.cpp - the decoder families' tables (one row per model type, with transformers'
// defaults for it), the reader they share, and each family's checks (family_config.hpp).
#include "mobius/sdk/family_config.hpp"

#include <cmath>
#include <initializer_list>

#include "mobius/sdk/config.hpp"

namespace mobius {

namespace {

// A family's spelling of its fields in config.json, where a key differs from the field's name.
using Spelling = std::vector<std::pair<std::string, std::string>>;

// The config.json key of `field`: the row's, else the family's spelling, else the field's name;
// the row's second spelling (FieldKey::or_key) when config.json (`raw`, if given) has only that.
std::string key_of(const std::string& field, const std::vector<FieldKey>* reads,
                   const Spelling& family, const nlohmann::json* raw = nullptr) {
  std::string key, alias;
  if (reads)
    for (const FieldKey& f : *reads)
      if (f.field == field) {
        if (key.empty()) key = f.key;
        if (alias.empty()) alias = f.alias;
      }
  if (key.empty())
    for (const auto& [f, k] : family)
      if (f == field && key.empty()) key = k;
  if (key.empty()) key = field;
  if (!alias.empty() && raw && raw->is_object() && !raw->contains(key) && raw->contains(alias))
    return alias;
  return key;
}

// A family's checks, naming each field by its config.json key and reporting through the site's
// reader when there is one.
class Checker {
 public:
  Checker(const ConfigSite& site, const Spelling& family) : site_(site), family_(family) {}
  std::string key(const std::string& field) const {
    return key_of(field, site_.reads, family_, site_.reader ? &site_.reader->raw() : nullptr);
  }
  std::string quoted(const std::string& field) const { return "'" + key(field) + "'"; }
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    if (site_.reader) site_.reader->fail(key(field), why);
    throw Error("[config] '" + key(field) + "' " + why);
  }
  // Within the key's SizeBound (a config built in code never went through ConfigReader).
  void bounded(const std::string& field, int64_t v) const {
    check_size_key(key(field), v, site_.reader ? site_.reader->where() : "");
  }
  // Every integer field of `fields` (a family config's JSON; lists: each entry) within its bound.
  void all_bounded(const nlohmann::json& fields) const {
    for (const auto& [field, v] : fields.items()) {
      if (v.is_number_integer()) bounded(field, v.get<int64_t>());
      if (v.is_array())
        for (const auto& e : v)
          if (e.is_number_integer()) bounded(field, e.get<int64_t>());
    }
  }
  void positive(const std::string& field, int64_t v) const {
    if (v <= 0) fail(field, "must be positive, got " + std::to_string(v));
  }

 private:
  const ConfigSite& site_;
  const Spelling& family_;
};

std::string joined(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ", ") + v;
  return out;
}

// `fields` (a family config's JSON, holding the row's defaults) with every field of `reads` read
// from config.json: how is decided by the type of the field's default.
nlohmann::json read_fields(const ConfigReader& r, const std::string& family_name,
                           const std::string& model_type, nlohmann::json fields,
                           const std::vector<FieldKey>& reads, const Spelling& family) {
  using Type = nlohmann::json::value_t;
  for (const FieldKey& f : reads) {
    auto it = fields.find(f.field);
    if (it == fields.end())
      throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] the " + family_name + " row of '" +
                                                model_type + "' reads '" + f.field +
                                                "', which is not a field of the " + family_name +
                                                " config");
    nlohmann::json& v = *it;
    const std::string key = key_of(f.field, &reads, family, &r.raw());
    if (auto raw = r.raw().find(key); f.if_null && raw != r.raw().end() && raw->is_null()) {
      v = *f.if_null;
      continue;
    }
    switch (v.type()) {
      case Type::boolean: v = r.get_bool(key, v.get<bool>()); break;
      case Type::number_integer:
      case Type::number_unsigned: v = r.get_int(key, v.get<int64_t>()); break;
      case Type::number_float: v = r.get_double(key, v.get<double>()); break;
      case Type::string: v = r.get_string(key, v.get<std::string>()); break;
      case Type::array: v = r.get_ints(key, v.get<std::vector<int64_t>>()); break;
      default:
        throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] the " + family_name + " field '" + f.field +
                                                  "' has no reader for its type");
    }
    if (!f.choices.empty() && v.is_string()) {
      const std::string s = v.get<std::string>();
      if (std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end())
        r.fail(key, "has unknown value " + quote_value(s) + " for " + model_type + " (known: " +
                        joined(f.choices) + ")");
    }
  }
  return fields;
}

// The row of `model_type` in a family's table.
template <class T>
const FamilyRow<T>& row_of(const std::vector<FamilyRow<T>>& rows, const std::string& model_type,
                           const std::string& family_name) {
  for (const auto& row : rows)
    if (row.model_type == model_type) return row;
  throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] the " + family_name +
                                            " table has no row for model type " +
                                            quote_value(model_type));
}

template <class T>
T read_row(const ConfigReader& r, const FamilyRow<T>& row, const std::string& family_name,
           const Spelling& family) {
  return read_fields(r, family_name, row.model_type, nlohmann::json(row.defaults), row.reads, family)
      .template get<T>();
}

// Throws "'key' is required" for the first required key config.json lacks (or holds null).
void check_required(const ConfigReader& r, const std::vector<FieldKey>& reads,
                    const Spelling& family) {
  for (const FieldKey& f : reads) {
    const std::string key = key_of(f.field, &reads, family, &r.raw());
    if (f.is_required && !r.has(key)) r.fail(key, "is required");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Mixture of experts

namespace {

const Spelling kMoESpelling = {{"scoring", "scoring_func"}};

// DeepSeek (configuration_deepseek_v2.py / configuration_deepseek_v3.py): an explicit null means
// none for the expert counts (no routed experts: every layer dense) and one group for
// n_group / topk_group, where an absent key takes the default. Every layer from
// first_k_dense_replace on is MoE: transformers ignores moe_layer_freq (1 in every DeepSeek
// checkpoint), decoder_sparse_step and mlp_only_layers.
std::vector<FieldKey> deepseek_moe_reads(std::initializer_list<FieldKey> more) {
  std::vector<FieldKey> reads = {"moe_intermediate_size",
                                 FieldKey("n_routed_experts").null_is(0),
                                 FieldKey("n_shared_experts").null_is(0),
                                 FieldKey("num_experts_per_tok").null_is(0),
                                 "first_k_dense_replace",
                                 FieldKey("n_group").null_is(1),
                                 FieldKey("topk_group").null_is(1),
                                 "routed_scaling_factor"};
  reads.insert(reads.end(), more);
  return reads;
}

}  // namespace

const std::vector<FamilyRow<MoEConfig>>& MoEConfig::rows() {
  static const std::vector<FamilyRow<MoEConfig>> rows = {
      // transformers fixes each version's router whatever scoring_func says. V2 scores with
      // softmax and honours topk_method; it has no num_experts_per_tok default, and its router
      // never renormalises (DeepSeek's own code did only when norm_topk_prob, which every V2
      // checkpoint sets false).
      {"deepseek_v2",
       {.moe_intermediate_size = 1407, .n_routed_experts = 64, .n_shared_experts = 2,
        .num_experts_per_tok = 0, .first_k_dense_replace = 0, .scoring = "softmax",
        .topk_method = "greedy", .n_group = 1, .topk_group = 1, .norm_topk_prob = false,
        .routed_scaling_factor = 1.0},
       deepseek_moe_reads({FieldKey("num_experts_per_tok").null_is(0).required(),
                           FieldKey("topk_method").one_of({"greedy", "group_limited_greedy"})})},
      // V3: sigmoid scores with e_score_correction_bias and noaux_tc, whatever the config says.
      {"deepseek_v3",
       {.moe_intermediate_size = 2048, .n_routed_experts = 256, .n_shared_experts = 1,
        .num_experts_per_tok = 8, .first_k_dense_replace = 3, .scoring = "sigmoid",
        .correction_bias = true, .topk_method = "noaux_tc", .n_group = 8, .topk_group = 4,
        .norm_topk_prob = true, .routed_scaling_factor = 2.5},
       deepseek_moe_reads({"norm_topk_prob"})},
      // Mixtral (configuration_mixtral.py, MixtralSparseMoeBlock): every layer is sparse, its
      // experts as wide as intermediate_size; a float32 softmax over all experts, the top k
      // always renormalised.
      {"mixtral",
       {.moe_intermediate_size = 14336, .n_routed_experts = 8, .num_experts_per_tok = 2,
        .scoring = "softmax", .norm_topk_prob = true},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_local_experts").or_key("num_experts"),
        "num_experts_per_tok"}},
      // Qwen3-MoE (configuration_qwen3_moe.py, Qwen2MoeTopKRouter): the sparse layers are every
      // decoder_sparse_step-th one outside mlp_only_layers (null: none); the same router as
      // Mixtral's, renormalised only when norm_topk_prob; no shared expert.
      {"qwen3_moe",
       {.moe_intermediate_size = 768, .n_routed_experts = 128, .num_experts_per_tok = 8,
        .scoring = "softmax", .norm_topk_prob = false},
       {"moe_intermediate_size",
        FieldKey("n_routed_experts", "num_experts").or_key("num_local_experts"),
        "num_experts_per_tok", "decoder_sparse_step",
        FieldKey("mlp_only_layers").null_is(nlohmann::json::array()), "norm_topk_prob"}},
      // gpt-oss (configuration_gpt_oss.py, GptOssTopKRouter, GptOssExperts): every layer is
      // sparse; a router with a bias, a softmax over its top k logits; experts as wide as
      // intermediate_size with the clamped SwiGLU.
      {"gpt_oss",
       {.moe_intermediate_size = 2880, .n_routed_experts = 128, .num_experts_per_tok = 4,
        .scoring = "topk_softmax", .router_bias = true, .swiglu_limit = 7.0,
        .swiglu_alpha = 1.702},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_local_experts").or_key("num_experts"),
        "num_experts_per_tok", "swiglu_limit", "swiglu_alpha"}},
      // Qwen2-MoE (configuration_qwen2_moe.py, Qwen2MoeSparseMoeBlock): Qwen3-MoE's layers and
      // router plus one shared expert of its own width, scaled by sigmoid(shared_expert_gate(x)).
      {"qwen2_moe",
       {.moe_intermediate_size = 1408, .n_routed_experts = 60, .n_shared_experts = 1,
        .shared_expert_intermediate_size = 5632, .shared_expert_gate = true,
        .num_experts_per_tok = 4, .scoring = "softmax", .norm_topk_prob = false},
       {"moe_intermediate_size", FieldKey("n_routed_experts", "num_experts"),
        "num_experts_per_tok", "decoder_sparse_step",
        FieldKey("mlp_only_layers").null_is(nlohmann::json::array()), "norm_topk_prob",
        "shared_expert_intermediate_size"}},
      // Qwen3-Next (configuration_qwen3_next.py): Qwen2-MoE's block with other defaults.
      {"qwen3_next",
       {.moe_intermediate_size = 512, .n_routed_experts = 512, .n_shared_experts = 1,
        .shared_expert_intermediate_size = 512, .shared_expert_gate = true,
        .num_experts_per_tok = 10, .scoring = "softmax", .norm_topk_prob = true},
       {"moe_intermediate_size", FieldKey("n_routed_experts", "num_experts"),
        "num_experts_per_tok", "decoder_sparse_step",
        FieldKey("mlp_only_layers").null_is(nlohmann::json::array()), "norm_topk_prob",
        "shared_expert_intermediate_size"}},
      // OLMoE (configuration_olmoe.py, OlmoeSparseMoeBlock): every layer sparse, experts as wide
      // as intermediate_size, Qwen-MoE's router.
      {"olmoe",
       {.moe_intermediate_size = 2048, .n_routed_experts = 64, .num_experts_per_tok = 8,
        .scoring = "softmax", .norm_topk_prob = false},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_experts").or_key("num_local_experts"),
        "num_experts_per_tok", "norm_topk_prob"}},
      // Granite-MoE (configuration_granitemoe.py, GraniteMoeTopKRouter): every layer sparse,
      // experts as wide as intermediate_size; a softmax over the top k logits.
      {"granitemoe",
       {.moe_intermediate_size = 11008, .n_routed_experts = 8, .num_experts_per_tok = 2,
        .scoring = "topk_softmax"},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_local_experts"), "num_experts_per_tok"}},
      // Granite 4.0 (configuration_granitemoehybrid.py): Granite-MoE's experts and router on its
      // MoE layers (0 experts: none).
      {"granitemoehybrid",
       {.moe_intermediate_size = 11008, .n_routed_experts = 8, .num_experts_per_tok = 2,
        .scoring = "topk_softmax"},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_local_experts"), "num_experts_per_tok"}},
      // PhiMoE (configuration_phimoe.py, sparsemixer): every layer sparse, experts as wide as
      // intermediate_size, two experts chosen by the sparse mixer.
      {"phimoe",
       {.moe_intermediate_size = 6400, .n_routed_experts = 16, .num_experts_per_tok = 2,
        .scoring = "sparsemixer", .jitter_eps = 0.01},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_local_experts"), "num_experts_per_tok",
        FieldKey("jitter_eps", "router_jitter_noise")}},
      // ERNIE 4.5 MoE (configuration_ernie4_5_moe.py, Ernie4_5_MoeTopKRouter): the layers
      // moe_layer_start_index..moe_layer_end_index (-1: the last) that are every
      // moe_layer_interval-th; a float32 softmax, the choice biased by moe_statics'
      // e_score_correction_bias, the k weights always renormalised; shared experts.
      {"ernie4_5_moe",
       {.moe_intermediate_size = 1536, .n_routed_experts = 64, .n_shared_experts = 2,
        .num_experts_per_tok = 6, .first_k_dense_replace = 1, .last_moe_layer = -1,
        .decoder_sparse_step = 1, .scoring = "softmax", .correction_bias = true,
        .norm_topk_prob = true},
       {"moe_intermediate_size",
        FieldKey("n_routed_experts", "moe_num_experts").or_key("num_experts"),
        FieldKey("num_experts_per_tok", "moe_k").or_key("num_experts_per_tok"),
        FieldKey("n_shared_experts", "moe_num_shared_experts").null_is(0),
        FieldKey("first_k_dense_replace", "moe_layer_start_index"),
        FieldKey("last_moe_layer", "moe_layer_end_index"),
        FieldKey("decoder_sparse_step", "moe_layer_interval")}},
      // GLM-4.5 (configuration_glm4_moe.py, Glm4MoeTopkRouter): DeepSeek V3's router (sigmoid,
      // correction bias, noaux_tc groups) and layers (dense below first_k_dense_replace).
      {"glm4_moe",
       {.moe_intermediate_size = 1408, .n_routed_experts = 128, .n_shared_experts = 1,
        .num_experts_per_tok = 8, .first_k_dense_replace = 1, .scoring = "sigmoid",
        .correction_bias = true, .topk_method = "noaux_tc", .n_group = 1, .topk_group = 1,
        .norm_topk_prob = true, .routed_scaling_factor = 1.0},
       {"moe_intermediate_size", FieldKey("n_routed_experts").or_key("num_local_experts"),
        FieldKey("n_shared_experts").null_is(0), "num_experts_per_tok", "first_k_dense_replace",
        FieldKey("n_group").null_is(1), FieldKey("topk_group").null_is(1), "norm_topk_prob",
        "routed_scaling_factor"}},
      // HunYuan-MoE (configuration_hunyuan_v1_moe.py, HunYuanMoEV1Gate): every layer sparse,
      // experts and the one shared MLP as wide as intermediate_size; the k weights always
      // renormalised.
      {"hunyuan_v1_moe",
       {.moe_intermediate_size = 11008, .n_routed_experts = 1, .n_shared_experts = 1,
        .shared_expert_intermediate_size = 11008, .num_experts_per_tok = 1,
        .scoring = "softmax", .norm_topk_prob = true},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("shared_expert_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_experts").or_key("num_local_experts"),
        FieldKey("num_experts_per_tok", "moe_topk").or_key("num_experts_per_tok")}},
      // DBRX (configuration_dbrx.py's ffn_config, DbrxRouter): every layer sparse, experts as
      // wide as ffn_hidden_size; a softmax, the k weights divided by their
      // moe_normalize_expert_weights-norm (the family reads that key: null is none).
      {"dbrx",
       {.moe_intermediate_size = 3584, .n_routed_experts = 4, .num_experts_per_tok = 1,
        .scoring = "softmax", .norm_topk_prob = true, .norm_topk_p = 1.0},
       {FieldKey("moe_intermediate_size", "ffn_hidden_size"),
        FieldKey("n_routed_experts", "moe_num_experts"),
        FieldKey("num_experts_per_tok", "moe_top_k")}},
      // Llama 4 (configuration_llama4.py's text config, Llama4TextMoe): the layers moe_layers
      // lists (the family fills it from interleave_moe_layer_step when absent); experts and the
      // shared expert as wide as intermediate_size; the sigmoid of the top k logits scales each
      // chosen expert's input.
      {"llama4_text",
       {.moe_intermediate_size = 8192, .n_routed_experts = 16, .n_shared_experts = 1,
        .shared_expert_intermediate_size = 8192, .num_experts_per_tok = 1,
        .scoring = "topk_sigmoid", .weight_inputs = true},
       {FieldKey("moe_intermediate_size", "intermediate_size"),
        FieldKey("shared_expert_intermediate_size", "intermediate_size"),
        FieldKey("n_routed_experts", "num_local_experts"), "num_experts_per_tok",
        FieldKey("moe_layers").null_is(nlohmann::json::array())}},
  };
  return rows;
}

MoEConfig MoEConfig::read(const ConfigReader& r, const std::string& model_type) {
  return read(r, row_of(rows(), model_type, "MoE"));
}

MoEConfig MoEConfig::read(const ConfigReader& r, const FamilyRow<MoEConfig>& row) {
  MoEConfig m = read_row(r, row, "MoE", kMoESpelling);
  // A dense config (no routed experts) need not state the routing keys.
  if (m.n_routed_experts > 0) check_required(r, row.reads, kMoESpelling);
  if (m.n_group == 0) m.n_group = 1;  // 0, like null: one group
  if (m.topk_group == 0) m.topk_group = 1;
  m.validate({&r, &row.reads});
  return m;
}

void MoEConfig::validate(const ConfigSite& site) const {
  const Checker c(site, kMoESpelling);
  c.all_bounded(*this);
  if (n_routed_experts < 0) c.fail("n_routed_experts", "must not be negative");
  if (first_k_dense_replace < 0) c.fail("first_k_dense_replace", "must not be negative");
  if (decoder_sparse_step <= 0)
    c.fail("decoder_sparse_step", "must be positive, got " + std::to_string(decoder_sparse_step));
  for (int64_t layer : mlp_only_layers)
    if (layer < 0)
      c.fail("mlp_only_layers", "must hold layer indices, got " + std::to_string(layer));
  if (n_routed_experts == 0) return;
  if (moe_intermediate_size <= 0) c.fail("moe_intermediate_size", "must be positive");
  if (n_shared_experts < 0) c.fail("n_shared_experts", "must not be negative");
  if (num_experts_per_tok <= 0 || num_experts_per_tok > n_routed_experts)
    c.fail("num_experts_per_tok", "(" + std::to_string(num_experts_per_tok) +
                                      ") must be between 1 and " + c.quoted("n_routed_experts") +
                                      " (" + std::to_string(n_routed_experts) + ")");
  if (scoring != "softmax" && scoring != "sigmoid" && scoring != "topk_softmax" &&
      scoring != "topk_sigmoid" && scoring != "sparsemixer")
    c.fail("scoring", "has unknown value " + quote_value(scoring) +
                          " (known: softmax, sigmoid, topk_softmax, topk_sigmoid, sparsemixer)");
  // Scoring the chosen logits only leaves no scores to choose groups by.
  const bool topk_first = scoring == "topk_softmax" || scoring == "topk_sigmoid" || scoring == "sparsemixer";
  if (topk_first && topk_method != "greedy")
    c.fail("topk_method", "must be greedy with " + quote_value(scoring) + " scoring, got " +
                              quote_value(topk_method));
  if (topk_first && correction_bias)
    c.fail("scoring", quote_value(scoring) + " has no scores for a correction bias to adjust");
  if (scoring == "sparsemixer" && num_experts_per_tok != 2)
    c.fail("num_experts_per_tok", "must be 2 for the sparse mixer, got " +
                                      std::to_string(num_experts_per_tok));
  if (!std::isfinite(jitter_eps) || jitter_eps < 0) c.fail("jitter_eps", "must be a non-negative number");
  if (!std::isfinite(norm_topk_p) || norm_topk_p <= 0) c.fail("norm_topk_p", "must be a positive number");
  if (shared_expert_intermediate_size < 0)
    c.fail("shared_expert_intermediate_size", "must not be negative");
  if (last_moe_layer < -1) c.fail("last_moe_layer", "must be a layer index or -1 (the last)");
  for (int64_t layer : moe_layers)
    if (layer < 0) c.fail("moe_layers", "must hold layer indices, got " + std::to_string(layer));
  if (!std::isfinite(swiglu_limit) || swiglu_limit <= 0)
    c.fail("swiglu_limit", "must be a positive number");
  if (!std::isfinite(swiglu_alpha)) c.fail("swiglu_alpha", "must be finite");
  if (topk_method != "greedy" && topk_method != "group_limited_greedy" && topk_method != "noaux_tc")
    c.fail("topk_method", "has unknown value " + quote_value(topk_method) +
                              " (known: greedy, group_limited_greedy, noaux_tc)");
  if (n_group <= 0 || n_routed_experts % n_group != 0)
    c.fail("n_group", "(" + std::to_string(n_group) + ") must divide " +
                          c.quoted("n_routed_experts") + " (" + std::to_string(n_routed_experts) +
                          ")");
  if (topk_group <= 0 || topk_group > n_group)
    c.fail("topk_group", "(" + std::to_string(topk_group) + ") must be between 1 and " +
                             c.quoted("n_group") + " (" + std::to_string(n_group) + ")");
  if (topk_method == "noaux_tc" && n_group > 1 && topk_group < n_group &&
      n_routed_experts / n_group < 2)
    c.fail("n_group", "leaves fewer than 2 experts per group for noaux_tc's top-2 group score");
  if (!std::isfinite(routed_scaling_factor)) c.fail("routed_scaling_factor", "must be finite");
}

// ---------------------------------------------------------------------------------------------
// Multi-head latent attention

namespace {

const Spelling kMLASpelling = {};

}  // namespace

const std::vector<FamilyRow<MLAConfig>>& MLAConfig::rows() {
  // DeepSeek: q_lora_rank null selects the plain q_proj (absent: the default rank).
  static const std::vector<FieldKey> deepseek_reads = {
      FieldKey("q_lora_rank").null_is(0), "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
      "v_head_dim", "attention_bias"};
  static const std::vector<FamilyRow<MLAConfig>> rows = {
      {"deepseek_v2",
       {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
        .qk_rope_head_dim = 64, .v_head_dim = 128, .attention_bias = false},
       deepseek_reads},
      {"deepseek_v3",
       {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
        .qk_rope_head_dim = 64, .v_head_dim = 128, .attention_bias = false},
       deepseek_reads},
  };
  return rows;
}

MLAConfig MLAConfig::read(const ConfigReader& r, const std::string& model_type) {
  return read(r, row_of(rows(), model_type, "MLA"));
}

MLAConfig MLAConfig::read(const ConfigReader& r, const FamilyRow<MLAConfig>& row) {
  MLAConfig m = read_row(r, row, "MLA", kMLASpelling);
  check_required(r, row.reads, kMLASpelling);
  m.validate({&r, &row.reads});
  return m;
}

void MLAConfig::validate(const ConfigSite& site) const {
  const Checker c(site, kMLASpelling);
  c.all_bounded(*this);
  c.positive("kv_lora_rank", kv_lora_rank);
  c.positive("qk_nope_head_dim", qk_nope_head_dim);
  c.positive("qk_rope_head_dim", qk_rope_head_dim);
  c.positive("v_head_dim", v_head_dim);
  if (q_lora_rank < 0) c.fail("q_lora_rank", "must be positive or null");
  if (qk_rope_head_dim % 2 != 0)
    c.fail("qk_rope_head_dim", "must be even, got " + std::to_string(qk_rope_head_dim));
}

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet

namespace {

const Spelling kGatedDeltaNetSpelling = {{"num_k_heads", "linear_num_key_heads"},
                                         {"num_v_heads", "linear_num_value_heads"},
                                         {"k_head_dim", "linear_key_head_dim"},
                                         {"v_head_dim", "linear_value_head_dim"},
                                         {"conv_kernel", "linear_conv_kernel_dim"}};

}  // namespace

const std::vector<FamilyRow<GatedDeltaNetConfig>>& GatedDeltaNetConfig::rows() {
  // Qwen3_5TextConfig (configuration_qwen3_5.py); qwen3_5 nests it as text_config.
  static const std::vector<FieldKey> qwen35_reads = {"conv_kernel", "k_head_dim", "v_head_dim",
                                                     "num_k_heads", "num_v_heads"};
  static const GatedDeltaNetConfig qwen35 = {.num_k_heads = 16, .num_v_heads = 32,
                                             .k_head_dim = 128, .v_head_dim = 128,
                                             .conv_kernel = 4};
  static const std::vector<FamilyRow<GatedDeltaNetConfig>> rows = {
      {"qwen3_5_text", qwen35, qwen35_reads},
      {"qwen3_5", qwen35, qwen35_reads},
  };
  return rows;
}

GatedDeltaNetConfig GatedDeltaNetConfig::read(const ConfigReader& r, const std::string& model_type) {
  return read(r, row_of(rows(), model_type, "Gated DeltaNet"));
}

GatedDeltaNetConfig GatedDeltaNetConfig::read(const ConfigReader& r,
                                              const FamilyRow<GatedDeltaNetConfig>& row) {
  GatedDeltaNetConfig m = read_row(r, row, "Gated DeltaNet", kGatedDeltaNetSpelling);
  check_required(r, row.reads, kGatedDeltaNetSpelling);
  m.validate({&r, &row.reads});
  return m;
}

void GatedDeltaNetConfig::validate(const ConfigSite& site) const {
  const Checker c(site, kGatedDeltaNetSpelling);
  c.all_bounded(*this);
  c.positive("conv_kernel", conv_kernel);
  c.positive("k_head_dim", k_head_dim);
  c.positive("v_head_dim", v_head_dim);
  c.positive("num_k_heads", num_k_heads);
  c.positive("num_v_heads", num_v_heads);
  if (num_v_heads % num_k_heads != 0)
    c.fail("num_v_heads", "(" + std::to_string(num_v_heads) + ") must be a multiple of " +
                              c.quoted("num_k_heads") + " (" + std::to_string(num_k_heads) + ")");
}

}  // namespace mobius
