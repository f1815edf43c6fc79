// swin.hpp - the swin plugin's parts shared by its files: the normalized config (config.cpp reads
// and checks config.json into it) and the geometry of the windows (windows.cpp: which position
// each window slot reads, the shifted windows' regions, the relative position index, the 2x2
// merge), all fixed when the graph is built for the config's image size.
//
// Semantics follow transformers 5's models/swin/modeling_swin.py (SwinEmbeddings,
// SwinPatchEmbeddings.maybe_pad, SwinLayer: maybe_pad, cyclic_shift, window_partition /
// window_reverse, get_attn_mask, set_shift_and_window_size; SwinRelativePositionBias;
// SwinPatchMerging; SwinModel's layernorm and average pooler; SwinForImageClassification).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mobius::swin {

// The normalized config: transformers' SwinConfig defaults where config.json is silent.
struct SwinConfig {
  int64_t image_height = 224, image_width = 224;  // image_size: an int or [height, width]
  int64_t patch_height = 4, patch_width = 4;      // patch_size: the same
  int64_t num_channels = 3;
  int64_t embed_dim = 96;
  std::vector<int64_t> depths = {2, 2, 6, 2};
  std::vector<int64_t> num_heads = {3, 6, 12, 24};
  int64_t window_size = 7;
  double mlp_ratio = 4.0;
  bool qkv_bias = true;
  std::string hidden_act = "gelu";
  bool use_absolute_embeddings = false;
  double layer_norm_eps = 1e-5;
  int64_t num_labels = 2;  // the classifier's rows (image-classification only)

  // Stage i's width: embed_dim * 2^i; the last stage's is the model's (num_features).
  int64_t dim(size_t stage) const { return embed_dim << stage; }
  int64_t num_features() const { return dim(depths.size() - 1); }
  // int(mlp_ratio * dim), as SwinMLP sizes fc1.
  int64_t mlp_dim(size_t stage) const;
  // The patch grid: the image padded to whole patches, one position per patch.
  int64_t grid_height() const { return (image_height + patch_height - 1) / patch_height; }
  int64_t grid_width() const { return (image_width + patch_width - 1) / patch_width; }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SwinConfig, image_height, image_width, patch_height, patch_width,
                                                num_channels, embed_dim, depths, num_heads, window_size, mlp_ratio,
                                                qkv_bias, hidden_act, use_absolute_embeddings, layer_norm_eps,
                                                num_labels)

// The tasks: the base model (SwinModel: last_hidden_state, pooler_output) first, the default
// when config.json names no class; the classifier (SwinForImageClassification: logits).
inline const std::vector<std::string>& swin_tasks() {
  static const std::vector<std::string> t = {"image-feature-extraction", "image-classification"};
  return t;
}

// config.json read with SwinConfig's defaults and checked, each fault naming config.json and its
// key: positive sizes within their bounds, one num_heads entry per stage dividing the stage's
// width, a window of at least 1, absolute position embeddings only for an image of whole patches,
// the labels (image-classification).
SwinConfig read_swin_config(const nlohmann::json& config_json, const std::string& task);

// The feature map (height, width) each stage runs at: the patch grid, then halved (rounded up)
// by each patch merging.
struct Resolution {
  int64_t height, width;
};
std::vector<Resolution> stage_resolutions(const SwinConfig& c);

// One layer's windowed attention over an H x W feature map, as SwinLayer runs it: the window
// clamped to the map when the map is not larger (min(H, W) <= window: window = min(H, W), no
// shift), the map padded at the bottom and right to whole windows, cyclically shifted by `shift`
// (torch.roll by -shift) and cut into windows of window x window positions, row-major windows of
// row-major positions. Index H * W stands for a padded position (a zero vector).
struct Windows {
  int64_t height = 0, width = 0, window = 0, shift = 0, padded_height = 0, padded_width = 0;
  int64_t count() const { return (padded_height / window) * (padded_width / window); }
  int64_t tokens() const { return window * window; }  // per window
  // For each window slot (count() * tokens()), the position it reads (H * W: padding).
  std::vector<int64_t> partition() const;
  // For each position of the map (H * W), its slot: the shift undone, the padding cropped.
  std::vector<int64_t> reverse() const;
  // For each window slot, its region of the shifted map (get_attn_mask's labels, 0 .. 8): two
  // slots of one window attend to each other only when their regions agree.
  std::vector<int64_t> regions() const;
  bool pads() const { return padded_height != height || padded_width != width; }
};
Windows layer_windows(int64_t height, int64_t width, int64_t window_size, bool shifted);

// SwinRelativePositionBias's index: for query a and key b of a window (tokens() x tokens()),
// the row of the (2w - 1)^2-row bias table at their offset (dh, dw).
std::vector<int64_t> relative_position_index(int64_t window);

// SwinPatchMerging's gather: for each merged position (ceil(H/2) x ceil(W/2), row-major) the four
// positions it concatenates, in transformers' order x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2],
// x[1::2, 1::2] (H * W: the zero padding of an odd size).
std::vector<int64_t> merge_positions(int64_t height, int64_t width);

}  // namespace mobius::swin
