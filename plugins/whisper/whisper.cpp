// whisper.cpp - the whisper plugin: Whisper as a row of the SDK's encoder-decoder spec
// (mobius/sdk/seq2seq.hpp; modeling_whisper.py): a Conv1d front end over log-mel features with
// the stored sinusoidal positions, pre-norm layers, k_proj without a bias, learned decoder
// positions and the head proj_out tied to the decoder's embeddings; task speech-to-text.
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/seq2seq.hpp"

namespace {

namespace nn = mobius::nn;

const nn::Seq2SeqSpec& whisper() {
  static const nn::Seq2SeqSpec s = [] {
    nn::Seq2SeqSpec w;
    w.model_type = "whisper";
    w.audio = true;
    w.position_offset = 0;
    w.pre_norm = true;
    w.final_norms = true;
    w.embedding_norm = false;
    w.final_logits_bias = false;
    w.key_bias = false;
    w.head = "proj_out";
    return w;
  }();
  return s;
}

void register_all(mobius::PluginRegistrar& r) { nn::register_seq2seq(r, whisper()); }

}  // namespace

MOBIUS_PLUGIN("whisper", "0.1.0", "mobius", register_all)
