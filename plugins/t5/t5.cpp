// t5.cpp - the t5 plugin: T5 (and T5 v1.1 / FLAN-T5, whose configs say gated-gelu and an untied
// head), mT5 and UMT5 (a relative position bias table in every layer), each one row of the
// SDK's encoder-decoder spec (mobius/sdk/seq2seq.hpp); task text2text-generation.
#include <vector>

#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/seq2seq.hpp"

namespace {

namespace nn = mobius::nn;

nn::Seq2SeqSpec t5_like(const char* type, bool bias_every_layer) {
  nn::Seq2SeqSpec s;
  s.model_type = type;
  s.style = nn::Seq2SeqSpec::Style::T5;
  s.prefix = "";
  s.final_logits_bias = false;
  s.embedding_norm = false;
  s.bias_every_layer = bias_every_layer;
  return s;
}

const std::vector<nn::Seq2SeqSpec>& families() {
  static const std::vector<nn::Seq2SeqSpec> f = {t5_like("t5", false), t5_like("mt5", false), t5_like("umt5", true)};
  return f;
}

void register_all(mobius::PluginRegistrar& r) {
  for (const nn::Seq2SeqSpec& spec : families()) nn::register_seq2seq(r, spec);
}

}  // namespace

MOBIUS_PLUGIN("t5", "0.1.0", "mobius", register_all)
