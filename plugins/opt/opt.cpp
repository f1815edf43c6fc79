// opt.cpp - decoders with learned or sinusoidal positions and fairseq's names: opt, biogpt, xglm.
//
// Rows of the SDK's decoder table (decoder_family.hpp): positions offset by 2, fc1/fc2 in the
// layer itself, OPT's post-norm form and its projections between the embedding width and the
// model's, BioGPT's and XGLM's scaled embeddings, XGLM's sinusoidal table.
#include <cmath>
#include <map>

#include "mobius/sdk/decoder_family.hpp"
#include "mobius/sdk/nn.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using namespace mobius::nn;
using nlohmann::json;

// fairseq's layer: self_attn (q/k/v/out_proj) after self_attn_layer_norm, fc1 and fc2 after
// final_layer_norm, in the layer itself; LayerNorm eps 1e-5 (none of these configs sets it).
DecoderSpec fairseq_names(const std::string& text_path, const std::string& final_norm) {
  DecoderSpec s;
  s.norm = NormKind::Layer;
  s.feed_forward = plain_mlp();
  TensorNames& n = s.names;
  n.text_path = text_path;
  n.final_norm = final_norm;
  n.input_norm = "self_attn_layer_norm";
  n.post_attention_norm = "final_layer_norm";
  n.attention.o = "out_proj";
  n.feed_forward = "";
  n.mlp.up = "fc1";
  n.mlp.down = "fc2";
  return s;
}

// Positions at position_ids + 2 (fairseq's offset); every projection with a bias.
void fairseq_positions(ArchitectureConfig& c, const char* kind) {
  c.position_embedding = kind;
  c.position_offset = 2;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
}

void scaled_embedding(const ConfigReader& r, ArchitectureConfig& c) {
  if (r.get_bool("scale_embedding", true)) c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
}

const std::map<std::string, DecoderFamily>& families() {
  static const std::map<std::string, DecoderFamily> f = {
      {"opt",
       {{50272, 768, 3072, 12, 12, 0, 0, 2048, 1e-5, 10000.0, 0, true, "relu", "activation_function", 1.0, 0, 0,
         {{"intermediate_size", {"ffn_dim"}}, {"rms_norm_eps", {}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          fairseq_positions(c, "learned");
          c.qkv_bias = c.o_bias = c.mlp_bias = r.get_bool("enable_bias", true);
          if (r.has("word_embed_proj_dim") && r.get_int("word_embed_proj_dim") != c.hidden_size)
            c.embedding_dim = r.get_int("word_embed_proj_dim");
          const bool before = r.get_bool("do_layer_norm_before", true);
          extra["do_layer_norm_before"] = before;
          extra["final_layer_norm"] = before && !r.get_bool("_remove_final_layer_norm", false);
          extra["layer_norm_elementwise_affine"] = r.get_bool("layer_norm_elementwise_affine", true);
        },
        [](const json& j) {
          DecoderSpec s = fairseq_names("model.decoder", "final_layer_norm");
          if (!j.value("do_layer_norm_before", true)) s.placement = NormPlacement::PostResidual;
          s.final_norm = j.value("final_layer_norm", true);
          if (!j.value("layer_norm_elementwise_affine", true)) s.norm = NormKind::LayerNoAffine;
          return s;
        }}},
      {"biogpt",
       {{42384, 1024, 4096, 24, 16, 0, 0, 1024, 1e-5, 10000.0, 0, true, "gelu", "hidden_act", 1.0, 0, 0,
         // layer_norm_eps is not read: every norm is torch's default, 1e-5.
         {{"rms_norm_eps", {}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          fairseq_positions(c, "learned");
          scaled_embedding(r, c);
        },
        [](const json&) {
          DecoderSpec s = fairseq_names("biogpt", "layer_norm");
          s.names.lm_head = "output_projection";
          return s;
        }}},
      {"xglm",
       {{256008, 1024, 4096, 24, 16, 0, 0, 2048, 1e-5, 10000.0, 0, true, "gelu", "activation_function", 1.0, 0, 0,
         {{"hidden_size", {"d_model"}},
          {"num_hidden_layers", {"num_layers"}},
          {"num_attention_heads", {"attention_heads"}},
          {"intermediate_size", {"ffn_dim"}},
          {"rms_norm_eps", {}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          fairseq_positions(c, "sinusoidal");
          scaled_embedding(r, c);
          extra["sinusoidal_padding_idx"] = r.has("pad_token_id") ? r.get_int("pad_token_id") : 1;
        },
        [](const json& j) {
          DecoderSpec s = fairseq_names("model", "layer_norm");
          s.sinusoidal_padding_idx = j.value("sinusoidal_padding_idx", int64_t{1});
          return s;
        }}},
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) { register_decoder_families(r, families()); }

}  // namespace

MOBIUS_PLUGIN("opt", "0.1.0", "mobius", register_all)
