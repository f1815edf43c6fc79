// wav2vec2.cpp - the wav2vec2 plugin: the CTC speech encoders of the wav2vec 2.0 lineage, each
// one row of the SDK's speech encoder spec (mobius/sdk/speech_encoder.hpp: the prefix of its
// encoder under the CTC head, its variants of the feature encoder, the positional embedding and
// the attention, transformers' configuration defaults): Wav2Vec2, HuBERT, WavLM, Data2VecAudio.
// Each builds the task ctc (input_values to logits, as *ForCTC computes them).
#include <vector>

#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/speech_encoder.hpp"

namespace {

namespace nn = mobius::nn;

// Wav2Vec2 (configuration_wav2vec2.py, modeling_wav2vec2.py): the spec's defaults.
nn::SpeechEncoderSpec wav2vec2() { return nn::SpeechEncoderSpec::of("wav2vec2", "wav2vec2."); }

// HuBERT (modeling_hubert.py): Wav2Vec2's layers; the feature projection's norm as
// feat_proj_layer_norm says, and conv_pos_batch_norm's batch norm in place of the weight norm.
// It has no adapters.
nn::SpeechEncoderSpec hubert() {
  nn::SpeechEncoderSpec s = nn::SpeechEncoderSpec::of("hubert", "hubert.");
  s.feat_proj_layer_norm_key = true;
  s.conv_pos_batch_norm_key = true;
  s.adapter_keys = false;
  return s;
}

// WavLM (modeling_wavlm.py): Wav2Vec2's layers with the gated relative position bias (the first
// layer's bucket table, num_buckets 320, max_bucket_distance 800).
nn::SpeechEncoderSpec wavlm() {
  nn::SpeechEncoderSpec s = nn::SpeechEncoderSpec::of("wavlm", "wavlm.");
  s.relative_bias = true;
  return s;
}

// Data2VecAudio (configuration_data2vec_audio.py, modeling_data2vec_audio.py): every conv layer
// layer-normed (no feat_extract_norm key), a stack of num_conv_pos_embeddings (5) positional
// convolutions of conv_pos_kernel_size (19) taps, the post-norm encoder always (no
// do_stable_layer_norm key).
nn::SpeechEncoderSpec data2vec_audio() {
  nn::SpeechEncoderSpec s = nn::SpeechEncoderSpec::of("data2vec-audio", "data2vec_audio.");
  s.feat_extract_norm_key = false;
  s.defaults.feat_extract_norm = "layer";
  s.stable_layer_norm_key = false;
  s.positions = nn::SpeechEncoderSpec::Positions::ConvLayers;
  s.defaults.num_conv_pos_embeddings = 5;
  s.defaults.conv_pos_kernel_size = 19;
  return s;
}

const std::vector<nn::SpeechEncoderSpec>& families() {
  static const std::vector<nn::SpeechEncoderSpec> f = {wav2vec2(), hubert(), wavlm(), data2vec_audio()};
  return f;
}

void register_all(mobius::PluginRegistrar& r) {
  for (const nn::SpeechEncoderSpec& spec : families()) nn::register_speech_encoder(r, spec);
}

}  // namespace

MOBIUS_PLUGIN("wav2vec2", "0.1.0", "mobius", register_all)
