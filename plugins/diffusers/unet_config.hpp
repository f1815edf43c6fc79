// unet_config.hpp - the config of diffusers' UNet2DConditionModel (Stable Diffusion 1.x / 2.x)
// as the UNet graph reads it: every per-block value expanded to one entry per down block, the
// keys SD 1.x/2.x do not use refused by name, and the skip-connection channel bookkeeping of
// diffusers' down and up blocks worked out (and checked) before anything is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mobius::diffusers {

struct UNetConfig {
  int64_t in_channels = 4;
  int64_t out_channels = 4;
  bool center_input_sample = false;
  bool flip_sin_to_cos = true;
  double freq_shift = 0.0;
  // "CrossAttnDownBlock2D" | "DownBlock2D" per down block; "CrossAttnUpBlock2D" | "UpBlock2D"
  // per up block (diffusers' "UNetRes" prefix removed).
  std::vector<std::string> down_block_types, up_block_types;
  bool mid_block = true;  // UNetMidBlock2DCrossAttn; false when mid_block_type is null
  std::vector<int64_t> block_out_channels;
  // Per down block (index i); up block i reads entry n-1-i, as diffusers reverses them.
  std::vector<int64_t> layers_per_block;
  // The heads of each block's attention: `attention_head_dim` read as the number of heads (the
  // diffusers naming quirk, num_attention_heads being null). Each head is channels / heads wide.
  std::vector<int64_t> attention_heads;
  std::vector<int64_t> transformer_layers_per_block;
  int64_t cross_attention_dim = 1280;
  int64_t downsample_padding = 1;
  double mid_block_scale_factor = 1.0;
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;
  bool use_linear_projection = false;
  bool upcast_attention = false;
  int64_t conv_in_kernel = 3;
  int64_t conv_out_kernel = 3;
  int64_t time_embed_dim = 0;  // time_embedding_dim, or block_out_channels[0] * 4

  size_t blocks() const { return block_out_channels.size(); }
  // Heads and their width of a transformer over `channels` (diffusers: channels // heads wide,
  // heads * that wide inside).
  static int64_t head_dim(int64_t channels, int64_t heads) { return channels / heads; }
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    UNetConfig, in_channels, out_channels, center_input_sample, flip_sin_to_cos, freq_shift,
    down_block_types, up_block_types, mid_block, block_out_channels, layers_per_block,
    attention_heads, transformer_layers_per_block, cross_attention_dim, downsample_padding,
    mid_block_scale_factor, norm_num_groups, norm_eps, use_linear_projection, upcast_attention,
    conv_in_kernel, conv_out_kernel, time_embed_dim)

// One up block as diffusers' UNet2DConditionModel.__init__ lays it out: its resnets' input
// channels (the running hidden states plus the skip connection each one concatenates), its
// width, and the settings it reads reversed from the down blocks.
struct UpBlockPlan {
  bool cross_attention = false;
  int64_t out_channels = 0;
  std::vector<int64_t> resnet_in_channels;    // hidden + skip, per resnet
  std::vector<int64_t> skip_channels;         // the skip each resnet concatenates
  int64_t heads = 0, transformer_layers = 0;
  bool upsample = false;
};
struct DownBlockPlan {
  bool cross_attention = false;
  int64_t in_channels = 0, out_channels = 0, layers = 0, heads = 0, transformer_layers = 0;
  bool downsample = false;
};
struct UNetPlan {
  std::vector<DownBlockPlan> down;
  std::vector<UpBlockPlan> up;
};

// Reads and checks config.json (every error "[config] ... 'key' ..."); the result's JSON is the
// normalized config the graph builder receives.
UNetConfig read_unet_config(const nlohmann::json& raw);
// The blocks of a checked config. Throws "[config] ..." when the skip connections diffusers'
// up blocks expect do not match the ones the down blocks make (an asymmetric layers_per_block).
UNetPlan plan_unet(const UNetConfig& c);

}  // namespace mobius::diffusers
