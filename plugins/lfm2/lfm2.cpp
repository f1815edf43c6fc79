// lfm2.cpp - the LFM2 pack: Liquid AI's hybrid decoder (model type lfm2).
//
// Each layer's token mixer is the SDK's gated short convolution (short_conv.hpp, "conv" layers)
// or grouped-query attention with per-head q/k norms ("full_attention" layers), by
// config.layer_types; the feed-forward is a SwiGLU MLP. The norms are plain RMS norms, pre-norm,
// and the stack's final norm is called embedding_norm. Semantics and defaults follow
// transformers' modeling_lfm2.py / configuration_lfm2.py; the names are the checkpoint's:
//   model.layers.N.operator_norm, .conv.{in_proj,conv,out_proj} | .self_attn.{q,k,v,out}_proj
//   and .self_attn.{q,k}_layernorm, .ffn_norm, .feed_forward.{w1,w3,w2}; model.embedding_norm.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/short_conv.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;
namespace nn = mobius::nn;

// A generous bound on conv_L_cache (LFM2 uses 3): the kernel is a weight and a cache dim.
constexpr int64_t kMaxConvKernel = 4096;

// Lfm2Config's defaults. The norms' epsilon is norm_eps; block_ff_dim, where present, is the
// MLP's width before the adjustment below (it wins over intermediate_size, as transformers pops
// it into intermediate_size).
mobius::DecoderDefaults defaults() {
  mobius::DecoderDefaults d{65536, 2560, 12288, 32, 32, 8, 0, 128000, 1e-5, 1000000.0};
  d.tie_word_embeddings = true;
  d.keys = {{"rms_norm_eps", {"norm_eps"}},
            {"intermediate_size", {"block_ff_dim", "intermediate_size"}}};
  return d;
}

// Lfm2MLP's width: with block_auto_adjust_ff_dim, two thirds of intermediate_size, times
// block_ffn_dim_multiplier and rounded up to a multiple of block_multiple_of (both only when the
// multiplier is not null), each step truncated to an integer as Python's int() does.
int64_t mlp_width(const ConfigReader& r, int64_t intermediate) {
  if (!r.get_bool("block_auto_adjust_ff_dim", true)) return intermediate;
  int64_t width = static_cast<int64_t>(2.0 * static_cast<double>(intermediate) / 3.0);
  const auto& raw = r.raw();
  auto m = raw.find("block_ffn_dim_multiplier");
  if (m != raw.end() && m->is_null()) return width;
  const double multiplier = r.get_double("block_ffn_dim_multiplier", 1.0);
  if (!std::isfinite(multiplier) || multiplier <= 0)
    r.fail("block_ffn_dim_multiplier", "must be a positive number");
  const int64_t multiple = r.get_int("block_multiple_of", 256);
  if (multiple <= 0) r.fail("block_multiple_of", "must be positive");
  width = static_cast<int64_t>(multiplier * static_cast<double>(width));
  width = multiple * ((width + multiple - 1) / multiple);
  if (width <= 0)
    r.fail("intermediate_size", "leaves the MLP no width after block_auto_adjust_ff_dim (" +
                                    std::to_string(width) + ")");
  return width;
}

json parse(const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "lfm2", defaults());
  if (c.num_hidden_layers <= 0) r.fail("num_hidden_layers", "must be positive");
  c.hidden_act = "silu";  // Lfm2MLP applies F.silu whatever the config says
  if (r.has("tie_embedding")) c.tie_word_embeddings = r.get_bool("tie_embedding");
  c.qk_norm = "head";
  c.sliding_window = 0;
  c.qkv_bias = c.o_bias = false;
  c.mlp_bias = false;
  // The default rope spans the whole head (Lfm2RotaryEmbedding ignores partial_rotary_factor).
  if (c.rope.type == "default") c.rope.partial_rotary_factor = 1.0;
  // Without layer_types: the layers in full_attn_idxs attend (all of them when it is null too),
  // the others convolve (Lfm2Config.__post_init__).
  if (c.layer_types.empty()) {
    std::vector<int64_t> attn;
    if (r.has("full_attn_idxs")) attn = r.get_ints("full_attn_idxs");
    else
      for (int64_t i = 0; i < c.num_hidden_layers; ++i) attn.push_back(i);
    mobius::default_layer_types(c, [&](int64_t i) {
      return std::find(attn.begin(), attn.end(), i) != attn.end() ? "full_attention" : "conv";
    });
  }
  mobius::check_layer_types(r, c, {"conv", "full_attention"}, false);
  c.intermediate_size = mlp_width(r, c.intermediate_size);
  c.validate();

  const int64_t kernel = r.get_int("conv_L_cache", 3);
  if (kernel <= 0 || kernel > kMaxConvKernel)
    r.fail("conv_L_cache", "must be between 1 and " + std::to_string(kMaxConvKernel) + ", got " +
                               std::to_string(kernel));
  json j = c;
  j["conv_L_cache"] = kernel;
  j["conv_bias"] = r.get_bool("conv_bias", false);
  return j;
}

void build(mobius::BuildContext& ctx, const json& j) {
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  nn::ShortConvOptions conv;
  conv.kernel = j.at("conv_L_cache").get<int64_t>();
  conv.bias = j.at("conv_bias").get<bool>();
  nn::DecoderSpec spec;
  nn::TensorNames& n = spec.names;
  n.input_norm = "operator_norm";
  n.post_attention_norm = "ffn_norm";
  n.final_norm = "embedding_norm";  // after the last layer, despite its name
  n.mixer_by_layer_type = {{"conv", "conv"}};
  n.attention.o = "out_proj";
  n.attention.q_norm = "q_layernorm";
  n.attention.k_norm = "k_layernorm";
  n.feed_forward = "feed_forward";
  n.mlp.gate = "w1";
  n.mlp.up = "w3";
  n.mlp.down = "w2";
  spec.mixer = nn::mixer_by_layer_type(
      {{"conv", nn::short_conv_mixer(conv)}, {"full_attention", nn::attention_mixer()}});
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) { r.add("lfm2", "text-generation", parse, build); }

}  // namespace

MOBIUS_PLUGIN("lfm2", "0.1.0", "mobius", register_all)
