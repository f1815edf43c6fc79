// qwen3_moe.cpp - the Qwen3-MoE plugin: Qwen3's attention (per-head q/k norms) with sparse
// mixture-of-experts layers and dense MLPs where the config says.
//
// The family is data: transformers' defaults (configuration_qwen3_moe.py), the MoE row of the
// SDK (family_config.cpp: num_experts, moe_intermediate_size, decoder_sparse_step,
// mlp_only_layers, norm_topk_prob) and Hugging Face's default tensor names (mlp.gate,
// mlp.experts.E.{gate,up,down}_proj; a dense layer's mlp.{gate,up,down}_proj of
// intermediate_size). Semantics follow transformers' modular_qwen3_moe.py.
#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// vocab, hidden, intermediate, layers, heads, kv heads, head_dim (0: hidden / heads), max
// positions, rms eps, rope theta.
const mobius::DecoderDefaults kDefaults = {151936, 2048, 6144, 24, 32, 4, 0, 32768, 1e-6, 10000.0};

json parse(const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "qwen3_moe", kDefaults);
  c.qk_norm = "head";
  c.mlp_bias = false;
  // The sliding window applies only with use_sliding_window, and then to every layer: the
  // model has no layer types (Qwen3MoeAttention, MixtralModel's mask).
  if (!r.get_bool("use_sliding_window", false)) c.sliding_window = 0;
  c.layer_types.clear();
  c.moe = mobius::MoEConfig::read(r, "qwen3_moe");
  c.validate();
  return json(c);
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  spec.feed_forward = moe_or_dense();
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) {
  r.add("qwen3_moe", "text-generation", parse, build);
}

}  // namespace

MOBIUS_PLUGIN("qwen3_moe", "0.1.0", "mobius", register_all)
