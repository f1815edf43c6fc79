// mobius/sdk/decoder.hpp - the decoder as a table: a DecoderSpec says where the norms go, which
// norm, which mixer and feed-forward each layer has and what every tensor is called; one
// DecoderLayer, TextModel and CausalLMModel build any spec. Then the text-generation task.
//
// A llama-like family is a spec with the defaults; a family that differs only in names or
// constants is a spec value, not a class. A layer that is really new derives from
// DecoderLayerBase (docs/writing-a-plugin.md, "a decoder layer of your own").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/feed_forward.hpp"

namespace mobius::nn {

// Where a layer's norms are:
//   Pre      h + mixer(input_layernorm(h)), then h + ff(post_attention_layernorm(h))  (Llama)
//   Post     h + post_attention_layernorm(mixer(h)), then h + post_feedforward_layernorm(ff(h))
//            (OLMo-2)
//   Sandwich h + post_attention_layernorm(mixer(input_layernorm(h))), then
//            h + post_feedforward_layernorm(ff(pre_feedforward_layernorm(h)))  (Gemma 2/3)
//   Parallel h + mixer(input_layernorm(h)) + ff(post_attention_layernorm(h)), or one norm for both
//            with DecoderSpec::parallel_shared_norm (GPT-J, Phi, Cohere, Falcon; GPT-NeoX two)
//   PostResidual h = input_layernorm(h + mixer(h)), then post_attention_layernorm(h + ff(h))
//            (OPT's do_layer_norm_before false)
// Each sub-block's output is multiplied by cfg.residual_multiplier (Granite) before the add.
enum class NormPlacement { Pre, Post, Sandwich, Parallel, PostResidual };

// Every checkpoint tensor name of a decoder: the text model's path, the modules below it and
// their weights. The defaults are Hugging Face's Llama names.
struct TensorNames {
  std::string text_path = "model";  // the decoder stack ("model.language_model" in composites)
  std::string embed = "embed_tokens", layers = "layers", final_norm = "norm";
  std::string lm_head = "lm_head";  // at the root, outside text_path; tied when the config says
  std::string input_norm = "input_layernorm";
  std::string post_attention_norm = "post_attention_layernorm";
  std::string pre_feedforward_norm = "pre_feedforward_layernorm";
  std::string post_feedforward_norm = "post_feedforward_layernorm";
  std::string mixer = "self_attn";
  // The mixer's name on layers of a given cfg.layer_types entry, where it differs from `mixer`
  // (Qwen3.5: "linear_attention" -> "linear_attn").
  std::map<std::string, std::string> mixer_by_layer_type;
  AttentionNames attention;
  std::string feed_forward = "mlp";
  MLPNames mlp;
  // Position embeddings (cfg.position_embedding "learned"), beside embed under text_path.
  std::string positions = "embed_positions";
  std::string embed_norm;  // non-empty: a norm of the looked-up embeddings (BLOOM)
  // OPT's projections between the embeddings' width (cfg.embedding_dim) and hidden_size.
  std::string project_in = "project_in", project_out = "project_out";
};

struct DecoderSpec;
using MixerFactory = std::function<std::unique_ptr<TokenMixer>(
    const ArchitectureConfig& cfg, int64_t layer, const DecoderSpec& spec)>;
using FeedForwardFactory = std::function<std::unique_ptr<FeedForward>(
    const ArchitectureConfig& cfg, int64_t layer, const DecoderSpec& spec)>;

struct DecoderSpec {
  NormPlacement placement = NormPlacement::Pre;
  NormKind norm = NormKind::RMS;  // every norm of the model, q/k norms included
  TensorNames names;
  // The token mixer of each layer; empty: attention_mixer(). See mixer_by_layer_type.
  MixerFactory mixer;
  // The feed-forward of each layer; empty: gated_mlp(). moe.hpp's moe_or_dense() picks the
  // sparse MoE on the layers cfg.moe says, the dense MLP elsewhere.
  FeedForwardFactory feed_forward;
  // Checkpoint tensors (globs) the model knowingly does not read, beside the rotary tables, a
  // tied lm_head and the multi-token-prediction layers the SDK leaves out itself.
  std::vector<std::string> ignored;
  // Rows of position_ids a runtime feeds (CausalLM::position_id_rows); empty: 1.
  std::function<int(const std::string& runtime)> position_id_rows;
  // Parallel: the mixer and the feed-forward read one norm (input_layernorm).
  bool parallel_shared_norm = false;
  // Pre: each residual is the normed input, not the input (BLOOM's
  // apply_residual_connection_post_layernorm).
  bool residual_from_norm = false;
  bool final_norm = true;  // the stack ends in a norm (not OPT's post-norm form)
  // Sinusoidal positions: the table row that is zeros (XGLM's padding_idx).
  int64_t sinusoidal_padding_idx = -1;
  // transformers.js feeds a multi-query model (config.json's multi_query: GPT-BigCode, Falcon)
  // one cache tensor per layer, past_key_values.<i>.key_value [batch, past, 2 kv_heads
  // head_dim]: each position's keys then values (CausalLM::packed_key_value).
  bool packed_key_value_for_transformers_js = false;

  NormFactory norm_factory() const { return nn::norm_factory(norm); }
};

// Mixers and feed-forwards by name, for DecoderSpec.
MixerFactory attention_mixer(bool output_gate = false);
// The mixer named by cfg.layer_types[layer] ("full_attention", "sliding_attention",
// "linear_attention", ...); a layer type missing from the map is an error naming it.
MixerFactory mixer_by_layer_type(std::map<std::string, MixerFactory> by_type);
FeedForwardFactory gated_mlp();
FeedForwardFactory plain_mlp();  // MLP: down(act(up(x))), names spec.names.mlp.up / down

// The residual stream between layers: `h`, plus the last sub-block's output `branch` when it
// has not been added yet. The next layer's input norm (or the final norm) adds it as part of the
// norm: one SkipSimplifiedLayerNormalization with ONNX Runtime's operators, instead of an Add and
// a norm. sum() is the stream with the branch added.
struct Residual {
  Value h, branch;
  Value sum() const;
};

// A decoder layer as the causal-LM model drives it.
class DecoderLayerBase : public Module {
 public:
  virtual Value forward(Graph& g, Value h, SharedInputs& shared, const CacheMap& past,
                        CacheMap& present) const = 0;
  virtual std::vector<CacheEntry> cache_entries(DType act) const = 0;
  // Whether forward() reads SharedInputs::positions() in a build for `ctx`.
  virtual bool reads_position_ids(const BuildContext& ctx) const {
    (void)ctx;
    return true;
  }
  // The layer on the residual stream; may leave its last branch pending (Residual). The
  // default adds a pending branch and returns forward()'s result with nothing pending.
  virtual Residual forward_residual(Graph& g, const Residual& r, SharedInputs& shared,
                                    const CacheMap& past, CacheMap& present) const;
};

// The layer every spec builds: norms per spec.placement around spec.mixer and
// spec.feed_forward.
class DecoderLayer : public DecoderLayerBase {
 public:
  DecoderLayer(const ArchitectureConfig& cfg, int64_t layer, const DecoderSpec& spec);
  Value forward(Graph& g, Value h, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  // Adds a pending branch inside the input norm (Pre, Sandwich), and leaves the feed-forward's
  // branch pending for the next norm.
  Residual forward_residual(Graph& g, const Residual& r, SharedInputs& shared,
                            const CacheMap& past, CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;
  bool reads_position_ids(const BuildContext& ctx) const override;

  NormPlacement placement;
  bool shared_norm = false;         // Parallel: one norm for both branches
  bool residual_from_norm = false;  // Pre: BLOOM's apply_residual_connection_post_layernorm
  double residual_multiplier = 1.0;
  const Norm* input_layernorm = nullptr;           // Pre, Sandwich
  const TokenMixer* mixer;
  const Norm* post_attention_layernorm;            // all (Pre: the norm before the ff)
  const Norm* pre_feedforward_layernorm = nullptr;  // Sandwich
  const FeedForward* feed_forward;
  const Norm* post_feedforward_layernorm = nullptr;  // Post, Sandwich
};

using LayerFactory =
    std::function<std::unique_ptr<DecoderLayerBase>(const ArchitectureConfig&, int64_t layer)>;

// The decoder stack: embed_tokens, layers.<i>, norm (under spec.names.text_path).
class TextModel : public Module {
 public:
  TextModel(const ArchitectureConfig& cfg, const DecoderSpec& spec);
  // With layers of your own (DecoderLayerBase), named as spec.names says.
  TextModel(const ArchitectureConfig& cfg, const DecoderSpec& spec, const LayerFactory& layers);
  // Hidden states [batch, seq, hidden] after the final norm.
  Value forward(Graph& g, SharedInputs& shared, const std::vector<CacheMap>& past,
                std::vector<CacheMap>& present) const;
  // Looked-up embeddings (times cfg.embedding_multiplier) in the activation dtype.
  virtual Value embed(Graph& g, SharedInputs& shared) const;
  // Checks the config against the checkpoint's headers, when the build has a checkpoint, before
  // forward() builds anything: the embedding's shape against vocab_size and hidden_size, and the
  // layer count. A parameter every layer declares (the first, by name, that layer 0 has in the
  // checkpoint) must exist for layer num_hidden_layers - 1 and must not for layer
  // num_hidden_layers (after the cfg.num_nextn_predict_layers multi-token-prediction layers some
  // families keep there). Throws "[config] ..." naming the key and the tensor it looked for.
  // forward() calls it.
  void check_checkpoint(BuildContext& ctx) const;

  // Whether embed() reads position_ids (learned or sinusoidal positions).
  bool reads_position_ids() const;

  ArchitectureConfig cfg;
  std::string layer_prefix;  // "layers."
  const Embedding* embed_tokens;
  const Embedding* embed_positions = nullptr;  // learned positions
  const Norm* embed_norm = nullptr;
  const Linear* project_in = nullptr;
  const Linear* project_out = nullptr;
  int64_t sinusoidal_padding_idx = -1;
  std::vector<const DecoderLayerBase*> layers;
  const Norm* norm = nullptr;  // none without DecoderSpec::final_norm
};

// What the text-generation task feeds a model and collects from it.
struct TextGenInputs {
  // position_ids is invalid when the model reads none (CausalLM::reads_position_ids).
  Value input_ids, attention_mask, position_ids;
  std::vector<CacheMap> past;  // per layer
};
struct TextGenOutputs {
  Value logits;                   // [batch, seq, vocab] float32
  std::vector<CacheMap> present;  // per layer, same names as past
};

// A model the text-generation task can drive.
class CausalLM : public Module {
 public:
  virtual std::vector<std::vector<CacheEntry>> cache_layout(DType act) const = 0;
  virtual TextGenOutputs forward(Graph& g, const TextGenInputs& in) const = 0;
  // Checkpoint tensors (globs) the model knowingly does not read; the task declares them.
  virtual std::vector<std::string> ignored_tensors() const { return {}; }
  // Rows of position_ids `runtime` feeds this model: 1 ([batch, seq]), or 3 ([3, batch, seq]:
  // the temporal, height and width rows of multimodal rope, which are equal for text; the task
  // passes the first row on as TextGenInputs::position_ids).
  virtual int position_id_rows(const std::string& runtime) const {
    (void)runtime;
    return 1;
  }
  // Whether the graph for `ctx` reads position_ids; when not, it has no such input (a runtime
  // feeds only the inputs a graph declares). Always true when position_id_rows is not 1.
  virtual bool reads_position_ids(const BuildContext& ctx) const {
    (void)ctx;
    return true;
  }
  // Whether `runtime` feeds each layer's "key" and "value" [batch, kv_heads, past, head_dim]
  // packed as one "key_value" [batch, past, 2 kv_heads head_dim] (transformers.js's multi-query
  // models); the task packs and unpacks them around the model.
  virtual bool packed_key_value(const std::string& runtime) const {
    (void)runtime;
    return false;
  }
};

// TextModel + lm_head (tied to the embeddings when the config says so and the checkpoint stores
// no lm_head of its own), logits divided by cfg.logits_scaling, multiplied by
// cfg.logits_multiplier and soft-capped as the config asks.
class CausalLMModel : public CausalLM {
 public:
  CausalLMModel(const ArchitectureConfig& cfg, const DecoderSpec& spec = {});
  CausalLMModel(const ArchitectureConfig& cfg, const DecoderSpec& spec, const LayerFactory& layers);
  std::vector<std::vector<CacheEntry>> cache_layout(DType act) const override;
  TextGenOutputs forward(Graph& g, const TextGenInputs& in) const override;
  // Rotary tables some checkpoints carry (recomputed in the graph), a tied lm_head, the
  // multi-token-prediction layers, and spec.ignored.
  std::vector<std::string> ignored_tensors() const override;
  int position_id_rows(const std::string& runtime) const override;
  bool reads_position_ids(const BuildContext& ctx) const override;  // any layer reads them
  bool packed_key_value(const std::string& runtime) const override;

  ArchitectureConfig cfg;
  DecoderSpec spec;
  const TextModel* model;
  const Linear* lm_head;
};

// The names a runtime feeds and reads layer `layer`'s cache tensor `kind` (CacheEntry::name) by:
// past_key_values.<layer>.<kind> and present.<layer>.<kind>, except for transformers.js, which
// names convolution states ("conv_state") past_conv.<layer>, Gated DeltaNet's recurrent states
// ("recurrent_state") past_recurrent.<layer> and state-space states ("ssm_state")
// past_ssm.<layer> (present_conv..., present_recurrent..., present_ssm...), and feeds any other
// single cache tensor, such as an MLA latent, as past_key_values.<layer>.key.
struct CacheIoNames {
  std::string past, present;
};
CacheIoNames cache_io_names(const std::string& runtime, size_t layer, const std::string& kind);

// The text-generation task: declares the graph I/O of DESIGN.md ("Graph I/O") with the names of
// the build's runtime (cache_io_names, CausalLM::position_id_rows), runs the model, names the
// outputs, and declares the model's ignored checkpoint tensors; logits are float32.
void build_text_generation(BuildContext& ctx, const CausalLM& model);

}  // namespace mobius::nn
