// mobius/sdk/deberta.hpp - DeBERTa (model_type "deberta") and DeBERTa-v2/v3 ("deberta-v2"):
// BERT's post-LayerNorm layers with disentangled attention, where every score adds to the
// content term the content-to-position and position-to-content terms of the pair's relative
// position.
//
// Semantics follow transformers' models/deberta/modeling_deberta.py and
// models/deberta_v2/modeling_deberta_v2.py (eval, eager):
//   h = LayerNorm(embed_proj(word(ids) [+ position(arange)] [+ token_type(types)])) * mask
//   every layer: a = LayerNorm(h + out(attention(h)));  h = LayerNorm(a + ffn_out(act(ffn_in(a))))
//   (v2 with conv_kernel_size > 0: after layer 0, h = LayerNorm(h + act(conv(embeddings) at
//    real tokens)) * mask)
//   last_hidden_state = h  (there is no pooler output)
// Attention of queries q_i and keys k_j (per head, head size D):
//   score(i, j) = (q_i . k_j + q_i . Kr[idx(i, j)] + k_j . Qr[idx(i, j)]) / sqrt(D * (1 + n))
// Kr and Qr are the relative-position embeddings projected per layer (v1: pos_proj without a
// bias, pos_q_proj; v2: pos_key_proj / pos_query_proj, or with share_att_key the layer's own
// key_proj / query_proj, biases included); the c2p term needs "c2p" in pos_att_type, the p2c
// term "p2c"; n counts pos_att_type's entries (v1) or which of c2p, p2c it holds (v2).
//   idx(i, j) = clamp(r(i - j) + S, 0, 2S - 1)
//   v1: S = min(seq, max_relative_positions), the embeddings' rows [max_rel - S, max_rel + S);
//       r(d) = d
//   v2: S = position_buckets (> 0) or max_relative_positions, all 2S rows, layer-normed by
//       encoder.LayerNorm when norm_rel_ebd names layer_norm; r(d) = d, or with buckets
//       transformers' make_log_bucket_position (deberta_log_bucket), computed in float32.
// The pair mask is attention_mask[i] * attention_mask[j]: masked scores become finfo(float32).min
// before a plain softmax, so a padded query's row attends uniformly to every key. v1's fused
// in_proj holds each head's q, k and v rows together ([q_h; k_h; v_h] per head), with q_bias and
// v_bias beside it. Layer norms and the softmax compute in float32.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "mobius/sdk/context.hpp"

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// The normalized config of either version (defaults filled in as transformers' configs and
// modules do; keys a version's modules never read keep their defaults).
struct DebertaConfig {
  std::string model_type = "deberta";  // "deberta" (v1) or "deberta-v2"
  int64_t vocab_size = 50265;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t head_dim = 64;        // v2: attention_head_size, else hidden_size / num_attention_heads
  int64_t intermediate_size = 3072;
  int64_t embedding_size = 768;  // the embeddings' width (embed_proj maps it to hidden_size)
  std::string hidden_act = "gelu";
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 0;
  double layer_norm_eps = 1e-7;
  bool position_biased_input = true;  // absolute positions added to the embeddings
  bool relative_attention = false;
  int64_t max_relative_positions = 512;  // resolved: max_position_embeddings when the key is < 1
  int64_t position_buckets = -1;         // v2's log buckets; <= 0: none
  bool c2p = false, p2c = false;         // pos_att_type
  int64_t score_factor = 1;              // the scores divide by sqrt(head_dim * score_factor)
  bool share_att_key = false;            // v2
  bool norm_rel_embeddings = false;      // v2: norm_rel_ebd names layer_norm
  int64_t conv_kernel_size = 0;          // v2's ConvLayer after layer 0; 0: none
  int64_t conv_groups = 1;
  std::string conv_act = "tanh";
  int64_t pooler_hidden_size = 768;
  std::string pooler_hidden_act = "gelu";
  int64_t num_labels = 2;   // classification heads: id2label's size, else num_labels
  bool legacy = true;       // the masked-LM head: cls.predictions (true) or lm_predictions.lm_head
  bool tie_word_embeddings = true;

  bool v2() const { return model_type == "deberta-v2"; }
  // S of idx(i, j) for v2 (for v1 it depends on the sequence length).
  int64_t v2_span() const { return position_buckets > 0 ? position_buckets : max_relative_positions; }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DebertaConfig, model_type, vocab_size, hidden_size, num_hidden_layers,
                                                num_attention_heads, head_dim, intermediate_size, embedding_size,
                                                hidden_act, max_position_embeddings, type_vocab_size, layer_norm_eps,
                                                position_biased_input, relative_attention, max_relative_positions,
                                                position_buckets, c2p, p2c, score_factor, share_att_key,
                                                norm_rel_embeddings, conv_kernel_size, conv_groups, conv_act,
                                                pooler_hidden_size, pooler_hidden_act, num_labels, legacy,
                                                tie_word_embeddings)

// transformers' make_log_bucket_position for one relative position d = i - j, in float32 as it
// computes it: d when |d| <= bucket_size / 2, else
//   sign(d) * (ceil(log(|d| / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid),  mid = bucket_size / 2.
// Needs bucket_size >= 2 and max_position - 1 > mid (read_deberta_config refuses the others).
int64_t deberta_log_bucket(int64_t d, int64_t bucket_size, int64_t max_position);

// config.json of `model_type` ("deberta" or "deberta-v2") read for `task` (one of
// encoder_tasks()) and checked; each fault names its key: what is not built (talking_head,
// pos_att_type entries other than c2p and p2c, norm_rel_ebd other than layer_norm / none), the
// sizes (check_encoder_config), attention_head_size, the buckets, the convolution, the labels,
// and for a head what its modules need (pooler_hidden_size, embedding_size).
DebertaConfig read_deberta_config(const std::string& model_type, const nlohmann::json& config_json,
                                  const std::string& task);

// The graph for one of encoder_tasks(): input_ids, attention_mask and (with token types)
// token_type_ids [batch_size, sequence_length] ->
//   feature-extraction       last_hidden_state (and sentence_embedding for a sentence-transformers
//                            folder);
//   sequence-classification  logits [batch_size, num_labels]: classifier(act(pooler.dense(h[:, 0])));
//   token-classification     logits [batch_size, sequence_length, num_labels]: classifier(h);
//   fill-mask                logits [batch_size, sequence_length, vocab_size]: cls.predictions
//                            (dense, act, LayerNorm, decoder tied to the word embeddings unless
//                            tie_word_embeddings is false, bias) or, with legacy false,
//                            lm_predictions.lm_head (the same on the word embeddings);
// in the activation dtype. The encoder's tensors are read under "deberta." when the checkpoint
// has them there (a head's checkpoint), else at the root; the other heads' tensors of such a
// checkpoint are ignored. Layer norms saved as gamma / beta are read under those names.
void build_deberta(BuildContext& ctx, const DebertaConfig& cfg, const std::string& task);

// Registers "deberta" and "deberta-v2" for encoder_tasks().
void register_deberta(PluginRegistrar& r);

}  // namespace mobius::nn
