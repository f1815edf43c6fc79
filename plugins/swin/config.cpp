// config.cpp - config.json of a Swin checkpoint read into SwinConfig (swin.hpp) and checked, every
// fault naming config.json and the key: transformers' SwinConfig (configuration_swin.py) with
// its defaults, and the sizes held to bounds well above released models' before anything is
// sized by them.
#include <cmath>
#include <cstdint>
#include <string>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "swin.hpp"

namespace mobius::swin {
namespace {

// Bounds (the most mobius accepts; released Swin checkpoints are far below each): the image side,
// a patch side, the channels, a stage's width, the stages, a stage's layers, the window side, the
// patch grid's positions, the MLP width and the parameters of the whole model.
constexpr int64_t kMaxImage = 16384;      // released: 384
constexpr int64_t kMaxPatch = 1024;       // released: 4
constexpr int64_t kMaxChannels = 1024;    // released: 3
constexpr int64_t kMaxWidth = 1 << 17;    // released: 1536
constexpr int64_t kMaxStages = 16;        // released: 4
constexpr int64_t kMaxDepth = 1024;       // released: 18
constexpr int64_t kMaxWindow = 64;        // released: 12
constexpr int64_t kMaxGrid = 1 << 20;     // released: 96 x 96
constexpr int64_t kMaxMlp = 1 << 20;      // released: 6144
constexpr double kMaxParameters = 68719476736.0;  // 2^36; released: about 0.2 billion

std::string str(int64_t v) { return std::to_string(v); }

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + "]";
}

// A size from 1 to `max`; the message says what mobius accepts and what released models use.
void check_range(const ConfigReader& r, const std::string& key, int64_t v, int64_t max, const std::string& entry = "") {
  const std::string what = entry.empty() ? "is " + str(v) : entry + " is " + str(v);
  if (v < 1) r.fail(key, (entry.empty() ? "must be positive, got " + str(v) : what + "; it must be positive"));
  if (v > max) r.fail(key, what + ", larger than " + str(max) + ", the most mobius accepts");
}

// image_size and patch_size: an int (a square) or [height, width].
void read_pair(const ConfigReader& r, const std::string& key, int64_t max, int64_t& h, int64_t& w) {
  if (!r.has(key)) return;
  const nlohmann::json& v = r.raw().at(key);
  if (v.is_array()) {
    const std::vector<int64_t> hw = r.get_ints(key);
    if (hw.size() != 2)
      r.fail(key, "has " + str(static_cast<int64_t>(hw.size())) + " entries; it is a size or [height, width]");
    h = hw[0];
    w = hw[1];
    check_range(r, key, h, max, "the height");
    check_range(r, key, w, max, "the width");
    return;
  }
  h = w = r.get_int(key);
  check_range(r, key, h, max);
}

}  // namespace

int64_t SwinConfig::mlp_dim(size_t stage) const {
  return static_cast<int64_t>(mlp_ratio * static_cast<double>(dim(stage)));
}

SwinConfig read_swin_config(const nlohmann::json& raw, const std::string& task) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  SwinConfig c;
  read_pair(r, "image_size", kMaxImage, c.image_height, c.image_width);
  read_pair(r, "patch_size", kMaxPatch, c.patch_height, c.patch_width);
  c.num_channels = r.get_int("num_channels", c.num_channels);
  check_range(r, "num_channels", c.num_channels, kMaxChannels);
  c.embed_dim = r.get_int("embed_dim", c.embed_dim);
  check_range(r, "embed_dim", c.embed_dim, kMaxWidth);

  c.depths = r.get_ints("depths", c.depths);
  if (c.depths.empty() || static_cast<int64_t>(c.depths.size()) > kMaxStages)
    r.fail("depths", "has " + str(static_cast<int64_t>(c.depths.size())) + " entries; a Swin model has from 1 to " +
                         str(kMaxStages) + " stages, one entry each");
  for (size_t i = 0; i < c.depths.size(); ++i)
    check_range(r, "depths", c.depths[i], kMaxDepth, "entry " + str(static_cast<int64_t>(i)));
  c.num_heads = r.get_ints("num_heads", c.num_heads);
  if (c.num_heads.size() != c.depths.size())
    r.fail("num_heads", "has " + str(static_cast<int64_t>(c.num_heads.size())) + " entries, but 'depths' has " +
                            str(static_cast<int64_t>(c.depths.size())) + ": one per stage");
  // Stage widths double: the last must stay within the bound (and far from overflowing).
  const int64_t stages = static_cast<int64_t>(c.depths.size());
  if (c.embed_dim > (kMaxWidth >> (stages - 1)))
    r.fail("embed_dim", "(" + str(c.embed_dim) + ") doubled at each of the " + str(stages - 1) +
                            " patch mergings makes the last stage wider than " + str(kMaxWidth) +
                            ", the most mobius accepts");
  for (size_t i = 0; i < c.num_heads.size(); ++i)
    if (c.dim(i) % c.num_heads[i] != 0)
      r.fail("num_heads", "entry " + str(static_cast<int64_t>(i)) + " (" + str(c.num_heads[i]) + ") must divide stage " +
                              str(static_cast<int64_t>(i)) + "'s width " + str(c.dim(i)) + " ('embed_dim' " +
                              str(c.embed_dim) + " * 2^" + str(static_cast<int64_t>(i)) + ")");

  c.window_size = r.get_int("window_size", c.window_size);
  if (c.window_size < 1) r.fail("window_size", "must be at least 1, got " + str(c.window_size));
  if (c.window_size > kMaxWindow)
    r.fail("window_size", "is " + str(c.window_size) + ", larger than " + str(kMaxWindow) + ", the most mobius accepts");

  c.mlp_ratio = r.get_double("mlp_ratio", c.mlp_ratio);
  if (!(c.mlp_ratio > 0)) r.fail("mlp_ratio", "must be positive");
  for (size_t i = 0; i < c.depths.size(); ++i) {
    const double width = c.mlp_ratio * static_cast<double>(c.dim(i));
    if (width < 1 || width > static_cast<double>(kMaxMlp))
      r.fail("mlp_ratio", "(" + describe_value(nlohmann::json(c.mlp_ratio)) + ") makes stage " +
                              str(static_cast<int64_t>(i)) +
                              "'s MLP " + std::to_string(static_cast<int64_t>(width)) + " wide; it must be from 1 to " +
                              str(kMaxMlp));
  }
  c.qkv_bias = r.get_bool("qkv_bias", c.qkv_bias);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  nn::check_activation(r, "hidden_act", c.hidden_act);
  c.use_absolute_embeddings = r.get_bool("use_absolute_embeddings", c.use_absolute_embeddings);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  if (!(c.layer_norm_eps > 0)) r.fail("layer_norm_eps", "must be positive");

  if (c.grid_height() * c.grid_width() > kMaxGrid)
    r.fail("image_size", "in patches of 'patch_size' makes a grid of " + str(c.grid_height()) + " x " +
                             str(c.grid_width()) + " positions, more than the " + str(kMaxGrid) +
                             " mobius accepts");
  // SwinEmbeddings adds a table of (H // p) * (W // p) positions to the padded image's
  // ceil(H / p) * ceil(W / p) patches: transformers itself cannot add them when the two differ.
  if (c.use_absolute_embeddings && (c.image_height % c.patch_height != 0 || c.image_width % c.patch_width != 0))
    r.fail("use_absolute_embeddings", "is true, but 'image_size' (" + str(c.image_height) + " x " + str(c.image_width) +
                                          ") is not a whole number of 'patch_size' (" + str(c.patch_height) + " x " +
                                          str(c.patch_width) + ") patches: the position table holds " +
                                          str((c.image_height / c.patch_height) * (c.image_width / c.patch_width)) +
                                          " positions for the " + str(c.grid_height() * c.grid_width()) +
                                          " patches of the padded image (transformers cannot add them either)");

  // The whole model's parameters, before anything is sized by them.
  double params = static_cast<double>(c.embed_dim) * static_cast<double>(c.num_channels) *
                  static_cast<double>(c.patch_height) * static_cast<double>(c.patch_width);
  for (size_t i = 0; i < c.depths.size(); ++i) {
    const double d = static_cast<double>(c.dim(i)), m = static_cast<double>(c.mlp_dim(i));
    params += static_cast<double>(c.depths[i]) * (4 * d * d + 2 * d * m);
    if (i + 1 < c.depths.size()) params += 8 * d * d;  // the merge's reduction
  }
  if (params > kMaxParameters)
    r.fail("depths", "with 'embed_dim' " + str(c.embed_dim) + " and 'num_heads' " + list_text(c.num_heads) +
                         " describes about " + std::to_string(static_cast<int64_t>(params / 1e9)) +
                         " billion parameters, more than mobius accepts");

  if (task == "image-classification") c.num_labels = nn::read_num_labels(r);
  return c;
}

}  // namespace mobius::swin
