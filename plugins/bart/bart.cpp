// bart.cpp - the bart plugin: BART and the encoder-decoders built of its layers, each one row of
// the SDK's encoder-decoder spec (mobius/sdk/seq2seq.hpp): how it places positions, where its
// norms sit, which extra norms and biases it has (modeling_bart.py, modeling_mbart.py,
// modeling_marian.py, modeling_m2m_100.py, modeling_pegasus.py, modeling_blenderbot.py,
// modeling_blenderbot_small.py); task text2text-generation.
#include <vector>

#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/seq2seq.hpp"

namespace {

namespace nn = mobius::nn;
using Positions = nn::Seq2SeqSpec::Positions;

// BART: learned positions offset by 2, post-norm layers, layernorm_embedding, final_logits_bias.
nn::Seq2SeqSpec bart(const char* type = "bart") {
  nn::Seq2SeqSpec s;
  s.model_type = type;
  return s;
}

// mBART: BART's embeddings, pre-norm layers and a final layer_norm on each side.
nn::Seq2SeqSpec mbart() {
  nn::Seq2SeqSpec s = bart("mbart");
  s.pre_norm = true;
  s.final_norms = true;
  return s;
}

// Marian: sinusoidal positions (computed), post-norm, no embedding norm.
nn::Seq2SeqSpec marian() {
  nn::Seq2SeqSpec s = bart("marian");
  s.positions = Positions::Sinusoidal;
  s.position_offset = 0;
  s.embedding_norm = false;
  return s;
}

// M2M-100 (and NLLB): tensor2tensor sinusoids numbered from the padding index, pre-norm, final
// norms, no final_logits_bias.
nn::Seq2SeqSpec m2m_100() {
  nn::Seq2SeqSpec s = bart("m2m_100");
  s.positions = Positions::Fairseq;
  s.position_offset = 0;
  s.embedding_norm = false;
  s.pre_norm = true;
  s.final_norms = true;
  s.final_logits_bias = false;
  return s;
}

// Pegasus: Marian's sinusoids (the checkpoint's table when it keeps one), pre-norm, final norms.
nn::Seq2SeqSpec pegasus() {
  nn::Seq2SeqSpec s = marian();
  s.model_type = "pegasus";
  s.pre_norm = true;
  s.final_norms = true;
  return s;
}

// Blenderbot: learned positions without an offset, pre-norm, final norms, no embedding norm.
nn::Seq2SeqSpec blenderbot() {
  nn::Seq2SeqSpec s = bart("blenderbot");
  s.position_offset = 0;
  s.embedding_norm = false;
  s.pre_norm = true;
  s.final_norms = true;
  return s;
}

// BlenderbotSmall: learned positions without an offset, post-norm, layernorm_embedding (in the
// decoder applied to the token embeddings before the positions are added); its decoder does not
// scale the embeddings (BlenderbotSmallDecoder never reads its embed_scale).
nn::Seq2SeqSpec blenderbot_small() {
  nn::Seq2SeqSpec s = bart("blenderbot-small");
  s.position_offset = 0;
  s.decoder_norm_before_positions = true;
  s.decoder_embed_scale = false;
  return s;
}

const std::vector<nn::Seq2SeqSpec>& families() {
  static const std::vector<nn::Seq2SeqSpec> f = {bart(), mbart(), marian(), m2m_100(), pegasus(), blenderbot(),
                                                 blenderbot_small()};
  return f;
}

void register_all(mobius::PluginRegistrar& r) {
  for (const nn::Seq2SeqSpec& spec : families()) nn::register_seq2seq(r, spec);
}

}  // namespace

MOBIUS_PLUGIN("bart", "0.1.0", "mobius", register_all)
