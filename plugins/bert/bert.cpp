// bert.cpp - the bert plugin: BERT and the families built of its layers, each one row of the
// SDK's encoder spec (mobius/sdk/encoder.hpp: config key spellings, tensor names, the prefix of
// its heads' checkpoints, position numbering): BERT, RoBERTa, XLM-RoBERTa, CamemBERT,
// Data2VecText, DistilBERT, ELECTRA, ALBERT, Megatron-BERT, MPNet, RoFormer, ESM. Each builds
// feature extraction, sequence and token classification and fill-mask (the head config.json's
// architectures names, or --task).
#include <string>
#include <vector>

#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/mobilebert.hpp"
#include "mobius/sdk/modernbert.hpp"
#include "mobius/sdk/xlm.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

namespace nn = mobius::nn;

// DistilBERT (modeling_distilbert.py): its own key spellings, no token types, no pooler, and the
// layers under transformer.layer.N with q_lin/k_lin/v_lin/out_lin, sa_layer_norm, ffn.lin1/lin2
// and output_layer_norm; its LayerNorm eps is fixed at 1e-12 (no config key).
nn::EncoderSpec distilbert() {
  nn::EncoderSpec s = nn::EncoderSpec::of("distilbert", "distilbert.");
  s.keys = {"dim", "n_layers", "n_heads", "hidden_dim", "activation", "", ""};
  s.names.token_type = "";
  s.names.layer = "transformer.layer.";
  s.names.query = "attention.q_lin";
  s.names.key = "attention.k_lin";
  s.names.value = "attention.v_lin";
  s.names.attn_out = "attention.out_lin";
  s.names.attn_norm = "sa_layer_norm";
  s.names.ffn_in = "ffn.lin1";
  s.names.ffn_out = "ffn.lin2";
  s.names.ffn_norm = "output_layer_norm";
  s.names.pooler = "";
  // DistilBertForSequenceClassification: classifier(relu(pre_classifier(h[:, 0]))); the masked
  // LM: vocab_projector(vocab_layer_norm(act(vocab_transform(h)))).
  s.heads.seq_dense = "pre_classifier";
  s.heads.seq_act = "relu";
  s.heads.mlm_dense = "vocab_transform";
  s.heads.mlm_norm = "vocab_layer_norm";
  s.heads.mlm_decoder = "vocab_projector";
  s.heads.mlm_bias = "vocab_projector.bias";
  return s;
}

// RoBERTa's heads (modeling_roberta.py): RobertaClassificationHead, out_proj(tanh(dense(h[:, 0])));
// RobertaLMHead, decoder(layer_norm(gelu(dense(h)))) + bias.
nn::EncoderSpec roberta_like(const std::string& model_type, const std::string& head_prefix) {
  nn::EncoderSpec s = nn::EncoderSpec::of(model_type, head_prefix, true);
  s.heads.seq_dense = "classifier.dense";
  s.heads.seq_out = "classifier.out_proj";
  s.heads.mlm_dense = "lm_head.dense";
  s.heads.mlm_act = "gelu";
  s.heads.mlm_norm = "lm_head.layer_norm";
  s.heads.mlm_decoder = "lm_head.decoder";
  s.heads.mlm_bias = "lm_head.bias";
  return s;
}

// ELECTRA (modeling_electra.py): BERT's layers under "electra.", the embeddings embedding_size
// wide and projected to the hidden size (embeddings_project) when the two differ; no pooler.
// Heads: ElectraClassificationHead, out_proj(gelu(dense(h[:, 0]))); the generator's masked LM,
// generator_lm_head(LayerNorm(gelu(generator_predictions.dense(h)))), its weight the word
// embeddings', its bias its own.
nn::EncoderSpec electra() {
  nn::EncoderSpec s = nn::EncoderSpec::of("electra", "electra.");
  s.keys.embedding = "embedding_size";
  s.names.embed_project = "embeddings_project";
  s.names.pooler = "";
  s.heads.seq_dense = "classifier.dense";
  s.heads.seq_act = "gelu";
  s.heads.seq_out = "classifier.out_proj";
  s.heads.mlm_dense = "generator_predictions.dense";
  s.heads.mlm_act = "gelu";
  s.heads.mlm_norm = "generator_predictions.LayerNorm";
  s.heads.mlm_decoder = "generator_lm_head";
  s.heads.mlm_bias = "generator_lm_head.bias";
  return s;
}

// ALBERT (modeling_albert.py): embeddings embedding_size wide, always mapped to the hidden size
// (encoder.embedding_hidden_mapping_in); num_hidden_groups groups of inner_group_num layers
// shared by the num_hidden_layers layers; each layer post-norm with its own names; the pooler a
// bare Linear ("pooler", tanh). Masked LM: predictions.decoder(LayerNorm(act(predictions.dense(h))))
// + predictions.bias, the decoder the word embeddings.
nn::EncoderSpec albert() {
  nn::EncoderSpec s = nn::EncoderSpec::of("albert", "albert.");
  s.keys.embedding = "embedding_size";
  s.names.embed_project = "encoder.embedding_hidden_mapping_in";
  s.names.embed_project_always = true;
  s.names.layer = "encoder.albert_layer_groups.";
  s.names.group_layer = "albert_layers.";
  s.names.query = "attention.query";
  s.names.key = "attention.key";
  s.names.value = "attention.value";
  s.names.attn_out = "attention.dense";
  s.names.attn_norm = "attention.LayerNorm";
  s.names.ffn_in = "ffn";
  s.names.ffn_out = "ffn_output";
  s.names.ffn_norm = "full_layer_layer_norm";
  s.names.pooler = "pooler";
  s.heads.mlm_dense = "predictions.dense";
  s.heads.mlm_norm = "predictions.LayerNorm";
  s.heads.mlm_decoder = "predictions.decoder";
  s.heads.mlm_bias = "predictions.bias";
  return s;
}

// Megatron-BERT (modeling_megatron_bert.py): BERT's heads and prefix ("bert."), pre-norm layers
// (attention.ln before the attention, ln before the MLP), no embedding norm, a final encoder.ln.
nn::EncoderSpec megatron_bert() {
  nn::EncoderSpec s = nn::EncoderSpec::of("megatron-bert", "bert.");
  s.pre_norm = true;
  s.names.embed_norm = "";
  s.names.attn_norm = "attention.ln";
  s.names.ffn_norm = "ln";
  s.names.final_norm = "encoder.ln";
  return s;
}

// MPNet (modeling_mpnet.py): RoBERTa's embeddings without token types, positions numbered from
// padding index 1 whatever the config says, attention.attn.{q,k,v,o} and attention.LayerNorm,
// and one relative position bias table shared by every layer; RoBERTa's heads.
nn::EncoderSpec mpnet() {
  nn::EncoderSpec s = roberta_like("mpnet", "mpnet.");
  s.positions_from_padding = false;
  s.padding_idx = 1;
  s.keys.type_vocab = "";
  s.names.token_type = "";
  s.names.query = "attention.attn.q";
  s.names.key = "attention.attn.k";
  s.names.value = "attention.attn.v";
  s.names.attn_out = "attention.attn.o";
  s.names.attn_norm = "attention.LayerNorm";
  s.relative_bias = "encoder.relative_attention_bias";
  return s;
}

// RoFormer (modeling_roformer.py): BERT's layers without a position table, q and k rotated in
// adjacent pairs at the angles of the checkpoint's encoder.embed_positions (v too with
// rotary_value), factorized embeddings like ELECTRA's, no pooler; its classification head's
// activation is hidden_act.
nn::EncoderSpec roformer() {
  nn::EncoderSpec s = nn::EncoderSpec::of("roformer", "roformer.");
  s.keys.embedding = "embedding_size";
  s.names.embed_project = "embeddings_project";
  s.names.pooler = "";
  s.absolute_positions = false;
  s.rotary = nn::EncoderSpec::Rotary::StoredInterleaved;
  s.rotary_table = "encoder.embed_positions";
  s.heads.seq_dense = "classifier.dense";
  s.heads.seq_act = "";
  s.heads.seq_out = "classifier.out_proj";
  return s;
}

// ESM (modeling_esm.py): pre-norm layers (attention.LayerNorm, LayerNorm) with a final
// encoder.emb_layer_norm_after, no token types, gelu without a config key, rotary (rotate_half)
// or absolute positions by position_embedding_type, token dropout's rescaling at inference and
// the embeddings zeroed at padding; RoBERTa's heads.
nn::EncoderSpec esm() {
  nn::EncoderSpec s = roberta_like("esm", "esm.");
  s.positions_from_padding = false;
  s.keys.act = "";
  s.keys.type_vocab = "";
  s.names.token_type = "";
  s.names.embed_norm = "";
  s.names.attn_norm = "attention.LayerNorm";
  s.names.ffn_norm = "LayerNorm";
  s.names.final_norm = "encoder.emb_layer_norm_after";
  s.pre_norm = true;
  s.rotary = nn::EncoderSpec::Rotary::Computed;
  s.esm_embeddings = true;
  return s;
}

const std::vector<nn::EncoderSpec>& families() {
  static const std::vector<nn::EncoderSpec> f = {
      nn::EncoderSpec::of("bert", "bert."),
      roberta_like("roberta", "roberta."),
      roberta_like("xlm-roberta", "roberta."),
      roberta_like("camembert", "roberta."),
      roberta_like("data2vec-text", "data2vec_text."),
      distilbert(),
      electra(),
      albert(),
      megatron_bert(),
      mpnet(),
      roformer(),
      esm(),
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) {
  for (const nn::EncoderSpec& spec : families()) nn::register_encoder(r, spec);
  nn::register_modernbert(r);
  nn::register_mobilebert(r);
  nn::register_xlm(r);
}

}  // namespace

MOBIUS_PLUGIN("bert", "0.1.0", "mobius", register_all)
