// mobius/sdk/speech_encoder.hpp - CTC speech encoders of the wav2vec 2.0 lineage as a spec: a
// family is a row (its model type, the prefix of its encoder under the CTC head, which of the
// lineage's variants it has, transformers' defaults for its config), and build_speech_ctc builds
// any row. The wav2vec2 plugin's families (Wav2Vec2, HuBERT, WavLM, Data2VecAudio) are rows.
//
// Semantics follow transformers 5's models/wav2vec2/modeling_wav2vec2.py (Wav2Vec2FeatureEncoder
// and its conv layers, Wav2Vec2FeatureProjection, Wav2Vec2PositionalConvEmbedding,
// Wav2Vec2Encoder / Wav2Vec2EncoderStableLayerNorm and their layers, Wav2Vec2ForCTC),
// modeling_hubert.py (feat_proj_layer_norm, conv_pos_batch_norm), modeling_wavlm.py (WavLMAttention's
// gated relative position bias) and modeling_data2vec_audio.py (layer-normed conv layers,
// Data2VecAudioPositionalConvEmbedding):
//   x = input_values [batch, samples]                       raw audio, one value per sample
//   feature encoder: per layer i, Conv1d(conv_dim[i-1] -> conv_dim[i], conv_kernel[i],
//     conv_stride[i], bias conv_bias), then the norm (feat_extract_norm "group": GroupNorm of one
//     channel per group on layer 0 only; "layer": LayerNorm over the channels on every layer,
//     eps 1e-5), then feat_extract_activation
//   feature projection: projection(LayerNorm(features))    [batch, frames, hidden]
//   positional embedding: h + act(conv(h)), conv grouped (num_conv_pos_embedding_groups) over
//     num_conv_pos_embeddings taps, padded by half of them, the last frame dropped when their
//     number is even, its weight g * v / ||v|| (weight norm over dim 2); Data2VecAudio: a stack
//     of num_conv_pos_embeddings such convolutions (conv_pos_kernel_size taps, no weight norm),
//     each followed by a LayerNorm without parameters and the activation
//   post-norm (do_stable_layer_norm false): h = LayerNorm(h + pos(h)); each layer
//     a = LayerNorm(h + attention(h)), h = LayerNorm(a + ffn(a))
//   pre-norm ("stable layer norm"): h = h + pos(h); each layer h = h + attention(LayerNorm(h)),
//     h = h + ffn(LayerNorm(h)); LayerNorm(h) after the last
//   logits = lm_head(h)                                    [batch, frames, vocab_size]
// WavLM adds to every layer's scores a relative position bias: the first layer's table
// (rel_attn_embed [num_buckets, heads]) read at each key-query distance's bucket, scaled per
// head and query by a gate of the layer's own input (gru_rel_pos_linear, gru_rel_pos_const).
// The attention is bidirectional over every frame: a clip is one unpadded sequence (the graph
// has no attention_mask; transformers.js's Wav2Vec2FeatureExtractor gives one clip at a time and
// feeds only the inputs a graph declares). input_values is float32 whatever the weight dtype;
// norms, the attention softmax and the WavLM gate compute in float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/context.hpp"
#include "mobius/sdk/graph.hpp"
#include "mobius/sdk/module.hpp"

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// The normalized config (transformers' configuration defaults where config.json is silent).
struct SpeechEncoderConfig {
  std::string model_type = "wav2vec2";
  int64_t vocab_size = 32;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  double layer_norm_eps = 1e-5;
  std::string feat_extract_norm = "group";  // "group" or "layer"
  std::string feat_extract_activation = "gelu";
  std::vector<int64_t> conv_dim = {512, 512, 512, 512, 512, 512, 512};
  std::vector<int64_t> conv_kernel = {10, 3, 3, 3, 3, 2, 2};
  std::vector<int64_t> conv_stride = {5, 2, 2, 2, 2, 2, 2};
  bool conv_bias = false;
  bool feat_proj_layer_norm = true;
  // The positional convolution's taps, or, for a stack of conv layers, their number.
  int64_t num_conv_pos_embeddings = 128;
  int64_t num_conv_pos_embedding_groups = 16;
  int64_t conv_pos_kernel_size = 19;  // the taps of each layer of a stack
  bool conv_pos_batch_norm = false;   // HuBERT: a batch norm before an unnormalized conv
  bool do_stable_layer_norm = false;
  int64_t num_buckets = 320;           // WavLM
  int64_t max_bucket_distance = 800;   // WavLM
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SpeechEncoderConfig, model_type, vocab_size, hidden_size,
                                                num_hidden_layers, num_attention_heads, intermediate_size, hidden_act,
                                                layer_norm_eps, feat_extract_norm, feat_extract_activation, conv_dim,
                                                conv_kernel, conv_stride, conv_bias, feat_proj_layer_norm,
                                                num_conv_pos_embeddings, num_conv_pos_embedding_groups,
                                                conv_pos_kernel_size, conv_pos_batch_norm, do_stable_layer_norm,
                                                num_buckets, max_bucket_distance)

struct SpeechEncoderSpec {
  // A spec with wav2vec2's variants and defaults for `model_type`, its encoder under `prefix`.
  static SpeechEncoderSpec of(std::string model_type, std::string prefix) {
    SpeechEncoderSpec s;
    s.model_type = std::move(model_type);
    s.prefix = std::move(prefix);
    s.defaults.model_type = s.model_type;
    return s;
  }
  std::string model_type;
  std::string prefix;  // the encoder's tensors in a CTC checkpoint ("wav2vec2.")
  // transformers' configuration defaults of the family (configuration_<type>.py).
  SpeechEncoderConfig defaults;
  // The keys the family reads; a family without one builds its default (Data2VecAudio has no
  // feat_extract_norm, always "layer", nor do_stable_layer_norm, always post-norm).
  bool feat_extract_norm_key = true;
  bool stable_layer_norm_key = true;
  bool feat_proj_layer_norm_key = false;  // HuBERT: the projection's norm may be left out
  bool conv_pos_batch_norm_key = false;   // HuBERT
  // add_adapter (and Wav2Vec2's adapter_attn_dim): the adapters are not built; a config that
  // turns them on is refused by name.
  bool adapter_keys = true;
  // The positional embedding: one weight-normed convolution (Wav2Vec2PositionalConvEmbedding),
  // or a stack of plain ones with parameter-free layer norms (Data2VecAudio's).
  enum class Positions { WeightNormConv, ConvLayers };
  Positions positions = Positions::WeightNormConv;
  bool relative_bias = false;  // WavLM's gated relative position bias
};

// The tasks a speech encoder family builds.
inline const std::vector<std::string>& speech_tasks() {
  static const std::vector<std::string> t = {"ctc"};
  return t;
}

// config.json read with the spec's defaults and checked, each fault naming its key: the feature
// encoder's lists (one entry per layer each, num_feat_extract_layers when given, sizes from 1 to
// their bound), the norm and activations, the positional convolution's groups dividing
// hidden_size, the attention heads, WavLM's buckets, the adapters left off.
SpeechEncoderConfig read_speech_encoder_config(const SpeechEncoderSpec& spec, const nlohmann::json& config_json);

// The checkpoint folder's preprocessor_config.json, when it has one, describes what the graph
// reads: raw audio of one value per sample (feature_size 1) at a positive sampling_rate. Throws
// mobius::Error (config kind) naming the file and the key.
void check_speech_preprocessor(const BuildContext& ctx, const std::string& model_type);

// The CTC graph: input_values float32 [batch_size, sequence_length] -> logits
// [batch_size, frames, vocab_size] in the activation dtype; the encoder's tensors under
// spec.prefix, the head's (lm_head) at the root.
void build_speech_ctc(BuildContext& ctx, const SpeechEncoderSpec& spec, const SpeechEncoderConfig& cfg);

// Registers spec.model_type for speech_tasks(), read by read_speech_encoder_config and built by
// build_speech_ctc. `spec` is kept by reference: it must live as long as the plugin (a static).
void register_speech_encoder(PluginRegistrar& r, const SpeechEncoderSpec& spec);

// torch.nn.Conv1d(in, out, kernel, stride, groups, bias) over x [N, in, T] (weight
// [out, in / groups, kernel], read as stored: ONNX Conv takes that layout, in x's dtype).
// `weighted` false: the weight is not a checkpoint tensor of the module's own (a weight-normed
// convolution's, made from its parametrization) and is handed to forward.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t groups = 1, bool bias = true,
         bool weighted = true);
  // Zero padding `pad_left` and `pad_right` frames; `weight` for a module without its own.
  Value forward(Graph& g, Value x, int64_t pad_left = 0, int64_t pad_right = 0, Value weight = Value()) const;
  int64_t in_channels, out_channels, kernel, stride, groups;
  bool has_bias;
};

}  // namespace mobius::nn
