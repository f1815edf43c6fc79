// short_conv.cpp - the gated short convolution (see short_conv.hpp).
//
// One step, of any length, is the same few ops: the gated inputs of this step are appended to the
// cached last K, the present state is the last K of that, and one depthwise Conv without padding
// over the last K-1 + seq of them gives exactly this step's outputs. An empty state is zeros,
// which is the zero left padding transformers' causal conv uses on a prefill; a continuation reads
// the real previous inputs, as transformers' cache concatenation does. So prefill, decode and a
// prompt fed in pieces are one graph, with no If.
#include "mobius/sdk/short_conv.hpp"

#include <climits>
#include <string>

namespace mobius::nn {

using namespace mobius::op;

void ShortConvOptions::validate() const {
  if (hidden <= 0)
    throw Error("[config] 'hidden_size' must be positive for the short convolution, got " +
                std::to_string(hidden));
  if (kernel <= 0)
    throw Error("[config] 'conv_L_cache' must be positive (the short convolution's kernel size), got " +
                std::to_string(kernel));
}

namespace {

// The depthwise conv's weight [hidden, 1, K] and, with conv_bias, its bias [hidden] (torch's
// Conv1d(hidden, hidden, K, groups=hidden)).
class BiasedCausalConv1d : public CausalConv1d {
 public:
  BiasedCausalConv1d(int64_t channels, int64_t kernel) : CausalConv1d(channels, kernel) {
    declare("bias", {channels});
  }
};


}  // namespace

ShortConv::ShortConv(const ShortConvOptions& o) : opt(o) {
  opt.validate();
  in_proj = &add<Linear>("in_proj", opt.hidden, 3 * opt.hidden, opt.bias);
  if (opt.bias) conv = &add<BiasedCausalConv1d>("conv", opt.hidden, opt.kernel);
  else conv = &add<CausalConv1d>("conv", opt.hidden, opt.kernel);
  out_proj = &add<Linear>("out_proj", opt.hidden, opt.hidden, opt.bias);
}

std::vector<CacheEntry> ShortConv::cache_entries(DType act) const {
  return {{"conv_state", act, {Dim("batch_size"), Dim(opt.hidden), Dim(opt.kernel)}}};
}

Value ShortConv::forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                         CacheMap& present) const {
  const int64_t h = opt.hidden, k = opt.kernel;
  Value keep = shared.recurrent_keep(shared.act, true);
  ScopeGuard scope(g, path());
  const DType act = x.dtype();
  // [batch, 3 hidden, seq]: B, C and u as channels, the sequence last (Conv's layout).
  Value bcu = Transpose(in_proj->forward(g, Mul(x, keep)), {0, 2, 1});
  auto parts = Split(bcu, {h, h, h}, 1);
  Value gated = Mul(parts[0], parts[2]);  // B * u

  Value full = Concat({past.at("conv_state"), gated}, 2);  // [batch, hidden, K + seq]
  present["conv_state"] =
      g.node("Slice", {full, Ints(g, {-k}), Ints(g, {INT64_MAX}), Ints(g, {2})},
             {TensorType(act, {x.dim(0), Dim(h), Dim(k)})})[0];
  // The conv in float32: ONNX Runtime's CPU Conv kernel is float32's whatever the build dtype,
  // and the K-tap sum loses nothing to it.
  std::vector<Value> conv_in{Cast(Slice(full, {1}, {INT64_MAX}, {2}), DType::Float),
                             conv->param(g, "weight", DType::Float)};
  if (opt.bias) conv_in.push_back(conv->param(g, "bias", DType::Float));
  Value y = g.node("Conv", conv_in, {TensorType(DType::Float, {x.dim(0), Dim(h), x.dim(1)})},
                   {Attr("group", h), Attr("kernel_shape", std::vector<int64_t>{k})})[0];
  y = Mul(parts[1], Cast(y, act));  // C * conv
  return out_proj->forward(g, Transpose(y, {0, 2, 1}));
}

MixerFactory short_conv_mixer(ShortConvOptions opt) {
  return [opt](const ArchitectureConfig& cfg, int64_t, const DecoderSpec&) {
    ShortConvOptions o = opt;
    o.hidden = cfg.hidden_size;
    return std::make_unique<ShortConv>(o);
  };
}

}  // namespace mobius::nn
