// mobius/sdk/nn.hpp - reusable decoder components: Linear, Embedding, norms, rotary embeddings,
// GQA attention with KV cache, gated MLP, decoder layers, and the causal-LM model around them.
//
// Parameter names equal the Hugging Face checkpoint's tensor names (dotted module paths), so a
// component's weights bind without a name table. Values flowing between components are in the
// activation dtype (see activation_dtype); norms and softmax compute in float32 as transformers
// does and cast back.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/module.hpp"
#include "mobius/sdk/ops.hpp"

namespace mobius::nn {

// The dtype activations and the KV cache use: the weight dtype for f32/f16; float32 for bf16
// (ONNX Runtime's CPU kernels do not compute in bfloat16).
DType activation_dtype(BuildContext& ctx);

// One cache tensor of a layer, e.g. {"key", [batch_size, kv_heads, past_sequence_length, head_dim]}.
struct CacheEntry {
  std::string name;
  DType dtype;
  std::vector<Dim> dims;
};

// Values computed once per graph and shared by every layer that needs them (masks, rope tables),
// so a model's graph holds one copy of each, not one per layer.
class SharedInputs {
 public:
  SharedInputs(Graph& g, Value input_ids, Value attention_mask, Value position_ids, DType act);
  Value input_ids, attention_mask, position_ids;
  DType act;
  // Additive float32 mask [batch, 1, rep*seq, total]: 0 where key slot j is visible to query
  // slot i (causal, not padding, and within `window` when window > 0), finfo(float32).min
  // elsewhere. Rows repeat `rep` times so grouped queries of one kv head share one matmul.
  Value attention_bias(int64_t window, int64_t rep);
  // Boolean [batch, 1, seq, total]: true where key slot j is visible to query slot i.
  Value visible(int64_t window);
  // cos and sin [batch, 1, seq, rotary_dim] in the activation dtype, attention scaling applied.
  std::pair<Value, Value> rope(const RopeConfig& rope, int64_t head_dim);
  // Boolean [batch, seq]: true at real (non-padding) query positions.
  Value query_is_real();
  // A cache of arbitrary shared values, keyed by the caller.
  std::map<std::string, Value> memo;

 private:
  Graph& g_;
  std::map<std::string, Value> cache_;
};

// Softmax scaling factor and inverse frequencies for a rope config (as transformers computes).
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t rotary_dim, double* attention_scaling);

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias);
  Value forward(Graph& g, Value x) const;
  int64_t in_features, out_features;
  bool has_bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim);
  Value forward(Graph& g, Value ids, DType act) const;
  int64_t vocab, dim;
};

// y = w * (x * rsqrt(mean(x^2) + eps)), in float32, cast back to x's dtype before the weight
// multiply (LlamaRMSNorm).
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps);
  virtual Value forward(Graph& g, Value x) const;
  int64_t dim;
  double eps;

 protected:
  Value normalized_f32(Graph& g, Value x) const;  // x * rsqrt(mean(x^2) + eps) in float32
};

// y = (1 + w) * normalized(x), all in float32, cast back after (Gemma's norm). The offset lives
// here, so decoder layers never ask which norm they hold.
class OffsetRMSNorm : public RMSNorm {
 public:
  using RMSNorm::RMSNorm;
  Value forward(Graph& g, Value x) const override;
};

using NormFactory = std::function<std::unique_ptr<RMSNorm>(int64_t dim, double eps)>;
NormFactory rms_norm_factory();
NormFactory offset_rms_norm_factory();

// Applies rotary embeddings to x [batch, heads, seq, head_dim] over its first cos.dim(-1) dims.
Value apply_rope(Value x, Value cos, Value sin, bool interleaved = false);
// Activation functions by their Hugging Face names (silu, gelu, gelu_pytorch_tanh, relu, ...).
Value activation(const std::string& name, Value x);
// Throws mobius::Error naming `key` when `name` is not an activation activation() knows.
void check_activation(const ConfigReader& r, const std::string& key, const std::string& name);

// Multi-head / grouped-query attention with a dynamic KV cache (transformers' eager semantics).
class Attention : public Module {
 public:
  Attention(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm);
  // past/present hold "key" and "value" [batch, kv_heads, past, head_dim].
  Value forward(Graph& g, Value x, SharedInputs& shared, const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const;
  std::vector<CacheEntry> cache_entries(DType act) const;

  int64_t heads, kv_heads, head_dim, hidden;
  int64_t window = 0;  // sliding window of this layer; 0 for global attention
  double scale;
  double softcap = 0;
  std::string qk_norm;  // none | head | full
  RopeConfig rope;
  const Linear* q_proj;
  const Linear* k_proj;
  const Linear* v_proj;
  const Linear* o_proj;
  const RMSNorm* q_norm = nullptr;
  const RMSNorm* k_norm = nullptr;
};

class GatedMLP : public Module {
 public:
  GatedMLP(int64_t hidden, int64_t intermediate, bool bias, std::string act);
  Value forward(Graph& g, Value x) const;
  std::string act;
  const Linear* gate_proj;
  const Linear* up_proj;
  const Linear* down_proj;
};

// A decoder layer as the causal-LM model drives it.
class DecoderLayerBase : public Module {
 public:
  virtual Value forward(Graph& g, Value h, SharedInputs& shared,
                        const std::map<std::string, Value>& past,
                        std::map<std::string, Value>& present) const = 0;
  virtual std::vector<CacheEntry> cache_entries(DType act) const = 0;
};

// Pre-norm: h + attn(input_layernorm(h)), then h + mlp(post_attention_layernorm(h)); each
// sub-block output times `residual_multiplier` before the add.
class DecoderLayer : public DecoderLayerBase {
 public:
  DecoderLayer(const ArchitectureConfig& cfg, int64_t layer,
               const NormFactory& norm = rms_norm_factory());
  Value forward(Graph& g, Value h, SharedInputs& shared, const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;

  double residual_multiplier = 1.0;
  const RMSNorm* input_layernorm;
  const Attention* self_attn;
  const RMSNorm* post_attention_layernorm;
  const GatedMLP* mlp;
};

// Granite: the pre-norm layer with residual_multiplier from the config.
class GraniteDecoderLayer : public DecoderLayer {
 public:
  GraniteDecoderLayer(const ArchitectureConfig& cfg, int64_t layer);
};

// OLMo-2: h + post_attention_layernorm(attn(h)), then h + post_feedforward_layernorm(mlp(h)).
class PostNormDecoderLayer : public DecoderLayerBase {
 public:
  PostNormDecoderLayer(const ArchitectureConfig& cfg, int64_t layer);
  Value forward(Graph& g, Value h, SharedInputs& shared, const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;

  const Attention* self_attn;
  const RMSNorm* post_attention_layernorm;
  const GatedMLP* mlp;
  const RMSNorm* post_feedforward_layernorm;
};

// Sandwich norms (Gemma 2/3): h + post_attention_layernorm(attn(input_layernorm(h))), then
// h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).
class SandwichDecoderLayer : public DecoderLayerBase {
 public:
  SandwichDecoderLayer(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm);
  Value forward(Graph& g, Value h, SharedInputs& shared, const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;

  const RMSNorm* input_layernorm;
  const Attention* self_attn;
  const RMSNorm* post_attention_layernorm;
  const RMSNorm* pre_feedforward_layernorm;
  const GatedMLP* mlp;
  const RMSNorm* post_feedforward_layernorm;
};

using LayerFactory =
    std::function<std::unique_ptr<DecoderLayerBase>(const ArchitectureConfig&, int64_t layer)>;

// The decoder stack: embed_tokens, layers.<i>, norm (under the path "model").
class TextModel : public Module {
 public:
  TextModel(const ArchitectureConfig& cfg, const LayerFactory& layers,
            const NormFactory& norm = rms_norm_factory());
  // Hidden states [batch, seq, hidden] after the final norm.
  Value forward(Graph& g, SharedInputs& shared, const std::vector<std::map<std::string, Value>>& past,
                std::vector<std::map<std::string, Value>>& present) const;
  // Looked-up embeddings (scaled as the family requires) in the activation dtype.
  virtual Value embed(Graph& g, SharedInputs& shared) const;
  // Checks the config against the checkpoint's headers, when the build has a checkpoint, before
  // forward() builds anything: the embedding's shape against vocab_size and hidden_size, and the
  // layer count. A parameter every layer declares (the first, by name, that layer 0 has in the
  // checkpoint) must exist for layer num_hidden_layers - 1 and must not for layer
  // num_hidden_layers (after the multi-token-prediction layers some families keep there, counted
  // by "num_nextn_predict_layers" in ArchitectureConfig::extra). Throws "[config] ..." naming
  // the key and the tensor it looked for. forward() calls it.
  void check_checkpoint(BuildContext& ctx) const;

  ArchitectureConfig cfg;
  const Embedding* embed_tokens;
  std::vector<const DecoderLayerBase*> layers;
  const RMSNorm* norm;
};

struct TextGenInputs {
  Value input_ids, attention_mask, position_ids;
  std::vector<std::map<std::string, Value>> past;  // per layer
};
struct TextGenOutputs {
  Value logits;                                        // [batch, seq, vocab] float32
  std::vector<std::map<std::string, Value>> present;  // per layer, same names as past
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
};

// TextModel + lm_head (tied to the embeddings when the config says so), logits scaled and
// soft-capped as the config asks.
class CausalLMModel : public CausalLM {
 public:
  CausalLMModel(const ArchitectureConfig& cfg, const LayerFactory& layers,
                const NormFactory& norm = rms_norm_factory());
  // For families that bring their own TextModel subclass.
  CausalLMModel(const ArchitectureConfig& cfg, std::unique_ptr<TextModel> model);
  std::vector<std::vector<CacheEntry>> cache_layout(DType act) const override;
  TextGenOutputs forward(Graph& g, const TextGenInputs& in) const override;
  // Rotary tables some checkpoints carry (recomputed in the graph) and, when tied, lm_head.
  std::vector<std::string> ignored_tensors() const override;

  ArchitectureConfig cfg;
  const TextModel* model;
  const Linear* lm_head;
};

// The names a runtime feeds and reads layer `layer`'s cache tensor `kind` (CacheEntry::name) by:
// past_key_values.<layer>.<kind> and present.<layer>.<kind>, except for transformers.js, which
// names Gated DeltaNet states past_conv.<layer> / past_recurrent.<layer> (present_conv...,
// present_recurrent...) and feeds any other single cache tensor, such as an MLA latent, as
// past_key_values.<layer>.key.
struct CacheIoNames {
  std::string past, present;
};
CacheIoNames cache_io_names(const std::string& runtime, size_t layer, const std::string& kind);

// The text-generation task: declares the graph I/O of DESIGN.md ("Graph I/O") with the names of
// the build's runtime (cache_io_names, CausalLM::position_id_rows), runs the model, names the
// outputs, and declares the model's ignored checkpoint tensors; logits are float32.
void build_text_generation(BuildContext& ctx, const CausalLM& model);

}  // namespace mobius::nn
