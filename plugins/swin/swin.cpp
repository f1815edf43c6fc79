// swin.cpp - the swin plugin: transformers' SwinModel (task image-feature-extraction:
// last_hidden_state, pooler_output) and SwinForImageClassification (image-classification:
// logits), chosen by config.json's architectures or --task.
//
//   pixel_values float32 [batch_size, num_channels, H, W]    H x W: config.json's image_size
//   h = norm(conv(pad(pixels)))                 patches, the image padded to whole patches
//       (+ position_embeddings)                 use_absolute_embeddings
//   each stage, each layer (shifted windows on every second layer):
//       h = h + o_proj(window_attention(layernorm_before(h)))
//       h = h + fc2(act(fc1(layernorm_after(h))))
//     then between stages h = reduction(norm(merge_2x2(h)))
//   last_hidden_state = layernorm(h);  pooler_output = mean over positions;  logits = classifier
//
// The windows partition a fixed grid: the graph is built for config.json's image_size (its
// pixel_values input has that height and width; ONNX Runtime refuses other sizes by the input's
// shape), and every reshape, pad, roll and crop of transformers' windows and merges is one
// Gather along the positions with an index computed here (windows.cpp). Layer norms and the
// attention softmax compute in float32; the scores of each window get the relative position
// bias (the table gathered at relative_position_index, a constant) and, in shifted layers,
// transformers' -100 between positions of different regions. With ONNX Runtime's operators and
// float32 activations the attention is one MultiHeadAttention (com.microsoft) with that additive
// bias, the GELU its Gelu and the residual norms SkipLayerNormalization; otherwise standard ONNX.
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"
#include "swin.hpp"

namespace mobius::swin {
namespace {

using namespace mobius::op;

// torch.nn.LayerNorm's default eps: SwinEmbeddings' norm and SwinPatchMerging's take none from
// the config.
constexpr double kTorchNormEps = 1e-5;

std::string str(int64_t v) { return std::to_string(v); }

// What every layer of one graph shares: the batch size and the index constants and masks, each
// made once per geometry.
struct Shared {
  Graph& g;
  DType act;
  Value batch;  // int64 [1]
  std::map<std::string, Value> memo;
};

Value memo_ints(Shared& s, const std::string& key, const std::vector<int64_t>& v) {
  auto it = s.memo.find(key);
  if (it != s.memo.end()) return it->second;
  return s.memo[key] = Ints(s.g, v);
}

// x [B, ...] viewed as [batch_size, dims...] (the batch kept symbolic in the value's type).
Value batch_view(Shared& s, Value x, const std::vector<int64_t>& dims) {
  std::vector<Dim> d{Dim("batch_size")};
  for (int64_t v : dims) d.emplace_back(v);
  return Reshape(x, Concat({s.batch, Ints(s.g, dims)}, 0), TensorType(x.dtype(), d));
}

// x [B, L, C] gathered along its positions at `index` (L: a zero vector, the padding of a map);
// x itself when the index reads every position in order.
Value gather_positions(Shared& s, Value x, const std::vector<int64_t>& index, const std::string& key) {
  const int64_t length = x.dim(1).size;
  bool identity = static_cast<int64_t>(index.size()) == length, pads = false;
  for (size_t i = 0; i < index.size(); ++i) {
    identity = identity && index[i] == static_cast<int64_t>(i);
    pads = pads || index[i] == length;
  }
  if (identity) return x;
  if (pads) {
    TensorType t = x.type();
    t.dims[1] = Dim(length + 1);
    x = s.g.node("Pad", {x, Ints(s.g, {0, 0, 0, 0, 1, 0})}, {t})[0];
  }
  return Gather(x, memo_ints(s, key, index), 1);
}

// SwinPatchEmbeddings' projection: Conv2d(num_channels, embed_dim, kernel = stride = patch) over
// the image padded at the bottom and right to whole patches (maybe_pad), weight as stored.
class PatchProjection : public nn::Module {
 public:
  explicit PatchProjection(const SwinConfig& c) : c_(c) {
    declare("weight", {c.embed_dim, c.num_channels, c.patch_height, c.patch_width});
    declare("bias", {c.embed_dim});
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    const int64_t pad_h = c_.grid_height() * c_.patch_height - c_.image_height;
    const int64_t pad_w = c_.grid_width() * c_.patch_width - c_.image_width;
    TensorType t(x.dtype(), {x.dim(0), Dim(c_.embed_dim), Dim(c_.grid_height()), Dim(c_.grid_width())});
    return g.node("Conv", {x, param(g, "weight", x.dtype()), param(g, "bias", x.dtype())}, {t},
                  {Attr("kernel_shape", {c_.patch_height, c_.patch_width}),
                   Attr("strides", {c_.patch_height, c_.patch_width}), Attr("pads", {int64_t{0}, int64_t{0}, pad_h, pad_w}),
                   Attr("dilations", {int64_t{1}, int64_t{1}}), Attr("group", int64_t{1})})[0];
  }

 private:
  const SwinConfig& c_;
};

// SwinEmbeddings: the patches as positions [batch, grid, embed_dim], normed, plus the absolute
// position table when the config has one.
class Embeddings : public nn::Module {
 public:
  explicit Embeddings(const SwinConfig& c) : c_(c) {
    projection_ = &add<PatchProjection>("patch_embeddings.projection", c);
    norm_ = &add<nn::LayerNorm>("norm", c.embed_dim, kTorchNormEps);
    if (c.use_absolute_embeddings) declare("position_embeddings", {1, c.grid_height() * c.grid_width(), c.embed_dim});
  }
  Value forward(Shared& s, Value pixels) const {
    Value p = projection_->forward(s.g, pixels);  // [B, E, gh, gw]
    Value h;
    {
      ScopeGuard sg(s.g, path());
      h = Transpose(Reshape(p, {0, c_.embed_dim, c_.grid_height() * c_.grid_width()}), {0, 2, 1});
    }
    h = norm_->forward(s.g, h);
    if (!c_.use_absolute_embeddings) return h;
    ScopeGuard sg(s.g, path());
    return Add(h, param(s.g, "position_embeddings", h.dtype()));
  }

 private:
  const SwinConfig& c_;
  const PatchProjection* projection_;
  const nn::LayerNorm* norm_;
};

// SwinRelativePositionBias's table [(2w - 1)^2, heads], at the checkpoint's name
// attention.self.relative_position_bias_table.
class BiasTable : public nn::Module {
 public:
  BiasTable(int64_t window, int64_t heads) {
    declare("relative_position_bias_table", {(2 * window - 1) * (2 * window - 1), heads});
  }
};

// One SwinLayer over an H x W map, its windows fixed (layer_windows).
class Layer : public nn::Module {
 public:
  Layer(const SwinConfig& c, size_t stage, const Windows& w) : w_(w), heads_(c.num_heads[stage]) {
    const int64_t d = c.dim(stage);
    head_dim_ = d / heads_;
    act_ = c.hidden_act;
    before_ = &add<nn::LayerNorm>("layernorm_before", d, c.layer_norm_eps);
    q_ = &add<nn::Linear>("attention.self.query", d, d, c.qkv_bias);
    k_ = &add<nn::Linear>("attention.self.key", d, d, c.qkv_bias);
    v_ = &add<nn::Linear>("attention.self.value", d, d, c.qkv_bias);
    table_ = &add<BiasTable>("attention.self", w.window, heads_);
    o_ = &add<nn::Linear>("attention.output.dense", d, d, true);
    after_ = &add<nn::LayerNorm>("layernorm_after", d, c.layer_norm_eps);
    fc1_ = &add<nn::Linear>("intermediate.dense", d, c.mlp_dim(stage), true);
    fc2_ = &add<nn::Linear>("output.dense", c.mlp_dim(stage), d, true);
  }

  Value forward(Shared& s, Value h) const {
    Graph& g = s.g;
    const std::string geometry = "h" + str(w_.height) + "w" + str(w_.width) + "win" + str(w_.window) + "s" + str(w_.shift);
    const int64_t n = w_.tokens(), windows = w_.count(), d = heads_ * head_dim_;
    Value x = before_->forward(g, h);
    Value attn;
    {
      ScopeGuard sg(g, path() + ".attention");
      // maybe_pad, cyclic_shift and window_partition: [B, windows * n, d] -> [B * windows, n, d].
      x = Reshape(gather_positions(s, x, w_.partition(), "partition/" + geometry), {-1, n, d});
      auto qkv = nn::packed_linears(g, x, {q_, k_, v_}, path() + ".attention.self.qkv");
      Value bias = scores_bias(s, geometry);
      if (nn::ort_ops(g.context()) && x.dtype() == DType::Float) {
        attn = g.node("MultiHeadAttention", {qkv[0], qkv[1], qkv[2], Value(), Value(), bias}, {qkv[0].type()},
                      {Attr("num_heads", heads_), Attr("scale", 1.0 / std::sqrt(static_cast<double>(head_dim_)))},
                      "com.microsoft")[0];
      } else {
        attn = nn::encoder_attention(g, qkv[0], qkv[1], qkv[2], heads_, head_dim_, bias);
      }
    }
    attn = o_->forward(g, attn);
    {
      ScopeGuard sg(g, path() + ".attention");
      // window_reverse, the shift undone, the padding cropped: [B, H * W, d].
      attn = gather_positions(s, batch_view(s, attn, {windows * n, d}), w_.reverse(), "reverse/" + geometry);
    }
    auto [normed, residual] = after_->forward_skip(g, attn, h);
    Value y = fc1_->forward(g, normed);
    {
      ScopeGuard sg(g, path() + ".intermediate");
      y = nn::encoder_activation(g, act_, y);
    }
    y = fc2_->forward(g, y);
    ScopeGuard sg(g, path());
    return Add(y, residual);
  }

  const Windows& windows() const { return w_; }

 private:
  // The additive float32 bias of the scores: the relative position bias [1, heads, n, n], plus,
  // in a shifted layer, the regions' mask of each window, for each image [B * windows, heads, n, n].
  Value scores_bias(Shared& s, const std::string& geometry) const {
    Graph& g = s.g;
    const int64_t n = w_.tokens(), windows = w_.count();
    Value index = memo_ints(s, "relative_index/" + str(w_.window), relative_position_index(w_.window));
    Value table = table_->param(g, "relative_position_bias_table", DType::Float);  // [(2w-1)^2, heads]
    Value rel = Reshape(Transpose(Gather(table, index, 0), {1, 0}), {1, heads_, n, n});
    if (w_.shift == 0) return rel;
    const std::string key = "mask/" + geometry;
    Value mask;
    if (auto it = s.memo.find(key); it != s.memo.end()) {
      mask = it->second;
    } else {
      ScopeGuard sg(g, "shift_mask");
      const std::vector<int64_t> regions = w_.regions();
      Value labels = Constant(g, DType::Float, {windows, n}, std::vector<double>(regions.begin(), regions.end()), "regions");
      Value diff = Sub(Unsqueeze(labels, {1}), Unsqueeze(labels, {2}));  // [windows, n, n]
      mask = Unsqueeze(Where(Equal(diff, Scalar(g, DType::Float, 0.0)), Scalar(g, DType::Float, 0.0),
                             Scalar(g, DType::Float, -100.0)),
                       {1});  // [windows, 1, n, n]
      s.memo[key] = mask;
    }
    Value both = Unsqueeze(Add(rel, mask), {0});  // [1, windows, heads, n, n]
    Value per_image = Expand(both, Concat({s.batch, Ints(g, {windows, heads_, n, n})}, 0),
                             TensorType(DType::Float, {Dim("batch_size"), Dim(windows), Dim(heads_), Dim(n), Dim(n)}));
    return Reshape(per_image, {-1, heads_, n, n});
  }

  Windows w_;
  int64_t heads_, head_dim_;
  std::string act_;
  const nn::LayerNorm *before_, *after_;
  const nn::Linear *q_, *k_, *v_, *o_, *fc1_, *fc2_;
  const BiasTable* table_;
};

// SwinPatchMerging: each 2x2 block's four positions concatenated (the odd side padded with
// zeros), normed, reduced to twice the width.
class PatchMerging : public nn::Module {
 public:
  PatchMerging(int64_t dim, Resolution r) : dim_(dim), r_(r) {
    norm_ = &add<nn::LayerNorm>("norm", 4 * dim, kTorchNormEps);
    reduction_ = &add<nn::Linear>("reduction", 4 * dim, 2 * dim, false);
  }
  Value forward(Shared& s, Value h) const {
    const int64_t merged = ((r_.height + 1) / 2) * ((r_.width + 1) / 2);
    {
      ScopeGuard sg(s.g, path());
      h = gather_positions(s, h, merge_positions(r_.height, r_.width), "merge/" + str(r_.height) + "x" + str(r_.width));
      h = batch_view(s, h, {merged, 4 * dim_});
    }
    return reduction_->forward(s.g, norm_->forward(s.g, h));
  }

 private:
  int64_t dim_;
  Resolution r_;
  const nn::LayerNorm* norm_;
  const nn::Linear* reduction_;
};

// SwinModel: embeddings, the stages (encoder.layers.i.blocks.j, encoder.layers.i.downsample) and
// the final layernorm, at the checkpoint's names under `prefix` ("swin." in a classifier's).
class Backbone : public nn::Module {
 public:
  explicit Backbone(const SwinConfig& c) : c_(c) {
    embeddings_ = &add<Embeddings>("embeddings", c);
    const std::vector<Resolution> res = stage_resolutions(c);
    for (size_t i = 0; i < c.depths.size(); ++i) {
      const std::string stage = "encoder.layers." + str(static_cast<int64_t>(i));
      for (int64_t j = 0; j < c.depths[i]; ++j)
        layers_.push_back(&add<Layer>(stage + ".blocks." + str(j), c, i,
                                      layer_windows(res[i].height, res[i].width, c.window_size, j % 2 == 1)));
      if (i + 1 < c.depths.size()) merges_.push_back(&add<PatchMerging>(stage + ".downsample", c.dim(i), res[i]));
    }
    norm_ = &add<nn::LayerNorm>("layernorm", c.num_features(), c.layer_norm_eps);
  }
  // last_hidden_state [batch_size, positions, num_features].
  Value forward(Shared& s, Value pixels) const {
    Value h = embeddings_->forward(s, pixels);
    size_t layer = 0;
    for (size_t i = 0; i < c_.depths.size(); ++i) {
      for (int64_t j = 0; j < c_.depths[i]; ++j) h = layers_[layer++]->forward(s, h);
      if (i < merges_.size()) h = merges_[i]->forward(s, h);
    }
    return norm_->forward(s.g, h);
  }
  const std::vector<const Layer*>& layers() const { return layers_; }

 private:
  const SwinConfig& c_;
  const Embeddings* embeddings_;
  std::vector<const Layer*> layers_;
  std::vector<const PatchMerging*> merges_;
  const nn::LayerNorm* norm_;
};

// The root: the backbone under its prefix, and the classifier of image-classification.
class Root : public nn::Module {
 public:
  Root(const SwinConfig& c, const std::string& prefix, bool classifier) {
    backbone = &add<Backbone>(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1), c);
    if (classifier) head = &add<nn::Linear>("classifier", c.num_features(), c.num_labels, true);
  }
  const Backbone* backbone = nullptr;
  const nn::Linear* head = nullptr;
};

// transformers 5 renames a few of Swin's tensors when it loads them (conversion_mapping.py) and
// back when it saves; a checkpoint holding the new names is read under them.
std::optional<std::string> renamed(const BuildContext& ctx, const std::string& name) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {".attention.self.query.", ".attention.q_proj."},
      {".attention.self.key.", ".attention.k_proj."},
      {".attention.self.value.", ".attention.v_proj."},
      {".attention.self.relative_position_bias_table", ".attention.relative_position_bias.relative_position_bias_table"},
      {".attention.output.dense.", ".attention.o_proj."},
      {".intermediate.dense.", ".mlp.fc1."},
      {".output.dense.", ".mlp.fc2."}};
  if (ctx.no_weights() || ctx.query_tensor(name)) return std::nullopt;
  for (const auto& [from, to] : kRenames) {
    const size_t at = name.find(from);
    if (at == std::string::npos) continue;
    std::string other = name;
    other.replace(at, std::string(from).size(), to);
    if (ctx.query_tensor(other)) return other;
    return std::nullopt;
  }
  return std::nullopt;
}

[[noreturn]] void refuse(const std::string& why) {
  throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] config.json: " + why);
}

// The checkpoint against config.json, before any tensor is planned: the patch projection, the
// stages and their layers, each layer's bias table against its window and heads, the labels.
void check_checkpoint(const BuildContext& ctx, const SwinConfig& c, const Root& root, const std::string& prefix,
                      const std::string& task) {
  if (ctx.no_weights()) return;
  auto tensor = [&](const std::string& name) {
    return ctx.query_tensor(renamed(ctx, name).value_or(name));
  };
  const std::string projection = prefix + "embeddings.patch_embeddings.projection.weight";
  if (auto t = tensor(projection); t && t->dims.size() == 4) {
    const std::vector<int64_t> want = {c.embed_dim, c.num_channels, c.patch_height, c.patch_width};
    const char* keys[] = {"embed_dim", "num_channels", "patch_size", "patch_size"};
    for (size_t i = 0; i < 4; ++i)
      if (t->dims[i] != want[i])
        refuse("'" + std::string(keys[i]) + "' disagrees with the checkpoint's " + projection + " " + shape_text(t->dims) +
               " (the config makes it " + shape_text(want) + ")");
  }
  auto present = [&](int64_t stage, int64_t block) {
    const std::string layer = prefix + "encoder.layers." + str(stage) + ".blocks." + str(block);
    return tensor(layer + ".layernorm_before.weight").has_value();
  };
  const auto stages = static_cast<int64_t>(c.depths.size());
  int64_t held = 0;
  while (held <= stages && present(held, 0)) ++held;
  if (held != stages)
    refuse("'depths' has " + str(stages) + " entries, one per stage, but the checkpoint's " + prefix +
           "encoder.layers holds " + (held > stages ? "more stages" : str(held)));
  for (int64_t i = 0; i < stages; ++i) {
    const int64_t depth = c.depths[static_cast<size_t>(i)];
    int64_t blocks = 0;
    while (blocks <= depth && present(i, blocks)) ++blocks;
    if (blocks != depth)
      refuse("'depths' entry " + str(i) + " is " + str(depth) + ", but the checkpoint's " + prefix + "encoder.layers." +
             str(i) + " holds " + (blocks > depth ? "more layers" : str(blocks) + " layers"));
  }
  size_t layer = 0;
  for (size_t i = 0; i < c.depths.size(); ++i)
    for (int64_t j = 0; j < c.depths[i]; ++j) {
      const Layer& l = *root.backbone->layers()[layer++];
      const std::string name = l.full_name("attention.self.relative_position_bias_table");
      const auto t = tensor(name);
      if (!t || t->dims.size() != 2) continue;  // the host's preflight names it
      if (t->dims[1] != c.num_heads[i])
        refuse("'num_heads' entry " + str(static_cast<int64_t>(i)) + " is " + str(c.num_heads[i]) +
               ", but the checkpoint's " + name + " has " + str(t->dims[1]) + " columns, one per head");
      const Windows& w = l.windows();
      const int64_t rows = (2 * w.window - 1) * (2 * w.window - 1);
      if (t->dims[0] == rows) continue;
      std::string why = "'window_size' is " + str(c.window_size) + ", but the checkpoint's " + name + " has " +
                        str(t->dims[0]) + " rows";
      if (w.window != c.window_size)
        why += "; stage " + str(static_cast<int64_t>(i)) + "'s " + str(w.height) + " x " + str(w.width) +
               " map is smaller than the window, which transformers clamps to " + str(w.window) + " x " +
               str(w.window) + " there, so the table must hold (2 * " + str(w.window) + " - 1)^2 = " + str(rows) +
               " rows (transformers cannot apply a table of larger windows either)";
      else
        why += ", not (2 * window_size - 1)^2 = " + str(rows);
      refuse(why);
    }
  if (task == "image-classification") nn::check_classifier_rows(ctx, "classifier", c.num_labels);
}

void build_swin(BuildContext& ctx, const SwinConfig& c, const std::string& task) {
  const bool classify = task == "image-classification";
  // A classifier's checkpoint holds the model under "swin."; SwinModel's at the root.
  const std::string probe = "embeddings.patch_embeddings.projection.weight";
  const std::string prefix =
      ctx.no_weights() ? (classify ? "swin." : "") : (ctx.query_tensor("swin." + probe) ? "swin." : "");
  // Buffers older transformers saved (the index is computed here), SwinForMaskedImageModeling's
  // mask token, and the classifier when building the base model of a classifier's checkpoint.
  ctx.ignore_tensors(prefix + "encoder.layers.*relative_position_index");
  ctx.ignore_tensors(prefix + "embeddings.mask_token");
  if (!classify) ctx.ignore_tensors("classifier.*");

  Root root(c, prefix, classify);
  root.retarget([&ctx](const std::string& name) { return renamed(ctx, name); });
  check_checkpoint(ctx, c, root, prefix, task);

  Graph& g = ctx.graph();
  // Pixels in float32 for every weight dtype, cast to the activation dtype inside.
  Value pixels = g.input("pixel_values", TensorType(DType::Float, {Dim("batch_size"), Dim(c.num_channels),
                                                                   Dim(c.image_height), Dim(c.image_width)}));
  Shared s{g, nn::activation_dtype(ctx), DimOf(pixels, 0), {}};
  Value h = root.backbone->forward(s, Cast(pixels, s.act));
  Value pooled;
  {
    ScopeGuard sg(g, "pooler");
    // AdaptiveAvgPool1d(1) over the positions, averaged in float32.
    pooled = Cast(ReduceMean(Cast(h, DType::Float), {1}, false), s.act);
  }
  if (!classify) {
    g.output(h, "last_hidden_state");
    g.output(pooled, "pooler_output");
    return;
  }
  g.output(root.head->forward(g, pooled), "logits");
}

void register_all(PluginRegistrar& r) {
  r.add_tasks(
      "swin", swin_tasks(),
      [](const nlohmann::json& raw, const std::string& task) { return nlohmann::json(read_swin_config(raw, task)); },
      [](BuildContext& ctx, const nlohmann::json& cfg) {
        build_swin(ctx, cfg.get<SwinConfig>(), cfg.at("task").get<std::string>());
      });
}

}  // namespace
}  // namespace mobius::swin

MOBIUS_PLUGIN("swin", "0.1.0", "mobius", mobius::swin::register_all)
