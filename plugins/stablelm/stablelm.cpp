// stablelm.cpp - decoders with LayerNorms: stablelm, phi, starcoder2, nemotron, cohere, cohere2,
// olmo.
//
// Rows of the SDK's decoder table (decoder_family.hpp): LayerNorm with and without bias, without
// parameters (OLMo) or with (1 + w) (Nemotron), parallel attention and MLP off one norm (Phi,
// Cohere, StableLM's option), partial rotary, per-head q/k LayerNorms, non-gated MLPs, Cohere's
// interleaved rotary and logit scale, rope on sliding layers only (Cohere 2), clamped qkv (OLMo).
#include <map>

#include "mobius/sdk/decoder_family.hpp"
#include "mobius/sdk/nn.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using namespace mobius::nn;
using nlohmann::json;

// Cohere's layer: one LayerNorm without bias (mean-subtracting) before attention and MLP in
// parallel; rotary on adjacent pairs; logits times logit_scale.
void cohere_common(const ConfigReader& r, ArchitectureConfig& c) {
  c.rope.interleaved = true;
  c.logits_multiplier = r.get_double("logit_scale", 0.0625);
  if (c.logits_multiplier == 0) r.fail("logit_scale", "must not be 0");
}

DecoderSpec cohere_spec(const json&) {
  DecoderSpec s;
  s.norm = NormKind::LayerNoBias;
  s.placement = NormPlacement::Parallel;
  s.parallel_shared_norm = true;
  return s;
}

const std::map<std::string, DecoderFamily>& families() {
  using D = mobius::DecoderDefaults;
  static const std::map<std::string, DecoderFamily> f = {
      {"stablelm",
       {D{50304, 2560, 6912, 32, 32, 32, 0, 4096, 1e-5, 10000.0, 0, false, "silu", "hidden_act", 0.25, 0, 0,
          {{"rms_norm_eps", {"layer_norm_eps"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          c.qkv_bias = r.get_bool("use_qkv_bias", false);
          c.o_bias = false;
          if (r.get_bool("qk_layernorm", false)) c.qk_norm = "head_each";  // one LayerNorm per head
          extra["use_parallel_residual"] = r.get_bool("use_parallel_residual", false);
          mobius::check_attention_layer_types(r, c);
        },
        [](const json& j) {
          DecoderSpec s;
          s.norm = NormKind::Layer;
          if (j.value("use_parallel_residual", false)) {
            s.placement = NormPlacement::Parallel;
            s.parallel_shared_norm = true;
          }
          s.names.attention.q_norm = "q_layernorm";
          s.names.attention.k_norm = "k_layernorm";
          s.names.attention.qk_norm_per_head_tensors = true;  // q_layernorm.norms.<h>.weight
          return s;
        }}},
      {"phi",
       {D{51200, 2048, 8192, 24, 32, 0, 0, 2048, 1e-5, 10000.0, 0, false, "gelu_new", "hidden_act", 0.5, 0, 0,
          {{"rms_norm_eps", {"layer_norm_eps"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          c.qkv_bias = c.o_bias = c.mlp_bias = c.lm_head_bias = true;
          if (r.get_bool("qk_layernorm", false)) c.qk_norm = "head";  // one LayerNorm, shared by the heads
          mobius::check_attention_layer_types(r, c);
        },
        [](const json&) {
          DecoderSpec s;
          s.norm = NormKind::Layer;
          s.placement = NormPlacement::Parallel;
          s.parallel_shared_norm = true;
          s.feed_forward = plain_mlp();
          s.names.final_norm = "final_layernorm";
          s.names.attention.o = "dense";
          s.names.attention.q_norm = "q_layernorm";
          s.names.attention.k_norm = "k_layernorm";
          s.names.mlp.up = "fc1";
          s.names.mlp.down = "fc2";
          return s;
        }}},
      {"starcoder2",
       {D{49152, 3072, 12288, 30, 24, 2, 0, 4096, 1e-5, 10000.0, 0, true, "gelu_pytorch_tanh", "hidden_act", 1.0, 0, 0,
          {{"rms_norm_eps", {"norm_epsilon"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          c.qkv_bias = c.o_bias = c.mlp_bias = r.get_bool("use_bias", true);
          mobius::check_attention_layer_types(r, c);
        },
        [](const json&) {
          DecoderSpec s;
          s.norm = NormKind::Layer;
          s.feed_forward = plain_mlp();
          s.names.mlp.up = "c_fc";
          s.names.mlp.down = "c_proj";
          return s;
        }}},
      {"nemotron",
       {D{256000, 6144, 24576, 32, 48, 0, 0, 4096, 1e-5, 10000.0, 0, false, "relu2", "hidden_act", 0.5, 0, 0,
          {{"rms_norm_eps", {"norm_eps"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) { mobius::check_attention_layer_types(r, c); },
        [](const json&) {
          DecoderSpec s;
          s.norm = NormKind::LayerOnePlus;  // LayerNorm1P: (1 + w), with a bias
          s.feed_forward = plain_mlp();
          return s;
        }}},
      {"cohere",
       {D{256000, 8192, 22528, 40, 64, 0, 0, 8192, 1e-5, 500000.0, 0, true, "silu", "hidden_act", 1.0, 0, 0,
          {{"rms_norm_eps", {"layer_norm_eps"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          cohere_common(r, c);
          if (r.get_bool("use_qk_norm", false)) c.qk_norm = "head_each";  // weights [heads, head_dim]
          mobius::check_attention_layer_types(r, c);
        },
        cohere_spec}},
      {"cohere2",
       {D{256000, 8192, 22528, 40, 64, 0, 0, 8192, 1e-5, 10000.0, 4096, true, "silu", "hidden_act", 1.0, 0, 0,
          {{"rms_norm_eps", {"layer_norm_eps"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          cohere_common(r, c);
          for (auto& t : c.layer_types)
            if (t == "attention") t = "full_attention";  // the older name
          const int64_t pattern = r.get_int("sliding_window_pattern", 4);
          if (pattern <= 0) r.fail("sliding_window_pattern", "must be positive");
          mobius::default_layer_types(c, [&](int64_t i) {
            return (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention";
          });
          mobius::check_attention_layer_types(r, c);
          // Only the sliding layers rotate; the full ones have no position embedding.
          for (int64_t i = 0; i < c.num_hidden_layers; ++i)
            if (c.layer_types[static_cast<size_t>(i)] != "sliding_attention") c.no_rope_layers.push_back(i);
        },
        cohere_spec}},
      {"olmo",
       {D{50304, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 10000.0, 0, false, "silu", "hidden_act", 1.0, 0, 0,
          {{"rms_norm_eps", {}}}},  // no parameters, eps 1e-5 always
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          if (r.has("clip_qkv")) c.clip_qkv = r.get_double("clip_qkv");
          if (c.clip_qkv < 0) r.fail("clip_qkv", "must not be negative");
          mobius::check_attention_layer_types(r, c);
        },
        [](const json&) {
          DecoderSpec s;
          s.norm = NormKind::LayerNoAffine;
          return s;
        }}},
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) { register_decoder_families(r, families()); }

}  // namespace

MOBIUS_PLUGIN("stablelm", "0.1.0", "mobius", register_all)
