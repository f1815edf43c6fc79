// llama.cpp - the llama family pack: llama, mistral, qwen2, qwen3, granite, olmo2.
//
// The family is data: a row of Hugging Face defaults per model type, the few keys of its own
// (biases, q/k norm, sliding window, multipliers), and the decoder spec (OLMo-2: post-norm).
#include <map>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_<type>.py defaults: vocab, hidden, intermediate, layers, heads, kv
// heads (0: heads), head_dim (0: hidden / heads), max positions, rms eps, rope theta.
const std::map<std::string, mobius::DecoderDefaults>& defaults() {
  static const std::map<std::string, mobius::DecoderDefaults> d = {
      {"llama", {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0}},
      {"mistral", {32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1e-6, 10000.0}},
      {"qwen2", {151936, 4096, 22016, 32, 32, 32, 0, 32768, 1e-6, 10000.0}},
      {"qwen3", {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 10000.0}},
      {"granite", {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0}},
      {"olmo2", {50304, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 10000.0}},
  };
  return d;
}

ArchitectureConfig parse(const std::string& type, const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, type, defaults().at(type));
  if (type == "qwen2" || type == "qwen3") {
    if (type == "qwen2") {
      c.qkv_bias = true;  // qwen2 always has q/k/v biases and no o_proj bias
      c.o_bias = false;
    }
    if (!r.get_bool("use_sliding_window", false)) c.sliding_window = 0;
    int64_t max_window_layers = r.get_int("max_window_layers", 28);
    mobius::default_layer_types(c, [&](int64_t i) {
      return c.sliding_window > 0 && i >= max_window_layers ? "sliding_attention" : "full_attention";
    });
    if (type == "qwen3") c.qk_norm = "head";
  } else if (type == "granite") {
    c.embedding_multiplier = r.get_double("embedding_multiplier", 1.0);
    c.attention_multiplier = r.get_double("attention_multiplier", 1.0);
    c.residual_multiplier = r.get_double("residual_multiplier", 1.0);
    c.logits_scaling = r.get_double("logits_scaling", 1.0);
    if (c.logits_scaling == 0) r.fail("logits_scaling", "must not be 0");
  } else if (type == "olmo2") {
    c.qk_norm = "full";
  }
  mobius::check_layer_types(r, c, {"full_attention", "sliding_attention"});
  c.validate();
  return c;
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  if (cfg.model_type == "olmo2") spec.placement = NormPlacement::Post;  // a norm after each block
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) {
  std::vector<std::string> types;
  for (const auto& [type, d] : defaults()) types.push_back(type);
  r.add_each(types, "text-generation", [](const std::string& t, const json& raw) { return json(parse(t, raw)); },
             build);
}

}  // namespace

MOBIUS_PLUGIN("llama", "0.1.0", "mobius", register_all)
