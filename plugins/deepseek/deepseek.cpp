// deepseek.cpp - the DeepSeek pack: deepseek_v2 and deepseek_v3 (MLA attention, DeepSeek MoE).
//
// Both types share one decoder layer (MLA + a dense MLP for the first first_k_dense_replace
// layers, a sparse MoE after); they differ in their defaults, their router (V2: softmax with
// greedy or group-limited greedy top-k; V3: sigmoid with e_score_correction_bias and noaux_tc)
// and their rope layout. Semantics follow transformers' modeling_deepseek_v2/v3.py.
#include <algorithm>

#include "mobius/sdk/mla.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_deepseek_v2.py / configuration_deepseek_v3.py defaults.
struct Defaults {
  int64_t vocab_size, hidden_size, intermediate_size, moe_intermediate_size, num_hidden_layers;
  int64_t num_attention_heads, max_position_embeddings;
  int64_t n_routed_experts, n_shared_experts, first_k_dense_replace;
  int64_t kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  int64_t n_group, topk_group, num_experts_per_tok;  // 0: required (V2 has no default)
  double routed_scaling_factor;
  bool norm_topk_prob;
};

const std::map<std::string, Defaults>& defaults() {
  static const std::map<std::string, Defaults> d = {
      {"deepseek_v2",
       {32000, 4096, 11008, 1407, 32, 32, 2048, 64, 2, 0, 512, 1536, 128, 64, 128, 1, 1, 0, 1.0,
        false}},
      {"deepseek_v3",
       {129280, 7168, 18432, 2048, 61, 128, 4096, 256, 1, 3, 512, 1536, 128, 64, 128, 8, 4, 8, 2.5,
        true}},
  };
  return d;
}

// An integer key where an explicit null means "none" (0), e.g. q_lora_rank: null selects the
// plain q_proj, while an absent key takes the default.
int64_t nullable_int(const ConfigReader& r, const std::string& key, int64_t def) {
  auto it = r.raw().find(key);
  if (it != r.raw().end() && it->is_null()) return 0;
  return r.get_int(key, def);
}

ArchitectureConfig parse(const std::string& model_type, const json& raw) {
  const Defaults& d = defaults().at(model_type);
  const bool v3 = model_type == "deepseek_v3";
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c;
  c.model_type = model_type;
  c.vocab_size = r.get_int("vocab_size", d.vocab_size);
  c.hidden_size = r.get_int("hidden_size", d.hidden_size);
  c.intermediate_size = r.get_int("intermediate_size", d.intermediate_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", d.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", d.num_attention_heads);
  if (c.num_attention_heads <= 0) r.fail("num_attention_heads", "must be positive");
  // kv_b_proj gives every head its own key and value; transformers' repeat_kv only works when
  // the two counts agree.
  c.num_key_value_heads = r.get_int("num_key_value_heads", c.num_attention_heads);
  if (c.num_key_value_heads != c.num_attention_heads)
    r.fail("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) +
                                      ") must equal 'num_attention_heads' (" +
                                      std::to_string(c.num_attention_heads) + ") for MLA");
  c.hidden_act = r.get_string("hidden_act", "silu");
  c.rms_norm_eps = r.get_double("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.get_int("max_position_embeddings", d.max_position_embeddings);
  c.rope = mobius::read_rope(r, 10000.0);
  // V2 multiplies adjacent pairs as complex numbers. V3 with rope_interleave permutes each
  // head's pairs apart and applies rotate_half: the same rotation of the same pairs.
  c.rope.interleaved = v3 ? r.get_bool("rope_interleave", true) : true;
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  c.mlp_bias = v3 ? false : r.get_bool("mlp_bias", false);
  if (c.mlp_bias) r.fail("mlp_bias", "is not supported: DeepSeek's routed experts have no biases");

  json& x = c.extra;
  x["q_lora_rank"] = nullable_int(r, "q_lora_rank", d.q_lora_rank);
  x["kv_lora_rank"] = r.get_int("kv_lora_rank", d.kv_lora_rank);
  x["qk_nope_head_dim"] = r.get_int("qk_nope_head_dim", d.qk_nope_head_dim);
  x["qk_rope_head_dim"] = r.get_int("qk_rope_head_dim", d.qk_rope_head_dim);
  x["v_head_dim"] = r.get_int("v_head_dim", d.v_head_dim);
  x["attention_bias"] = r.get_bool("attention_bias", false);
  c.head_dim = x["qk_rope_head_dim"].get<int64_t>();  // transformers' head_dim: the rope part

  x["n_routed_experts"] = nullable_int(r, "n_routed_experts", d.n_routed_experts);
  x["n_shared_experts"] = nullable_int(r, "n_shared_experts", d.n_shared_experts);
  x["moe_intermediate_size"] = r.get_int("moe_intermediate_size", d.moe_intermediate_size);
  // Every layer from first_k_dense_replace on is MoE: transformers ignores moe_layer_freq (1 in
  // every DeepSeek checkpoint).
  x["first_k_dense_replace"] = r.get_int("first_k_dense_replace", d.first_k_dense_replace);
  int64_t experts = x["n_routed_experts"].get<int64_t>();
  if (d.num_experts_per_tok == 0 && experts > 0)
    x["num_experts_per_tok"] = r.get_int("num_experts_per_tok");
  else
    x["num_experts_per_tok"] = nullable_int(r, "num_experts_per_tok", d.num_experts_per_tok);
  x["n_group"] = nullable_int(r, "n_group", d.n_group);
  x["topk_group"] = nullable_int(r, "topk_group", d.topk_group);
  if (x["n_group"].get<int64_t>() == 0) x["n_group"] = 1;  // null: one group
  if (x["topk_group"].get<int64_t>() == 0) x["topk_group"] = 1;
  x["routed_scaling_factor"] = r.get_double("routed_scaling_factor", d.routed_scaling_factor);
  // transformers fixes each version's router whatever scoring_func/topk_method say: V2 always
  // scores with softmax and honours topk_method; V3 always uses sigmoid + noaux_tc.
  if (v3) {
    x["scoring_func"] = "sigmoid";
    x["topk_method"] = "noaux_tc";
    x["norm_topk_prob"] = r.get_bool("norm_topk_prob", d.norm_topk_prob);
  } else {
    std::string method = r.get_string("topk_method", "greedy");
    if (method != "greedy" && method != "group_limited_greedy")
      r.fail("topk_method", "has unknown value '" + method + "' for deepseek_v2 (known: greedy, "
                            "group_limited_greedy)");
    x["scoring_func"] = "softmax";
    x["topk_method"] = method;
    // transformers' V2 router never renormalises (DeepSeek's own code did only when
    // norm_topk_prob, which every V2 checkpoint sets false).
    x["norm_topk_prob"] = false;
  }
  x["num_nextn_predict_layers"] = r.get_int("num_nextn_predict_layers", 0);

  mobius::nn::check_activation(r, "hidden_act", c.hidden_act);
  c.validate();
  // The components check their own keys now, so a bad config fails before the build.
  mobius::nn::MLAConfig::from(c);
  mobius::nn::MoEConfig::from(c);
  return c;
}

// Pre-norm: h + self_attn(input_layernorm(h)), then h + mlp(post_attention_layernorm(h)), where
// mlp is the dense GatedMLP below first_k_dense_replace and a SparseMoE from there on.
class DeepSeekMLADecoderLayer : public mobius::nn::DecoderLayerBase {
 public:
  DeepSeekMLADecoderLayer(const ArchitectureConfig& cfg, int64_t layer) {
    using namespace mobius::nn;
    input_layernorm = &add<RMSNorm>("input_layernorm", cfg.hidden_size, cfg.rms_norm_eps);
    self_attn = &add<MultiHeadLatentAttention>("self_attn", MLAConfig::from(cfg));
    post_attention_layernorm =
        &add<RMSNorm>("post_attention_layernorm", cfg.hidden_size, cfg.rms_norm_eps);
    MoEConfig moe = MoEConfig::from(cfg);
    if (moe.is_moe_layer(layer))
      sparse_mlp = &add<SparseMoE>("mlp", moe);
    else
      dense_mlp = &add<GatedMLP>("mlp", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias,
                                 cfg.hidden_act);
  }

  mobius::Value forward(mobius::Graph& g, mobius::Value h, mobius::nn::SharedInputs& shared,
                        const std::map<std::string, mobius::Value>& past,
                        std::map<std::string, mobius::Value>& present) const override {
    using mobius::op::Add;
    mobius::ScopeGuard s(g, path());
    h = Add(h, self_attn->forward(g, input_layernorm->forward(g, h), shared, past, present));
    mobius::Value x = post_attention_layernorm->forward(g, h);
    return Add(h, sparse_mlp ? sparse_mlp->forward(g, x) : dense_mlp->forward(g, x));
  }

  std::vector<mobius::nn::CacheEntry> cache_entries(mobius::DType act) const override {
    return self_attn->cache_entries(act);
  }

  const mobius::nn::RMSNorm* input_layernorm;
  const mobius::nn::MultiHeadLatentAttention* self_attn;
  const mobius::nn::RMSNorm* post_attention_layernorm;
  const mobius::nn::GatedMLP* dense_mlp = nullptr;
  const mobius::nn::SparseMoE* sparse_mlp = nullptr;
};

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  CausalLMModel model(cfg, [](const ArchitectureConfig& c, int64_t i) {
    return std::make_unique<DeepSeekMLADecoderLayer>(c, i);
  });
  // Multi-token-prediction layers (DeepSeek-V3's layer 61) follow the decoder's layers in the
  // checkpoint; transformers does not load them and neither does the exported graph.
  int64_t mtp = cfg.extra.value("num_nextn_predict_layers", int64_t{0});
  for (int64_t i = cfg.num_hidden_layers; i < cfg.num_hidden_layers + mtp; ++i)
    ctx.ignore_tensors("model.layers." + std::to_string(i) + ".*");
  build_text_generation(ctx, model);
}

void register_all(mobius::PluginRegistrar& r) {
  std::vector<std::string> types;
  for (const auto& [type, d] : defaults()) types.push_back(type);
  r.add_each(types, "text-generation", [](const std::string& t, const json& raw) { return json(parse(t, raw)); },
             build);
}

}  // namespace

MOBIUS_PLUGIN("deepseek", "0.1.0", "mobius", register_all)
