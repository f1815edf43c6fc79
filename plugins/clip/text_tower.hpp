// text_tower.hpp - the text towers of CLIP (CLIPTextTransformer: Stable Diffusion's text encoder,
// and CLIPModel's text side) and SigLIP (SiglipTextModel).
//
// Semantics follow transformers' models/clip/modeling_clip.py (CLIPTextEmbeddings, CLIPAttention's
// eager path, CLIPMLP, CLIPEncoderLayer, CLIPTextTransformer) and models/siglip/modeling_siglip.py
// (SiglipTextEmbeddings, SiglipTextModel):
//   h = token_embedding(input_ids) + position_embedding(0 .. seq-1)
//   every layer: h = h + out_proj(attention(layer_norm1(h)))
//                h = h + fc2(act(fc1(layer_norm2(h))))
//   last_hidden_state = final_layer_norm(h)
// CLIP's attention is causal (and, given an attention_mask, keys at padding are hidden too); its
// pooler_output is last_hidden_state[row, index]: index = argmax(input_ids) when the config's
// eos_token_id is 2 (the legacy rule, kept for configs written before transformers PR #24773),
// else the first position holding eos_token_id (0 when a row holds none, as argmax of an all-zero
// row gives). SigLIP's attention is bidirectional; its pooler_output is head(last[:, -1]) (the
// last position, padding or not).
//
// Numerics: layer norms compute in float32 (LayerNormalization, stash_type 1, on a float32 copy
// of the input) and the attention softmax in float32, as the SDK's decoders do; with float16
// weights the activation function also runs in float32 and is rounded once.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"

namespace clip {

// The normalized config of a text tower: the keys the graph reads, defaults filled in, and the
// pooling and masking its family uses.
struct TextConfig {
  std::string model_type = "clip_text_model";
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";
  double layer_norm_eps = 1e-5;
  int64_t eos_token_id = 49407;
  std::string pooling = "first_eos";  // "argmax" (CLIP, eos_token_id == 2), "first_eos" (CLIP) or "last" (SigLIP)
  bool causal = true;                 // CLIP; SigLIP's is bidirectional
  int64_t projection_size = 0;        // SigLIP's head: hidden_size -> projection_size (0: no head)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TextConfig, model_type, vocab_size, hidden_size, intermediate_size,
                                                num_hidden_layers, num_attention_heads, max_position_embeddings,
                                                hidden_act, layer_norm_eps, eos_token_id, pooling, causal,
                                                projection_size)

// CLIPTextConfig's (model_type clip_text_model) or SiglipTextConfig's keys read from `raw` (a
// config.json, or a composite's text_config, `where` naming it in messages), checked, each fault
// naming its key.
TextConfig read_clip_text(const nlohmann::json& raw, const std::string& where);
TextConfig read_siglip_text(const nlohmann::json& raw, const std::string& where);

struct TextOutputs {
  mobius::Value last_hidden_state, pooler_output;
};

// The tower at `prefix` ("text_model") under the root of the checkpoint.
class TextTransformer : public mobius::nn::Module {
 public:
  explicit TextTransformer(const TextConfig& c);
  // input_ids int64 [batch, seq]; attention_mask int64 [batch, seq] (1 a real token), or invalid
  // for none (every key visible but the causal rule's).
  TextOutputs forward(mobius::Graph& g, mobius::Value input_ids, mobius::Value attention_mask,
                      mobius::DType act) const;

  TextConfig cfg;

 private:
  class Layer;
  const mobius::nn::Embedding* token_embedding;
  const mobius::nn::Embedding* position_embedding;
  std::vector<const Layer*> layers;
  const mobius::nn::LayerNorm* final_layer_norm;
  const mobius::nn::Linear* head = nullptr;
};

// The config against the checkpoint's headers under `prefix` ("text_model."), when the build
// reads one: the embedding tables' shapes and the layer count, each mismatch named by its key
// (`where` names the config: "config.json", "config.json text_config").
void check_text_checkpoint(const mobius::BuildContext& ctx, const TextConfig& c, const std::string& prefix,
                           const std::string& where);

}  // namespace clip
