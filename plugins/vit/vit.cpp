// vit.cpp - the vit plugin: vision transformers, each one row of the SDK's vision spec
// (mobius/sdk/vision.hpp: the prefix of its tower under its heads, its tensor names, the tokens
// beside its patches, its position resampling, pooling and classifier, transformers'
// configuration defaults): ViT, DeiT, DINOv2, DINOv2 with registers. Each builds
// image-feature-extraction (AutoModel: last_hidden_state, pooler_output) and
// image-classification (AutoModelForImageClassification: logits), the head config.json's
// architectures names, or --task.
#include <vector>

#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/vision.hpp"

namespace {

namespace nn = mobius::nn;

// ViT (configuration_vit.py, modeling_vit.py): the spec's names and defaults; the dense pooler
// (pooler_output_size, pooler_act) where the checkpoint has it.
nn::VisionSpec vit() {
  nn::VisionSpec s = nn::VisionSpec::of("vit", "vit.");
  s.pooler_keys = true;
  return s;
}

// DeiT (modeling_deit.py): ViT with a distillation token after the class token (both with rows
// of the position table); DeiTForImageClassificationWithTeacher averages a classifier on each.
nn::VisionSpec deit() {
  nn::VisionSpec s = nn::VisionSpec::of("deit", "deit.");
  s.pooler_keys = true;
  s.names.distillation = "embeddings.distillation_token";
  s.names.cls_classifier = "cls_classifier";
  s.names.distillation_classifier = "distillation_classifier";
  return s;
}

// DINOv2 (configuration_dinov2.py, modeling_dinov2.py): norm1/norm2, an MLP of
// hidden_size * mlp_ratio (or SwiGLU), LayerScale on both branches, layer norm eps 1e-6, 14-pixel
// patches; pooler_output the normalized class token; the classifier reads the class token beside
// the mean of the patch tokens.
nn::VisionSpec dinov2() {
  nn::VisionSpec s = nn::VisionSpec::of("dinov2", "dinov2.");
  s.mlp_ratio_key = true;
  s.swiglu_key = true;
  s.defaults.layer_norm_eps = 1e-6;
  s.defaults.patch_height = s.defaults.patch_width = 14;
  nn::VisionNames& n = s.names;
  n.norm1 = "norm1";
  n.layer_scale1 = "layer_scale1";
  n.norm2 = "norm2";
  n.ffn_in = "mlp.fc1";
  n.ffn_out = "mlp.fc2";
  n.layer_scale2 = "layer_scale2";
  n.pooler = "";
  s.pooling = nn::VisionSpec::Pooling::Cls;
  s.classifier = nn::VisionSpec::Classifier::ClsAndPatchMean;
  return s;
}

// DINOv2 with registers (modeling_dinov2_with_registers.py): DINOv2 with num_register_tokens (4)
// tokens after the class token, its position table resampled with torch's antialiased bicubic
// filter; 16-pixel patches by default.
nn::VisionSpec dinov2_with_registers() {
  nn::VisionSpec s = dinov2();
  s.model_type = s.defaults.model_type = "dinov2_with_registers";
  s.head_prefix = "dinov2_with_registers.";
  s.registers_key = true;
  s.defaults.num_register_tokens = 4;
  s.defaults.patch_height = s.defaults.patch_width = 16;
  s.names.registers = "embeddings.register_tokens";
  s.resample = nn::VisionSpec::Resample::BicubicAntialias;
  return s;
}

const std::vector<nn::VisionSpec>& families() {
  static const std::vector<nn::VisionSpec> f = {vit(), deit(), dinov2(), dinov2_with_registers()};
  return f;
}

void register_all(mobius::PluginRegistrar& r) {
  for (const nn::VisionSpec& spec : families()) nn::register_vision(r, spec);
}

}  // namespace

MOBIUS_PLUGIN("vit", "0.1.0", "mobius", register_all)
