// mobius/sdk/vision.hpp - ViT-like vision towers as a spec: a family is a row (its model type,
// the prefix of its tower in its heads' checkpoints, what it calls its tensors, the tokens it
// puts beside the patches, how it resamples its position table, how it pools, transformers'
// defaults for its config), and build_vision builds any row for image classification or image
// feature extraction. The vit plugin's families (ViT, DeiT, DINOv2, DINOv2 with registers) are
// rows; so are the vision towers of CLIP and SigLIP (clip_vision(), siglip_vision()), which a
// contrastive model builds with vision_tower under its own prefix.
//
// Semantics follow transformers 5's models/vit/modeling_vit.py (ViTEmbeddings, ViTLayer,
// ViTPooler, ViTForImageClassification), modeling_deit.py (the distillation token,
// DeiTForImageClassificationWithTeacher), modeling_dinov2.py (Dinov2LayerScale,
// Dinov2SwiGLUFFN, Dinov2ForImageClassification), modeling_dinov2_with_registers.py (register
// tokens, the antialiased resampling), modeling_clip.py (CLIPVisionEmbeddings, CLIPVisionModel)
// and modeling_siglip.py (SiglipVisionModel, SiglipMultiheadAttentionPoolingHead):
//   x = pixel_values [batch, channels, height, width]      float32 for every dtype
//   patches = Conv2d(x, kernel = stride = patch_size), flattened row by row
//                                                           [batch, (h / ph) * (w / pw), hidden]
//   h = [cls, distillation, patches] + positions            the tokens the family has
//   DINOv2 with registers: its register tokens after the class token (after the positions)
//   CLIP: h = pre_layrnorm(h)
//   every layer (pre-norm):
//     h = h + ls1 * out(attention(norm1(h)))                every token sees every other
//     h = h + ls2 * mlp(norm2(h))     mlp: fc2(act(fc1(.))), or DINOv2's SwiGLU
//                                     weights_out(silu(a) * b) with [a, b] = weights_in(.)
//     ls1, ls2: DINOv2's LayerScale (lambda1 per channel), 1 elsewhere
//   last_hidden_state = layernorm(h)                        (CLIP: h, unnormalized)
//   pooler_output: ViT, DeiT  act(pooler(last[:, 0])) where the checkpoint has the pooler
//                  DINOv2     last[:, 0]
//                  CLIP       post_layernorm(h[:, 0])
//                  SigLIP     head(last): its probe attends over every token, then
//                             p + mlp(layernorm(p)), p = out_proj(attention)
//   logits: ViT, DeiT classifier(last[:, 0]); DeiT's distilled checkpoints
//           (cls_classifier(last[:, 0]) + distillation_classifier(last[:, 1])) / 2; DINOv2
//           classifier(concat(last[:, 0], mean of the patch tokens))
// Positions: the table's rows of the leading tokens (class, distillation) as stored, and its grid
// of patch rows (image_size / patch_size) resampled to the image's grid (height / ph,
// width / pw) as torch's interpolate(mode="bicubic", align_corners=False) does it: the plain
// filter (a = -0.75, edges repeated), or with antialias=True (DINOv2 with registers: a = -0.5,
// widened when shrinking, normalized over the table). At the table's own grid the resampling is
// the identity, exactly what every family's forward adds; at another grid it is what DINOv2
// always computes and what ViT, DeiT, CLIP and SigLIP compute with interpolate_pos_encoding=True
// (without it transformers refuses an image of another size). A table whose grid is not square,
// which transformers cannot reshape to interpolate, is resampled the same way.
// The layer norms, the attention softmax, the patch convolution and the position resampling
// compute in float32 for every dtype. With --ops ort and float32 activations the attention is
// ONNX Runtime's Attention (MultiHeadAttention where q, k and v have no biases), the residual
// norms SkipLayerNormalization and gelu its Gelu; --ops standard uses ONNX's operators only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/context.hpp"
#include "mobius/sdk/graph.hpp"

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// The normalized config (transformers' configuration defaults where config.json is silent).
struct VisionConfig {
  std::string model_type = "vit";
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;  // the MLP's width (DINOv2: hidden_size * mlp_ratio)
  std::string hidden_act = "gelu";
  double layer_norm_eps = 1e-12;
  int64_t image_height = 224, image_width = 224;  // image_size, a number or [height, width]
  int64_t patch_height = 16, patch_width = 16;    // patch_size, likewise
  int64_t num_channels = 3;
  bool qkv_bias = true;
  bool use_swiglu_ffn = false;  // DINOv2
  int64_t num_register_tokens = 0;
  int64_t pooler_output_size = 768;  // ViT, DeiT: the pooler's width (hidden_size when null)
  std::string pooler_act = "tanh";
  bool use_head = true;  // SigLIP's vision_use_head
  int64_t num_labels = 2;
  // architectures[0] is DeiTForImageClassificationWithTeacher (without weights, the head to build).
  bool distilled_head = false;
  // CLIPVisionModelWithProjection: image_embeds = visual_projection(pooler_output), projection_dim
  // wide (with_projection: architectures[0] names it; without weights, whether to build it).
  int64_t projection_dim = 512;
  bool with_projection = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(VisionConfig, model_type, hidden_size, num_hidden_layers,
                                                num_attention_heads, intermediate_size, hidden_act, layer_norm_eps,
                                                image_height, image_width, patch_height, patch_width, num_channels,
                                                qkv_bias, use_swiglu_ffn, num_register_tokens, pooler_output_size,
                                                pooler_act, use_head, num_labels, distilled_head, projection_dim,
                                                with_projection)

// What a family calls its tensors: the tower's from its root, the heads' from the checkpoint's
// root; "" for a part the family does not have.
struct VisionNames {
  std::string patch = "embeddings.patch_embeddings.projection";  // Conv2d
  bool patch_bias = true;                                        // CLIP's has none
  std::string cls = "embeddings.cls_token";                      // [1, 1, hidden]
  std::string distillation = "";                                 // DeiT: [1, 1, hidden]
  std::string registers = "";                                    // [1, num_register_tokens, hidden]
  std::string position = "embeddings.position_embeddings";       // [1, rows, hidden]
  // CLIP and SigLIP keep the class token as [hidden] and the positions as an nn.Embedding
  // (`position` names its weight, [rows, hidden]).
  bool flat_embeddings = false;
  std::string pre_norm = "";  // CLIP's pre_layrnorm
  std::string layer = "encoder.layer.";
  std::string norm1 = "layernorm_before";
  std::string query = "attention.attention.query";
  std::string key = "attention.attention.key";
  std::string value = "attention.attention.value";
  std::string attn_out = "attention.output.dense";
  std::string layer_scale1 = "";  // DINOv2: "layer_scale1" (its lambda1)
  std::string norm2 = "layernorm_after";
  std::string ffn_in = "intermediate.dense";
  std::string ffn_out = "output.dense";
  std::string swiglu_in = "mlp.weights_in";  // use_swiglu_ffn
  std::string swiglu_out = "mlp.weights_out";
  std::string layer_scale2 = "";
  std::string final_norm = "layernorm";  // SigLIP: post_layernorm; CLIP: none
  std::string pooler = "pooler.dense";   // ViT, DeiT
  std::string pooled_norm = "";          // CLIP: post_layernorm, on the pooled class token
  std::string attention_pool = "";       // SigLIP: head
  // CLIPVisionModelWithProjection's projection of pooler_output to image_embeds, from the
  // checkpoint's root (without bias): read where the checkpoint has it.
  std::string projection = "";
  // Tensors a checkpoint may hold that no task reads (DINOv2's mask token, the position ids
  // older checkpoints saved), from the tower's root.
  std::vector<std::string> unused = {"embeddings.mask_token", "embeddings.position_ids"};
  // The heads, from the checkpoint's root.
  std::string classifier = "classifier";
  std::string cls_classifier = "";           // DeiT's distilled head: "cls_classifier"
  std::string distillation_classifier = "";  // and "distillation_classifier"
};

// The tasks a vision family builds (the first is the default when config.json names no head).
inline const std::vector<std::string>& vision_tasks() {
  static const std::vector<std::string> t = {"image-feature-extraction", "image-classification"};
  return t;
}

struct VisionSpec {
  // A spec with ViT's names, keys and defaults for `model_type`, its tower under `head_prefix`
  // in the checkpoints of its heads (and, for a CLIP-like tower, in its own).
  static VisionSpec of(std::string model_type, std::string head_prefix) {
    VisionSpec s;
    s.model_type = std::move(model_type);
    s.head_prefix = std::move(head_prefix);
    s.defaults.model_type = s.model_type;
    return s;
  }
  std::string model_type;
  std::string head_prefix;  // "vit.", "dinov2.", CLIP's "vision_model."
  VisionConfig defaults;    // transformers' configuration defaults of the family
  VisionNames names;
  // The config keys the family reads beside the common ones (hidden_size, num_hidden_layers,
  // num_attention_heads, hidden_act, layer_norm_eps, image_size, patch_size, num_channels).
  bool mlp_ratio_key = false;  // DINOv2: mlp_ratio in place of intermediate_size
  bool qkv_bias_key = true;
  bool swiglu_key = false;      // use_swiglu_ffn
  bool registers_key = false;   // num_register_tokens
  bool pooler_keys = false;     // pooler_output_size, pooler_act
  bool use_head_key = false;    // vision_use_head
  // The position table's resampling (see the top of this file).
  enum class Resample { Bicubic, BicubicAntialias };
  Resample resample = Resample::Bicubic;
  // pooler_output (see the top of this file): ViT's dense pooler, the layer-normed class token
  // (DINOv2), the class token through pooled_norm (CLIP), the attention-pooling head (SigLIP).
  enum class Pooling { Dense, Cls, NormedCls, AttentionHead };
  Pooling pooling = Pooling::Dense;
  // What the classifier reads: the class token, or the class token beside the mean of the patch
  // tokens (DINOv2).
  enum class Classifier { Cls, ClsAndPatchMean };
  Classifier classifier = Classifier::Cls;
};

// The towers of CLIPVisionModel and SiglipVisionModel (model types clip_vision_model and
// siglip_vision_model; their tensors under "vision_model." as published, or at the root as
// transformers 5 saves them), image-feature-extraction only.
const VisionSpec& clip_vision();
const VisionSpec& siglip_vision();

// config.json (or a composite's vision_config, `where` naming it in messages) read with the
// spec's defaults and checked, each fault naming its key: the sizes (positive, the heads
// dividing hidden_size), image_size and patch_size (a number or [height, width], a patch no
// larger than the image), num_channels, mlp_ratio, num_register_tokens, the pooler's width and
// activation, the labels.
VisionConfig read_vision_config(const VisionSpec& spec, const nlohmann::json& config_json,
                                const std::string& where = "config.json");

// The checkpoint folder's preprocessor_config.json, when it has one, describes images the graph
// can take: size and crop_size positive (a number, [height, width], or their height, width,
// shortest_edge, longest_edge), image_mean and image_std one value or one per channel (image_std
// positive), rescale_factor positive. Throws mobius::Error (config kind) naming the file and the
// key.
void check_image_preprocessor(const BuildContext& ctx, const std::string& model_type, int64_t num_channels);

// The checkpoint's tower under `prefix` agrees with the config (nothing is checked without
// weights): the patch convolution's shape (hidden_size, num_channels, patch_size), the position
// table's rows (the patch grid of image_size / patch_size and the leading tokens), the register
// tokens, the number of layers. Throws mobius::Error (config kind) naming config.json's keys and
// the tensor.
void check_vision_checkpoint(const BuildContext& ctx, const VisionSpec& spec, const VisionConfig& cfg,
                             const std::string& prefix);

// The outputs of a tower: last_hidden_state [batch, tokens, hidden] and, when asked for and the
// family has one, pooler_output [batch, width] (else invalid); in the activation dtype.
struct VisionOutputs {
  Value last_hidden_state, pooler_output;
};
// The tower of `spec` over `pixel_values` (float32 [batch, num_channels, height, width]), its
// tensors under `prefix`.
VisionOutputs vision_tower(Graph& g, const VisionSpec& spec, const VisionConfig& cfg, const std::string& prefix,
                           Value pixel_values, bool with_pooler);

// The graph of a family for one of vision_tasks(): pixel_values float32 [batch_size,
// num_channels, height, width] ->
//   image-feature-extraction  last_hidden_state and, where the family has one (ViT and DeiT:
//                             where the checkpoint has the pooler), pooler_output;
//   image-classification      logits [batch_size, num_labels];
// in the activation dtype; the tower read under the head prefix when the checkpoint has it (a
// head's checkpoint), the other heads' tensors of such a checkpoint ignored.
void build_vision(BuildContext& ctx, const VisionSpec& spec, const VisionConfig& cfg, const std::string& task);

// Registers spec.model_type for `tasks` (of vision_tasks()), read by read_vision_config and
// built by build_vision. `spec` is kept by reference: it must live as long as the plugin (a
// static). CLIP's and SigLIP's towers build image-feature-extraction only.
void register_vision(PluginRegistrar& r, const VisionSpec& spec,
                     const std::vector<std::string>& tasks = vision_tasks());

}  // namespace mobius::nn
