// clip.cpp - the clip plugin: transformers' CLIPTextModel, the text encoder of Stable Diffusion
// 1.x (openai/clip-vit-large-patch14) and 2.x (OpenCLIP ViT-H, converted), task "text-encoding";
// CLIPModel and SiglipModel for zero-shot image classification (zero_shot.cpp); and the vision
// towers alone, CLIPVisionModel and SiglipVisionModel, for image feature extraction (the SDK's
// vision.hpp).
//
// The text encoder (text_tower.hpp) takes input_ids [batch_size, sequence_length] alone: Stable
// Diffusion pipelines call it without an attention mask. Its outputs, last_hidden_state and
// pooler_output, are in the activation dtype (float16 for --dtype f16, as a float16 UNet consumes
// them).
#include <cfloat>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/vision.hpp"
#include "text_tower.hpp"
#include "zero_shot.hpp"

namespace {

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

constexpr const char* kModelType = "clip_text_model";
constexpr const char* kTask = "text-encoding";

json parse(const json& raw) { return json(clip::read_clip_text(raw, "config.json")); }

// CLIPTextModel: the tower at "text_model" under the checkpoint's root.
class ClipTextModel : public nn::Module {
 public:
  explicit ClipTextModel(const clip::TextConfig& c) { text_model = &add<clip::TextTransformer>("text_model", c); }
  const clip::TextTransformer* text_model;
};

void build(BuildContext& ctx, const json& j) {
  const clip::TextConfig cfg = j.get<clip::TextConfig>();
  clip::check_text_checkpoint(ctx, cfg, "text_model.", "config.json");
  // An unused buffer SD 1.5's checkpoint carries (arange(max_position_embeddings)).
  ctx.ignore_tensors("text_model.embeddings.position_ids");
  // CLIPTextModelWithProjection's projection: CLIPTextModel does not read it either.
  if (ctx.query_tensor("text_projection.weight")) {
    ctx.ignore_tensors("text_projection.weight");
    ctx.log(MOBIUS_LOG_WARNING,
            "the checkpoint's text_projection.weight (CLIPTextModelWithProjection) is not part of "
            "the graph: it outputs last_hidden_state and pooler_output, as CLIPTextModel does");
  }
  ClipTextModel model(cfg);
  Graph& g = ctx.graph();
  const DType act = nn::activation_dtype(ctx);
  Value ids = g.input("input_ids", TensorType(DType::Int64, {Dim("batch_size"), Dim("sequence_length")}));
  clip::TextOutputs out = model.text_model->forward(g, ids, Value(), act);
  g.output(out.last_hidden_state, "last_hidden_state");
  g.output(out.pooler_output, "pooler_output");
}

void register_all(mobius::PluginRegistrar& r) {
  r.add(kModelType, kTask, parse, build);
  clip::register_zero_shot(r);
  nn::register_vision(r, nn::clip_vision(), {"image-feature-extraction"});
  nn::register_vision(r, nn::siglip_vision(), {"image-feature-extraction"});
}

}  // namespace

MOBIUS_PLUGIN("clip", "0.1.0", "mobius", register_all)
