// mobius/sdk/layers.hpp - the building blocks every decoder part uses: Linear, Embedding, the
// norms, activations, rotary tables and their application, and the values shared by all layers of
// one graph (masks, rope tables).
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
#include <utility>
#include <vector>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/module.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/quant.hpp"

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
  // position_ids may be invalid: the graph then has no such input (CausalLM::reads_position_ids)
  // and positions() is an error.
  SharedInputs(Graph& g, Value input_ids, Value attention_mask, Value position_ids, DType act);
  Value input_ids, attention_mask, position_ids;
  DType act;
  // position_ids [batch, seq]; an error naming the graph's missing input when it has none.
  Value positions() const;
  // Additive float32 mask [batch, 1, rep*seq, total]: 0 where key slot j is visible to query
  // slot i (causal, not padding, within `window` when window > 0, and in the query's chunk when
  // chunk > 0), finfo(float32).min elsewhere. Rows repeat `rep` times so grouped queries of one
  // kv head share one matmul.
  Value attention_bias(int64_t window, int64_t rep, int64_t chunk = 0);
  // Boolean [batch, 1, seq, total]: true where key slot j is visible to query slot i. Chunked
  // attention (chunk > 0, Llama 4's attention_chunk_size) cuts the row into chunks of `chunk`
  // slots counted from its first real token, and a query sees only keys of its own chunk:
  // (j - lead) // chunk == (i - lead) // chunk, `lead` the row's left padding (transformers'
  // chunked_overlay).
  Value visible(int64_t window, int64_t chunk = 0);
  // Int64 [seq]: each query's cache slot, the past length (the attention mask's width minus the
  // sequence length) plus its index.
  Value query_slots();
  // Int64 [batch]: each row's left padding, the zeros of its attention mask before its first 1
  // (all of them for a row without a real token).
  Value left_padding();
  // The rotary tables of `rope` over `rotary_dim` dims, as cos and sin [batch, 1, seq, width],
  // attention scaling applied, built once per graph, rope and layout (the one rope-table builder
  // of the SDK). full_width: the angles repeated for rotate_half's two halves (one per pair when
  // the rope is interleaved), in the activation dtype, for apply_rope; otherwise one angle per
  // rotated pair in float32. A longrope's frequencies are those of the run (long_context).
  std::pair<Value, Value> rope_tables(const RopeConfig& rope, int64_t rotary_dim, bool full_width);
  // rope_tables over a head of head_dim: its first head_dim * partial_rotary_factor dims (even).
  std::pair<Value, Value> rope(const RopeConfig& rope, int64_t head_dim);
  // Boolean [batch, seq]: true at real (non-padding) query positions.
  Value query_is_real();
  // Boolean [1]: this step is one token on top of a cache (a decode step).
  Value one_token_on_cache();
  // [batch, seq, 1] in `dt`: 0 at the padded positions a recurrent mixer (a convolution, a
  // state-space or linear-attention scan) zeroes, else 1. transformers
  // (create_recurrent_attention_mask, apply_mask_to_padding_states) zeroes the padded positions
  // of a multi-token step and never those of a one-token step on top of a state (a generated
  // token is never padding); a multi-token step on top of a state (a prompt fed in pieces) is
  // zeroed as well, so a left-padded prompt gives the same state whole or in pieces.
  // `one_token_kept`: a one-token step is never zeroed, with or without a state (LFM2's and
  // Mamba-2's masks are None for one token).
  Value recurrent_keep(DType dt, bool one_token_kept = false);
  // Float32 [batch, 1, 1, total]: each key slot's position counted by the attention mask,
  // (cumsum(mask) - 1) * mask (ALiBi's positions, BLOOM's build_alibi_tensor).
  Value key_positions();
  // For ONNX Runtime's GroupQueryAttention: seqlens_k (int32 [batch]) and
  // total_sequence_length (int32 scalar, the attention mask's width). seqlens_k is a row's
  // leading padding plus its real tokens, minus one: a left-padded or unpadded row keeps its
  // tokens at their slots (the last slot, total - 1; its padding is masked by gqa_bias), a
  // right-padded row (ONNX Runtime GenAI pads on the right) counts its real tokens, so the
  // operator writes the next token over the padding, as GenAI's own graphs have it. Either way
  // the operator's rotary, which turns a token at its slot, keeps every distance between two
  // tokens of a row (see Attention).
  std::pair<Value, Value> gqa_lengths();
  // Int64 [batch, seq]: the cache slot at which GroupQueryAttention puts each query: i on a
  // first prompt (no past), else seqlens_k + 1 - seq + i. That is query_slots() for a left-padded
  // or unpadded row; a right-padded row's tokens (GenAI's batches) sit at the slots of its real
  // tokens, as if it had no padding.
  Value gqa_query_slots();
  // GroupQueryAttention's attention_bias [batch, 1, seq, total] in the activation dtype: 0 from
  // a row's first real token on, the dtype's lowest value on its leading padding. Causality,
  // the end of a right-padded row (seqlens_k) and the sliding window are the operator's own.
  // With chunk > 0 the keys before the query's chunk (visible's chunks, counted at the
  // operator's slots, gqa_query_slots) are hidden as well: the operator has no chunked
  // attention of its own.
  Value gqa_bias(int64_t chunk = 0);
  // Rotary caches for RotaryEmbedding / GroupQueryAttention: cos and sin [max_positions,
  // rotary_dim / 2] in the activation dtype, attention scaling applied, as initializers computed
  // while the weights are written (float32 angles, as transformers computes them). A longrope
  // has both tables in one: the short factors' rows for positions below
  // original_max_position_embeddings (at most max_positions of them), then the long factors'
  // max_positions rows; index them with rope_positions(rope), never position_ids.
  // Tables of more than kMaxStoredRopeBytes (a context of millions, Llama 4 Scout's 10,485,760)
  // are computed in the graph instead, over the rows this run reads (the attention mask's width,
  // or past the largest position id): the same float32 angles, no gigabytes in the model.
  std::pair<Value, Value> rope_caches(const RopeConfig& rope, int64_t rotary_dim);
  static constexpr int64_t kMaxStoredRopeBytes = int64_t{256} << 20;
  // The rows of rope_caches(rope, ..) this run reads: position_ids, or for a longrope in a long
  // run (long_context) position_ids moved past the short rows. The run picks its table through
  // these few indices, so no table is copied or selected per step.
  Value rope_positions(const RopeConfig& rope);
  // Boolean scalar: true when this run's largest position id + 1 exceeds the rope's
  // original_max_position_embeddings, the run in which a longrope uses its long factors.
  Value long_context(const RopeConfig& rope);
  // Rows of the rotary caches: the model's max_position_embeddings.
  int64_t max_positions = 0;
  // A cache of arbitrary shared values, keyed by the caller.
  std::map<std::string, Value> memo;

 private:
  // Int64 [batch, 1, seq, 1]: the first key slot of each query's chunk (visible's chunks), the
  // queries at query_slots(), or at gqa_query_slots() with `gqa`.
  Value chunk_start(int64_t chunk, bool gqa);
  Graph& g_;
  std::map<std::string, Value> cache_;
  int rope_cache_count_ = 0;
};

// Softmax scaling factor and inverse frequencies for a rope config (as transformers computes).
// long_factors: a longrope's frequencies for a long run (long_factor), else its short ones.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t rotary_dim, double* attention_scaling,
                                 bool long_factors = false);

// True when the build may use ONNX Runtime's contrib operators (--ops ort, the default);
// false for standard ONNX only (--ops standard).
bool ort_ops(const BuildContext& ctx);

// y = x W^T + b. The weight is stored as its operator reads it, laid out while the weights
// stream: [in, out] for MatMul, or MatMulNBits blocks when the build quantizes (--dtype int4/int8).
// A checkpoint whose weight is stored [in, out] (GPT-2's Conv1D: `in_out`) is read as stored: it is
// MatMul's layout already. Quantized (--dtype int4/int8), such a weight stays in the float dtype.
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, bool in_out = false);
  Value forward(Graph& g, Value x) const;
  int64_t in_features, out_features;
  bool has_bias;
  bool in_out = false;
};

// One MatMul (or MatMulNBits) for linears that read the same input, such as q, k and v: their
// weights (and biases) concatenated along the output dimension while the weights stream, into
// initializers `name`.weight / `name`.bias; returns the product [.., sum of out_features].
Value packed_linear(Graph& g, Value x, const std::vector<const Linear*>& parts,
                    const std::string& name);
// packed_linear's product split back into each linear's output.
std::vector<Value> packed_linears(Graph& g, Value x, const std::vector<const Linear*>& parts,
                                  const std::string& name);
// The initializer `name` [in, out] of `dtype`: the transpose of `sources` ([out_i, in]
// checkpoint tensors concatenated along their first dimension), made while the weights stream.
Value weight_in_out(Graph& g, const std::string& name, const std::vector<std::string>& sources,
                    int64_t in, int64_t out, DType dtype);
// x [.., k] times the weight made of `sources` ([n, k] checkpoint tensors, concatenated along
// their first dimension), block-quantized as the build options say, as one MatMulNBits node;
// its initializers are named `name`_Q4 / _scales / _zero_points.
Value matmul_nbits(Graph& g, Value x, const std::string& name,
                   const std::vector<std::string>& sources, int64_t k, int64_t n);

// One vector parameter of its own, e.g. a masked-LM head's output bias "cls.predictions.bias":
// a module at the name's parent path ("cls.predictions") holding the leaf ("bias").
class VectorParam : public Module {
 public:
  VectorParam(std::string leaf, int64_t n) : leaf(std::move(leaf)) { declare(this->leaf, {n}); }
  Value forward(Graph& g) const { return param(g, leaf); }
  std::string leaf;
};

// The initializers of matmul_nbits's weight `name` ([Q, scales] or [Q, scales, zero points]),
// planned once and found again by any later reader; scales in `scales_dtype`.
std::vector<Value> quantized_weight(Graph& g, const std::string& name,
                                    const std::vector<std::string>& sources, int64_t k, int64_t n,
                                    DType scales_dtype);

class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim);
  Value forward(Graph& g, Value ids, DType act) const;
  // x [.., dim] times the table transposed: [.., vocab], for a head tied to the embeddings. One
  // table serves both: the same initializer (Gemm with transB), or, when `tied_head` is set and
  // the build quantizes to 4 bits, the same block-quantized initializers for the head's
  // MatMulNBits and the lookup's GatherBlockQuantized.
  Value tied_logits(Graph& g, Value x) const;
  // Set by a model whose head reads this table (before the graph is built).
  bool tied_head = false;
  int64_t vocab, dim;

 private:
  bool shares_quantized_table(const BuildContext& ctx) const;
};

// A norm over the last axis, as the decoder parts hold it: RMSNorm, Gemma's (1 + w) RMSNorm or
// a LayerNorm, whichever the family uses (NormKind).
class Norm : public Module {
 public:
  virtual ~Norm() = default;
  virtual Value forward(Graph& g, Value x) const = 0;
  // (norm(skip + x), skip + x): one fused operator (residual add and norm) where ONNX Runtime
  // has one, an Add and the norm otherwise.
  virtual std::pair<Value, Value> forward_skip(Graph& g, Value x, Value skip) const;
};

// y = w * (x * rsqrt(mean(x^2) + eps)), in float32, cast back to x's dtype before the weight
// multiply (LlamaRMSNorm).
// With ONNX Runtime's operators: SimplifiedLayerNormalization (float32 statistics).
class RMSNorm : public Norm {
 public:
  RMSNorm(int64_t dim, double eps);
  Value forward(Graph& g, Value x) const override;
  // One SkipSimplifiedLayerNormalization with ONNX Runtime's operators.
  std::pair<Value, Value> forward_skip(Graph& g, Value x, Value skip) const override;
  int64_t dim;
  double eps;

 protected:
  Value normalized_f32(Graph& g, Value x) const;  // x * rsqrt(mean(x^2) + eps) in float32
  // The multiplier applied after normalizing, as an initializer of dtype `dt`.
  virtual Value scale(Graph& g, DType dt) const;
  Value simplified(Graph& g, Value x) const;  // SimplifiedLayerNormalization(x, scale)
  // Whether the norm of an input of `dt` is one fused operator with the scale in `dt`.
  virtual bool fusable(DType dt) const { (void)dt; return true; }
};

// y = (1 + w) * normalized(x), all in float32, cast back after (Gemma's norm). The offset lives
// here, so decoder layers never ask which norm they hold.
class OffsetRMSNorm : public RMSNorm {
 public:
  using RMSNorm::RMSNorm;
  Value forward(Graph& g, Value x) const override;

 protected:
  Value scale(Graph& g, DType dt) const override;  // (1 + w), made while the weights stream
  bool fusable(DType dt) const override { return dt == DType::Float; }
};

// torch.nn.LayerNorm(dim, eps) with its weight and bias: ONNX LayerNormalization over the last
// axis with float32 statistics (stash_type 1). Where the rest of the graph runs:
//   Float32: x is cast to float32, the weight and bias are float32 whatever the weight dtype,
//            and the result is cast back to x's dtype (transformers' encoders, computed as their
//            float32 reference does; CLIP's text encoder);
//   InputDtype: the weight and bias in x's dtype, the operator on x as it is (diffusers' UNet,
//            whose float16 pipeline keeps its norms in float16).
// With ONNX Runtime's operators, forward_skip of a float32 input is one SkipLayerNormalization.
class LayerNorm : public Norm {
 public:
  enum class Compute { Float32, InputDtype };
  // The parameters: weight and bias (torch.nn.LayerNorm); no bias (ModernBERT's norm_bias false,
  // Cohere's norm); neither (OLMo's non-parametric norm: weight ones, bias zeros). A weight
  // offset of 1 multiplies by (1 + w) (Nemotron's LayerNorm1P), made while the weights stream.
  enum class Params { WeightBias, Weight, None };
  LayerNorm(int64_t dim, double eps, Compute compute = Compute::Float32, bool bias = true);
  LayerNorm(int64_t dim, double eps, Params params, double weight_offset = 0.0);
  Value forward(Graph& g, Value x) const override;
  std::pair<Value, Value> forward_skip(Graph& g, Value x, Value skip) const override;
  int64_t dim;
  double eps;
  Compute compute = Compute::Float32;
  bool bias = true;
  bool weight = true;
  double weight_offset = 0.0;

 private:
  // The scale (1 + w, w, or ones) and bias (or an invalid Value) as initializers of `dt`.
  Value scale(Graph& g, DType dt) const;
  Value shift(Graph& g, DType dt) const;
};

// The norm a family uses everywhere (layer norms, q/k norms, the final norm): RMSNorm, Gemma's
// (1 + w) RMSNorm, LayerNorm with weight and bias, with a weight only (Cohere), with neither
// (OLMo), or with (1 + w) and a bias (Nemotron's LayerNorm1P).
enum class NormKind { RMS, OffsetRMS, Layer, LayerNoBias, LayerNoAffine, LayerOnePlus };
using NormFactory = std::function<std::unique_ptr<Norm>(int64_t dim, double eps)>;
NormFactory norm_factory(NormKind kind);
NormFactory rms_norm_factory();
NormFactory offset_rms_norm_factory();

// ONNX Runtime's RotaryEmbedding over x [batch, seq, heads * head_dim] at `position_ids`, with
// caches from SharedInputs::rope_caches (its first rotary_dim dims of each head; adjacent pairs
// when interleaved, else rotate_half).
Value RotaryEmbedding(Value x, Value position_ids, Value cos, Value sin, int64_t heads,
                      int64_t rotary_dim, bool interleaved);
// Applies rotary embeddings to x [batch, heads, seq, head_dim] over its first cos.dim(-1) dims.
Value apply_rope(Value x, Value cos, Value sin, bool interleaved = false);
// Activation functions by their Hugging Face names (silu, gelu, gelu_pytorch_tanh, relu, ...).
Value activation(const std::string& name, Value x);
// activation(name, x) computed in float32 for a float16 x (rounded once, after), as is otherwise.
Value activation_f32(const std::string& name, Value x);

// Eager attention without a cache over packed projections q, k, v [batch, seq, heads * head_dim]
// (every head its own keys): softmax(q k^T / sqrt(head_dim) + bias) v, the scores scaled, biased
// and normalized in float32 (transformers' softmax(dtype=float32)), returned as
// [batch, seq, heads * head_dim] in q's dtype. `bias`: float32, broadcastable to
// [batch, heads, seq_q, seq_k] (a causal or a padding mask).
// With `rope`, q and k (and v where rope->values) are rotated per head first by apply_rope's
// rule: cos/sin [seq, head_dim] for rotate_half, [seq, head_dim / 2] (one angle per adjacent
// pair) when interleaved, in q's dtype.
struct EncoderRope {
  Value cos, sin;
  bool interleaved = false;
  bool values = false;  // RoFormer's rotary_value
};
// `bias`, when valid, is added to the scores; `scale` 0 is head_dim^-0.5.
Value encoder_attention(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim, Value bias,
                        const EncoderRope* rope = nullptr, double scale = 0);
// rotate_half angles for positions 0 .. seq-1 (`seq` an int64 scalar), inv_freq from
// rope_inv_freq of an unscaled rope of `theta`: cos / sin [seq, head_dim] in `act`.
EncoderRope rotary_angles(Graph& g, Value seq, int64_t head_dim, double theta, DType act);
// Bidirectional attention over padded sequences, as encoder_attention computes it (keys whose
// attention_mask is 0 at finfo(float32).min; every key when there is no attention_mask;
// `position_bias`, when valid, a float32 relative position bias [1, heads, seq, seq] added to the
// scores; q and k rotated with `rope`; the scores scaled by `scale`, 0 for head_dim^-0.5). With
// ONNX Runtime's operators and float32 activations: one MultiHeadAttention (com.microsoft) node,
// the padding as its key_padding_mask; else encoder_attention with `mask_bias` (the padding's
// additive bias [batch, 1, 1, seq]).
struct PaddedAttention {
  explicit PaddedAttention(Value attention_mask) : attention_mask(attention_mask) {}
  Value attention_mask;  // int64 [batch, seq]: 1 a real token; invalid: no padding
  Value position_bias;   // optional
  // The padding as an additive float32 bias [batch, 1, 1, seq] (finfo(float32).min at padding),
  // and as the int32 mask ONNX Runtime's attention operators take: each made once, when first
  // used (a graph of fused attention has no additive mask).
  Value mask_bias(Graph& g) const;
  Value key_padding(Graph& g) const;

 private:
  mutable Value bias_, int32_;
};
Value padded_attention(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim, const PaddedAttention& mask,
                       const EncoderRope* rope = nullptr, double scale = 0);
// Self-attention of x [batch, seq, in] through the linears `qkv` (query, key, value, each biased;
// their weights and biases packed into initializers `name`.weight / `name`.bias): with ONNX
// Runtime's operators, float32 activations, float weights and no rotary, one Attention
// (com.microsoft) node that does the projection too (the padding as its mask_index, the position
// bias as its attention_bias); else packed_linears and padded_attention.
Value self_attention(Graph& g, Value x, const std::vector<const Linear*>& qkv, const std::string& name, int64_t heads,
                     int64_t head_dim, const PaddedAttention& mask, const EncoderRope* rope = nullptr);
// An activation of an encoder's MLP: with ONNX Runtime's operators, gelu (erf) as its Gelu and
// the tanh approximations (gelu_new, gelu_pytorch_tanh, gelu_fast) as FastGelu (com.microsoft),
// which its CPU kernels compute in float32; anything else, or without them, activation_f32.
Value encoder_activation(Graph& g, const std::string& name, Value x);
// Throws mobius::Error naming `key` when `name` is not an activation activation() knows.
void check_activation(const ConfigReader& r, const std::string& key, const std::string& name);

// The sizes of an encoder (a decoder's shape without a KV cache), each failing through `r` with
// its key: hidden_act known, intermediate_size and max_position_embeddings positive,
// layer_norm_eps positive, num_attention_heads dividing hidden_size; then the SDK's size checks
// (every size against its bound, the whole model's parameter count).
struct EncoderSizes {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
      max_position_embeddings;
  double layer_norm_eps;
  std::string hidden_act;
  // The config keys the messages name, where a family spells them otherwise (DistilBERT's dim,
  // hidden_dim, n_heads, activation).
  std::string hidden_key = "hidden_size", intermediate_key = "intermediate_size",
              heads_key = "num_attention_heads", act_key = "hidden_act", eps_key = "layer_norm_eps";
};
void check_encoder_config(const ConfigReader& r, const std::string& model_type, const EncoderSizes& c);

}  // namespace mobius::nn
