// mobius/sdk/seq2seq.hpp - encoder-decoder models as a spec: a family is a row (its layer style,
// positions, norm placement, names), and nn::build_seq2seq builds any row as two graphs of one
// folder, as transformers.js and Optimum lay them out:
//   encoder_model         input_ids, attention_mask [batch_size, encoder_sequence_length]
//                         (Whisper: input_features float32 [batch_size, num_mel_bins, frames])
//                         -> last_hidden_state [batch_size, encoder_sequence_length, d_model]
//   decoder_model_merged  input_ids [batch_size, decoder_sequence_length], encoder_attention_mask
//                         (not Whisper's), encoder_hidden_states, use_cache_branch (bool [1]) and
//                         per layer past_key_values.<i>.decoder.key/value (the self-attention
//                         cache, [batch_size, heads, past_decoder_sequence_length, head_dim]) and
//                         past_key_values.<i>.encoder.key/value (the cross-attention keys and
//                         values) -> logits and present.<i>.decoder.* / present.<i>.encoder.*.
// The cross-attention keys and values are computed from encoder_hidden_states on the first step
// (use_cache_branch false, the past entries empty) and returned; on later steps (true) they are
// read from the past entries and the present ones are empty placeholders, as Optimum's merged
// decoders and transformers.js's loop (which keeps the first step's) have it.
//
// Semantics follow transformers' modeling_t5.py / modeling_umt5.py (T5Block: RMS pre-norm,
// unscaled scores, relative position buckets held by the first layer (every layer for UMT5),
// bidirectional in the encoder and causal in the decoder, relu or gated-gelu feed-forward, the
// tied head's d_model^-0.5 rescale) and modeling_bart.py with its kin (mbart, marian, m2m_100,
// pegasus, blenderbot, blenderbot_small: scaled embeddings, learned positions with BART's offset
// of 2 or sinusoidal ones, post- or pre-norm layers, embedding and final layer norms,
// final_logits_bias) and modeling_whisper.py (Conv1d front end, stored sinusoidal encoder
// positions, learned decoder positions, k_proj without bias). Norms and softmax compute in
// float32; the eager attention's masks are finfo(float32).min.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "mobius/sdk/context.hpp"

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

struct Seq2SeqSpec {
  enum class Style { T5, Bart };
  // How the embeddings learn where a token is (Bart style):
  //   Learned     the checkpoint's embed_positions table, row past + i + position_offset;
  //   Sinusoidal  Marian's and Pegasus's table (sin in the first half, cos in the second, angles
  //               pos / 10000^(2k/d)), the checkpoint's when it stores one, else computed;
  //   Fairseq     M2M-100's: tensor2tensor's sinusoids (exp(-k log(10000) / (half - 1))) at
  //               positions numbered from the padding index, padding rows zero.
  enum class Positions { Learned, Sinusoidal, Fairseq };
  std::string model_type;
  Style style = Style::Bart;
  Positions positions = Positions::Learned;
  int64_t position_offset = 2;
  bool pre_norm = false;             // LN before each sublayer (mbart, pegasus, m2m, blenderbot, whisper)
  bool embedding_norm = true;        // layernorm_embedding after the embeddings (bart, mbart, blenderbot-small)
  bool decoder_norm_before_positions = false;  // BlenderbotSmall's decoder: LN(embeds) + positions
  bool decoder_embed_scale = true;   // the decoder scales its embeddings too (BlenderbotSmall's does not)
  bool final_norms = false;          // encoder.layer_norm / decoder.layer_norm after the last layer
  bool final_logits_bias = true;     // the checkpoint's final_logits_bias added to the logits
  bool audio = false;                // Whisper's Conv1d front end on input_features
  bool key_bias = true;              // k_proj has a bias (Whisper's does not)
  bool bias_every_layer = false;     // T5 style: every layer its own relative bias table (UMT5)
  std::string prefix = "model.";    // the model's tensors ("" for T5)
  std::string head = "lm_head";      // the LM head (Whisper: proj_out)
};

// The normalized config of every row (keys as config.json spells them where it can).
struct Seq2SeqConfig {
  std::string model_type;
  int64_t vocab_size = 0, d_model = 0, encoder_layers = 0, decoder_layers = 0, encoder_heads = 0,
          decoder_heads = 0, encoder_ffn = 0, decoder_ffn = 0, head_dim = 0, max_positions = 0;
  int64_t decoder_head_dim = 0;      // the decoder's head size when it differs (BART style: d_model / its heads)
  std::string act = "gelu";
  bool gated = false;                // T5 v1.1 / FLAN / UMT5: act(wi_0) * wi_1
  double eps = 1e-5;
  double embed_scale = 1.0;          // sqrt(d_model) with scale_embedding
  int64_t pad_token_id = 1;
  bool tied_head = true;             // the head reads the decoder's embedding table
  bool scale_logits = false;         // T5: the decoder output times d_model^-0.5
  int64_t relative_buckets = 32, relative_max_distance = 128;
  int64_t num_mel_bins = 0, max_source_positions = 0;  // Whisper
  int64_t decoder_start_token_id = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Seq2SeqConfig, model_type, vocab_size, d_model, encoder_layers,
                                                decoder_layers, encoder_heads, decoder_heads, encoder_ffn, decoder_ffn,
                                                head_dim, decoder_head_dim, max_positions, act, gated, eps, embed_scale, pad_token_id,
                                                tied_head, scale_logits, relative_buckets, relative_max_distance,
                                                num_mel_bins, max_source_positions, decoder_start_token_id)

// config.json read and checked for the row (each fault names its key).
Seq2SeqConfig read_seq2seq_config(const Seq2SeqSpec& spec, const nlohmann::json& config_json);

// The config against what the build reads beside it, each fault a mobius::Error naming the file
// and the key: the encoder's and the decoder's layer counts against the checkpoint's layers
// (layer count - 1 held, layer count not), and for an audio row num_mel_bins against conv1's
// input channels and preprocessor_config.json (feature_size equal to num_mel_bins; n_fft,
// hop_length, sampling_rate and chunk_length positive). Without a checkpoint (a graph-only
// build) only the preprocessor is checked.
void check_seq2seq_checkpoint(BuildContext& ctx, const Seq2SeqSpec& spec, const Seq2SeqConfig& cfg);

// The graph BuildContext::graph_name() names ("encoder_model" or "decoder_model_merged").
void build_seq2seq(BuildContext& ctx, const Seq2SeqSpec& spec, const Seq2SeqConfig& cfg);

// Whisper for ONNX Runtime GenAI (its Whisper runner; the default runtime of an audio row): true
// when GenAI can run the model, else false with the reason in `why`.
bool whisper_genai_runs(const Seq2SeqConfig& cfg, std::string* why);
// genai_config.json (type whisper: the encoder returns the cross-attention keys and values, the
// decoder reads them as past_key_cross_<i>) and audio_processor_config.json, as runtime files.
void add_whisper_genai_files(BuildContext& ctx, const Seq2SeqConfig& cfg);

// Registers spec.model_type for text2text-generation (speech-to-text for an audio row). `spec`
// is kept by reference: it must live as long as the plugin (a static).
void register_seq2seq(PluginRegistrar& r, const Seq2SeqSpec& spec);

}  // namespace mobius::nn
