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

ShortConv::ShortConv(const ShortConvOptions& o) : opt(o) {
  opt.validate();
  in_proj = &add<Linear>("in_proj", opt.hidden, 3 * opt.hidden, opt.bias);
  conv = &add<CausalConv1d>("conv", opt.hidden, opt.kernel, DType::Undefined, opt.bias);
  out_proj = &add<Linear>("out_proj", opt.hidden, opt.hidden, opt.bias);
}

std::vector<CacheEntry> ShortConv::cache_entries(DType act) const {
  return {{"conv_state", act, {Dim("batch_size"), Dim(opt.hidden), Dim(opt.kernel)}}};
}

Value ShortConv::forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                         CacheMap& present) const {
  const int64_t h = opt.hidden;
  Value keep = shared.recurrent_keep(shared.act, true);
  ScopeGuard scope(g, path());
  const DType act = x.dtype();
  // [batch, 3 hidden, seq]: B, C and u as channels, the sequence last (Conv's layout).
  Value bcu = Transpose(in_proj->forward(g, Mul(x, keep)), {0, 2, 1});
  auto parts = Split(bcu, {h, h, h}, 1);
  Value gated = Mul(parts[0], parts[2]);  // B * u

  // The conv in float32 (the K-tap sum loses nothing to it).
  Value y = conv->forward(g, past.at("conv_state"), gated, present["conv_state"]);
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
