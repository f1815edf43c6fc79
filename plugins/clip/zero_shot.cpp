// zero_shot.cpp - CLIPModel and SiglipModel: zero-shot image classification, three graphs of one
// folder (task zero-shot-image-classification): `text_model` and `vision_model`, each tower with
// its projection (transformers.js's CLIPTextModelWithProjection / CLIPVisionModelWithProjection,
// SiglipTextModel / SiglipVisionModel), and `model`, both towers and the logits.
//
// Semantics follow transformers' models/clip/modeling_clip.py (CLIPModel.forward) and
// models/siglip/modeling_siglip.py (SiglipModel.forward):
//   image_embeds = visual_projection(vision pooler_output)   CLIP (SigLIP: the pooler_output)
//   text_embeds  = text_projection(text pooler_output)       CLIP (SigLIP: the text head's output)
//   both divided by their L2 norm (in `model`; the towers' graphs return them unnormalized)
//   logits_per_text  = text_embeds @ image_embeds^T * exp(logit_scale) (+ logit_bias, SigLIP)
//   logits_per_image = logits_per_text^T
// CLIP's text tower takes an attention_mask (padding hidden from every query); SigLIP's takes
// none: its tokenizer gives input_ids alone, padded to max_length, and its model attends to every
// position, as transformers does when no mask is given. The vision tower is the SDK's
// (mobius/sdk/vision.hpp: clip_vision(), siglip_vision()). The norms and the logits compute in
// float32; the outputs are in the activation dtype.
#include <string>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/vision.hpp"
#include "text_tower.hpp"
#include "zero_shot.hpp"

namespace clip {

using mobius::BuildContext;
using mobius::ConfigReader;
using mobius::Dim;
using mobius::DType;
using mobius::Graph;
using mobius::ScopeGuard;
using mobius::TensorType;
using mobius::Value;
using nlohmann::json;
namespace op = mobius::op;
namespace nn = mobius::nn;

namespace {

struct Family {
  const char* model_type;
  const char* title;  // transformers' class, for messages
  bool siglip;
};

const Family kClip{"clip", "CLIPModel", false};
const Family kSiglip{"siglip", "SiglipModel", true};

const Family& family_of(const std::string& model_type) { return model_type == "siglip" ? kSiglip : kClip; }
const nn::VisionSpec& vision_spec(const Family& f) { return f.siglip ? nn::siglip_vision() : nn::clip_vision(); }

// A composite's sub-config: absent or null gives the defaults.
json sub_config(const json& raw, const char* key) {
  auto it = raw.find(key);
  return it == raw.end() || it->is_null() ? json::object() : *it;
}

json parse(const std::string& model_type, const json& raw) {
  if (!raw.is_object()) throw mobius::Error("[config] config.json must be a JSON object");
  const Family& f = family_of(model_type);
  ConfigReader r(raw, "config.json");
  for (const char* key : {"text_config", "vision_config"})
    if (raw.contains(key) && !raw[key].is_null() && !raw[key].is_object()) r.fail(key, "must be a JSON object");
  json out;
  out["model_type"] = f.model_type;
  const TextConfig text = f.siglip ? read_siglip_text(sub_config(raw, "text_config"), "config.json text_config")
                                   : read_clip_text(sub_config(raw, "text_config"), "config.json text_config");
  out["text"] = text;
  out["vision"] = nn::read_vision_config(vision_spec(f), sub_config(raw, "vision_config"), "config.json vision_config");
  if (!f.siglip) {
    const int64_t dim = r.get_int("projection_dim", 512);
    if (dim <= 0 || dim > (1 << 20)) r.fail("projection_dim", "is " + std::to_string(dim) + "; it must be from 1 to 2^20");
    out["projection_dim"] = dim;
  }
  return out;
}

// The checkpoint's root: both towers, the projections, the logit scale (and SigLIP's bias).
class ZeroShotModel : public nn::Module {
 public:
  ZeroShotModel(const Family& f, const TextConfig& text, const nn::VisionConfig& vision, int64_t projection_dim)
      : siglip(f.siglip) {
    text_model = &add<TextTransformer>("text_model", text);
    if (!siglip) {
      text_projection = &add<nn::Linear>("text_projection", text.hidden_size, projection_dim, false);
      visual_projection = &add<nn::Linear>("visual_projection", vision.hidden_size, projection_dim, false);
      declare("logit_scale", {}, DType::Float);
    } else {
      declare("logit_scale", {1}, DType::Float);
      declare("logit_bias", {1}, DType::Float);
    }
  }
  bool siglip;
  const TextTransformer* text_model;
  const nn::Linear* text_projection = nullptr;
  const nn::Linear* visual_projection = nullptr;
};

// x / ||x||_2 along the last axis, in float32.
Value l2_normalize(Value x) {
  Value f = op::Cast(x, DType::Float);
  return op::Div(f, op::Sqrt(op::ReduceSum(op::Mul(f, f), {-1})));
}

void build(BuildContext& ctx, const json& j) {
  const Family& f = family_of(j.at("model_type").get<std::string>());
  const TextConfig text = j.at("text").get<TextConfig>();
  const nn::VisionConfig vision = j.at("vision").get<nn::VisionConfig>();
  const int64_t projection_dim = f.siglip ? 0 : j.at("projection_dim").get<int64_t>();
  const std::string graph = ctx.graph_name();
  const bool want_text = graph != "vision_model", want_vision = graph != "text_model";

  nn::check_image_preprocessor(ctx, f.model_type, vision.num_channels);
  check_text_checkpoint(ctx, text, "text_model.", "config.json text_config");
  nn::check_vision_checkpoint(ctx, vision_spec(f), vision, "vision_model.");
  // Tensors no graph reads (position ids buffers older checkpoints saved), and the other tower's
  // in a one-tower graph.
  ctx.ignore_tensors("text_model.embeddings.position_ids");
  for (const std::string& u : vision_spec(f).names.unused) ctx.ignore_tensors("vision_model." + u);
  if (!want_text) {
    ctx.ignore_tensors("text_model.*");
    ctx.ignore_tensors("text_projection.*");
  }
  if (!want_vision) {
    ctx.ignore_tensors("vision_model.*");
    ctx.ignore_tensors("visual_projection.*");
  }
  if (graph != "model") {
    ctx.ignore_tensors("logit_scale");
    ctx.ignore_tensors("logit_bias");
  }

  ZeroShotModel model(f, text, vision, projection_dim);
  Graph& g = ctx.graph();
  const DType act = nn::activation_dtype(ctx);
  Value text_embeds, image_embeds;
  if (want_text) {
    Value ids = g.input("input_ids", TensorType(DType::Int64, {Dim("text_batch_size"), Dim("sequence_length")}));
    Value mask;
    if (!f.siglip)
      mask = g.input("attention_mask", TensorType(DType::Int64, {Dim("text_batch_size"), Dim("sequence_length")}));
    TextOutputs t = model.text_model->forward(g, ids, mask, act);
    text_embeds = f.siglip ? t.pooler_output : model.text_projection->forward(g, t.pooler_output);
    if (graph == "text_model") {
      g.output(t.last_hidden_state, "last_hidden_state");
      g.output(text_embeds, f.siglip ? "pooler_output" : "text_embeds");
      return;
    }
  }
  if (want_vision) {
    Value pixels = g.input("pixel_values", TensorType(DType::Float, {Dim("image_batch_size"), Dim(vision.num_channels),
                                                                     Dim("height"), Dim("width")}));
    nn::VisionOutputs v = nn::vision_tower(g, vision_spec(f), vision, "vision_model.", pixels, true);
    image_embeds = f.siglip ? v.pooler_output : model.visual_projection->forward(g, v.pooler_output);
    if (graph == "vision_model") {
      g.output(v.last_hidden_state, "last_hidden_state");
      g.output(image_embeds, f.siglip ? "pooler_output" : "image_embeds");
      return;
    }
  }
  ScopeGuard s(g, "logits");
  Value t = l2_normalize(text_embeds), i = l2_normalize(image_embeds);
  Value logits_per_text = op::Mul(op::MatMul(t, op::Transpose(i, {1, 0})), op::Exp(model.param(g, "logit_scale")));
  if (f.siglip) logits_per_text = op::Add(logits_per_text, model.param(g, "logit_bias"));
  g.output(op::Cast(op::Transpose(logits_per_text, {1, 0}), act), "logits_per_image");
  g.output(op::Cast(logits_per_text, act), "logits_per_text");
  g.output(op::Cast(t, act), "text_embeds");
  g.output(op::Cast(i, act), "image_embeds");
}

}  // namespace

void register_zero_shot(mobius::PluginRegistrar& r) {
  for (const Family* f : {&kClip, &kSiglip})
    r.add(f->model_type, "zero-shot-image-classification",
          [f](const json& raw) { return parse(f->model_type, raw); }, build);
}

}  // namespace clip
