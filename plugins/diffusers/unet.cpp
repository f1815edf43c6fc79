// unet.cpp - diffusers' UNet2DConditionModel (Stable Diffusion 1.x / 2.x) as one graph:
// (sample, timestep, encoder_hidden_states) -> out_sample, the noise (or v) prediction.
//
// Semantics of diffusers 0.31: models/unets/unet_2d_condition.py (the model, the skip
// connections), unets/unet_2d_blocks.py (CrossAttnDownBlock2D, DownBlock2D,
// UNetMidBlock2DCrossAttn, UpBlock2D, CrossAttnUpBlock2D), embeddings.py (the sinusoidal timestep
// embedding and TimestepEmbedding), transformers/transformer_2d.py (Transformer2DModel),
// attention.py (BasicTransformerBlock, the GEGLU feed-forward) and attention_processor.py
// (Attention with AttnProcessor). The convolutional parts (GroupNorm, Conv2d, Upsample2D,
// Downsample2D, ResnetBlock2D) are the SDK's (mobius/sdk/conv.hpp); the config is read, and the
// skip-connection channels worked out, in unet_config.cpp.
//
// Dtypes: activations in the build's activation dtype; group-norm statistics, the timestep
// embedding's sin/cos, and the attention softmax in float32 (and the attention scores too when
// the config says upcast_attention). With --ops ort the attention is ONNX Runtime's
// MultiHeadAttention; int4/int8 builds quantize every Linear (the SDK's MatMulNBits), never the
// convolutions.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "diffusers.hpp"
#include "mobius/sdk/conv.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "unet_config.hpp"

namespace mobius::diffusers {

namespace {

using namespace mobius::op;
using nlohmann::json;

Value cast_to(Value x, DType t) { return x.dtype() == t ? x : Cast(x, t); }

// torch.nn.LayerNorm in the activation dtype, float32 statistics.
class LayerNorm : public nn::LayerNorm {
 public:
  LayerNorm(int64_t dim, double eps) : nn::LayerNorm(dim, eps, Compute::InputDtype) {}
};

// diffusers' Attention with AttnProcessor: to_q / to_k / to_v without bias, softmax(q k^T *
// head_dim^-0.5) v per head, to_out.0 with bias. Self-attention (attn1) when context_dim is 0:
// q, k and v are one packed MatMul; cross-attention (attn2) packs k and v.
class Attention : public nn::Module {
 public:
  Attention(int64_t query_dim, int64_t context_dim, int64_t heads, int64_t head_dim, bool upcast)
      : heads(heads), head_dim(head_dim), upcast(upcast), self(context_dim == 0) {
    const int64_t inner = heads * head_dim;
    const int64_t kv_in = self ? query_dim : context_dim;
    to_q = &add<nn::Linear>("to_q", query_dim, inner, false);
    to_k = &add<nn::Linear>("to_k", kv_in, inner, false);
    to_v = &add<nn::Linear>("to_v", kv_in, inner, false);
    to_out = &add<nn::Linear>("to_out.0", inner, query_dim, true);
  }

  // x [batch, tokens, query_dim]; context [batch, sequence, context_dim] (ignored for attn1).
  Value forward(Graph& g, Value x, Value context) const {
    ScopeGuard s(g, path());
    Value q, k, v;
    if (self) {
      auto qkv = nn::packed_linears(g, x, {to_q, to_k, to_v}, full_name("to_qkv"));
      q = qkv[0], k = qkv[1], v = qkv[2];
    } else {
      q = to_q->forward(g, x);
      auto kv = nn::packed_linears(g, context, {to_k, to_v}, full_name("to_kv"));
      k = kv[0], v = kv[1];
    }
    Value o = nn::ort_ops(g.context()) ? fused(g, q, k, v) : spelled_out(q, k, v);
    return to_out->forward(g, o);
  }

  int64_t heads, head_dim;
  bool upcast, self;

 private:
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

  // The attention in standard operators: q [b, s, h*d], k and v [b, l, h*d] -> [b, s, h*d].
  Value spelled_out(Value q, Value k, Value v) const {
    const DType act = q.dtype();
    Value qh = Transpose(Reshape(q, {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, s, d]
    Value kt = Transpose(Reshape(k, {0, 0, heads, head_dim}), {0, 2, 3, 1});  // [b, h, d, l]
    Value vh = Transpose(Reshape(v, {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, l, d]
    // get_attention_scores: upcast_attention computes q k^T in float32; the softmax is computed
    // in float32 either way here (diffusers' f16 softmax accumulates in float32 too).
    if (upcast) {
      qh = cast_to(qh, DType::Float);
      kt = cast_to(kt, DType::Float);
    }
    Value scores = MatMul(qh, kt);
    scores = Mul(scores, ScalarLike(scores, scale()));
    Value probs = cast_to(Softmax(cast_to(scores, DType::Float), -1), act);
    Value o = MatMul(probs, vh);                                               // [b, h, s, d]
    return Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});     // [b, s, h*d]
  }

  // ONNX Runtime's MultiHeadAttention (com.microsoft): the same product; an upcast attention of
  // a float16 model runs it in float32.
  Value fused(Graph& g, Value q, Value k, Value v) const {
    const DType act = q.dtype();
    const DType dt = upcast ? DType::Float : act;
    q = cast_to(q, dt), k = cast_to(k, dt), v = cast_to(v, dt);
    TensorType t = q.type();
    Value o = g.node("MultiHeadAttention", {q, k, v}, {t},
                     {Attr("num_heads", heads), Attr("scale", scale())}, "com.microsoft")[0];
    return cast_to(o, act);
  }

  const nn::Linear* to_q;
  const nn::Linear* to_k;
  const nn::Linear* to_v;
  const nn::Linear* to_out;
};

// FeedForward with GEGLU: net.0.proj to 2 * inner (inner = 4 * dim), its first half times the
// exact (erf) GELU of its second half, net.2 back to dim.
class GEGLUFeedForward : public nn::Module {
 public:
  explicit GEGLUFeedForward(int64_t dim) : inner(4 * dim) {
    proj = &add<nn::Linear>("net.0.proj", dim, 2 * inner, true);
    out = &add<nn::Linear>("net.2", inner, dim, true);
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    auto parts = Split(proj->forward(g, x), {inner, inner}, -1);
    return out->forward(g, Mul(parts[0], nn::activation("gelu", parts[1])));
  }
  int64_t inner;

 private:
  const nn::Linear* proj;
  const nn::Linear* out;
};

// BasicTransformerBlock (norm_type layer_norm, eps 1e-5): self-attention, cross-attention on
// encoder_hidden_states, GEGLU feed-forward, each pre-normed and added to its input.
class BasicTransformerBlock : public nn::Module {
 public:
  BasicTransformerBlock(int64_t dim, int64_t heads, int64_t head_dim, int64_t cross_dim, bool upcast) {
    norm1 = &add<LayerNorm>("norm1", dim, 1e-5);
    attn1 = &add<Attention>("attn1", dim, 0, heads, head_dim, upcast);
    norm2 = &add<LayerNorm>("norm2", dim, 1e-5);
    attn2 = &add<Attention>("attn2", dim, cross_dim, heads, head_dim, upcast);
    norm3 = &add<LayerNorm>("norm3", dim, 1e-5);
    ff = &add<GEGLUFeedForward>("ff", dim);
  }
  Value forward(Graph& g, Value h, Value context) const {
    ScopeGuard s(g, path());
    h = Add(attn1->forward(g, norm1->forward(g, h), Value()), h);
    h = Add(attn2->forward(g, norm2->forward(g, h), context), h);
    return Add(ff->forward(g, norm3->forward(g, h)), h);
  }

 private:
  const LayerNorm *norm1, *norm2, *norm3;
  const Attention *attn1, *attn2;
  const GEGLUFeedForward* ff;
};

// [b, c, h, w] -> [b, h*w, c] (permute(0, 2, 3, 1).reshape(b, h*w, c)).
Value to_tokens(Value x, int64_t channels) {
  return Transpose(Reshape(x, {0, channels, -1}), {0, 2, 1});
}
// [b, h*w, c] -> [b, c, h, w] with `like`'s batch, height and width.
Value to_image(Graph& g, Value x, int64_t channels, Value like) {
  Value shape = Concat({Shape(like, 0, 1), Ints(g, {channels}), Shape(like, 2, 4)}, 0);
  return Reshape(Transpose(x, {0, 2, 1}), shape,
                 TensorType(x.dtype(), {like.dim(0), Dim(channels), like.dim(2), like.dim(3)}));
}

// Transformer2DModel over continuous inputs: GroupNorm (eps 1e-6), proj_in (a 1x1 Conv2d before
// flattening, or a Linear after it with use_linear_projection), the transformer blocks, proj_out
// (the reverse order), plus the input.
class Transformer2D : public nn::Module {
 public:
  Transformer2D(int64_t channels, int64_t heads, int64_t layers, int64_t cross_dim, int64_t groups,
                bool linear, bool upcast)
      : channels(channels), inner(heads * UNetConfig::head_dim(channels, heads)), linear(linear) {
    norm = &add<nn::GroupNorm>("norm", channels, groups, 1e-6);
    if (linear)
      proj_in_linear = &add<nn::Linear>("proj_in", channels, inner, true);
    else
      proj_in_conv = &add<nn::Conv2d>("proj_in", channels, inner, 1, 1, 0, true);
    for (int64_t i = 0; i < layers; ++i)
      blocks.push_back(&add<BasicTransformerBlock>("transformer_blocks." + std::to_string(i), inner,
                                                   heads, UNetConfig::head_dim(channels, heads),
                                                   cross_dim, upcast));
    if (linear)
      proj_out_linear = &add<nn::Linear>("proj_out", inner, channels, true);
    else
      proj_out_conv = &add<nn::Conv2d>("proj_out", inner, channels, 1, 1, 0, true);
  }

  Value forward(Graph& g, Value x, Value context) const {
    ScopeGuard s(g, path());
    Value h = norm->forward(g, x);
    if (linear) {
      h = proj_in_linear->forward(g, to_tokens(h, channels));
    } else {
      h = to_tokens(proj_in_conv->forward(g, h), inner);
    }
    for (const BasicTransformerBlock* b : blocks) h = b->forward(g, h, context);
    if (linear) {
      h = to_image(g, proj_out_linear->forward(g, h), channels, x);
    } else {
      h = proj_out_conv->forward(g, to_image(g, h, inner, x));
    }
    return Add(h, x);
  }

  int64_t channels, inner;
  bool linear;

 private:
  const nn::GroupNorm* norm;
  const nn::Linear* proj_in_linear = nullptr;
  const nn::Linear* proj_out_linear = nullptr;
  const nn::Conv2d* proj_in_conv = nullptr;
  const nn::Conv2d* proj_out_conv = nullptr;
  std::vector<const BasicTransformerBlock*> blocks;
};

class TimestepEmbedding : public nn::Module {
 public:
  TimestepEmbedding(int64_t in, int64_t dim) {
    linear_1 = &add<nn::Linear>("linear_1", in, dim, true);
    linear_2 = &add<nn::Linear>("linear_2", dim, dim, true);
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    return linear_2->forward(g, nn::activation("silu", linear_1->forward(g, x)));
  }

 private:
  const nn::Linear* linear_1;
  const nn::Linear* linear_2;
};

// get_timestep_embedding(timesteps, dim, flip_sin_to_cos, downscale_freq_shift): float32
// [batch, dim]. The frequencies exp(-ln(10000) * i / (dim/2 - shift)) are computed here in
// float32 arithmetic as torch computes them; t * freq, sin and cos in the graph, in float32.
Value timestep_embedding(Graph& g, Value timesteps, int64_t dim, bool flip, double shift) {
  ScopeGuard s(g, "time_proj");
  const int64_t half = dim / 2;
  std::vector<double> freqs(static_cast<size_t>(half));
  const auto neg_log = static_cast<float>(-std::log(10000.0));
  const auto denom = static_cast<float>(static_cast<double>(half) - shift);
  for (int64_t i = 0; i < half; ++i) {
    const float e = (neg_log * static_cast<float>(i)) / denom;
    freqs[static_cast<size_t>(i)] = static_cast<double>(std::exp(e));
  }
  Value f = Constant(g, DType::Float, {half}, freqs, "freqs");
  Value args = Mul(Unsqueeze(Cast(timesteps, DType::Float), {1}), f);  // [batch, half]
  Value sin = Sin(args), cos = Cos(args);
  Value emb = flip ? Concat({cos, sin}, -1) : Concat({sin, cos}, -1);
  if (dim % 2 == 1) {
    Value zeros = ConstantOfShape(Concat({Shape(timesteps), Ints(g, {1})}, 0), DType::Float, 0.0, 2);
    emb = Concat({emb, zeros}, -1);
  }
  return emb;
}

class DownBlock : public nn::Module {
 public:
  DownBlock(const DownBlockPlan& p, const UNetConfig& c) : plan(p) {
    for (int64_t j = 0; j < p.layers; ++j) {
      const std::string i = std::to_string(j);
      resnets.push_back(&add<nn::ResnetBlock2D>("resnets." + i, j == 0 ? p.in_channels : p.out_channels,
                                                p.out_channels, c.time_embed_dim, c.norm_num_groups,
                                                c.norm_eps, 1.0));
      if (p.cross_attention)
        attentions.push_back(&add<Transformer2D>("attentions." + i, p.out_channels, p.heads,
                                                 p.transformer_layers, c.cross_attention_dim,
                                                 c.norm_num_groups, c.use_linear_projection,
                                                 c.upcast_attention));
    }
    if (p.downsample)
      downsampler = &add<nn::Downsample2D>("downsamplers.0", p.out_channels, true,
                                           c.downsample_padding, p.out_channels);
  }
  Value forward(Graph& g, Value h, Value temb, Value context, std::vector<Value>& skips) const {
    ScopeGuard s(g, path());
    for (size_t j = 0; j < resnets.size(); ++j) {
      h = resnets[j]->forward(g, h, temb);
      if (plan.cross_attention) h = attentions[j]->forward(g, h, context);
      skips.push_back(h);
    }
    if (downsampler) {
      h = downsampler->forward(g, h);
      skips.push_back(h);
    }
    return h;
  }

 private:
  DownBlockPlan plan;
  std::vector<const nn::ResnetBlock2D*> resnets;
  std::vector<const Transformer2D*> attentions;
  const nn::Downsample2D* downsampler = nullptr;
};

class UpBlock : public nn::Module {
 public:
  UpBlock(const UpBlockPlan& p, const UNetConfig& c) : plan(p) {
    for (size_t j = 0; j < p.resnet_in_channels.size(); ++j) {
      const std::string i = std::to_string(j);
      resnets.push_back(&add<nn::ResnetBlock2D>("resnets." + i, p.resnet_in_channels[j],
                                                p.out_channels, c.time_embed_dim,
                                                c.norm_num_groups, c.norm_eps, 1.0));
      if (p.cross_attention)
        attentions.push_back(&add<Transformer2D>("attentions." + i, p.out_channels, p.heads,
                                                 p.transformer_layers, c.cross_attention_dim,
                                                 c.norm_num_groups, c.use_linear_projection,
                                                 c.upcast_attention));
    }
    if (p.upsample) upsampler = &add<nn::Upsample2D>("upsamplers.0", p.out_channels, true, p.out_channels);
  }
  Value forward(Graph& g, Value h, Value temb, Value context, std::vector<Value>& skips) const {
    ScopeGuard s(g, path());
    for (size_t j = 0; j < resnets.size(); ++j) {
      Value skip = skips.back();
      skips.pop_back();
      h = resnets[j]->forward(g, Concat({h, skip}, 1), temb);
      if (plan.cross_attention) h = attentions[j]->forward(g, h, context);
    }
    // UNet2DConditionModel.forward's upsample_size: the size of the skip connection the next
    // block concatenates first. It is twice the input when the latent's height and width are
    // multiples of 2^upsamplers, and what keeps an odd size lined up otherwise.
    if (upsampler) h = upsampler->forward(g, h, Shape(skips.back(), 2, 4));
    return h;
  }

 private:
  UpBlockPlan plan;
  std::vector<const nn::ResnetBlock2D*> resnets;
  std::vector<const Transformer2D*> attentions;
  const nn::Upsample2D* upsampler = nullptr;
};

class MidBlock : public nn::Module {
 public:
  explicit MidBlock(const UNetConfig& c) {
    const size_t last = c.blocks() - 1;
    const int64_t ch = c.block_out_channels[last];
    resnet0 = &add<nn::ResnetBlock2D>("resnets.0", ch, ch, c.time_embed_dim, c.norm_num_groups,
                                      c.norm_eps, c.mid_block_scale_factor);
    attention = &add<Transformer2D>("attentions.0", ch, c.attention_heads[last],
                                    c.transformer_layers_per_block[last], c.cross_attention_dim,
                                    c.norm_num_groups, c.use_linear_projection, c.upcast_attention);
    resnet1 = &add<nn::ResnetBlock2D>("resnets.1", ch, ch, c.time_embed_dim, c.norm_num_groups,
                                      c.norm_eps, c.mid_block_scale_factor);
  }
  Value forward(Graph& g, Value h, Value temb, Value context) const {
    ScopeGuard s(g, path());
    h = resnet0->forward(g, h, temb);
    h = attention->forward(g, h, context);
    return resnet1->forward(g, h, temb);
  }

 private:
  const nn::ResnetBlock2D* resnet0;
  const Transformer2D* attention;
  const nn::ResnetBlock2D* resnet1;
};

class UNet2DConditionModel : public nn::Module {
 public:
  explicit UNet2DConditionModel(const UNetConfig& c) : cfg(c) {
    const UNetPlan plan = plan_unet(c);
    const int64_t c0 = c.block_out_channels[0];
    conv_in = &add<nn::Conv2d>("conv_in", c.in_channels, c0, c.conv_in_kernel, 1,
                               (c.conv_in_kernel - 1) / 2, true);
    time_embedding = &add<TimestepEmbedding>("time_embedding", c0, c.time_embed_dim);
    for (size_t i = 0; i < plan.down.size(); ++i)
      down.push_back(&add<DownBlock>("down_blocks." + std::to_string(i), plan.down[i], c));
    if (c.mid_block) mid = &add<MidBlock>("mid_block", c);
    for (size_t i = 0; i < plan.up.size(); ++i)
      up.push_back(&add<UpBlock>("up_blocks." + std::to_string(i), plan.up[i], c));
    conv_norm_out = &add<nn::GroupNorm>("conv_norm_out", c0, c.norm_num_groups, c.norm_eps);
    conv_out = &add<nn::Conv2d>("conv_out", c0, c.out_channels, c.conv_out_kernel, 1,
                                (c.conv_out_kernel - 1) / 2, true);
  }

  // sample [b, in, h, w], timesteps int64 [b] (or [1]), context [b, seq, cross_attention_dim].
  Value forward(Graph& g, Value sample, Value timesteps, Value context) const {
    const DType act = sample.dtype();
    if (cfg.center_input_sample)
      sample = Sub(Mul(sample, ScalarLike(sample, 2.0)), ScalarLike(sample, 1.0));
    // timesteps.expand(sample.shape[0]): one timestep for the whole batch also works.
    Value t = Expand(timesteps, Shape(sample, 0, 1), TensorType(DType::Int64, {sample.dim(0)}));
    Value t_emb = timestep_embedding(g, t, cfg.block_out_channels[0], cfg.flip_sin_to_cos, cfg.freq_shift);
    Value emb = time_embedding->forward(g, cast_to(t_emb, act));

    Value h = conv_in->forward(g, sample);
    std::vector<Value> skips{h};
    for (const DownBlock* b : down) h = b->forward(g, h, emb, context, skips);
    if (mid) h = mid->forward(g, h, emb, context);
    for (const UpBlock* b : up) h = b->forward(g, h, emb, context, skips);
    h = nn::activation("silu", conv_norm_out->forward(g, h));
    return conv_out->forward(g, h);
  }

 private:
  UNetConfig cfg;
  const nn::Conv2d* conv_in;
  const TimestepEmbedding* time_embedding;
  std::vector<const DownBlock*> down;
  const MidBlock* mid = nullptr;
  std::vector<const UpBlock*> up;
  const nn::GroupNorm* conv_norm_out;
  const nn::Conv2d* conv_out;
};

json parse(const json& raw) { return json(read_unet_config(raw)); }

void build(BuildContext& ctx, const json& j) {
  const UNetConfig cfg = j.get<UNetConfig>();
  const UNet2DConditionModel model(cfg);
  Graph& g = ctx.graph();
  const DType act = nn::activation_dtype(ctx);
  Value sample = g.input("sample", TensorType(act, {Dim("batch_size"), Dim(cfg.in_channels),
                                                   Dim("height"), Dim("width")}));
  Value timestep = g.input("timestep", TensorType(DType::Int64, {Dim("batch_size")}));
  Value context = g.input("encoder_hidden_states",
                          TensorType(act, {Dim("batch_size"), Dim("sequence_length"),
                                           Dim(cfg.cross_attention_dim)}));
  Value out = model.forward(g, sample, timestep, context);
  // The output as its consumers see it: the sample's batch, height and width.
  const TensorType out_type(act, {Dim("batch_size"), Dim(cfg.out_channels), Dim("height"), Dim("width")});
  if (!(out.type().str() == out_type.str())) out = g.node("Identity", {out}, {out_type})[0];
  g.output(out, "out_sample");
}

}  // namespace

void register_unet(PluginRegistrar& r) { r.add("UNet2DConditionModel", "image-unet", parse, build); }

}  // namespace mobius::diffusers
