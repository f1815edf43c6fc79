// moe.cpp - the mixture-of-experts pack: decoders whose feed-forward is the SDK's sparse MoE
// block (moe.hpp), each a row of the decoder table (decoder_family.hpp): transformers'
// configuration defaults, the MoE row of the SDK's family table (family_config.cpp: the router,
// the expert counts and which layers are sparse), the attention's own keys, and the tensor names
// of the block as the hub stores them. Semantics follow transformers' modeling_<type>.py.
#include <cmath>
#include <map>

#include "mobius/sdk/decoder_family.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using namespace mobius::nn;
using nlohmann::json;

// An attention without layer types: a window, when set, covers every layer (Mixtral's, PhiMoE's).
void every_layer_window(ArchitectureConfig& c) { c.layer_types.clear(); }

// HunYuan's per-layer lists (num_experts, moe_topk, ...) when every layer has the same value: that
// value; a list that varies is refused naming the key.
void flatten_per_layer(const ConfigReader& r, json& raw, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = raw.find(key);
    if (it == raw.end() || !it->is_array()) continue;
    if (it->empty()) r.fail(key, "is an empty list");
    for (const auto& v : *it)
      if (v != it->front())
        r.fail(key, "differs between layers; a model whose layers have different MoE sizes is not supported");
    json first = it->front();
    *it = first;
  }
}

const std::map<std::string, DecoderFamily>& families() {
  using D = mobius::DecoderDefaults;
  static const std::map<std::string, DecoderFamily> f = {
      // Qwen2-MoE: Qwen2's attention (q/k/v biases), sparse layers per decoder_sparse_step and
      // mlp_only_layers, one shared expert behind a sigmoid gate.
      {"qwen2_moe", {D{151936, 2048, 5632, 24, 16, 16, 0, 32768, 1e-6, 10000.0},
                     [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                       c.qkv_bias = true;
                       c.o_bias = false;
                       c.mlp_bias = false;
                       mobius::read_qwen_window(r, c);
                       c.moe = mobius::MoEConfig::read(r, "qwen2_moe");
                     },
                     [](const json&) {
                       DecoderSpec s;
                       MoESpec moe;
                       moe.names.shared_experts = "shared_expert";
                       s.feed_forward = moe_or_dense(moe);
                       return s;
                     }}},
      // OLMoE: RMS norms over the whole q and k projections (OLMo-2's), q/k/v clamped at
      // clip_qkv, every layer sparse.
      {"olmoe", {D{50304, 2048, 2048, 16, 16, 0, 0, 4096, 1e-5, 10000.0},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                   c.qk_norm = "full";
                   c.clip_qkv = r.has("clip_qkv") ? r.get_double("clip_qkv") : 0.0;
                   if (c.clip_qkv < 0 || !std::isfinite(c.clip_qkv)) r.fail("clip_qkv", "must be a positive number or null");
                   c.mlp_bias = false;
                   mobius::check_attention_layer_types(r, c);
                   c.moe = mobius::MoEConfig::read(r, "olmoe");
                 },
                 [](const json&) {
                   DecoderSpec s;
                   s.feed_forward = moe_or_dense();
                   return s;
                 }}},
      // Granite-MoE: Granite's multipliers; the experts stacked as input_linear [E, 2I, H] (gate
      // rows, then up rows) and output_linear [E, H, I], routed by a softmax over the top k logits.
      {"granitemoe", {D{32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0},
                      [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                        mobius::read_granite_multipliers(r, c);
                        c.mlp_bias = false;
                        mobius::check_attention_layer_types(r, c);
                        c.moe = mobius::MoEConfig::read(r, "granitemoe");
                      },
                      [](const json&) {
                        DecoderSpec s;
                        s.names.feed_forward = "block_sparse_moe";
                        MoESpec moe;
                        moe.names.router = "router.layer";
                        moe.names.experts = "";  // the banks sit in the block itself
                        StackedExperts banks;
                        banks.gate_up = "input_linear.weight";
                        banks.down = "output_linear.weight";
                        moe.experts = stacked_experts(banks);
                        s.feed_forward = moe_or_dense(moe);
                        return s;
                      }}},
      // PhiMoE: LayerNorms, biases on every attention projection (attention_bias) and on the
      // lm_head (lm_head_bias), Mixtral's expert names, the sparse mixer's top-2 choice.
      {"phimoe", {D{32064, 4096, 6400, 32, 32, 8, 0, 131072, 1e-5, 1e6},
                  [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                    c.lm_head_bias = r.get_bool("lm_head_bias", false);
                    c.mlp_bias = false;
                    every_layer_window(c);
                    // A longrope scales cos and sin by short_mscale or long_mscale, by the run's
                    // length; one value when the two agree.
                    if (c.rope.type == "longrope") {
                      const json& rope = r.raw().contains("rope_parameters") ? r.raw().at("rope_parameters")
                                                                             : r.raw().at("rope_scaling");
                      const char* key = r.raw().contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
                      if (!rope.contains("short_mscale") || !rope.contains("long_mscale") ||
                          !rope.at("short_mscale").is_number() || !rope.at("long_mscale").is_number())
                        r.fail(key, "short_mscale and long_mscale are required for PhiMoE's longrope");
                      const double s = rope.at("short_mscale").get<double>(), l = rope.at("long_mscale").get<double>();
                      if (s != l || !(s > 0))
                        r.fail(key, "short_mscale and long_mscale must be one positive value (a longrope whose "
                                    "scale changes with the run's length is not supported)");
                      c.rope.attention_factor = s;
                    }
                    c.moe = mobius::MoEConfig::read(r, "phimoe");
                  },
                  [](const json&) {
                    DecoderSpec s;
                    s.norm = NormKind::Layer;
                    s.names.feed_forward = "block_sparse_moe";
                    MoESpec moe;
                    moe.names.expert.gate = "w1";
                    moe.names.expert.up = "w3";
                    moe.names.expert.down = "w2";
                    s.feed_forward = moe_or_dense(moe);
                    return s;
                  }}},
      // ERNIE 4.5 MoE: ERNIE 4.5's attention (adjacent-pair rotary, use_bias), dense layers
      // outside moe_layer_start_index..moe_layer_end_index, a router whose choice is biased by
      // moe_statics, shared experts.
      {"ernie4_5_moe", {D{103424, 2560, 12288, 28, 20, 4, 0, 131072, 1e-5, 500000.0, 0, true},
                        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                          c.rope.interleaved = true;
                          c.qkv_bias = c.o_bias = r.get_bool("use_bias", false);
                          c.mlp_bias = false;
                          mobius::check_attention_layer_types(r, c);
                          c.moe = mobius::MoEConfig::read(r, "ernie4_5_moe");
                        },
                        [](const json&) {
                          DecoderSpec s;
                          MoESpec moe;
                          moe.names.correction_bias = "moe_statics.e_score_correction_bias";
                          moe.names.correction_bias_row = true;
                          s.feed_forward = moe_or_dense(moe);
                          s.ignored = {"mtp*", "model.mtp*"};  // multi-token-prediction heads
                          return s;
                        }}},
      // GLM-4.5: rotate_half over half of each head (partial_rotary_factor 0.5), q/k/v biases
      // (attention_bias), q/k norms per head (use_qk_norm), DeepSeek V3's router and layers.
      {"glm4_moe", {D{151552, 4096, 10944, 46, 96, 8, 0, 131072, 1e-5, 10000.0, 0, false, "silu", "hidden_act", 0.5},
                    [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                      c.qkv_bias = r.get_bool("attention_bias", false);
                      c.o_bias = false;
                      c.mlp_bias = false;
                      if (r.get_bool("use_qk_norm", false)) c.qk_norm = "head";
                      mobius::check_attention_layer_types(r, c);
                      c.moe = mobius::MoEConfig::read(r, "glm4_moe");
                      c.num_nextn_predict_layers = r.get_int("num_nextn_predict_layers", 0);
                    },
                    [](const json&) {
                      DecoderSpec s;
                      s.feed_forward = moe_or_dense();
                      return s;
                    }}},
      // HunYuan-MoE: HunYuan's attention (q/k norms after rope, named query_layernorm and
      // key_layernorm), a router under gate.wg, one shared MLP.
      {"hunyuan_v1_moe", {D{290943, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 10000.0},
                          [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                            mobius::read_hunyuan_attention(r, c);
                            c.mlp_bias = false;
                            json flat = r.raw();
                            flatten_per_layer(r, flat, {"num_experts", "moe_topk", "num_shared_expert"});
                            ConfigReader fr(flat, r.where());
                            c.moe = mobius::MoEConfig::read(fr, "hunyuan_v1_moe");
                          },
                          [](const json&) {
                            DecoderSpec s;
                            s.names.attention.q_norm = "query_layernorm";
                            s.names.attention.k_norm = "key_layernorm";
                            s.names.attention.qk_norm_after_rope = true;
                            MoESpec moe;
                            moe.names.router = "gate.wg";
                            moe.names.shared_experts = "shared_mlp";
                            s.feed_forward = moe_or_dense(moe);
                            return s;
                          }}},
      // DBRX: MPT's names (transformer.blocks, fused Wqkv clamped at clip_qkv, bias-free
      // LayerNorms norm_1 and norm_2 around the attention), the attention's and the MoE's keys in
      // attn_config and ffn_config, experts stacked as w1 and v1 [E*I, H] and w2 [E*I, H].
      {"dbrx", {D{32000, 2048, 0, 24, 16, 0, 0, 2048, 1e-5, 10000.0, 0, false, "silu", "hidden_act", 1.0, 0.0, 0.0,
                  {{"hidden_size", {"d_model"}},
                   {"num_attention_heads", {"n_heads"}},
                   {"num_hidden_layers", {"n_layers"}},
                   {"max_position_embeddings", {"max_seq_len"}},
                   {"intermediate_size", {}},
                   {"num_key_value_heads", {}},
                   {"rms_norm_eps", {}}}},
                [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                  static const json empty = json::object();
                  auto section = [&](const char* key) -> const json& {
                    auto it = r.raw().find(key);
                    if (it == r.raw().end() || it->is_null()) return empty;
                    if (!it->is_object()) r.fail(key, "must be an object");
                    return *it;
                  };
                  const json& attn = section("attn_config");
                  const json& ffn = section("ffn_config");
                  ConfigReader ar(attn, r.where() + " attn_config"), fr(ffn, r.where() + " ffn_config");
                  c.num_key_value_heads = ar.get_int("kv_n_heads", 1);
                  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
                    ar.fail("kv_n_heads", "must divide n_heads (" + std::to_string(c.num_attention_heads) + ")");
                  c.clip_qkv = ar.has("clip_qkv") ? ar.get_double("clip_qkv") : 0.0;
                  if (c.clip_qkv < 0 || !std::isfinite(c.clip_qkv)) ar.fail("clip_qkv", "must be a positive number or null");
                  // The rope: rope_parameters at the top (transformers 5), else attn_config's rope_theta.
                  if (!r.has("rope_parameters") && !r.has("rope_theta"))
                    c.rope.theta = ar.get_double("rope_theta", 10000.0);
                  c.qkv_bias = c.o_bias = c.mlp_bias = false;
                  c.layer_types.clear();
                  const std::string act = fr.raw().contains("ffn_act_fn") && fr.raw().at("ffn_act_fn").is_object()
                                              ? ConfigReader(fr.raw().at("ffn_act_fn"), fr.where() + " ffn_act_fn").get_string("name", "silu")
                                              : std::string("silu");
                  c.hidden_act = act;
                  c.moe = mobius::MoEConfig::read(fr, "dbrx");
                  // moe_normalize_expert_weights: the p of the norm the k weights are divided by;
                  // null: not normalised.
                  const bool has_p = fr.raw().contains("moe_normalize_expert_weights");
                  if (has_p && fr.raw().at("moe_normalize_expert_weights").is_null()) {
                    c.moe->norm_topk_prob = false;
                  } else {
                    c.moe->norm_topk_p = fr.get_double("moe_normalize_expert_weights", 1.0);
                    if (!(c.moe->norm_topk_p > 0) || !std::isfinite(c.moe->norm_topk_p))
                      fr.fail("moe_normalize_expert_weights", "must be a positive number or null");
                  }
                  c.intermediate_size = c.moe->moe_intermediate_size;
                },
                [](const json&) {
                  DecoderSpec s;
                  s.norm = NormKind::LayerNoBias;
                  s.names.text_path = "transformer";
                  s.names.embed = "wte";
                  s.names.layers = "blocks";
                  s.names.final_norm = "norm_f";
                  s.names.input_norm = "norm_attn_norm.norm_1";
                  s.names.post_attention_norm = "norm_attn_norm.norm_2";
                  s.names.mixer = "norm_attn_norm.attn";
                  s.names.attention.qkv = "Wqkv";
                  s.names.attention.o = "out_proj";
                  s.names.feed_forward = "ffn";
                  MoESpec moe;
                  moe.names.router = "router.layer";
                  moe.names.experts = "experts.mlp";
                  StackedExperts banks;
                  banks.gate = "w1";
                  banks.up = "v1";
                  banks.down = "w2";
                  banks.down_flat = true;
                  moe.experts = stacked_experts(banks);
                  s.feed_forward = moe_or_dense(moe);
                  return s;
                }}},
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) { register_decoder_families(r, families()); }

}  // namespace

MOBIUS_PLUGIN("moe", "0.1.0", "mobius", register_all)
