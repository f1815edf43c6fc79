// gpt_oss.cpp - the gpt-oss plugin: attention with sinks on alternating sliding and full layers,
// yarn rope, and a sparse mixture of clamped-SwiGLU experts in every layer.
//
// Its differences from a Llama-like decoder live in its parts, all from the SDK: the mixer is
// SinkAttention (attention.hpp), the feed-forward the sparse MoE (moe.hpp) with gpt-oss' router
// (a bias, a softmax over the top-k logits; the MoE row in family_config.cpp) and
// ClampedSwiGLUExpertBank. Semantics follow transformers' modeling_gpt_oss.py and
// configuration_gpt_oss.py. The experts are read in GptOssExperts' dequantized layout
// (mlp.experts.gate_up_proj [E, hidden, 2I] and so on), the form the checkpoint reader also
// gives MXFP4 hub checkpoints.
#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// vocab, hidden, intermediate, layers, heads, kv heads, head_dim, max positions, rms eps, rope
// theta, sliding window.
const mobius::DecoderDefaults kDefaults = {201088, 2880, 2880, 36, 64, 8, 64, 131072, 1e-5, 150000.0, 128};

json parse(const json& raw) {
  json text = mobius::text_config(raw);
  // Without a rope in the config, transformers gives gpt-oss its yarn rope.
  const bool has_rope = (text.contains("rope_scaling") && !text["rope_scaling"].is_null()) ||
                        (text.contains("rope_parameters") && !text["rope_parameters"].is_null());
  if (!has_rope)
    text["rope_scaling"] = {{"rope_type", "yarn"},   {"factor", 32.0},
                            {"beta_fast", 32.0},     {"beta_slow", 1.0},
                            {"truncate", false},     {"original_max_position_embeddings", 4096}};
  ConfigReader r(text, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "gpt_oss", kDefaults);
  c.qkv_bias = c.o_bias = r.get_bool("attention_bias", true);
  c.mlp_bias = false;
  // null: no window, every layer attends to all keys.
  if (text.contains("sliding_window") && text["sliding_window"].is_null()) c.sliding_window = 0;
  // Even layers slide, odd ones see everything, unless the config lists its layer types.
  mobius::default_layer_types(
      c, [](int64_t i) { return i % 2 == 0 ? "sliding_attention" : "full_attention"; });
  mobius::check_layer_types(r, c, {"sliding_attention", "full_attention"}, /*any_length=*/false);
  c.moe = mobius::MoEConfig::read(r, "gpt_oss");
  c.validate();
  return json(c);
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  spec.mixer = [](const ArchitectureConfig& c, int64_t layer,
                  const DecoderSpec& s) -> std::unique_ptr<TokenMixer> {
    return std::make_unique<SinkAttention>(c, layer, s.norm_factory(), s.names.attention);
  };
  MoESpec moe;
  moe.names.router = "router";
  moe.experts = clamped_swiglu_experts();
  spec.feed_forward = moe_or_dense(moe);
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) { r.add("gpt_oss", "text-generation", parse, build); }

}  // namespace

MOBIUS_PLUGIN("gpt_oss", "0.1.0", "mobius", register_all)
