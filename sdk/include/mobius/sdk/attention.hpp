// mobius/sdk/attention.hpp - token mixers, the part of a decoder layer that mixes positions, and
// the attention core they all share.
//
// A mixer takes the normalized hidden states and its layer's cache and returns its output before
// the residual add. Attention here (plain, with q/k norms, soft-capped, with a sigmoid output
// gate, with a fused qkv_proj; SinkAttention with attention sinks), Multi-head Latent Attention
// (mla.hpp) and Gated DeltaNet (gated_deltanet.hpp) are mixers; a family with a new one derives
// from TokenMixer.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mobius/sdk/layers.hpp"

namespace mobius::nn {

// A layer's cache tensors by name (CacheEntry::name), as the task feeds and collects them.
using CacheMap = std::map<std::string, Value>;

class TokenMixer : public Module {
 public:
  // x [batch, seq, hidden] in the activation dtype; past holds this layer's cache tensors and
  // present receives their new values under the same names.
  virtual Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                        CacheMap& present) const = 0;
  virtual std::vector<CacheEntry> cache_entries(DType act) const = 0;
  // Whether forward() reads SharedInputs::positions() in a build for `ctx`.
  virtual bool reads_position_ids(const BuildContext& ctx) const {
    (void)ctx;
    return true;
  }
};

// The attention core's settings: scores = scale * q.k^T, computed then in float32,
// soft-capped (cap * tanh(scores / cap)) when softcap > 0, plus the mask bias (causal, padding,
// the sliding window when window > 0, the query's chunk when chunk > 0: SharedInputs::visible),
// softmax, cast back to q's dtype.
struct AttentionCore {
  double scale = 1.0;
  double softcap = 0.0;
  int64_t window = 0;
  int64_t chunk = 0;  // chunked attention (Llama 4's attention_chunk_size); 0: none
  // ALiBi: slope_h * SharedInputs::key_positions() * alibi_scale added to head h's scores (before
  // the mask); empty: none.
  std::vector<double> alibi;
  double alibi_scale = 1.0;
  // Falcon's ALiBi: slope and position rounded to bfloat16, their product rounded to bfloat16,
  // then divided by sqrt(head_dim) (alibi_scale 1 / sqrt(head_dim)) in float32.
  bool alibi_bf16 = false;
};

// The attention probabilities for q [batch, groups, rep * seq, d] (the rep query heads of one
// key group stacked as rows) against k [batch, groups or 1, total, d]: [batch, groups, rep * seq,
// total] in q's dtype. With `sinks` (float32 [groups * rep], one logit per query head), each
// head's sink logit joins the softmax's denominator and takes no value (gpt-oss): the
// probabilities of a row sum to less than 1.
Value attention_probs(Graph& g, SharedInputs& shared, Value q, Value k, const AttentionCore& core,
                      int64_t rep, Value sinks = Value());
// [batch, heads, seq, d] -> [batch, seq, heads * d].
Value merge_heads(Value o, int64_t heads, int64_t head_dim);
// Grouped-query attention over the cache: q [batch, heads, seq, d], k and v [batch, kv_heads,
// total, d]; the rep = heads / kv_heads query heads of one kv head are rows of one matmul, so K
// and V are never repeated. Returns the merged heads [batch, seq, heads * d].
Value grouped_attention(Graph& g, SharedInputs& shared, Value q, Value k, Value v,
                        const AttentionCore& core, int64_t heads, int64_t kv_heads,
                        Value sinks = Value());

// How a fused qkv projection (AttentionNames::qkv) orders its output rows:
//   Blocks    all q heads, then all k heads, then all v heads (Phi-3, GPT-2, MPT, multi-query
//             Falcon and GPT-BigCode)
//   PerHead   per head [q | k | v] (GPT-NeoX, BLOOM, Falcon's and GPT-BigCode's multi-head form)
//   PerGroup  per kv head [its heads / kv_heads q heads | k | v] (Falcon's new decoder)
//   CodeGen   four blocks, each [q | v | k] of a quarter of the heads (CodeGen's mp_num 4)
enum class QkvLayout { Blocks, PerHead, PerGroup, CodeGen };

// The checkpoint names of an attention block's weights, below the mixer's path, and how they
// are stored.
struct AttentionNames {
  std::string q = "q_proj", k = "k_proj", v = "v_proj", o = "o_proj";
  std::string qkv;  // non-empty: one fused projection under this name, laid out as qkv_layout
  QkvLayout qkv_layout = QkvLayout::Blocks;
  std::string q_norm = "q_norm", k_norm = "k_norm";
  bool in_out = false;  // weights stored [in, out] (GPT-2's Conv1D)
  bool qk_norm_after_rope = false;  // HunYuan: the q/k norms rotate first
  bool qk_norm_per_head_tensors = false;  // "head_each" read from <norm>.norms.<h>.weight (StableLM)
  bool falcon_alibi = false;  // ALiBi as Falcon computes it: in bfloat16, divided by sqrt(head_dim)
};

// Attention temperature tuning (Llama 4's NoPE layers, transformers' attn_temperature_tuning):
// each query is multiplied by 1 + scale * log(1 + floor((slot + 1) / floor_scale)) in float32,
// `slot` its cache slot (SharedInputs::query_slots: the past length plus its index, not its
// position id; with GroupQueryAttention the operator's slot, gqa_query_slots), after the rope
// and the q/k norms. Off while floor_scale is 0.
struct QueryTemperature {
  double floor_scale = 0.0;
  double scale = 0.0;
  bool enabled() const { return floor_scale > 0; }
};

// Multi-head / grouped-query attention with a dynamic key/value cache (transformers' eager
// semantics): optional q/k norms (cfg.qk_norm: "head", one norm over each head; "full", over the
// whole projection; "head_each", a LayerNorm per head with a weight [heads, head_dim] of its own
// (Cohere's, and StableLM's norms.<h> stacked); "head_weightless", an RMS norm over each head
// without a weight (WeightlessRMSNorm, Llama 4's L2 norm)), q, k and v clamped at
// cfg.clip_qkv, the layer's rope (cfg.sliding_rope on sliding layers when the config has one,
// partial rotary; none on cfg.no_rope_layers) or ALiBi (cfg.position_embedding), soft-capping,
// the layer's sliding window or chunk (core), the query temperature (`temperature`). With
// output_gate, q_proj yields per head
// [query | gate] and sigmoid(gate) multiplies the output before o_proj (Qwen3-Next / Qwen3.5).
// The cache is "key" and "value" [batch, kv_heads, past, head_dim]. With ONNX Runtime's
// operators (--ops ort) the layer is one GroupQueryAttention, fed the packed q/k/v projection
// where no q/k norm or output gate sits between. The rotary embedding is inside the operator
// with --position-ids slots (BuildContext::positions): it rotates at key slots, which gives
// transformers' logits at generation's position_ids (fused_attention), so such a graph has no
// position_ids input. RotaryEmbedding nodes at position_ids rotate q and k before it instead
// with --position-ids input (a caller's positions honoured), for a longrope (whose table depends
// on the whole run) and for head sizes that are not multiples of 16 (rotary_outside).
// Chunked attention (core.chunk) stays on the operator: its attention_bias hides the keys before
// the query's chunk (SharedInputs::gqa_bias), as local_window_size cannot; the query temperature
// (`temperature`) scales q before the operator, which then gets q unpacked.
class Attention : public TokenMixer {
 public:
  Attention(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm,
            const AttentionNames& names = {}, bool output_gate = false);
  Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;
  bool reads_position_ids(const BuildContext& ctx) const override;

  int64_t heads, kv_heads, head_dim, hidden;
  AttentionCore core;
  QueryTemperature temperature;  // set by a family after construction; off by default
  bool output_gate = false;
  std::string qk_norm;  // none | head | full | head_each | head_weightless
  bool rotates = true;  // the layer applies its rope (not for ALiBi, none, cfg.no_rope_layers)
  bool alibi = false;
  std::string alibi_slopes = "bloom";
  double alibi_bias_max = 8.0;
  double clip_qkv = 0.0;
  QkvLayout qkv_layout = QkvLayout::Blocks;
  bool qk_norm_after_rope = false;
  RopeConfig rope;
  const Linear* q_proj = nullptr;
  const Linear* k_proj = nullptr;
  const Linear* v_proj = nullptr;
  const Linear* qkv_proj = nullptr;  // fused, instead of q/k/v_proj
  const Linear* o_proj;
  const Norm* q_norm = nullptr;
  const Norm* k_norm = nullptr;

 protected:
  // The per-head logits [heads] that join every softmax's denominator (attention sinks), as a
  // graph value of `dt`; none (an invalid Value) for plain attention.
  virtual Value head_sinks(Graph& g, DType dt) const {
    (void)g;
    (void)dt;
    return Value();
  }

 private:
  // True when the build uses ONNX Runtime's GroupQueryAttention and RotaryEmbedding (--ops ort)
  // instead of the attention spelled out in standard operators.
  bool fused(const BuildContext& ctx, DType act) const;
  // The rotated dims of a head (partial_rotary_factor); 0 without rope.
  int64_t rotary_dim() const;
  // True when the fused layer rotates q and k with RotaryEmbedding nodes at position_ids
  // rather than inside GroupQueryAttention: the graph takes position_ids (--position-ids input),
  // a longrope, or sizes the operator's rotary does not take.
  bool rotary_outside(const BuildContext& ctx) const;
  // Whether q/k norms apply per head (qk_norm head, head_each or head_weightless).
  bool head_norms() const;
  // q times the query temperature of each query's slot, q itself when it is off: q [batch,
  // heads, seq, head_dim] at SharedInputs::query_slots(), or with `gqa` q [batch, seq, heads *
  // head_dim] at the slots GroupQueryAttention puts it (SharedInputs::gqa_query_slots).
  Value apply_temperature(Graph& g, SharedInputs& shared, Value q, bool gqa) const;
  // The layer as GroupQueryAttention: q [batch, seq, heads * head_dim] (or split per head by the
  // output gate), k and v [batch, seq, kv_heads * head_dim], after a "full" q/k norm; or q the
  // packed projection [batch, seq, (heads + 2 kv_heads) * head_dim] with k and v invalid.
  // Returns [batch, seq, heads * head_dim]. The cache is the operator's past/present key and
  // value (one buffer when the runtime shares them).
  Value fused_attention(Graph& g, Value q, Value k, Value v, SharedInputs& shared,
                        const CacheMap& past, CacheMap& present) const;
};

// A LayerNorm over each head of x [.., heads, head_dim] with a weight [heads, head_dim] of its own
// and no bias, in float32 (Cohere's q/k norm). With `stacked`, the weight is read from one tensor
// per head, `<path>.norms.<h>.weight` (StableLM's q_layernorm).
class PerHeadLayerNorm : public Norm {
 public:
  PerHeadLayerNorm(int64_t heads, int64_t head_dim, double eps, bool stacked);
  Value forward(Graph& g, Value x) const override;
  int64_t heads, head_dim;
  double eps;
  bool stacked;
};

// An RMS norm without a weight over the last axis: x * rsqrt(mean(x^2) + eps), computed in
// float32 and cast back to x's dtype (Llama 4's q/k norm, Llama4TextWeightlessRMSNorm).
class WeightlessRMSNorm : public Norm {
 public:
  explicit WeightlessRMSNorm(double eps) : eps(eps) {}
  Value forward(Graph& g, Value x) const override;
  double eps;
};

// ALiBi's slope of each of `heads` heads: BLOOM's (and Falcon's) build_alibi_tensor, or MPT's
// with alibi_bias_max (`style` "bloom" or "mpt").
std::vector<double> alibi_slopes(int64_t heads, const std::string& style, double bias_max);

// Attention with sinks (gpt-oss): Attention plus one learned logit per query head,
// `sinks` [heads], that joins the softmax's denominator as a key nobody reads the value of,
// so a head may attend to nothing in particular. With ONNX Runtime's operators the logits are
// GroupQueryAttention's head_sink input.
class SinkAttention : public Attention {
 public:
  SinkAttention(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm,
                const AttentionNames& names = {});

 protected:
  Value head_sinks(Graph& g, DType dt) const override;
};

}  // namespace mobius::nn
