// mobius/sdk/encoder.hpp - BERT-like encoders as a spec: a family is a row (its model type, how
// its config spells its keys, what it calls its tensors, the prefix of its heads' checkpoints,
// how it numbers positions), and nn::EncoderModel builds any row. The plugins/bert plugin's
// families (BERT, RoBERTa, XLM-RoBERTa, CamemBERT, Data2VecText, DistilBERT) are rows; a new
// family with BERT's layers and other names is one more row (docs/writing-a-plugin.md).
//
// Semantics follow transformers' models/bert/modeling_bert.py (BertEmbeddings, BertSelfAttention's
// eager path, BertSelfOutput, BertIntermediate, BertOutput, BertPooler), modeling_roberta.py
// (create_position_ids_from_input_ids) and modeling_distilbert.py (Embeddings, TransformerBlock):
//   h = LayerNorm(word(input_ids) + position(ids) + token_type(token_type_ids))
//   every layer: a = LayerNorm(h + out(attention(h)))      bidirectional, padding masked
//                h = LayerNorm(a + ffn_out(act(ffn_in(a))))
//   last_hidden_state = h;  pooler_output = tanh(pooler(h[:, 0])) where the family has a pooler
// Positions are 0 .. seq-1, or, for a family numbering them from the padding index (RoBERTa):
//   position = cumsum(input_ids != pad) * (input_ids != pad) + pad
// The padding mask adds finfo(float32).min to the scores of keys whose attention_mask is 0, as
// transformers' bidirectional mask does for eager attention. Layer norms and the attention
// softmax compute in float32; with float16 weights the activation also runs in float32.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/context.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// How a family spells its config keys ("": the family has no such key; the default holds).
struct EncoderKeys {
  std::string hidden = "hidden_size";
  std::string layers = "num_hidden_layers";
  std::string heads = "num_attention_heads";
  std::string intermediate = "intermediate_size";
  std::string act = "hidden_act";
  std::string eps = "layer_norm_eps";
  std::string type_vocab = "type_vocab_size";
  // The width of the embeddings when it differs from the hidden size (ALBERT, ELECTRA:
  // "embedding_size"); "": the embeddings are hidden_size wide.
  std::string embedding = "";
};

// What a family calls its tensors, from the model's root (the embeddings, the layers' prefix,
// the pooler) or from a layer's (the rest); "" for a part the family does not have.
struct EncoderNames {
  std::string word = "embeddings.word_embeddings";
  std::string position = "embeddings.position_embeddings";
  std::string token_type = "embeddings.token_type_embeddings";
  std::string embed_norm = "embeddings.LayerNorm";
  std::string layer = "encoder.layer.";
  std::string query = "attention.self.query";
  std::string key = "attention.self.key";
  std::string value = "attention.self.value";
  std::string attn_out = "attention.output.dense";
  std::string attn_norm = "attention.output.LayerNorm";
  std::string ffn_in = "intermediate.dense";
  std::string ffn_out = "output.dense";
  std::string ffn_norm = "output.LayerNorm";
  std::string pooler = "pooler.dense";
  // Factorized embeddings (EncoderKeys::embedding): the projection from the embedding width to
  // the hidden size (ELECTRA's "embeddings_project", present when the widths differ; ALBERT's
  // "encoder.embedding_hidden_mapping_in", always).
  std::string embed_project = "";
  bool embed_project_always = false;
  // ALBERT's shared layers: num_hidden_groups groups of inner_group_num layers, named
  // `layer` + group + "." + `group_layer` + j; layer i runs group i * groups / layers.
  std::string group_layer = "";
  // The norm after the last layer (pre-norm families: Megatron-BERT's "encoder.ln").
  std::string final_norm = "";
};

// The heads on a family's encoder, their tensors named from the checkpoint's root (where the
// encoder sits under the family's head prefix). Logits as transformers' AutoModelFor* compute
// them, before any softmax.
struct EncoderHeadNames {
  // Sequence classification: classifier(pooler_output) (BERT: `classifier`), or, with a dense
  // layer, out(act(dense(h[:, 0]))) (RoBERTa: classifier.dense, tanh, classifier.out_proj).
  std::string seq_dense = "";
  std::string seq_act = "tanh";  // "": the config's hidden_act
  std::string seq_out = "classifier";
  // Token classification: classifier(h) per token.
  std::string token_out = "classifier";
  // Masked LM: decoder(norm(act(dense(h)))) + bias, the decoder's weight the word embeddings'
  // unless the checkpoint stores its own; act "" for the config's hidden_act.
  std::string mlm_dense = "cls.predictions.transform.dense";
  std::string mlm_act = "";
  std::string mlm_norm = "cls.predictions.transform.LayerNorm";
  std::string mlm_decoder = "cls.predictions.decoder";
  std::string mlm_bias = "cls.predictions.bias";
};

// The tasks an encoder family builds (the first is the default when config.json names no head).
inline const std::vector<std::string>& encoder_tasks() {
  static const std::vector<std::string> t = {"feature-extraction", "sequence-classification", "token-classification",
                                             "fill-mask"};
  return t;
}

struct EncoderSpec {
  // A spec with the defaults (BERT's keys, names and heads) for `model_type`.
  static EncoderSpec of(std::string model_type, std::string head_prefix, bool positions_from_padding = false) {
    EncoderSpec s;
    s.model_type = std::move(model_type);
    s.head_prefix = std::move(head_prefix);
    s.positions_from_padding = positions_from_padding;
    return s;
  }
  std::string model_type;
  std::string head_prefix;              // its tensors in the checkpoints of its heads ("bert.")
  bool positions_from_padding = false;  // RoBERTa's create_position_ids_from_input_ids
  EncoderKeys keys;
  EncoderNames names;
  EncoderHeadNames heads;
  // Norm placement: post-residual (BERT: LayerNorm(h + f(h))), or pre-norm (Megatron-BERT:
  // h + f(LayerNorm(h)), with the final norm after the last layer).
  bool pre_norm = false;
  // Position schemes beside (or instead of) the learned absolute table:
  //   absolute_positions  the position table is added to the embeddings (false: RoFormer, and
  //                       ESM when its position_embedding_type is "rotary");
  //   padding_idx         >= 0: positions numbered from this padding index whatever the config
  //                       says (MPNet's 1);
  //   rotary              q and k rotated per head: Computed, rotate_half with inv_freq from
  //                       rope_theta (ESM's "rotary"); StoredInterleaved, adjacent pairs at the
  //                       angles of the checkpoint's `rotary_table` [positions, head_dim]: sin in
  //                       its first half, cos in its second (RoFormer's embed_positions);
  //   relative_bias       a table [buckets, heads] whose rows, at the bucket of each key's
  //                       distance from its query (T5's bidirectional buckets, max distance 128),
  //                       are added to every layer's scores (MPNet's relative_attention_bias).
  enum class Rotary { None, Computed, StoredInterleaved };
  bool absolute_positions = true;
  int64_t padding_idx = -1;
  Rotary rotary = Rotary::None;
  std::string rotary_table = "";
  std::string relative_bias = "";
  // ESM: token_dropout's rescaling at inference (mask tokens zeroed, each row scaled by
  // 0.88 / (1 - its share of mask tokens)), then the embeddings zeroed at padding.
  bool esm_embeddings = false;
};

// The normalized config (defaults filled in; BERT's where the family does not set them).
struct EncoderConfig {
  std::string model_type = "bert";
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;  // where positions start for a family numbering them from padding
  int64_t num_labels = 2;    // classification heads: id2label's size, else num_labels
  bool tie_word_embeddings = true;  // the masked-LM decoder reads the word embeddings
  int64_t embedding_size = 768;     // the embeddings' width (hidden_size unless factorized)
  int64_t num_hidden_groups = 1;    // ALBERT's layer groups
  int64_t inner_group_num = 1;      // layers in each of them
  bool rotary = false;              // q and k rotated (EncoderSpec::rotary)
  double rope_theta = 10000.0;
  int64_t relative_buckets = 32;    // rows of the relative bias table
  bool token_dropout = false;       // ESM
  int64_t mask_token_id = -1;
  bool rotary_value = false;        // RoFormer: v rotated too
  bool absolute_positions = true;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(EncoderConfig, model_type, pad_token_id, vocab_size, hidden_size,
                                                num_hidden_layers, num_attention_heads, intermediate_size,
                                                hidden_act, max_position_embeddings, type_vocab_size,
                                                layer_norm_eps, num_labels, tie_word_embeddings, embedding_size,
                                                num_hidden_groups, inner_group_num, rotary, rope_theta,
                                                relative_buckets, token_dropout, mask_token_id, rotary_value,
                                                absolute_positions)

// config.json read through the spec's keys and checked (each fault names its key): the position
// scheme ("absolute" only), the token types, the padding index, the labels, the sizes
// (check_encoder_config).
EncoderConfig read_encoder_config(const EncoderSpec& spec, const nlohmann::json& config_json);

// The graph of a family for one of encoder_tasks(): input_ids, attention_mask and (with token
// types) token_type_ids [batch_size, sequence_length] ->
//   feature-extraction       last_hidden_state and, where the checkpoint has the pooler,
//                            pooler_output;
//   sequence-classification  logits [batch_size, num_labels];
//   token-classification     logits [batch_size, sequence_length, num_labels];
//   fill-mask                logits [batch_size, sequence_length, vocab_size];
// in the activation dtype; the encoder's weights read under the head prefix when the checkpoint
// has it (a head's checkpoint), the other heads' tensors of such a checkpoint ignored.
void build_encoder(BuildContext& ctx, const EncoderSpec& spec, const EncoderConfig& cfg, const std::string& task);

// Parts every encoder family's reading and building shares (the spec's, DeBERTa's, ModernBERT's):
// The number of labels as transformers' PretrainedConfig takes it: id2label's size when it is
// given (num_labels, when given too, must agree), else num_labels (default `def`); at least 1.
int64_t read_num_labels(const ConfigReader& r, int64_t def = 2);
// The prefix a head's checkpoint puts on the encoder: `head_prefix` when the checkpoint has
// `probe` (one of the encoder's tensors, named from its root) under it, else "". Without
// weights: the prefix for a head's task, none for feature extraction.
std::string checkpoint_prefix(const BuildContext& ctx, const std::string& head_prefix, const std::string& probe,
                              const std::string& task);
// transformers' legacy names, which it still reads (ESM's checkpoints still carry them): for a
// parameter "<x>.weight" / "<x>.bias" the checkpoint lacks, its "<x>.gamma" / "<x>.beta", for
// Module::retarget; keeps `ctx` by reference.
std::function<std::optional<std::string>(const std::string&)> legacy_norm_names(const BuildContext& ctx);
// Refuses (config kind, naming config.json's labels and the tensor) a classifier whose weight
// `name`.weight has other than `num_labels` rows.
void check_classifier_rows(const BuildContext& ctx, const std::string& name, int64_t num_labels);

// An encoder graph's inputs: input_ids, attention_mask and (with token types) token_type_ids,
// int64 [batch_size, sequence_length].
struct EncoderInputs {
  Value input_ids, attention_mask, token_type_ids;
};
EncoderInputs encoder_inputs(Graph& g, bool token_types);
// A feature-extraction graph's outputs: last_hidden_state, pooler_output (when valid) and, for a
// sentence-transformers folder with pooling, its sentence_embedding.
struct SentenceModules;
void output_features(Graph& g, Value last_hidden_state, Value pooler_output, const std::optional<SentenceModules>& sentence,
                     Value attention_mask, DType act);
// Registers a family of its own builder for encoder_tasks(): `read` parses config.json into
// `Config` (a JSON-convertible struct), `build` builds the task's graph.
template <class Config>
void register_encoder_family(PluginRegistrar& r, const std::string& model_type, Config (*read)(const nlohmann::json&),
                             void (*build)(BuildContext&, const Config&, const std::string& task)) {
  r.add_tasks(
      model_type, encoder_tasks(), [read](const nlohmann::json& raw, const std::string&) { return nlohmann::json(read(raw)); },
      [build](BuildContext& ctx, const nlohmann::json& cfg) { build(ctx, cfg.get<Config>(), cfg.at("task").get<std::string>()); });
}

// Registers spec.model_type for encoder_tasks(), its config read by read_encoder_config and its
// graph built by build_encoder. `spec` is kept by reference: it must live as long as the plugin
// (a static).
void register_encoder(PluginRegistrar& r, const EncoderSpec& spec);

}  // namespace mobius::nn
