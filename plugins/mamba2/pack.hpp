// pack.hpp - what the Mamba-2 pack's model types share: their registrations, and the layer of
// one norm and one part that Mamba-2 (and Nemotron-H) stack.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mobius/sdk/mamba2.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace mobius_mamba2 {

namespace nn = mobius::nn;

void register_mamba2(mobius::PluginRegistrar& r);
void register_bamba(mobius::PluginRegistrar& r);
void register_falcon_h1(mobius::PluginRegistrar& r);
void register_granitemoehybrid(mobius::PluginRegistrar& r);
void register_nemotron_h(mobius::PluginRegistrar& r);

// The mixer's keys as BambaConfig, FalconH1Config and GraniteMoeHybridConfig spell them:
// mamba_n_heads, mamba_d_head, mamba_d_state, mamba_n_groups, mamba_d_conv, mamba_expand,
// mamba_chunk_size, mamba_conv_bias, mamba_proj_bias (in_proj and out_proj), rms_norm_eps,
// time_step_limit.
nn::Mamba2Keys mamba_prefixed_keys();
// Those configs' mixer defaults: 128 heads of the width / mamba_n_heads, state 256, one group, a
// conv of 4 with a bias, chunks of 256, no projection biases.
nn::Mamba2Config mamba_prefixed_defaults();

// h + part(norm(h)): a pre-norm residual block around one token mixer or one feed-forward, with
// no second sub-block (Mamba2Block, NemotronHBlock). The previous layer's pending branch is
// added inside this layer's norm (one SkipSimplifiedLayerNormalization with ONNX Runtime's
// operators), and this part's output is left pending for the next.
class NormBlock : public nn::DecoderLayerBase {
 public:
  NormBlock(const std::string& norm_name, std::unique_ptr<nn::Norm> norm, const std::string& part_name,
            std::unique_ptr<nn::TokenMixer> mixer);
  NormBlock(const std::string& norm_name, std::unique_ptr<nn::Norm> norm, const std::string& part_name,
            std::unique_ptr<nn::FeedForward> feed_forward);
  mobius::Value forward(mobius::Graph& g, mobius::Value h, nn::SharedInputs& shared,
                        const nn::CacheMap& past, nn::CacheMap& present) const override;
  nn::Residual forward_residual(mobius::Graph& g, const nn::Residual& r, nn::SharedInputs& shared,
                                const nn::CacheMap& past, nn::CacheMap& present) const override;
  std::vector<nn::CacheEntry> cache_entries(mobius::DType act) const override;
  bool reads_position_ids(const mobius::BuildContext& ctx) const override;

  const nn::Norm* norm;
  const nn::TokenMixer* mixer = nullptr;
  const nn::FeedForward* feed_forward = nullptr;
};

}  // namespace mobius_mamba2
