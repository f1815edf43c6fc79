// vision_tower.cpp - the tower of a vision spec row and its heads (mobius/sdk/vision.hpp), to
// transformers 5's modeling_vit.py, modeling_deit.py, modeling_dinov2.py,
// modeling_dinov2_with_registers.py, modeling_clip.py and modeling_siglip.py, and torch's
// bicubic interpolation (aten UpSampleBicubic2d.cpp, UpSampleKernel.cpp's antialiased filter).
#include <algorithm>
#include <climits>
#include <cmath>
#include <tuple>

#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/vision.hpp"
#include "packed.hpp"

namespace mobius::nn {

using namespace mobius::op;

namespace {

// Parameters of a module that are not a torch submodule's (a class token, a position table,
// LayerScale's lambda1), declared by name.
class Params : public Module {
 public:
  void hold(const std::string& local, std::vector<int64_t> shape, DType dtype = DType::Undefined) {
    declare(local, std::move(shape), dtype);
  }
};

// DINOv2's LayerScale: x * lambda1 (one value per channel), in x's dtype.
class LayerScale : public Module {
 public:
  explicit LayerScale(int64_t channels) { declare("lambda1", {channels}); }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    return Mul(x, param(g, "lambda1", x.dtype()));
  }
};

// ---------------------------------------------------------------------------------------------
// The position table, resampled to the image's grid

// torch's cubic convolution kernel at distance d >= 0 (float32 [..]): ((a + 2) d - (a + 3)) d^2 + 1
// below 1, ((a d - 5a) d + 8a) d - 4a below 2, 0 beyond.
Value cubic_kernel(Graph& g, Value d, double a) {
  auto c = [&](double v) { return Scalar(g, DType::Float, v); };
  Value near = Add(Mul(Sub(Mul(c(a + 2), d), c(a + 3)), Mul(d, d)), c(1.0));
  Value far = Sub(Mul(Add(Mul(Sub(Mul(c(a), d), c(5 * a)), d), c(8 * a)), d), c(4 * a));
  return Where(Less(d, c(1.0)), near, Where(Less(d, c(2.0)), far, c(0.0)));
}

// The weights [out, in] (float32) that resample `in` positions to `out` (an int64 scalar) as
// torch's interpolate(mode="bicubic", align_corners=False) does along one axis, the scale in / out:
//   plain (upsample_bicubic2d): source x = scale * (i + 0.5) - 0.5, the kernel (a = -0.75) at the
//     four positions around it, those outside the table read at its edge;
//   antialias (_upsample_bicubic2d_aa): centre scale * (i + 0.5), the kernel (a = -0.5) at
//     (j + 0.5 - centre) / max(scale, 1) for every position j of the table, the row normalized.
// At out == in both are the identity, exactly.
Value resample_weights(Graph& g, Value out, int64_t in, VisionSpec::Resample mode) {
  auto c = [&](double v) { return Scalar(g, DType::Float, v); };
  Value scale = Div(c(static_cast<double>(in)), Cast(out, DType::Float));
  Value i = Cast(Range(Int(g, 0), out, Int(g, 1)), DType::Float);  // [out]
  Value centre = Unsqueeze(Mul(scale, Add(i, c(0.5))), {1});         // [out, 1]
  if (mode == VisionSpec::Resample::Bicubic) {
    // Taps at -2 .. in + 1 cover every source position's four; the edge's taps fold onto it.
    std::vector<double> taps, fold(static_cast<size_t>((in + 4) * in), 0.0);
    for (int64_t j = -2; j < in + 2; ++j) {
      taps.push_back(static_cast<double>(j));
      const int64_t at = std::min(std::max<int64_t>(j, 0), in - 1);
      fold[static_cast<size_t>((j + 2) * in + at)] = 1.0;
    }
    Value t = Constant(g, DType::Float, {1, in + 4}, taps, "taps");
    Value w = cubic_kernel(g, Abs(Sub(t, Sub(centre, c(0.5)))), -0.75);  // [out, in + 4]
    return MatMul(w, Constant(g, DType::Float, {in + 4, in}, fold, "edge_fold"));
  }
  std::vector<double> taps;
  for (int64_t j = 0; j < in; ++j) taps.push_back(static_cast<double>(j) + 0.5);
  Value t = Constant(g, DType::Float, {1, in}, taps, "taps");
  Value widen = Max(scale, c(1.0));  // the filter stretches when the table shrinks
  Value w = cubic_kernel(g, Abs(Div(Sub(t, centre), widen)), -0.5);  // [out, in]
  return Div(w, ReduceSum(w, {1}, true));
}

// ---------------------------------------------------------------------------------------------
// Attention over every token

// softmax(q k^T / sqrt(head_dim)) v over packed q [b, sq, heads * head_dim] and k, v
// [b, sk, heads * head_dim]: with ONNX Runtime's operators and float32 activations one
// MultiHeadAttention (com.microsoft); else q scaled first (a float16 product never holds the
// unscaled sums) and the scores normalized in float32.
Value attend(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (ort_ops(g.context()) && q.dtype() == DType::Float)
    return g.node("MultiHeadAttention", {q, k, v}, {q.type()}, {Attr("num_heads", heads), Attr("scale", scale)},
                  "com.microsoft")[0];
  q = Transpose(Reshape(Mul(q, ScalarLike(q, scale)), {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, sq, d]
  k = Transpose(Reshape(k, {0, 0, heads, head_dim}), {0, 2, 3, 1});                               // [b, h, d, sk]
  v = Transpose(Reshape(v, {0, 0, heads, head_dim}), {0, 2, 1, 3});                               // [b, h, sk, d]
  Value probs = Cast(Softmax(Cast(MatMul(q, k), DType::Float), -1), v.dtype());
  return Reshape(Transpose(MatMul(probs, v), {0, 2, 1, 3}), {0, 0, heads * head_dim});
}

// A tower layer: pre-norm attention and MLP, each scaled by LayerScale where the family has it.
class VisionLayer : public Module {
 public:
  VisionLayer(const VisionConfig& c, const VisionNames& n)
      : act(c.hidden_act), heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads),
        swiglu(c.use_swiglu_ffn) {
    const int64_t h = c.hidden_size;
    norm1 = &add<LayerNorm>(n.norm1, h, c.layer_norm_eps);
    query = &add<Linear>(n.query, h, h, c.qkv_bias);
    key = &add<Linear>(n.key, h, h, c.qkv_bias);
    value = &add<Linear>(n.value, h, h, c.qkv_bias);
    attn_out = &add<Linear>(n.attn_out, h, h, true);
    norm2 = &add<LayerNorm>(n.norm2, h, c.layer_norm_eps);
    if (swiglu) {
      ffn_in = &add<Linear>(n.swiglu_in, h, 2 * c.intermediate_size, true);
      ffn_out = &add<Linear>(n.swiglu_out, c.intermediate_size, h, true);
    } else {
      ffn_in = &add<Linear>(n.ffn_in, h, c.intermediate_size, true);
      ffn_out = &add<Linear>(n.ffn_out, c.intermediate_size, h, true);
    }
    if (!n.layer_scale1.empty()) scale1 = &add<LayerScale>(n.layer_scale1, h);
    if (!n.layer_scale2.empty()) scale2 = &add<LayerScale>(n.layer_scale2, h);
  }

  // One layer over the residual stream h, `pending` the previous layer's MLP output not yet added
  // to it (added here, fused with this layer's first norm); returns the stream and this layer's
  // MLP output, likewise pending.
  std::pair<Value, Value> forward(Graph& g, Value h, Value pending) const {
    Value x;
    if (pending.valid()) {
      std::tie(x, h) = norm1->forward_skip(g, pending, h);
    } else {
      x = norm1->forward(g, h);
    }
    Value a = attn_out->forward(g, attention(g, x));
    if (scale1) a = scale1->forward(g, a);
    std::tie(x, h) = norm2->forward_skip(g, a, h);
    Value f = mlp(g, x);
    if (scale2) f = scale2->forward(g, f);
    return {h, f};
  }

 private:
  // With ONNX Runtime's operators, float32 activations, float weights and biased q, k and v: one
  // Attention (com.microsoft) node that projects too; else one packed projection and attend().
  Value attention(Graph& g, Value x) const {
    BuildContext& ctx = g.context();
    const std::string name = full_name("qkv");
    bool fusable = ort_ops(ctx) && x.dtype() == DType::Float && ctx.weight_bits() == 0;
    for (const Linear* l : {query, key, value})
      fusable = fusable && l->has_bias && l->parameter("weight").dtype == DType::Undefined;
    ScopeGuard s(g, path());
    if (!fusable) {
      auto qkv = packed_linears(g, x, {query, key, value}, name);
      return attend(g, qkv[0], qkv[1], qkv[2], heads, head_dim);
    }
    const int64_t h = heads * head_dim;
    std::vector<std::string> sources, bias_sources;
    for (const Linear* l : {query, key, value}) {
      sources.push_back(l->source_tensor("weight"));
      bias_sources.push_back(l->source_tensor("bias"));
    }
    Value w = Cast(weight_in_out(g, name + ".weight", sources, query->in_features, 3 * h, ctx.weight_dtype()),
                   x.dtype());
    Value b = detail::packed_bias(g, name + ".bias", bias_sources, 3 * h, x.dtype());
    return g.node("Attention", {x, w, b}, {TensorType(x.dtype(), {x.dim(0), x.dim(1), Dim(h)})},
                  {Attr("num_heads", heads), Attr("scale", 1.0 / std::sqrt(static_cast<double>(head_dim)))},
                  "com.microsoft")[0];
  }

  Value mlp(Graph& g, Value x) const {
    Value y = ffn_in->forward(g, x);
    {
      ScopeGuard s(g, path());
      if (swiglu) {
        // Dinov2SwiGLUFFN: the first half gates (silu), the second is gated.
        const std::vector<Value> ab = Split(y, {ffn_out->in_features, ffn_out->in_features}, -1);
        y = Mul(activation_f32("silu", ab[0]), ab[1]);
      } else {
        y = encoder_activation(g, act, y);
      }
    }
    return ffn_out->forward(g, y);
  }

  std::string act;
  int64_t heads, head_dim;
  bool swiglu;
  const LayerNorm *norm1, *norm2;
  const Linear *query, *key, *value, *attn_out, *ffn_in, *ffn_out;
  const LayerScale *scale1 = nullptr, *scale2 = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Pooling and the heads

// SiglipMultiheadAttentionPoolingHead: the probe attends over every token (torch's
// nn.MultiheadAttention: in_proj_weight [3 * hidden, hidden] packs q, k and v), then
// p + mlp(layernorm(p)); the probe's row is the pooled output.
class AttentionPoolingHead : public Module {
 public:
  explicit AttentionPoolingHead(const VisionConfig& c)
      : hidden(c.hidden_size), heads(c.num_attention_heads), act(c.hidden_act) {
    declare("probe", {1, 1, hidden});
    Params& in = add<Params>("attention");
    in.hold("in_proj_weight", {3 * hidden, hidden});
    in.hold("in_proj_bias", {3 * hidden});
    in_proj = &in;
    out_proj = &add<Linear>("attention.out_proj", hidden, hidden, true);
    norm = &add<LayerNorm>("layernorm", hidden, c.layer_norm_eps);
    fc1 = &add<Linear>("mlp.fc1", hidden, c.intermediate_size, true);
    fc2 = &add<Linear>("mlp.fc2", c.intermediate_size, hidden, true);
  }

  Value forward(Graph& g, Value h) const {
    BuildContext& ctx = g.context();
    const DType dt = h.dtype();
    Value attended;
    {
      ScopeGuard s(g, full_name("attention"));
      Value batch = DimOf(h, 0);
      Value probe = Expand(param(g, "probe", dt), Concat({batch, Ints(g, {1, hidden})}, 0),
                           TensorType(dt, {h.dim(0), Dim(1), Dim(hidden)}));
      // [hidden, 3 * hidden]: the transpose of in_proj_weight, made while the weights stream.
      Value w = Cast(weight_in_out(g, in_proj->full_name("in_proj_weight"), {in_proj->source_tensor("in_proj_weight")},
                                   hidden, 3 * hidden, ctx.weight_dtype()),
                     dt);
      Value b = in_proj->param(g, "in_proj_bias", dt);
      Value q = Add(MatMul(probe, Slice(w, {0}, {hidden}, {1})), Slice(b, {0}, {hidden}, {0}));
      Value kv = Add(MatMul(h, Slice(w, {hidden}, {3 * hidden}, {1})), Slice(b, {hidden}, {3 * hidden}, {0}));
      const std::vector<Value> k_v = Split(kv, {hidden, hidden}, -1);
      attended = attend(g, q, k_v[0], k_v[1], heads, hidden / heads);
    }
    Value p = out_proj->forward(g, attended);
    Value y = fc1->forward(g, norm->forward(g, p));
    {
      ScopeGuard s(g, full_name("mlp"));
      y = encoder_activation(g, act, y);
    }
    y = fc2->forward(g, y);
    ScopeGuard s(g, path());
    return Squeeze(Add(p, y), {1});  // [batch, hidden]: the probe's one row
  }

 private:
  int64_t hidden, heads;
  std::string act;
  const Params* in_proj;
  const Linear *out_proj, *fc1, *fc2;
  const LayerNorm* norm;
};

// h[:, i] of h [batch, tokens, hidden]: [batch, hidden].
Value token(Value h, int64_t i) { return Squeeze(Slice(h, {i}, {i + 1}, {1}), {1}); }

// The tower: embeddings, layers, final norm and pooling, its tensors under `prefix`.
class Tower : public Module {
 public:
  Tower(const VisionSpec& s, const VisionConfig& c, const std::string& prefix, bool with_pooler) : spec(s), cfg(c) {
    const VisionNames& n = s.names;
    const int64_t d = c.hidden_size;
    patch = tensor(prefix + n.patch + ".weight", {d, c.num_channels, c.patch_height, c.patch_width}, DType::Float);
    if (n.patch_bias) patch_bias = tensor(prefix + n.patch + ".bias", {d}, DType::Float);
    const std::vector<int64_t> one = n.flat_embeddings ? std::vector<int64_t>{d} : std::vector<int64_t>{1, 1, d};
    if (!n.cls.empty()) cls = tensor(prefix + n.cls, one);
    if (!n.distillation.empty()) distillation = tensor(prefix + n.distillation, one);
    if (!n.registers.empty() && c.num_register_tokens > 0)
      registers = tensor(prefix + n.registers, {1, c.num_register_tokens, d});
    lead = (cls.holder ? 1 : 0) + (distillation.holder ? 1 : 0);
    const int64_t rows = lead + (c.image_height / c.patch_height) * (c.image_width / c.patch_width);
    position = tensor(prefix + n.position, n.flat_embeddings ? std::vector<int64_t>{rows, d}
                                                              : std::vector<int64_t>{1, rows, d},
                      DType::Float);
    if (!n.pre_norm.empty()) pre_norm = &add<LayerNorm>(prefix + n.pre_norm, d, c.layer_norm_eps);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<VisionLayer>(prefix + n.layer + std::to_string(i), c, n));
    if (!n.final_norm.empty()) final_norm = &add<LayerNorm>(prefix + n.final_norm, d, c.layer_norm_eps);
    if (!with_pooler) return;
    if (s.pooling == VisionSpec::Pooling::Dense && !n.pooler.empty())
      pooler = &add<Linear>(prefix + n.pooler, d, c.pooler_output_size, true);
    if (s.pooling == VisionSpec::Pooling::NormedCls) pooled_norm = &add<LayerNorm>(prefix + n.pooled_norm, d, c.layer_norm_eps);
    if (s.pooling == VisionSpec::Pooling::AttentionHead && c.use_head)
      head = &add<AttentionPoolingHead>(prefix + n.attention_pool, c);
    pools = pooler || pooled_norm || head || s.pooling == VisionSpec::Pooling::Cls;
  }

  VisionOutputs forward(Graph& g, Value pixel_values, DType act) const {
    const TensorType t = pixel_values.type();
    if (!t.rank_known || t.rank() != 4 || t.dtype != DType::Float)
      throw Error("[vision] " + spec.model_type + " takes float32 pixel_values [batch, channels, height, width], got " +
                  pixel_values.name() + " " + t.str());
    Value h = embeddings(g, pixel_values, act);
    if (pre_norm) h = pre_norm->forward(g, h);
    Value pending;
    for (const VisionLayer* l : layers) std::tie(h, pending) = l->forward(g, h, pending);
    if (final_norm) {
      h = pending.valid() ? final_norm->forward_skip(g, pending, h).first : final_norm->forward(g, h);
    } else if (pending.valid()) {
      ScopeGuard s(g, path().empty() ? std::string("encoder") : path());
      h = Add(h, pending);
    }
    VisionOutputs out;
    out.last_hidden_state = h;
    if (!pools) return out;
    if (head) {
      out.pooler_output = head->forward(g, h);
      return out;
    }
    Value first;
    {
      ScopeGuard s(g, "pooler");
      first = token(h, 0);
    }
    if (pooler) {
      Value y = pooler->forward(g, first);
      ScopeGuard s(g, "pooler");
      first = activation_f32(cfg.pooler_act, y);
    }
    if (pooled_norm) first = pooled_norm->forward(g, first);
    out.pooler_output = first;
    return out;
  }

 private:
  // A parameter that is no torch submodule's, held by a module at its parent's path.
  struct Tensor {
    const Params* holder = nullptr;
    std::string leaf;
    Value get(Graph& g, DType as = DType::Undefined) const { return holder->param(g, leaf, as); }
  };
  Tensor tensor(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::Undefined) {
    const size_t dot = name.rfind('.');
    Params& p = add<Params>(dot == std::string::npos ? "" : name.substr(0, dot));
    Tensor r{&p, dot == std::string::npos ? name : name.substr(dot + 1)};
    p.hold(r.leaf, std::move(shape), dtype);
    return r;
  }

  // [cls, distillation, patches] + positions, then the registers after the class token.
  Value embeddings(Graph& g, Value px, DType act) const {
    ScopeGuard s(g, "embeddings");
    const int64_t d = cfg.hidden_size;
    // The patches in float32 (pixel_values is), cast once to the activation dtype.
    std::vector<Value> conv_in = {px, patch.get(g)};
    if (patch_bias.holder) conv_in.push_back(patch_bias.get(g));
    Value grid = g.node("Conv", conv_in, {TensorType(DType::Float, {px.dim(0), Dim(d), Dim(), Dim()})},
                        {Attr("kernel_shape", {cfg.patch_height, cfg.patch_width}),
                         Attr("strides", {cfg.patch_height, cfg.patch_width})})[0];
    Value patches = Cast(Transpose(Reshape(grid, {0, 0, -1}), {0, 2, 1}), act);  // [b, patches, d]
    Value batch = DimOf(px, 0);
    auto batched = [&](const Tensor& tok, int64_t n) {
      Value v = Reshape(tok.get(g, act), {1, n, d});
      return Expand(v, Concat({batch, Ints(g, {n, d})}, 0), TensorType(act, {px.dim(0), Dim(n), Dim(d)}));
    };
    std::vector<Value> parts;
    if (cls.holder) parts.push_back(batched(cls, 1));
    if (distillation.holder) parts.push_back(batched(distillation, 1));
    parts.push_back(patches);
    Value h = parts.size() == 1 ? patches : Concat(parts, 1);
    h = Add(h, positions(g, px, act));
    if (!registers.holder) return h;
    const int64_t r = cfg.num_register_tokens;
    return Concat({Slice(h, {0}, {1}, {1}), batched(registers, r), Slice(h, {1}, {INT64_MAX}, {1})}, 1);
  }

  // The position table's rows for the image [1, lead + patches, d]: the leading tokens' as
  // stored, the grid's resampled to the image's grid (float32, cast to `act` after). One If on
  // whether the image's grid is the table's: the table as stored (what the resampling gives
  // there, exactly), or resampled, so an image of the config's size pays for no resampling.
  Value positions(Graph& g, Value px, DType act) const {
    ScopeGuard s(g, "positions");
    const int64_t d = cfg.hidden_size;
    const int64_t gh = cfg.image_height / cfg.patch_height, gw = cfg.image_width / cfg.patch_width;
    Value table = Reshape(position.get(g, DType::Float), {lead + gh * gw, d});
    Value rows_h = Squeeze(Div(DimOf(px, 2), Int(g, cfg.patch_height)), {0});  // the image's grid
    Value rows_w = Squeeze(Div(DimOf(px, 3), Int(g, cfg.patch_width)), {0});
    Value same = And(Equal(rows_h, Int(g, gh)), Equal(rows_w, Int(g, gw)));
    std::shared_ptr<Graph> stored = g.subgraph("stored"), resampled = g.subgraph("resampled");
    stored->output(stored->outer(table), stored->fresh_name("positions"));
    {
      Graph& r = *resampled;
      Value tab = r.outer(table);
      Value grid = Reshape(Slice(tab, {lead}, {lead + gh * gw}, {0}), {gh, gw * d});
      Value t = MatMul(resample_weights(r, r.outer(rows_h), gh, spec.resample), grid);  // [nh, gw * d]
      t = Reshape(Transpose(Reshape(t, {-1, gw, d}), {1, 0, 2}), {gw, -1});            // [gw, nh * d]
      t = MatMul(resample_weights(r, r.outer(rows_w), gw, spec.resample), t);           // [nw, nh * d]
      t = Reshape(Transpose(Reshape(t, {0, -1, d}), {1, 0, 2}), {-1, d});               // [nh * nw, d]
      if (lead > 0) t = Concat({Slice(tab, {0}, {lead}, {0}), t}, 0);
      r.output(t, r.fresh_name("positions"));
    }
    Value t = g.node("If", {same}, {TensorType(DType::Float, {Dim(), Dim(d)})},
                     {Attr("then_branch", stored), Attr("else_branch", resampled)})[0];
    return Cast(Unsqueeze(t, {0}), act);
  }

  const VisionSpec& spec;
  VisionConfig cfg;
  Tensor patch, patch_bias, cls, distillation, registers, position;
  int64_t lead = 0;
  const LayerNorm *pre_norm = nullptr, *final_norm = nullptr, *pooled_norm = nullptr;
  std::vector<const VisionLayer*> layers;
  const Linear* pooler = nullptr;
  const AttentionPoolingHead* head = nullptr;
  bool pools = false;
};

// The classifier on the tower's last_hidden_state (its tensors at the checkpoint's root):
// classifier(h[:, 0]); DeiT's distilled head, the mean of cls_classifier(h[:, 0]) and
// distillation_classifier(h[:, 1]); DINOv2's classifier(concat(h[:, 0], mean of the patches)).
// A projection at the checkpoint's root, without bias (CLIP's visual_projection).
class Projection : public Module {
 public:
  Projection(const std::string& name, int64_t in, int64_t out) { linear = &add<Linear>(name, in, out, false); }
  const Linear* linear;
};

class VisionHead : public Module {
 public:
  VisionHead(const VisionSpec& s, const VisionConfig& c, bool distilled) : spec(s), cfg(c) {
    const VisionNames& n = s.names;
    const int64_t in = s.classifier == VisionSpec::Classifier::ClsAndPatchMean ? 2 * c.hidden_size : c.hidden_size;
    if (distilled) {
      out = &add<Linear>(n.cls_classifier, in, c.num_labels, true);
      distillation = &add<Linear>(n.distillation_classifier, in, c.num_labels, true);
    } else {
      out = &add<Linear>(n.classifier, in, c.num_labels, true);
    }
  }

  Value forward(Graph& g, Value h) const {
    Value x;
    {
      ScopeGuard s(g, "head");
      x = token(h, 0);
      if (spec.classifier == VisionSpec::Classifier::ClsAndPatchMean) {
        // The patch tokens follow the class token and the registers; their mean in float32.
        Value patches = Cast(Slice(h, {1 + cfg.num_register_tokens}, {INT64_MAX}, {1}), DType::Float);
        x = Concat({x, Cast(ReduceMean(patches, {1}, false), h.dtype())}, 1);
      }
    }
    Value logits = out->forward(g, x);
    if (!distillation) return logits;
    Value second;
    {
      ScopeGuard s(g, "head");
      second = token(h, 1);
    }
    Value other = distillation->forward(g, second);
    ScopeGuard s(g, "head");
    return Mul(Add(logits, other), ScalarLike(logits, 0.5));
  }

 private:
  const VisionSpec& spec;
  VisionConfig cfg;
  const Linear *out = nullptr, *distillation = nullptr;
};

}  // namespace

VisionOutputs vision_tower(Graph& g, const VisionSpec& spec, const VisionConfig& cfg, const std::string& prefix,
                           Value pixel_values, bool with_pooler) {
  Tower tower(spec, cfg, prefix, with_pooler);
  return tower.forward(g, pixel_values, activation_dtype(g.context()));
}

void build_vision(BuildContext& ctx, const VisionSpec& spec, const VisionConfig& cfg, const std::string& task) {
  const VisionNames& n = spec.names;
  const bool classify = task == "image-classification";
  if (!classify && task != "image-feature-extraction")
    throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + spec.model_type + ": no vision build for task " + task);
  if (classify && n.classifier.empty() && n.cls_classifier.empty())
    throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + spec.model_type + " has no image classifier");
  check_image_preprocessor(ctx, spec.model_type, cfg.num_channels);
  // A head's checkpoint holds the tower under the head prefix; a base model's at the root
  // (without weights: the classifier's under the prefix, the base model's at the root).
  const std::string prefix =
      ctx.no_weights() ? (classify ? spec.head_prefix : "")
                       : (ctx.query_tensor(spec.head_prefix + n.patch + ".weight") ? spec.head_prefix : "");
  check_vision_checkpoint(ctx, spec, cfg, prefix);
  for (const std::string& u : n.unused) ctx.ignore_tensors(prefix + u);
  // pooler_output for feature extraction; ViT's and DeiT's dense pooler only where the
  // checkpoint has it (a classifier's checkpoint has none: add_pooling_layer=False).
  bool pooler = !classify;
  if (pooler && spec.pooling == VisionSpec::Pooling::Dense)
    pooler = ctx.no_weights() ? prefix.empty() : ctx.query_tensor(prefix + n.pooler + ".weight").has_value();
  if (!pooler)
    for (const std::string& p : {n.pooler, n.pooled_norm, n.attention_pool})
      if (!p.empty()) ctx.ignore_tensors(prefix + p + ".*");
  // A head's checkpoint built for feature extraction: its heads are not read.
  if (!classify && !prefix.empty())
    for (const std::string& h : {n.classifier, n.cls_classifier, n.distillation_classifier})
      if (!h.empty()) ctx.ignore_tensors(h + ".*");
  // DeiT's distilled head where the checkpoint holds it (without weights: as architectures says).
  bool distilled = classify && cfg.distilled_head;
  if (classify && !ctx.no_weights() && !n.cls_classifier.empty())
    distilled = ctx.query_tensor(n.cls_classifier + ".weight").has_value();
  if (classify)
    for (const std::string& c : distilled ? std::vector<std::string>{n.cls_classifier, n.distillation_classifier}
                                          : std::vector<std::string>{n.classifier})
      check_classifier_rows(ctx, c, cfg.num_labels);
  Graph& g = ctx.graph();
  // float32 for every dtype (what transformers.js's image processors and ONNX Runtime callers
  // hand over), cast inside.
  Value px = g.input("pixel_values",
                     TensorType(DType::Float, {Dim("batch_size"), Dim(cfg.num_channels), Dim("height"), Dim("width")}));
  // CLIPVisionModelWithProjection: image_embeds in place of pooler_output, where the checkpoint
  // has the projection (without weights: where architectures names the class).
  const bool project = !classify && !n.projection.empty() &&
                       (ctx.no_weights() ? cfg.with_projection : ctx.query_tensor(n.projection + ".weight").has_value());
  const VisionOutputs out = vision_tower(g, spec, cfg, prefix, px, pooler || project);
  if (!classify) {
    g.output(out.last_hidden_state, "last_hidden_state");
    if (project) {
      Projection projection(n.projection, cfg.hidden_size, cfg.projection_dim);
      g.output(projection.linear->forward(g, out.pooler_output), "image_embeds");
    } else if (out.pooler_output.valid()) {
      g.output(out.pooler_output, "pooler_output");
    }
    return;
  }
  VisionHead head(spec, cfg, distilled);
  g.output(head.forward(g, out.last_hidden_state), "logits");
}

}  // namespace mobius::nn
