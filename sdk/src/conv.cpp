// conv.cpp - the convolutional parts of conv.hpp, written to diffusers' semantics (0.31:
// resnet.py ResnetBlock2D, upsampling.py Upsample2D, downsampling.py Downsample2D,
// attention_processor.py Attention with AttnProcessor, torch.nn.GroupNorm).
#include "mobius/sdk/conv.hpp"

#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw Error("[" + what + "] " + why);
}

// The channel dim of an NCHW (or N, C, ...) value: checked against `channels` when static.
void check_channels(const std::string& what, const std::string& path, Value x, int64_t channels,
                    int min_rank) {
  const TensorType t = x.type();
  if (!t.rank_known || t.rank() < min_rank)
    fail(what, "'" + path + "' needs an input of rank " + std::to_string(min_rank) +
                   (min_rank == 4 ? " (N, C, H, W)" : " or more (N, C, ...)") + ", got " +
                   x.name() + " " + t.str());
  const Dim& c = t.dims[1];
  if (c.is_static() && c.size != channels)
    fail(what, "'" + path + "' takes " + std::to_string(channels) + " channels, got " + x.name() +
                   " " + t.str());
}

// The size of one spatial dim after a convolution or pooling window: static when the input's is,
// the input's own (static or symbolic) when the window keeps the size, unknown otherwise.
Dim window_dim(const std::string& what, const Dim& in, int64_t kernel, int64_t stride,
               int64_t pad_total) {
  if (in.is_static()) {
    const int64_t padded = in.size + pad_total;
    if (padded < kernel)
      fail(what, "a spatial size of " + std::to_string(in.size) + " (padded to " +
                     std::to_string(padded) + ") is smaller than the " + std::to_string(kernel) +
                     "x" + std::to_string(kernel) + " window");
    return Dim((padded - kernel) / stride + 1);
  }
  if (stride == 1 && pad_total == kernel - 1) return in;
  return Dim();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// GroupNorm

GroupNorm::GroupNorm(int64_t c, int64_t g, double e) : channels(c), groups(g), eps(e) {
  if (c <= 0 || g <= 0 || c % g != 0)
    fail("group_norm", std::to_string(g) + " groups cannot divide " + std::to_string(c) +
                           " channels evenly");
  declare("weight", {c});
  declare("bias", {c});
}

Value GroupNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  check_channels("group_norm", path(), x, channels, 3);
  const int rank = x.rank();
  // [N, C, ...] -> [N, groups, C/groups * spatial]: one InstanceNormalization channel per group
  // (its statistics over the group's channels and positions, population variance as torch
  // computes it), unit scale and zero shift; the per-channel affine follows on the original
  // shape. All in float32, cast back after.
  Value xf = Cast(x, DType::Float);
  Value grouped = Reshape(xf, {0, groups, -1});
  Value ones = Constant(g, DType::Float, {groups}, std::vector<double>(static_cast<size_t>(groups), 1.0),
                        "ones");
  Value zeros = Constant(g, DType::Float, {groups}, std::vector<double>(static_cast<size_t>(groups), 0.0),
                         "zeros");
  Value n = g.node("InstanceNormalization", {grouped, ones, zeros}, {grouped.type()},
                   {Attr("epsilon", eps)})[0];
  TensorType ft = x.type();
  ft.dtype = DType::Float;
  Value y = Reshape(n, Shape(x), ft);
  std::vector<int64_t> spatial_axes;
  for (int i = 1; i < rank - 1; ++i) spatial_axes.push_back(i);
  Value w = param(g, "weight", DType::Float);
  Value b = param(g, "bias", DType::Float);
  if (!spatial_axes.empty()) {
    w = Unsqueeze(w, spatial_axes);  // [C, 1, 1]
    b = Unsqueeze(b, spatial_axes);
  }
  return Cast(Add(Mul(y, w), b), x.dtype());
}

// ---------------------------------------------------------------------------------------------
// Conv2d

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t st, int64_t pad, bool bias)
    : in_channels(in), out_channels(out), kernel(k), stride(st), padding(pad), has_bias(bias) {
  if (in <= 0 || out <= 0 || k <= 0 || st <= 0 || pad < 0)
    fail("conv", "Conv2d(" + std::to_string(in) + ", " + std::to_string(out) + ", kernel " +
                     std::to_string(k) + ", stride " + std::to_string(st) + ", padding " +
                     std::to_string(pad) + ") has a size that is not positive");
  declare("weight", {out, in, k, k});
  if (bias) declare("bias", {out});
}

Value Conv2d::forward(Graph& g, Value x) const {
  return forward(g, x, {padding, padding, padding, padding});
}

Value Conv2d::forward(Graph& g, Value x, const std::vector<int64_t>& pads) const {
  ScopeGuard s(g, path());
  check_channels("conv", path(), x, in_channels, 4);
  if (pads.size() != 4)
    fail("conv", "'" + path() + "': pads are {top, left, bottom, right}, got " +
                     std::to_string(pads.size()) + " values");
  for (int64_t p : pads)
    if (p < 0) fail("conv", "'" + path() + "': negative padding");
  if (!is_floating(x.dtype())) fail("conv", "'" + path() + "' needs a floating input, got " + x.type().str());
  // The weight [out, in, k, k] as stored: Conv reads that layout. Stored in the input's dtype
  // (converted while the weights stream), so no Cast node runs per call.
  std::vector<Value> inputs{x, param(g, "weight", x.dtype())};
  if (has_bias) inputs.push_back(param(g, "bias", x.dtype()));
  const TensorType t = x.type();
  TensorType out(x.dtype(), {t.dims[0], Dim(out_channels),
                             window_dim("conv", t.dims[2], kernel, stride, pads[0] + pads[2]),
                             window_dim("conv", t.dims[3], kernel, stride, pads[1] + pads[3])});
  return g.node("Conv", inputs, {out},
                {Attr("kernel_shape", {kernel, kernel}), Attr("strides", {stride, stride}),
                 Attr("pads", pads), Attr("dilations", {int64_t{1}, int64_t{1}}),
                 Attr("group", int64_t{1})})[0];
}

// ---------------------------------------------------------------------------------------------
// Upsample2D / Downsample2D

Upsample2D::Upsample2D(int64_t c, bool conv, int64_t out)
    : channels(c), out_channels(out > 0 ? out : c), use_conv(conv) {
  if (use_conv) add<Conv2d>("conv", channels, out_channels, 3, 1, 1);
  else if (out_channels != channels)
    fail("upsample", "without a conv the channel count cannot change (" + std::to_string(channels) +
                         " -> " + std::to_string(out_channels) + ")");
}

Value Upsample2D::forward(Graph& g, Value x, Value size) const {
  Value y;
  {
    ScopeGuard s(g, path());
    check_channels("upsample", path(), x, channels, 4);
    // F.interpolate(mode="nearest") reads source index floor(dst * in / out): ONNX Resize's
    // nearest mode with asymmetric coordinates and floor rounding is the same map.
    const std::vector<Attr> attrs{Attr("mode", "nearest"),
                                  Attr("coordinate_transformation_mode", "asymmetric"),
                                  Attr("nearest_mode", "floor")};
    TensorType t = x.type();
    if (size.valid()) {
      if (size.dtype() != DType::Int64 || size.rank() != 1 || !(size.dim(0) == Dim(2)))
        fail("upsample", "'" + path() + "': the output size is an int64 [2] (height, width), got " +
                             size.type().str());
      Value sizes = Concat({Shape(x, 0, 2), size}, 0);
      t.dims[2] = t.dims[3] = Dim();
      y = g.node("Resize", {x, Value(), Value(), sizes}, {t}, attrs)[0];
    } else {
      Value scales = Constant(g, DType::Float, {4}, {1.0, 1.0, 2.0, 2.0}, "scales");
      for (int i = 2; i < 4; ++i) t.dims[i] = t.dims[i].is_static() ? Dim(2 * t.dims[i].size) : Dim();
      y = g.node("Resize", {x, Value(), scales}, {t}, attrs)[0];
    }
  }
  if (use_conv) y = static_cast<const Conv2d*>(child("conv"))->forward(g, y);
  return y;
}

Downsample2D::Downsample2D(int64_t c, bool conv, int64_t pad, int64_t out)
    : channels(c), out_channels(out > 0 ? out : c), use_conv(conv), padding(pad) {
  if (use_conv) {
    add<Conv2d>("conv", channels, out_channels, 3, 2, padding);
  } else if (out_channels != channels) {
    fail("downsample", "without a conv the channel count cannot change (" +
                           std::to_string(channels) + " -> " + std::to_string(out_channels) + ")");
  }
}

Value Downsample2D::forward(Graph& g, Value x) const {
  if (use_conv) {
    const auto* conv = static_cast<const Conv2d*>(child("conv"));
    // padding 0 (the VAE's encoder): F.pad(x, (0, 1, 0, 1)) first, the conv's own padding
    // taking the right column and bottom row of zeros.
    if (padding == 0) return conv->forward(g, x, {0, 0, 1, 1});
    return conv->forward(g, x);
  }
  ScopeGuard s(g, path());
  check_channels("downsample", path(), x, channels, 4);
  TensorType t = x.type();
  for (int i = 2; i < 4; ++i) t.dims[i] = window_dim("downsample", t.dims[i], 2, 2, 0);
  return g.node("AveragePool", {x}, {t},
                {Attr("kernel_shape", {int64_t{2}, int64_t{2}}),
                 Attr("strides", {int64_t{2}, int64_t{2}})})[0];
}

// ---------------------------------------------------------------------------------------------
// ResnetBlock2D

ResnetBlock2D::ResnetBlock2D(int64_t in, int64_t out, int64_t temb, int64_t groups, double eps,
                             double osf)
    : in_channels(in), out_channels(out > 0 ? out : in), temb_channels(temb),
      output_scale_factor(osf) {
  if (osf == 0.0 || !std::isfinite(osf)) fail("resnet", "output_scale_factor must be finite and non-zero");
  add<GroupNorm>("norm1", in_channels, groups, eps);
  add<Conv2d>("conv1", in_channels, out_channels, 3, 1, 1);
  if (temb_channels > 0) add<Linear>("time_emb_proj", temb_channels, out_channels, true);
  add<GroupNorm>("norm2", out_channels, groups, eps);
  add<Conv2d>("conv2", out_channels, out_channels, 3, 1, 1);
  if (in_channels != out_channels) add<Conv2d>("conv_shortcut", in_channels, out_channels, 1, 1, 0);
}

Value ResnetBlock2D::forward(Graph& g, Value x, Value temb) const {
  if (temb_channels > 0 && !temb.valid())
    fail("resnet", "'" + path() + "' takes a time embedding of " + std::to_string(temb_channels) +
                       " channels; none was given");
  auto norm = [&](const char* n) -> const GroupNorm& { return *static_cast<const GroupNorm*>(child(n)); };
  auto conv = [&](const char* n) -> const Conv2d& { return *static_cast<const Conv2d*>(child(n)); };
  Value h = activation("silu", norm("norm1").forward(g, x));
  h = conv("conv1").forward(g, h);
  if (temb_channels > 0) {
    const auto& proj = *static_cast<const Linear*>(child("time_emb_proj"));
    Value t = proj.forward(g, activation("silu", Cast(temb, h.dtype())));  // [N, out]
    ScopeGuard s(g, path());
    h = Add(h, Unsqueeze(t, {2, 3}));
  }
  h = activation("silu", norm("norm2").forward(g, h));
  h = conv("conv2").forward(g, h);
  Value shortcut = in_channels != out_channels ? conv("conv_shortcut").forward(g, x) : x;
  ScopeGuard s(g, path());
  Value y = Add(shortcut, h);
  if (output_scale_factor != 1.0) y = Div(y, ScalarLike(y, output_scale_factor));
  return y;
}

// ---------------------------------------------------------------------------------------------
// SpatialSelfAttention

namespace {
// The linears of diffusers' Attention and the names of the deprecated attention block that old
// VAE checkpoints still carry (diffusers renames them when it loads such a checkpoint).
const std::pair<const char*, const char*> kLegacyNames[] = {
    {"to_q", "query"}, {"to_k", "key"}, {"to_v", "value"}, {"to_out.0", "proj_attn"}};
}  // namespace

SpatialSelfAttention::SpatialSelfAttention(int64_t c, int64_t h, int64_t groups, double eps,
                                           double rescale)
    : channels(c), heads(h), rescale_output_factor(rescale) {
  if (c <= 0 || h <= 0 || c % h != 0)
    fail("attention", std::to_string(h) + " heads cannot divide " + std::to_string(c) + " channels");
  if (rescale == 0.0 || !std::isfinite(rescale))
    fail("attention", "rescale_output_factor must be finite and non-zero");
  add<GroupNorm>("group_norm", c, groups, eps);
  for (const auto& [name, legacy] : kLegacyNames) {
    (void)legacy;
    add<Linear>(name, c, c, true);
  }
}

Value SpatialSelfAttention::forward(Graph& g, Value x) const {
  BuildContext& ctx = g.context();
  // The checkpoint's spelling: the current names unless only the deprecated ones are there
  // (without a checkpoint, --no-weights, the current names).
  if (!ctx.query_tensor(full_name("to_q.weight")) && ctx.query_tensor(full_name("query.weight"))) {
    for (const auto& [name, legacy] : kLegacyNames) {
      Module* l = child(name);
      l->tie("weight", full_name(std::string(legacy) + ".weight"));
      l->tie("bias", full_name(std::string(legacy) + ".bias"));
    }
  }
  check_channels("attention", path(), x, channels, 3);
  const auto& to_q = *static_cast<const Linear*>(child("to_q"));
  const auto& to_k = *static_cast<const Linear*>(child("to_k"));
  const auto& to_v = *static_cast<const Linear*>(child("to_v"));
  const auto& to_out = *static_cast<const Linear*>(child("to_out.0"));
  Value h = static_cast<const GroupNorm*>(child("group_norm"))->forward(g, x);
  const int64_t d = channels / heads;
  std::vector<Value> qkv;
  Value seq;
  {
    ScopeGuard s(g, path());
    seq = Transpose(Reshape(h, {0, channels, -1}), {0, 2, 1});  // [N, HW, C]
    // q, k and v read the same positions: one MatMul over their weights side by side.
    qkv = packed_linears(g, seq, {&to_q, &to_k, &to_v}, full_name("to_qkv"));
  }
  Value o;
  {
    ScopeGuard s(g, path());
    Value q = qkv[0], k = qkv[1], v = qkv[2];
    if (heads == 1) {
      k = Transpose(k, {0, 2, 1});  // [N, C, HW]
    } else {
      q = Transpose(Reshape(q, {0, 0, heads, d}), {0, 2, 1, 3});  // [N, heads, HW, d]
      k = Transpose(Reshape(k, {0, 0, heads, d}), {0, 2, 3, 1});  // [N, heads, d, HW]
      v = Transpose(Reshape(v, {0, 0, heads, d}), {0, 2, 1, 3});
    }
    // baddbmm(alpha = d^-0.5), the softmax upcast to float32 (upcast_softmax), then back. The
    // scale is applied to q: the product never holds the unscaled sums, which a float16 graph
    // could overflow where torch's scaled GEMM does not.
    q = Mul(q, ScalarLike(q, 1.0 / std::sqrt(static_cast<double>(d))));
    Value scores = MatMul(q, k);
    Value probs = Cast(Softmax(Cast(scores, DType::Float), -1), q.dtype());
    o = MatMul(probs, v);
    if (heads > 1) o = Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, channels});
  }
  o = to_out.forward(g, o);  // [N, HW, C]
  ScopeGuard s(g, path());
  o = Reshape(Transpose(o, {0, 2, 1}), Shape(x), x.type());
  Value y = Add(o, x);  // residual_connection
  if (rescale_output_factor != 1.0) y = Div(y, ScalarLike(y, rescale_output_factor));
  return y;
}

}  // namespace mobius::nn
