// speech_encoder.cpp - CTC speech encoders built from a spec (mobius/sdk/speech_encoder.hpp), to
// transformers 5's modeling_wav2vec2.py, modeling_hubert.py, modeling_wavlm.py and
// modeling_data2vec_audio.py.
#include "mobius/sdk/speech_encoder.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/conv.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"

namespace mobius::nn {

using namespace mobius::op;

namespace {

// torch.nn.LayerNorm's, GroupNorm's and BatchNorm1d's default eps: the feature encoder's norms,
// Data2VecAudio's positional norms and HuBERT's batch norm are built without the config's.
constexpr double kTorchNormEps = 1e-5;

// ---------------------------------------------------------------------------------------------
// The feature encoder and the positional embedding

// One layer of the feature encoder (Wav2Vec2NoLayerNormConvLayer, ...LayerNormConvLayer,
// ...GroupNormConvLayer; Data2VecAudioConvLayer): conv, the norm where the layer has one, the
// activation, over [batch, channels, frames].
class ConvLayer : public Module {
 public:
  ConvLayer(const SpeechEncoderConfig& c, size_t i, bool norm) : act(c.feat_extract_activation) {
    const int64_t in = i == 0 ? 1 : c.conv_dim[i - 1], out = c.conv_dim[i];
    conv = &add<Conv1d>("conv", in, out, c.conv_kernel[i], c.conv_stride[i], 1, c.conv_bias);
    if (!norm) return;
    if (c.feat_extract_norm == "group")  // GroupNorm(num_groups=out, num_channels=out): per channel
      group_norm = &add<GroupNorm>("layer_norm", out, out, kTorchNormEps);
    else  // LayerNorm over the channels of each frame
      layer_norm = &add<LayerNorm>("layer_norm", out, kTorchNormEps);
  }
  Value forward(Graph& g, Value x) const {
    Value h = conv->forward(g, x);
    if (group_norm) h = group_norm->forward(g, h);
    if (layer_norm) {
      h = layer_norm->forward(g, Transpose(h, {0, 2, 1}));
      ScopeGuard s(g, path());
      return Transpose(encoder_activation(g, act, h), {0, 2, 1});
    }
    ScopeGuard s(g, path());
    return encoder_activation(g, act, h);
  }
  std::string act;
  const Conv1d* conv;
  const GroupNorm* group_norm = nullptr;
  const LayerNorm* layer_norm = nullptr;
};

// torch.nn.BatchNorm1d(channels) in inference over x [batch, channels, frames]: the running
// statistics, weight and bias (float32), as ONNX BatchNormalization computes it.
class BatchNorm1d : public Module {
 public:
  explicit BatchNorm1d(int64_t channels) {
    for (const char* p : {"weight", "bias", "running_mean", "running_var"}) declare(p, {channels}, DType::Float);
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    Value xf = Cast(x, DType::Float);
    Value y = g.node("BatchNormalization",
                     {xf, param(g, "weight"), param(g, "bias"), param(g, "running_mean"), param(g, "running_var")},
                     {xf.type()}, {Attr("epsilon", kTorchNormEps)})[0];
    return Cast(y, x.dtype());
  }
};

// The initializer `name` of `dtype` [out, in_per_group, kernel]: torch's weight norm over dim 2
// (nn.utils.parametrizations.weight_norm(conv, dim=2)), w = g * v / ||v||, the norm of each tap
// over every output and input channel, made while the weights stream from the checkpoint's
// magnitude g [1, 1, kernel] and direction v.
Value weight_normed(Graph& g, const std::string& name, const std::string& magnitude, const std::string& direction,
                    const std::vector<int64_t>& dims, DType dtype) {
  BuildContext& ctx = g.context();
  const int64_t kernel = dims.back();
  Value w = ctx.graph().initializer(name, TensorType(dtype, {Dim(dims[0]), Dim(dims[1]), Dim(dims[2])}));
  ctx.plan_transformed(name, {magnitude, direction}, [kernel, name](const std::vector<HostTensor>& in, float* out,
                                                                    size_t n) {
    const HostTensor& gt = in.at(0);
    const HostTensor& vt = in.at(1);
    const auto k = static_cast<size_t>(kernel);
    if (gt.numel != k || vt.numel != n)
      throw Error("[weight_norm] '" + name + "': the magnitude holds " + std::to_string(gt.numel) +
                  " values and the direction " + std::to_string(vt.numel) + "; the weight takes " +
                  std::to_string(k) + " and " + std::to_string(n));
    std::vector<double> norm(k, 0.0);
    for (size_t i = 0; i < n; ++i) norm[i % k] += static_cast<double>(vt.data[i]) * vt.data[i];
    for (double& v : norm) v = std::sqrt(v);
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(static_cast<double>(gt.data[i % k]) * vt.data[i] / norm[i % k]);
  });
  return w;
}

// The positional embedding of every frame, [batch, frames, hidden] in h's dtype: one
// convolution (Wav2Vec2PositionalConvEmbedding: weight-normed, or after a batch norm for
// HuBERT's conv_pos_batch_norm), or Data2VecAudio's stack of convolutions each followed by a
// parameter-free LayerNorm; the activation after each.
class PositionalConv : public Module {
 public:
  PositionalConv(const SpeechEncoderConfig& c, const SpeechEncoderSpec& s)
      : act(c.feat_extract_activation), hidden(c.hidden_size) {
    const int64_t h = c.hidden_size, groups = c.num_conv_pos_embedding_groups;
    if (s.positions == SpeechEncoderSpec::Positions::ConvLayers) {
      kernel = c.conv_pos_kernel_size;
      for (int64_t i = 0; i < c.num_conv_pos_embeddings; ++i) {
        const std::string l = "layers." + std::to_string(i);
        convs.push_back(&add<Conv1d>(l + ".conv", h, h, kernel, 1, groups, true));
        norms.push_back(&add<LayerNorm>(l + ".layer_norm", h, kTorchNormEps, LayerNorm::Params::None));
      }
      return;
    }
    kernel = c.num_conv_pos_embeddings;
    if (c.conv_pos_batch_norm) batch_norm = &add<BatchNorm1d>("batch_norm", h);
    // Weight-normed unless batch-normed: its weight is made from the parametrization.
    convs.push_back(&add<Conv1d>("conv", h, h, kernel, 1, groups, true, c.conv_pos_batch_norm));
  }

  Value forward(Graph& g, Value h) const {
    // padding = kernel // 2 on both sides, and Wav2Vec2SamePadLayer drops the last frame of an
    // even kernel's output: the same frames as one frame less of padding on the right.
    const int64_t left = kernel / 2, right = kernel / 2 - (kernel % 2 == 0 ? 1 : 0);
    Value x;
    {
      ScopeGuard s(g, path());
      x = Transpose(h, {0, 2, 1});  // [batch, hidden, frames]
    }
    if (!norms.empty()) {
      for (size_t i = 0; i < convs.size(); ++i) {
        Value y = norms[i]->forward(g, Transpose(convs[i]->forward(g, x, left, right), {0, 2, 1}));
        ScopeGuard s(g, path());
        y = encoder_activation(g, act, y);  // [batch, frames, hidden]
        if (i + 1 == convs.size()) return y;
        x = Transpose(y, {0, 2, 1});
      }
    }
    if (batch_norm) x = batch_norm->forward(g, x);
    Value y = convs[0]->forward(g, x, left, right, batch_norm ? Value() : normed_weight(g, x.dtype()));
    ScopeGuard s(g, path());
    return Transpose(encoder_activation(g, act, y), {0, 2, 1});
  }

  // The weight-normed convolution's weight, from its parametrization as transformers 5 saves it
  // (conv.parametrizations.weight.original0 / original1), or as older checkpoints hold it
  // (conv.weight_g / conv.weight_v, which transformers renames when it loads them).
  Value normed_weight(Graph& g, DType dtype) const {
    BuildContext& ctx = g.context();
    const Conv1d& conv = *convs[0];
    const std::string base = conv.full_name("");
    std::string mag = base + ".parametrizations.weight.original0", dir = base + ".parametrizations.weight.original1";
    if (!ctx.no_weights() && !ctx.query_tensor(mag) && ctx.query_tensor(base + ".weight_g")) {
      mag = base + ".weight_g";
      dir = base + ".weight_v";
    }
    const std::vector<int64_t> dims = {conv.out_channels, conv.in_channels / conv.groups, kernel};
    const std::string name = base + ".weight";
    // A transform reads whole tensors of any shape: the shapes are checked here, by name.
    for (const auto& [t, want] : {std::pair{mag, std::vector<int64_t>{1, 1, kernel}}, std::pair{dir, dims}}) {
      if (ctx.no_weights()) break;
      if (auto info = ctx.query_tensor(t); info && info->dims != want)
        throw Error(MOBIUS_ERROR_KIND_CHECKPOINT,
                    "[checkpoint] tensor '" + t + "' has shape " + shape_text(info->dims) + ", the graph expects " +
                        shape_text(want) + " for '" + name + "' (config.json: 'hidden_size' " +
                        std::to_string(hidden) + ", 'num_conv_pos_embeddings' " + std::to_string(kernel) +
                        ", 'num_conv_pos_embedding_groups' " + std::to_string(conv.groups) + ")");
    }
    if (auto v = ctx.graph().find_initializer(name)) return *v;
    return weight_normed(g, name, mag, dir, dims, dtype);
  }

  std::string act;
  int64_t hidden, kernel = 0;
  std::vector<const Conv1d*> convs;
  std::vector<const LayerNorm*> norms;
  const BatchNorm1d* batch_norm = nullptr;
};

// ---------------------------------------------------------------------------------------------
// The transformer encoder

// softmax(q k^T / sqrt(head_dim) + bias) v over packed q, k, v [batch, frames, heads * head_dim],
// every frame visible to every other; `bias` (optional) float32 [batch or 1, heads, frames,
// frames]. With ONNX Runtime's operators and float32 activations one MultiHeadAttention
// (com.microsoft); else q scaled first (a float16 product never holds the unscaled sums) and the
// scores normalized in float32.
Value attend(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim, Value bias) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (ort_ops(g.context()) && q.dtype() == DType::Float) {
    std::vector<Value> in = {q, k, v};
    if (bias.valid()) in.insert(in.end(), {Value(), Value(), bias});  // no qkv bias, no padding
    return g.node("MultiHeadAttention", in, {q.type()}, {Attr("num_heads", heads), Attr("scale", scale)},
                  "com.microsoft")[0];
  }
  q = Transpose(Reshape(Mul(q, ScalarLike(q, scale)), {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, s, d]
  k = Transpose(Reshape(k, {0, 0, heads, head_dim}), {0, 2, 3, 1});                               // [b, h, d, s]
  v = Transpose(Reshape(v, {0, 0, heads, head_dim}), {0, 2, 1, 3});                               // [b, h, s, d]
  Value scores = Cast(MatMul(q, k), DType::Float);
  if (bias.valid()) scores = Add(scores, bias);
  Value o = MatMul(Cast(Softmax(scores, -1), v.dtype()), v);
  return Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});
}

// Wav2Vec2Attention (q_proj, k_proj, v_proj, out_proj, each biased); WavLMAttention adds its
// gate (gru_rel_pos_linear, gru_rel_pos_const) and, in the first layer, the bucket table
// (rel_attn_embed).
class SelfAttention : public Module {
 public:
  SelfAttention(const SpeechEncoderConfig& c, bool gated, bool table)
      : heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads) {
    const int64_t h = c.hidden_size;
    q = &add<Linear>("q_proj", h, h, true);
    k = &add<Linear>("k_proj", h, h, true);
    v = &add<Linear>("v_proj", h, h, true);
    out = &add<Linear>("out_proj", h, h, true);
    if (gated) {
      declare("gru_rel_pos_const", {1, heads, 1, 1}, DType::Float);
      gru = &add<Linear>("gru_rel_pos_linear", head_dim, 8, true);
    }
    if (table) rel = &add<Embedding>("rel_attn_embed", c.num_buckets, heads);
  }

  Value forward(Graph& g, Value x, Value position_bias) const {
    Value bias = gru ? gated_bias(g, x, position_bias) : Value();
    ScopeGuard s(g, path());
    auto qkv = packed_linears(g, x, {q, k, v}, full_name("qkv"));
    return out->forward(g, attend(g, qkv[0], qkv[1], qkv[2], heads, head_dim, bias));
  }

  // WavLMAttention.forward's gate of the shared bias [1, heads, s, s], per head and query from
  // this layer's input: the input's heads through gru_rel_pos_linear (8 values), summed in two
  // fours, a and b = sigmoid of each, gate = a * (b * gru_rel_pos_const - 1) + 2; in float32.
  Value gated_bias(Graph& g, Value x, Value position_bias) const {
    Value heads_of_x;
    {
      ScopeGuard s(g, path());
      heads_of_x = Transpose(Reshape(x, {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, s, d]
    }
    Value p = Cast(gru->forward(g, heads_of_x), DType::Float);  // [b, h, s, 8]
    ScopeGuard s(g, path());
    Value ab = Sigmoid(ReduceSum(Reshape(p, {0, 0, 0, 2, 4}), {4}, false));  // [b, h, s, 2]
    const std::vector<Value> parts = Split(ab, {1, 1}, 3);                  // [b, h, s, 1] each
    Value one = Scalar(g, DType::Float, 1.0), two = Scalar(g, DType::Float, 2.0);
    Value gate = Add(Mul(parts[0], Sub(Mul(parts[1], param(g, "gru_rel_pos_const")), one)), two);
    return Mul(gate, position_bias);  // [b, h, s, s]
  }

  // WavLMAttention.compute_bias over the frames 0 .. seq-1 (`seq` an int64 scalar): the table's
  // row at the bucket of each key's distance from its query, [1, heads, s, s] float32. The
  // buckets (_relative_positions_bucket: half of num_buckets per sign, exact below a quarter,
  // logarithmic up to max_bucket_distance, the last bucket beyond) of every distance up to
  // max_bucket_distance are a constant of the graph, computed in float32 as torch does; longer
  // distances share the last.
  Value relative_position_bias(Graph& g, Value seq, const SpeechEncoderConfig& c) const {
    ScopeGuard s(g, full_name("rel_attn_embed"));
    const int64_t span = c.max_bucket_distance, half = c.num_buckets / 2, exact = half / 2;
    const float log_span = static_cast<float>(std::log(static_cast<double>(span) / static_cast<double>(exact)));
    std::vector<double> bucket(static_cast<size_t>(2 * span + 1));
    for (int64_t d = -span; d <= span; ++d) {  // d = key - query
      int64_t b = d > 0 ? half : 0;
      const int64_t a = d < 0 ? -d : d;
      if (a < exact) {
        b += a;
      } else {
        float large = std::log(static_cast<float>(a) / static_cast<float>(exact)) / log_span;
        large = static_cast<float>(exact) + large * static_cast<float>(half - exact);
        b += std::min<int64_t>(static_cast<int64_t>(large), half - 1);
      }
      bucket[static_cast<size_t>(d + span)] = static_cast<double>(b);
    }
    Value table = Constant(g, DType::Int64, {2 * span + 1}, bucket, "buckets");
    Value idx = Range(Int(g, 0), seq, Int(g, 1));                                          // [s]
    Value dist = Sub(Unsqueeze(idx, {0}), Unsqueeze(idx, {1}));                            // [s, s]
    dist = Add(Min(Max(dist, Int(g, -span)), Int(g, span)), Int(g, span));
    Value rows = Gather(rel->param(g, "weight", DType::Float), Gather(table, dist, 0), 0);  // [s, s, h]
    return Unsqueeze(Transpose(rows, {2, 0, 1}), {0});                                    // [1, h, s, s]
  }

  int64_t heads, head_dim;
  const Linear *q, *k, *v, *out, *gru = nullptr;
  const Embedding* rel = nullptr;
};

// Wav2Vec2EncoderLayer (post-norm) and Wav2Vec2EncoderLayerStableLayerNorm (pre-norm), and
// WavLM's, which pass the position bias on.
class EncoderLayer : public Module {
 public:
  EncoderLayer(const SpeechEncoderConfig& c, bool gated, bool table) : act(c.hidden_act) {
    attention = &add<SelfAttention>("attention", c, gated, table);
    layer_norm = &add<LayerNorm>("layer_norm", c.hidden_size, c.layer_norm_eps);
    ffn_in = &add<Linear>("feed_forward.intermediate_dense", c.hidden_size, c.intermediate_size, true);
    ffn_out = &add<Linear>("feed_forward.output_dense", c.intermediate_size, c.hidden_size, true);
    final_norm = &add<LayerNorm>("final_layer_norm", c.hidden_size, c.layer_norm_eps);
  }
  Value forward(Graph& g, Value h, Value position_bias, bool pre_norm) const {
    auto ffn = [&](Value x) {
      Value y = ffn_in->forward(g, x);
      {
        ScopeGuard s(g, full_name("feed_forward"));
        y = encoder_activation(g, act, y);
      }
      return ffn_out->forward(g, y);
    };
    if (pre_norm) {
      Value a = attention->forward(g, layer_norm->forward(g, h), position_bias);
      {
        ScopeGuard s(g, path());
        h = Add(h, a);
      }
      Value f = ffn(final_norm->forward(g, h));
      ScopeGuard s(g, path());
      return Add(h, f);
    }
    Value a = layer_norm->forward_skip(g, attention->forward(g, h, position_bias), h).first;
    return final_norm->forward_skip(g, ffn(a), a).first;
  }
  std::string act;
  const SelfAttention* attention;
  const LayerNorm *layer_norm, *final_norm;
  const Linear *ffn_in, *ffn_out;
};

// The family's ForCTC model: the encoder under the spec's prefix, lm_head at the root.
class SpeechCTCModel : public Module {
 public:
  SpeechCTCModel(const SpeechEncoderConfig& c, const SpeechEncoderSpec& s) : cfg(c) {
    const std::string& p = s.prefix;
    for (size_t i = 0; i < c.conv_dim.size(); ++i)
      conv_layers.push_back(&add<ConvLayer>(p + "feature_extractor.conv_layers." + std::to_string(i), c, i,
                                            c.feat_extract_norm == "layer" || i == 0));
    if (c.feat_proj_layer_norm)
      proj_norm = &add<LayerNorm>(p + "feature_projection.layer_norm", c.conv_dim.back(), c.layer_norm_eps);
    projection = &add<Linear>(p + "feature_projection.projection", c.conv_dim.back(), c.hidden_size, true);
    positions = &add<PositionalConv>(p + "encoder.pos_conv_embed", c, s);
    encoder_norm = &add<LayerNorm>(p + "encoder.layer_norm", c.hidden_size, c.layer_norm_eps);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<EncoderLayer>(p + "encoder.layers." + std::to_string(i), c, s.relative_bias,
                                          s.relative_bias && i == 0));
    lm_head = &add<Linear>("lm_head", c.hidden_size, c.vocab_size, true);
  }

  Value forward(Graph& g, Value input_values, DType act) const {
    Value x;
    {
      ScopeGuard s(g, "feature_extractor");
      x = Unsqueeze(Cast(input_values, act), {1});  // [batch, 1, samples]
    }
    for (const ConvLayer* l : conv_layers) x = l->forward(g, x);
    Value h;
    {
      ScopeGuard s(g, "feature_projection");
      h = Transpose(x, {0, 2, 1});  // [batch, frames, conv_dim[-1]]
    }
    if (proj_norm) h = proj_norm->forward(g, h);
    h = projection->forward(g, h);
    Value pos = positions->forward(g, h);
    if (cfg.do_stable_layer_norm) {
      ScopeGuard s(g, "encoder");
      h = Add(h, pos);
    } else {
      h = encoder_norm->forward_skip(g, pos, h).first;
    }
    // WavLM: the first layer's bucket table, shared by every layer through its own gate.
    Value bias;
    if (const SelfAttention* first = layers.empty() ? nullptr : layers[0]->attention; first && first->rel) {
      Value seq;
      {
        ScopeGuard s(g, "encoder");
        seq = Squeeze(DimOf(h, 1), {0});
      }
      bias = first->relative_position_bias(g, seq, cfg);
    }
    for (const EncoderLayer* l : layers) h = l->forward(g, h, bias, cfg.do_stable_layer_norm);
    if (cfg.do_stable_layer_norm) h = encoder_norm->forward(g, h);
    return lm_head->forward(g, h);
  }

  SpeechEncoderConfig cfg;
  std::vector<const ConvLayer*> conv_layers;
  const LayerNorm* proj_norm = nullptr;
  const Linear* projection;
  const PositionalConv* positions;
  const LayerNorm* encoder_norm;
  std::vector<const EncoderLayer*> layers;
  const Linear* lm_head;
};

// ---------------------------------------------------------------------------------------------
// The config

// Bounds of the feature encoder's and the positional convolution's sizes (far above released
// models': 512 channels, kernels up to 128 taps, strides up to 5), and of a convolution's weights.
constexpr int64_t kMaxConvLayers = 64, kMaxChannels = 1 << 16, kMaxKernel = 4096, kMaxStride = 4096,
                  kMaxPosLayers = 256, kMaxBuckets = 1 << 16, kMaxBucketDistance = 1 << 16;
constexpr double kMaxConvWeights = 68719476736.0;  // 2^36

// A size key's value from `lo` to `hi`, naming the key (and the entry of a list).
void check_range(const ConfigReader& r, const std::string& key, int64_t v, int64_t lo, int64_t hi, int entry = -1) {
  if (v >= lo && v <= hi) return;
  r.fail(key, (entry >= 0 ? "entry " + std::to_string(entry) + " " : "") + "is " + std::to_string(v) +
                  "; it must be from " + std::to_string(lo) + " to " + std::to_string(hi));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Conv1d

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, int64_t st, int64_t grp, bool bias, bool weighted)
    : in_channels(in), out_channels(out), kernel(k), stride(st), groups(grp), has_bias(bias) {
  if (in <= 0 || out <= 0 || k <= 0 || st <= 0 || grp <= 0 || in % grp != 0 || out % grp != 0)
    throw Error("[conv] Conv1d(" + std::to_string(in) + ", " + std::to_string(out) + ", kernel " + std::to_string(k) +
                ", stride " + std::to_string(st) + ", groups " + std::to_string(grp) +
                ") has a size that is not positive or groups that do not divide its channels");
  if (weighted) declare("weight", {out, in / grp, k});
  if (bias) declare("bias", {out});
}

Value Conv1d::forward(Graph& g, Value x, int64_t pad_left, int64_t pad_right, Value weight) const {
  ScopeGuard s(g, path());
  const TensorType t = x.type();
  if (!t.rank_known || t.rank() != 3 || !is_floating(t.dtype))
    throw Error("[conv] '" + path() + "' takes a floating [N, C, T] input, got " + x.name() + " " + t.str());
  if (t.dims[1].is_static() && t.dims[1].size != in_channels)
    throw Error("[conv] '" + path() + "' takes " + std::to_string(in_channels) + " channels, got " + x.name() + " " +
                t.str());
  if (pad_left < 0 || pad_right < 0) throw Error("[conv] '" + path() + "': negative padding");
  if (!weight.valid()) weight = param(g, "weight", x.dtype());
  std::vector<Value> inputs{x, weight};
  if (has_bias) inputs.push_back(param(g, "bias", x.dtype()));
  // The frames out: static for a static input, the input's own when the window keeps them.
  Dim frames;
  const Dim& in = t.dims[2];
  if (in.is_static()) {
    const int64_t padded = in.size + pad_left + pad_right;
    if (padded < kernel)
      throw Error("[conv] '" + path() + "': " + std::to_string(padded) + " frames are fewer than its " +
                  std::to_string(kernel) + " taps");
    frames = Dim((padded - kernel) / stride + 1);
  } else if (stride == 1 && pad_left + pad_right == kernel - 1) {
    frames = in;
  }
  return g.node("Conv", inputs, {TensorType(x.dtype(), {t.dims[0], Dim(out_channels), frames})},
                {Attr("kernel_shape", {kernel}), Attr("strides", {stride}), Attr("pads", {pad_left, pad_right}),
                 Attr("dilations", {int64_t{1}}), Attr("group", groups)})[0];
}

// ---------------------------------------------------------------------------------------------
// Reading and building

SpeechEncoderConfig read_speech_encoder_config(const SpeechEncoderSpec& spec, const nlohmann::json& raw) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  SpeechEncoderConfig c = spec.defaults;
  c.model_type = spec.model_type;
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.hidden_size = r.get_int("hidden_size", c.hidden_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", c.num_attention_heads);
  c.intermediate_size = r.get_int("intermediate_size", c.intermediate_size);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  // The feature encoder: one convolution per entry of conv_dim, conv_kernel and conv_stride
  // (transformers' validate_architecture); num_feat_extract_layers, when given, counts them.
  if (spec.feat_extract_norm_key) c.feat_extract_norm = r.get_string("feat_extract_norm", c.feat_extract_norm);
  if (c.feat_extract_norm != "group" && c.feat_extract_norm != "layer")
    r.fail("feat_extract_norm", "is " + quote_value(c.feat_extract_norm) + "; " + spec.model_type +
                                    "'s feature encoder has 'group' (a group norm on its first layer) or 'layer' "
                                    "(a layer norm on every layer)");
  c.feat_extract_activation = r.get_string("feat_extract_activation", c.feat_extract_activation);
  check_activation(r, "feat_extract_activation", c.feat_extract_activation);
  c.conv_dim = r.get_ints("conv_dim", c.conv_dim);
  c.conv_kernel = r.get_ints("conv_kernel", c.conv_kernel);
  c.conv_stride = r.get_ints("conv_stride", c.conv_stride);
  const bool counted = r.has("num_feat_extract_layers");
  const int64_t layers = counted ? r.get_int("num_feat_extract_layers") : static_cast<int64_t>(c.conv_dim.size());
  if (layers < 1 || layers > kMaxConvLayers)
    r.fail(counted ? "num_feat_extract_layers" : "conv_dim",
           (counted ? "is " + std::to_string(layers) : "has " + std::to_string(layers) + " entries") +
               "; the feature encoder has from 1 to " + std::to_string(kMaxConvLayers) + " convolutions");
  for (const auto& [key, list, lo, hi] : {std::tuple{"conv_dim", &c.conv_dim, int64_t{1}, kMaxChannels},
                                          std::tuple{"conv_kernel", &c.conv_kernel, int64_t{1}, kMaxKernel},
                                          std::tuple{"conv_stride", &c.conv_stride, int64_t{1}, kMaxStride}}) {
    if (static_cast<int64_t>(list->size()) != layers)
      r.fail(key, "has " + std::to_string(list->size()) + " entries, but " +
                      (counted ? "'num_feat_extract_layers' is " : "'conv_dim' has ") + std::to_string(layers) +
                      ": the feature encoder has one convolution per entry of 'conv_dim', 'conv_kernel' and "
                      "'conv_stride'");
    for (size_t i = 0; i < list->size(); ++i) check_range(r, key, (*list)[i], lo, hi, static_cast<int>(i));
  }
  c.conv_bias = r.get_bool("conv_bias", c.conv_bias);
  double conv_weights = 0;
  for (size_t i = 0; i < c.conv_dim.size(); ++i)
    conv_weights += static_cast<double>(i == 0 ? 1 : c.conv_dim[i - 1]) * static_cast<double>(c.conv_dim[i]) *
                    static_cast<double>(c.conv_kernel[i]);
  if (conv_weights > kMaxConvWeights)
    r.fail("conv_dim", "and 'conv_kernel' make a feature encoder of " + std::to_string(conv_weights) +
                           " weights, more than 2^36");
  if (spec.feat_proj_layer_norm_key) c.feat_proj_layer_norm = r.get_bool("feat_proj_layer_norm", c.feat_proj_layer_norm);
  // The positional convolution(s).
  const bool stack = spec.positions == SpeechEncoderSpec::Positions::ConvLayers;
  c.num_conv_pos_embeddings = r.get_int("num_conv_pos_embeddings", c.num_conv_pos_embeddings);
  check_range(r, "num_conv_pos_embeddings", c.num_conv_pos_embeddings, 1, stack ? kMaxPosLayers : kMaxKernel);
  if (stack) {
    c.conv_pos_kernel_size = r.get_int("conv_pos_kernel_size", c.conv_pos_kernel_size);
    check_range(r, "conv_pos_kernel_size", c.conv_pos_kernel_size, 1, kMaxKernel);
  }
  c.num_conv_pos_embedding_groups = r.get_int("num_conv_pos_embedding_groups", c.num_conv_pos_embedding_groups);
  if (c.num_conv_pos_embedding_groups < 1 || c.hidden_size % c.num_conv_pos_embedding_groups != 0)
    r.fail("num_conv_pos_embedding_groups", "(" + std::to_string(c.num_conv_pos_embedding_groups) +
                                                ") must divide 'hidden_size' (" + std::to_string(c.hidden_size) +
                                                "): the positional convolution is grouped by it");
  const double pos_weights = static_cast<double>(c.hidden_size) *
                             static_cast<double>(c.hidden_size / c.num_conv_pos_embedding_groups) *
                             (stack ? static_cast<double>(c.conv_pos_kernel_size * c.num_conv_pos_embeddings)
                                    : static_cast<double>(c.num_conv_pos_embeddings));
  if (pos_weights > kMaxConvWeights)
    r.fail("num_conv_pos_embeddings", "makes a positional convolution of " + std::to_string(pos_weights) +
                                          " weights, more than 2^36");
  if (spec.conv_pos_batch_norm_key) c.conv_pos_batch_norm = r.get_bool("conv_pos_batch_norm", c.conv_pos_batch_norm);
  if (spec.stable_layer_norm_key) c.do_stable_layer_norm = r.get_bool("do_stable_layer_norm", c.do_stable_layer_norm);
  if (spec.relative_bias) {
    c.num_buckets = r.get_int("num_buckets", c.num_buckets);
    check_range(r, "num_buckets", c.num_buckets, 4, kMaxBuckets);
    c.max_bucket_distance = r.get_int("max_bucket_distance", c.max_bucket_distance);
    // The logarithmic buckets run from a quarter of num_buckets to max_bucket_distance.
    check_range(r, "max_bucket_distance", c.max_bucket_distance, c.num_buckets / 4 + 1, kMaxBucketDistance);
  }
  if (spec.adapter_keys) {
    if (r.get_bool("add_adapter", false))
      r.fail("add_adapter", "is true: the adapter after " + spec.model_type + "'s encoder is not built yet");
    if (r.has("adapter_attn_dim"))
      r.fail("adapter_attn_dim", "is set: " + spec.model_type + "'s attention adapters are not built yet");
  }
  EncoderSizes sizes{c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                     1, c.layer_norm_eps, c.hidden_act};
  check_encoder_config(r, spec.model_type, sizes);
  return c;
}

void check_speech_preprocessor(const BuildContext& ctx, const std::string& model_type) {
  const std::optional<std::string> text = ctx.read_source_file("preprocessor_config.json");
  if (!text) return;
  const nlohmann::json j = parse_config_text(*text, "preprocessor_config.json");
  ConfigReader r(j, "preprocessor_config.json");
  if (const int64_t n = r.get_int("feature_size", 1); n != 1)
    r.fail("feature_size", "is " + std::to_string(n) + "; " + model_type +
                               " reads raw audio, one value per sample (feature_size 1)");
  if (r.has("sampling_rate") && !(r.get_double("sampling_rate") > 0))
    r.fail("sampling_rate", "must be positive, got " + describe_value(j.at("sampling_rate")));
}

void build_speech_ctc(BuildContext& ctx, const SpeechEncoderSpec& spec, const SpeechEncoderConfig& cfg) {
  check_speech_preprocessor(ctx, spec.model_type);
  // SpecAugment's mask vector (training only) and a batch norm's step counter.
  ctx.ignore_tensors(spec.prefix + "masked_spec_embed");
  ctx.ignore_tensors(spec.prefix + "encoder.pos_conv_embed.batch_norm.num_batches_tracked");
  SpeechCTCModel model(cfg, spec);
  Graph& g = ctx.graph();
  // Raw audio in float32 for every weight dtype (what transformers.js's feature extractor and
  // ONNX Runtime callers hand over), cast to the activation dtype inside.
  Value x = g.input("input_values", TensorType(DType::Float, {Dim("batch_size"), Dim("sequence_length")}));
  g.output(model.forward(g, x, activation_dtype(ctx)), "logits");
}

void register_speech_encoder(PluginRegistrar& r, const SpeechEncoderSpec& spec) {
  r.add_tasks(
      spec.model_type, speech_tasks(),
      [&spec](const nlohmann::json& raw, const std::string&) {
        return nlohmann::json(read_speech_encoder_config(spec, raw));
      },
      [&spec](BuildContext& ctx, const nlohmann::json& cfg) {
        build_speech_ctc(ctx, spec, cfg.get<SpeechEncoderConfig>());
      });
}

}  // namespace mobius::nn
