// pack.cpp - the Mamba-2 pack: mamba2, bamba, falcon_h1, granitemoehybrid and nemotron_h, decoders built on the SDK's Mamba-2
// mixer (mobius/sdk/mamba2.hpp). Each model type has its file; this one registers them and holds
// the layer they share.
#include "pack.hpp"

#include <tuple>

namespace mobius_mamba2 {

using mobius::Graph;
using mobius::Value;

NormBlock::NormBlock(const std::string& norm_name, std::unique_ptr<nn::Norm> n,
                     const std::string& part_name, std::unique_ptr<nn::TokenMixer> m) {
  norm = n.get();
  attach(norm_name, std::move(n));
  mixer = m.get();
  attach(part_name, std::move(m));
}

NormBlock::NormBlock(const std::string& norm_name, std::unique_ptr<nn::Norm> n,
                     const std::string& part_name, std::unique_ptr<nn::FeedForward> f) {
  norm = n.get();
  attach(norm_name, std::move(n));
  feed_forward = f.get();
  attach(part_name, std::move(f));
}

Value NormBlock::forward(Graph& g, Value h, nn::SharedInputs& shared, const nn::CacheMap& past,
                         nn::CacheMap& present) const {
  return forward_residual(g, {h, Value()}, shared, past, present).sum();
}

nn::Residual NormBlock::forward_residual(Graph& g, const nn::Residual& r, nn::SharedInputs& shared,
                                         const nn::CacheMap& past, nn::CacheMap& present) const {
  mobius::ScopeGuard s(g, path());
  Value h, x;
  if (r.branch) {
    std::tie(x, h) = norm->forward_skip(g, r.branch, r.h);
  } else {
    h = r.h;
    x = norm->forward(g, h);
  }
  Value out = mixer ? mixer->forward(g, x, shared, past, present) : feed_forward->forward(g, x);
  return {h, out};
}

std::vector<nn::CacheEntry> NormBlock::cache_entries(mobius::DType act) const {
  return mixer ? mixer->cache_entries(act) : std::vector<nn::CacheEntry>{};
}

bool NormBlock::reads_position_ids(const mobius::BuildContext& ctx) const {
  return mixer && mixer->reads_position_ids(ctx);
}

nn::Mamba2Keys mamba_prefixed_keys() {
  nn::Mamba2Keys k;
  k.num_heads = "mamba_n_heads";
  k.head_dim = "mamba_d_head";
  k.state_size = "mamba_d_state";
  k.n_groups = "mamba_n_groups";
  k.conv_kernel = "mamba_d_conv";
  k.expand = "mamba_expand";
  k.chunk_size = "mamba_chunk_size";
  k.conv_bias = "mamba_conv_bias";
  k.in_proj_bias = k.out_proj_bias = "mamba_proj_bias";
  k.norm_eps = "rms_norm_eps";
  return k;
}

nn::Mamba2Config mamba_prefixed_defaults() {
  nn::Mamba2Config d;
  d.num_heads = 128;
  d.head_dim = 0;  // "auto": the width / mamba_n_heads
  d.state_size = 256;
  d.n_groups = 1;
  d.conv_kernel = 4;
  d.chunk_size = 256;
  d.conv_bias = true;
  d.in_proj_bias = d.out_proj_bias = false;
  return d;
}

namespace {

void register_all(mobius::PluginRegistrar& r) {
  register_bamba(r);
  register_falcon_h1(r);
  register_granitemoehybrid(r);
  register_mamba2(r);
  register_nemotron_h(r);
}

}  // namespace

}  // namespace mobius_mamba2

MOBIUS_PLUGIN("mamba2", "0.1.0", "mobius", mobius_mamba2::register_all)
