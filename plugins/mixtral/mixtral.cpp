// mixtral.cpp - the Mixtral plugin: Mistral's attention with a sparse mixture of experts in
// every layer.
//
// The family is data: transformers' defaults (configuration_mixtral.py), the MoE row of the SDK
// (family_config.cpp: num_local_experts, num_experts_per_tok, a renormalised float32 softmax
// router) and the hub names of the block (block_sparse_moe.gate, block_sparse_moe.experts.E.
// {w1,w3,w2}: gate, up and down). Semantics follow transformers' modular_mixtral.py.
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
const mobius::DecoderDefaults kDefaults = {32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1e-5, 1e6};

json parse(const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "mixtral", kDefaults);
  // MistralAttention has no biases and no layer types: a sliding window, when set, covers
  // every layer.
  c.qkv_bias = c.o_bias = false;
  c.mlp_bias = false;
  c.layer_types.clear();
  c.moe = mobius::MoEConfig::read(r, "mixtral");
  c.validate();
  return json(c);
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  spec.names.feed_forward = "block_sparse_moe";
  MoESpec moe;
  moe.names.expert.gate = "w1";
  moe.names.expert.up = "w3";
  moe.names.expert.down = "w2";
  spec.feed_forward = moe_or_dense(moe);
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) { r.add("mixtral", "text-generation", parse, build); }

}  // namespace

MOBIUS_PLUGIN("mixtral", "0.1.0", "mobius", register_all)
