// vision.cpp - ViT-like vision towers as spec rows (mobius/sdk/vision.hpp): CLIP's and SigLIP's
// rows, reading and checking a family's config, its preprocessor_config.json and its checkpoint
// against the config, and the registration. The tower and the heads are vision_tower.cpp's.
#include <cmath>
#include <optional>
#include <tuple>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/vision.hpp"

namespace mobius::nn {

namespace {

// Bounds far above released models' (images of 518 pixels, patches of 14 to 32, 3 channels, 4
// registers, 1370 positions).
constexpr int64_t kMaxImage = 1 << 16, kMaxChannels = 1024, kMaxRegisters = 1 << 12, kMaxPositions = 1 << 20;

// A size key from `lo` to `hi`, naming the key (and, for a [height, width] pair, the entry).
void check_range(const ConfigReader& r, const std::string& key, int64_t v, int64_t lo, int64_t hi,
                 const char* entry = nullptr) {
  if (v >= lo && v <= hi) return;
  r.fail(key, std::string(entry ? std::string(entry) + " " : "") + "is " + std::to_string(v) + "; it must be from " +
                  std::to_string(lo) + " to " + std::to_string(hi));
}

// image_size or patch_size: one number for both sides, or [height, width].
std::pair<int64_t, int64_t> read_pair(const ConfigReader& r, const std::string& key, int64_t def_h, int64_t def_w) {
  if (!r.has(key)) return {def_h, def_w};
  if (r.raw().at(key).is_array()) {
    const std::vector<int64_t> v = r.get_ints(key);
    if (v.size() != 2)
      r.fail(key, "has " + std::to_string(v.size()) + " entries; it is one number or [height, width]");
    check_range(r, key, v[0], 1, kMaxImage, "height");
    check_range(r, key, v[1], 1, kMaxImage, "width");
    return {v[0], v[1]};
  }
  const int64_t v = r.get_int(key);
  check_range(r, key, v, 1, kMaxImage);
  return {v, v};
}

std::string grid_text(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

// The position table's rows before the patches': the class and distillation tokens'.
int64_t leading_positions(const VisionSpec& spec) {
  return (spec.names.cls.empty() ? 0 : 1) + (spec.names.distillation.empty() ? 0 : 1);
}

// CLIPVisionModel (configuration_clip.py's CLIPVisionConfig, modeling_clip.py): the class token
// and positions as [hidden] and an nn.Embedding, a patch convolution without bias, pre_layrnorm
// before the layers and no norm after them, pooler_output post_layernorm of the class token;
// quick_gelu, 32-pixel patches and layer norm eps 1e-5 by default.
VisionSpec clip_row() {
  VisionSpec s = VisionSpec::of("clip_vision_model", "vision_model.");
  s.defaults.hidden_act = "quick_gelu";
  s.defaults.layer_norm_eps = 1e-5;
  s.defaults.patch_height = s.defaults.patch_width = 32;
  s.qkv_bias_key = false;
  VisionNames& n = s.names;
  n.patch = "embeddings.patch_embedding";
  n.patch_bias = false;
  n.cls = "embeddings.class_embedding";
  n.position = "embeddings.position_embedding.weight";
  n.flat_embeddings = true;
  n.pre_norm = "pre_layrnorm";
  n.layer = "encoder.layers.";
  n.norm1 = "layer_norm1";
  n.query = "self_attn.q_proj";
  n.key = "self_attn.k_proj";
  n.value = "self_attn.v_proj";
  n.attn_out = "self_attn.out_proj";
  n.norm2 = "layer_norm2";
  n.ffn_in = "mlp.fc1";
  n.ffn_out = "mlp.fc2";
  n.final_norm = "";
  n.pooler = "";
  n.pooled_norm = "post_layernorm";
  n.projection = "visual_projection";
  n.classifier = "";
  s.pooling = VisionSpec::Pooling::NormedCls;
  return s;
}

// SiglipVisionModel (configuration_siglip.py's SiglipVisionConfig, modeling_siglip.py): CLIP's
// names without the class token and pre_layrnorm, the patch convolution biased, post_layernorm
// after the layers, pooler_output the attention-pooling head when vision_use_head;
// gelu_pytorch_tanh, 16-pixel patches and layer norm eps 1e-6 by default.
VisionSpec siglip_row() {
  VisionSpec s = clip_row();
  s.model_type = "siglip_vision_model";
  s.defaults = VisionConfig();
  s.defaults.model_type = s.model_type;
  s.defaults.hidden_act = "gelu_pytorch_tanh";
  s.defaults.layer_norm_eps = 1e-6;
  s.use_head_key = true;
  VisionNames& n = s.names;
  n.patch_bias = true;
  n.cls = "";
  n.pre_norm = "";
  n.final_norm = "post_layernorm";
  n.pooled_norm = "";
  n.attention_pool = "head";
  n.projection = "";
  s.pooling = VisionSpec::Pooling::AttentionHead;
  return s;
}

}  // namespace

const VisionSpec& clip_vision() {
  static const VisionSpec s = clip_row();
  return s;
}

const VisionSpec& siglip_vision() {
  static const VisionSpec s = siglip_row();
  return s;
}

VisionConfig read_vision_config(const VisionSpec& spec, const nlohmann::json& raw, const std::string& where) {
  if (!raw.is_object()) throw Error("[config] " + where + " must be a JSON object");
  ConfigReader r(raw, where);
  VisionConfig c = spec.defaults;
  c.model_type = spec.model_type;
  c.hidden_size = r.get_int("hidden_size", c.hidden_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", c.num_attention_heads);
  std::string width_key = "intermediate_size";
  if (spec.mlp_ratio_key) {
    // Dinov2MLP: int(hidden_size * mlp_ratio) wide.
    width_key = "mlp_ratio";
    const double ratio = r.get_double("mlp_ratio", 4.0);
    if (!(ratio > 0) || ratio * static_cast<double>(c.hidden_size) >= static_cast<double>(1 << 20))
      r.fail("mlp_ratio", "is " + describe_value(raw.value("mlp_ratio", nlohmann::json(ratio))) +
                              "; the MLP's width, hidden_size * mlp_ratio, must be from 1 to 2^20");
    c.intermediate_size = static_cast<int64_t>(static_cast<double>(c.hidden_size) * ratio);
  } else {
    c.intermediate_size = r.get_int("intermediate_size", c.intermediate_size);
  }
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  std::tie(c.image_height, c.image_width) = read_pair(r, "image_size", c.image_height, c.image_width);
  std::tie(c.patch_height, c.patch_width) = read_pair(r, "patch_size", c.patch_height, c.patch_width);
  // The convolution floors each side to whole patches, as transformers does; an image smaller
  // than one patch has none.
  if (c.patch_height > c.image_height || c.patch_width > c.image_width)
    r.fail("patch_size", "(" + grid_text(c.patch_height, c.patch_width) + ") is larger than 'image_size' (" +
                             grid_text(c.image_height, c.image_width) + "): the image holds no patch");
  c.num_channels = r.get_int("num_channels", c.num_channels);
  check_range(r, "num_channels", c.num_channels, 1, kMaxChannels);
  if (spec.qkv_bias_key) c.qkv_bias = r.get_bool("qkv_bias", c.qkv_bias);
  if (spec.swiglu_key) c.use_swiglu_ffn = r.get_bool("use_swiglu_ffn", c.use_swiglu_ffn);
  if (c.use_swiglu_ffn) {
    // Dinov2SwiGLUFFN: two thirds of the MLP's width, rounded up to a multiple of 8.
    c.intermediate_size = (c.intermediate_size * 2 / 3 + 7) / 8 * 8;
  }
  if (spec.registers_key) {
    c.num_register_tokens = r.get_int("num_register_tokens", c.num_register_tokens);
    check_range(r, "num_register_tokens", c.num_register_tokens, 0, kMaxRegisters);
  }
  c.pooler_output_size = c.hidden_size;
  if (spec.pooler_keys) {
    c.pooler_output_size = r.get_int("pooler_output_size", c.hidden_size);
    check_range(r, "pooler_output_size", c.pooler_output_size, 1, 1 << 17);
    c.pooler_act = r.get_string("pooler_act", c.pooler_act);
    check_activation(r, "pooler_act", c.pooler_act);
  }
  if (spec.use_head_key) c.use_head = r.get_bool("vision_use_head", c.use_head);
  c.num_labels = read_num_labels(r, c.num_labels);
  if (auto a = raw.find("architectures"); a != raw.end() && a->is_array() && !a->empty() && a->front().is_string()) {
    const std::string cls = a->front().get<std::string>();
    const std::string teacher = "WithTeacher";
    c.distilled_head = !spec.names.cls_classifier.empty() && cls.size() > teacher.size() &&
                       cls.compare(cls.size() - teacher.size(), teacher.size(), teacher) == 0;
    const std::string projected = "WithProjection";
    c.with_projection = !spec.names.projection.empty() && cls.size() > projected.size() &&
                        cls.compare(cls.size() - projected.size(), projected.size(), projected) == 0;
  }
  if (!spec.names.projection.empty()) {
    c.projection_dim = r.get_int("projection_dim", c.projection_dim);
    check_range(r, "projection_dim", c.projection_dim, 1, 1 << 20);
  }
  const int64_t grid = (c.image_height / c.patch_height) * (c.image_width / c.patch_width);
  if (grid + leading_positions(spec) > kMaxPositions)
    r.fail("image_size", "(" + grid_text(c.image_height, c.image_width) + ") over 'patch_size' (" +
                             grid_text(c.patch_height, c.patch_width) + ") makes " + std::to_string(grid) +
                             " patches, more than " + std::to_string(kMaxPositions));
  EncoderSizes sizes{1, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                     grid + leading_positions(spec), c.layer_norm_eps, c.hidden_act};
  sizes.intermediate_key = width_key;
  check_encoder_config(r, spec.model_type, sizes);
  return c;
}

void check_image_preprocessor(const BuildContext& ctx, const std::string& model_type, int64_t num_channels) {
  const std::optional<std::string> text = ctx.read_source_file("preprocessor_config.json");
  if (!text) return;
  const nlohmann::json j = parse_config_text(*text, "preprocessor_config.json");
  ConfigReader r(j, "preprocessor_config.json");
  // size and crop_size: a number, (height, width), or an object of sides (transformers'
  // get_size_dict).
  for (const char* key : {"size", "crop_size"}) {
    if (!r.has(key)) continue;
    const nlohmann::json& v = j.at(key);
    auto side = [&](const nlohmann::json& x, const std::string& what) {
      if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
        r.fail(key, what + "must be a positive number of pixels, got " + describe_value(x));
    };
    if (v.is_object()) {
      for (const char* s : {"height", "width", "shortest_edge", "longest_edge"})
        if (auto it = v.find(s); it != v.end() && !it->is_null()) side(*it, std::string("'") + s + "' ");
    } else if (v.is_array()) {  // (height, width)
      if (v.size() != 2) r.fail(key, "has " + std::to_string(v.size()) + " entries; it is (height, width)");
      side(v[0], "height ");
      side(v[1], "width ");
    } else {
      side(v, "");
    }
  }
  // image_mean and image_std: one value for every channel, or one per channel.
  for (const char* key : {"image_mean", "image_std"}) {
    if (!r.has(key)) continue;
    const nlohmann::json& v = j.at(key);
    std::vector<nlohmann::json> values;
    if (v.is_array()) {
      if (static_cast<int64_t>(v.size()) != num_channels)
        r.fail(key, "has " + std::to_string(v.size()) + " entries, but the image has " + std::to_string(num_channels) +
                        " channels (config.json: 'num_channels'); " + model_type + " normalizes each channel");
      values.assign(v.begin(), v.end());
    } else {
      values.push_back(v);
    }
    for (const nlohmann::json& x : values) {
      if (!x.is_number() || !std::isfinite(x.get<double>()))
        r.fail(key, "must hold finite numbers, got " + describe_value(x));
      if (std::string(key) == "image_std" && !(x.get<double>() > 0))
        r.fail(key, "must be positive (each channel is divided by it), got " + describe_value(x));
    }
  }
  if (r.has("rescale_factor") && !(r.get_double("rescale_factor") > 0))
    r.fail("rescale_factor", "must be positive, got " + describe_value(j.at("rescale_factor")));
}

void check_vision_checkpoint(const BuildContext& ctx, const VisionSpec& spec, const VisionConfig& c,
                             const std::string& prefix) {
  if (ctx.no_weights()) return;
  const VisionNames& n = spec.names;
  auto refuse = [](const std::string& keys, const std::string& tensor, const std::vector<int64_t>& dims,
                   const std::string& why) {
    throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] config.json: " + keys + ", but the checkpoint's '" + tensor +
                                              "' has shape " + shape_text(dims) + why);
  };
  const std::string h = std::to_string(c.hidden_size);
  // The patch convolution: [hidden_size, num_channels, patch height, patch width].
  const std::string patch = prefix + n.patch + ".weight";
  if (auto t = ctx.query_tensor(patch)) {
    const std::vector<int64_t> want = {c.hidden_size, c.num_channels, c.patch_height, c.patch_width};
    if (t->dims != want)
      refuse("'hidden_size' " + h + ", 'num_channels' " + std::to_string(c.num_channels) + " and 'patch_size' " +
                 grid_text(c.patch_height, c.patch_width) + " make the patch convolution " + shape_text(want),
             patch, t->dims, "");
  }
  // The position table: a row per leading token and per patch of the config's grid.
  const std::string position = prefix + n.position;
  if (auto t = ctx.query_tensor(position)) {
    const int64_t gh = c.image_height / c.patch_height, gw = c.image_width / c.patch_width;
    const int64_t rows = gh * gw + leading_positions(spec);
    const std::vector<int64_t> want =
        n.flat_embeddings ? std::vector<int64_t>{rows, c.hidden_size} : std::vector<int64_t>{1, rows, c.hidden_size};
    if (t->dims != want) {
      const int64_t lead = leading_positions(spec);
      refuse("'image_size' " + grid_text(c.image_height, c.image_width) + " over 'patch_size' " +
                 grid_text(c.patch_height, c.patch_width) + " is a " + grid_text(gh, gw) + " grid of patches, " +
                 std::to_string(rows) + " positions" +
                 (lead ? " with the " + std::string(lead == 1 ? "class token" : "class and distillation tokens") : "") +
                 " ('hidden_size' " + h + " wide)",
             position, t->dims, "");
    }
  }
  if (!n.registers.empty() && c.num_register_tokens > 0) {
    const std::string reg = prefix + n.registers;
    if (auto t = ctx.query_tensor(reg); t && t->dims != std::vector<int64_t>{1, c.num_register_tokens, c.hidden_size})
      refuse("'num_register_tokens' is " + std::to_string(c.num_register_tokens), reg, t->dims, "");
  }
  // The layers: layer i's first norm, for every i below num_hidden_layers and none beyond.
  auto has_layer = [&](int64_t i) {
    return ctx.query_tensor(prefix + n.layer + std::to_string(i) + "." + n.norm1 + ".weight").has_value();
  };
  int64_t held = 0;
  while (held <= c.num_hidden_layers && has_layer(held)) ++held;
  if (held != c.num_hidden_layers && held > 0)
    throw Error(MOBIUS_ERROR_KIND_CONFIG,
                "[config] config.json: 'num_hidden_layers' is " + std::to_string(c.num_hidden_layers) +
                    ", but the checkpoint holds " +
                    (held > c.num_hidden_layers ? "more layers ('" + prefix + n.layer +
                                                      std::to_string(c.num_hidden_layers) + ".*')"
                                                : std::to_string(held) + " (" + prefix + n.layer + "0 to " +
                                                      prefix + n.layer + std::to_string(held - 1) + ")"));
}

void register_vision(PluginRegistrar& r, const VisionSpec& spec, const std::vector<std::string>& tasks) {
  r.add_tasks(
      spec.model_type, tasks,
      [&spec](const nlohmann::json& raw, const std::string&) { return nlohmann::json(read_vision_config(spec, raw)); },
      [&spec](BuildContext& ctx, const nlohmann::json& cfg) {
        build_vision(ctx, spec, cfg.get<VisionConfig>(), cfg.at("task").get<std::string>());
      });
}

}  // namespace mobius::nn
