// bloom.cpp - decoders with a fused query_key_value and ALiBi or rotary: bloom, falcon, mpt.
//
// Rows of the SDK's decoder table (decoder_family.hpp): BLOOM's per-head qkv, embedding norm and
// ALiBi; Falcon's three qkv layouts (multi-query blocks, per head, per kv group), parallel
// attention with one or two norms, rotary or ALiBi; MPT's ALiBi, clamped qkv and weight-only norms.
#include <map>

#include "mobius/sdk/decoder_family.hpp"
#include "mobius/sdk/nn.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using namespace mobius::nn;
using nlohmann::json;

// transformer.{word_embeddings, h.<i>.{input_layernorm, self_attention.{query_key_value, dense},
// post_attention_layernorm, mlp.{dense_h_to_4h, dense_4h_to_h}}, ln_f}.
DecoderSpec bloom_names() {
  DecoderSpec s;
  s.norm = NormKind::Layer;
  s.feed_forward = plain_mlp();
  TensorNames& n = s.names;
  n.text_path = "transformer";
  n.embed = "word_embeddings";
  n.layers = "h";
  n.final_norm = "ln_f";
  n.mixer = "self_attention";
  n.attention.qkv = "query_key_value";
  n.attention.qkv_layout = QkvLayout::PerHead;
  n.attention.o = "dense";
  n.mlp.up = "dense_h_to_4h";
  n.mlp.down = "dense_4h_to_h";
  return s;
}

// attn_config.<key> of MPT's config, when present and not null.
const json* attn_config(const ConfigReader& r, const char* key) {
  auto it = r.raw().find("attn_config");
  if (it == r.raw().end() || !it->is_object()) return nullptr;
  auto v = it->find(key);
  return v == it->end() || v->is_null() ? nullptr : &*v;
}

const std::map<std::string, DecoderFamily>& families() {
  static const std::map<std::string, DecoderFamily> f = {
      {"bloom",
       {{250880, 64, 0, 2, 8, 0, 0, 2048, 1e-5, 10000.0, 0, true, "gelu_pytorch_tanh", "", 1.0, 0, 0,
         {{"hidden_size", {"hidden_size", "n_embed"}},
          {"num_hidden_layers", {"n_layer"}},
          {"num_attention_heads", {"n_head"}},
          {"rms_norm_eps", {"layer_norm_epsilon"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          c.intermediate_size = 4 * c.hidden_size;  // fixed; no key
          c.hidden_act = "gelu_pytorch_tanh";        // bloom_gelu, the tanh form
          c.position_embedding = "alibi";
          c.qkv_bias = c.o_bias = c.mlp_bias = true;
          extra["residual_from_norm"] = r.get_bool("apply_residual_connection_post_layernorm", false);
        },
        [](const json& j) {
          DecoderSpec s = bloom_names();
          s.names.embed_norm = "word_embeddings_layernorm";
          s.residual_from_norm = j.value("residual_from_norm", false);
          return s;
        }}},
      {"falcon",
       {{65024, 4544, 0, 32, 71, 0, 0, 2048, 1e-5, 10000.0, 0, true, "gelu", "activation", 1.0, 0, 0,
         {{"intermediate_size", {"ffn_hidden_size"}},
          {"num_key_value_heads", {"num_kv_heads"}},
          {"rms_norm_eps", {"layer_norm_epsilon"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          if (!r.has("ffn_hidden_size")) c.intermediate_size = 4 * c.hidden_size;
          const bool new_arch = r.get_bool("new_decoder_architecture", false);
          const bool mq = r.get_bool("multi_query", true);
          // One key/value head for the original multi-query decoder, whatever num_kv_heads says.
          if (!new_arch && mq) c.num_key_value_heads = 1;
          if (!new_arch && !mq) c.num_key_value_heads = c.num_attention_heads;
          c.qkv_bias = c.o_bias = c.mlp_bias = r.get_bool("bias", false);
          if (r.get_bool("alibi", false)) c.position_embedding = "alibi";
          const bool parallel = r.get_bool("parallel_attn", true);
          const int64_t norms = r.has("num_ln_in_parallel_attn") ? r.get_int("num_ln_in_parallel_attn")
                                                                 : (new_arch ? 2 : 1);
          if (new_arch && !parallel)
            r.fail("parallel_attn", "is false with new_decoder_architecture, which transformers does not run");
          if (norms != 1 && norms != 2) r.fail("num_ln_in_parallel_attn", "must be 1 or 2");
          if (norms == 2 && !new_arch)
            r.fail("num_ln_in_parallel_attn", "is 2 without new_decoder_architecture, which transformers does not run");
          extra["qkv_layout"] = new_arch ? "per_group" : mq ? "blocks" : "per_head";
          extra["parallel_attn"] = parallel;
          extra["parallel_norms"] = norms;
          // transformers.js reads config.json's own multi_query (absent: false).
          extra["tjs_multi_query"] = r.has("multi_query") && r.get_bool("multi_query");
        },
        [](const json& j) {
          DecoderSpec s = bloom_names();
          const std::string layout = j.value("qkv_layout", "blocks");
          s.names.attention.qkv_layout = layout == "per_group" ? QkvLayout::PerGroup
                                         : layout == "per_head" ? QkvLayout::PerHead
                                                                : QkvLayout::Blocks;
          s.names.attention.falcon_alibi = true;  // in bfloat16, divided by sqrt(head_dim)
          s.packed_key_value_for_transformers_js = j.value("tjs_multi_query", false);
          if (j.value("parallel_attn", true)) {
            s.placement = NormPlacement::Parallel;
            s.parallel_shared_norm = j.value("parallel_norms", 1) == 1;
            if (!s.parallel_shared_norm) {
              s.names.input_norm = "ln_attn";
              s.names.post_attention_norm = "ln_mlp";
            }
          }
          return s;
        }}},
      {"mpt",
       {{50368, 2048, 0, 24, 16, 0, 0, 2048, 1e-5, 10000.0, 0, true, "gelu", "", 1.0, 0, 0,
         {{"hidden_size", {"d_model"}},
          {"num_hidden_layers", {"n_layers"}},
          {"num_attention_heads", {"n_heads"}},
          {"max_position_embeddings", {"max_seq_len"}},
          {"rms_norm_eps", {"layer_norm_epsilon"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          // transformers' MPT: ALiBi with a bias_max of 8, no biases, no learned positions, an MLP
          // 4 times as wide with the exact gelu, whatever no_bias, learned_pos_emb,
          // expansion_ratio, alibi_bias_max and logit_scale say.
          c.intermediate_size = 4 * c.hidden_size;
          c.hidden_act = "gelu";
          c.position_embedding = "alibi";
          c.alibi = "mpt";
          c.alibi_bias_max = 8.0;
          if (const json* s = attn_config(r, "softmax_scale")) {
            if (!s->is_number() || !(s->get<double>() > 0)) r.fail("attn_config", "softmax_scale must be a positive number");
            c.attention_multiplier = s->get<double>();
          }
          if (const json* q = attn_config(r, "clip_qkv")) {
            if (!q->is_number() || q->get<double>() < 0) r.fail("attn_config", "clip_qkv must not be negative");
            c.clip_qkv = q->get<double>();
          }
        },
        [](const json&) {
          DecoderSpec s;
          s.norm = NormKind::LayerNoBias;
          s.feed_forward = plain_mlp();
          TensorNames& n = s.names;
          n.text_path = "transformer";
          n.embed = "wte";
          n.layers = "blocks";
          n.final_norm = "norm_f";
          n.input_norm = "norm_1";
          n.post_attention_norm = "norm_2";
          n.mixer = "attn";
          n.attention.qkv = "Wqkv";
          n.attention.o = "out_proj";
          n.feed_forward = "ffn";
          return s;
        }}},
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) { register_decoder_families(r, families()); }

}  // namespace

MOBIUS_PLUGIN("bloom", "0.1.0", "mobius", register_all)
