// phi3.cpp - the Phi-3 family: Phi-3, Phi-3.5 and Phi-4-mini (model type phi3).
//
// A Llama-shaped decoder whose checkpoints fuse q/k/v into one qkv_proj and gate/up into one
// gate_up_proj (both are names in the spec), every layer attending within `sliding_window` when
// the config has one, and the long-context rope "longrope" (per-frequency short and long
// factors, the SDK's rope type, picked per run).
#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_phi3.py defaults: vocab, hidden, intermediate, layers, heads, kv
// heads (0: heads), head_dim (0: hidden / heads), max positions, rms eps, rope theta.
const mobius::DecoderDefaults kDefaults = {32064, 3072, 8192, 32, 32, 0, 0, 4096, 1e-5, 10000.0};
// Phi3Config.original_max_position_embeddings: always set, so it is the length longrope compares
// against even when the rope object carries its own.
constexpr int64_t kOriginalMaxPositions = 4096;

json parse(const json& raw) {
  // The text config with what Phi3Config fills in before the rope is read: the two lengths, the
  // rope object (rope_scaling wins over rope_parameters), and the rope type's former names.
  json text = mobius::text_config(raw);
  if (!text.is_object()) throw mobius::Error("[config] config.json must be an object");
  auto absent = [&](const char* key) { return !text.contains(key) || text.at(key).is_null(); };
  if (absent("max_position_embeddings")) text["max_position_embeddings"] = kDefaults.max_position_embeddings;
  if (absent("original_max_position_embeddings"))
    text["original_max_position_embeddings"] = kOriginalMaxPositions;
  if (!absent("rope_scaling")) text.erase("rope_parameters");
  const std::string key = absent("rope_scaling") ? "rope_parameters" : "rope_scaling";
  if (!absent(key.c_str()) && text.at(key).is_object()) {
    json& rope = text.at(key);
    json type = rope.value("type", json());
    if (rope.contains("rope_type") && !rope.at("rope_type").is_null()) type = rope.at("rope_type");
    // Phi-3's first configs named longrope "su" (and some "yarn"); configuration_phi3 reads
    // both as longrope.
    if (type == "su" || type == "yarn") rope["rope_type"] = "longrope";
  }

  ConfigReader r(text, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "phi3", kDefaults);
  if (c.rope.type != "default" && c.rope.type != "longrope")
    r.fail(key, "has rope type " + mobius::quote_value(c.rope.type) +
                    "; Phi-3 has default or longrope (su and yarn are former names of longrope)");
  mobius::check_rope_factors(r, c.rope, c.rotary_dim());
  // Phi-3's projections have no biases, whatever attention_bias or mlp_bias say.
  c.qkv_bias = c.o_bias = c.mlp_bias = false;
  // transformers' Phi-3 has no layer types: with a sliding_window, every layer slides.
  c.layer_types.clear();
  c.validate();
  return json(c);
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  // qkv_proj rows are [q | k | v] and gate_up_proj rows [gate | up]: the SDK's fused layouts.
  spec.names.attention.qkv = "qkv_proj";
  spec.names.mlp.gate_up = "gate_up_proj";
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) { r.add("phi3", "text-generation", parse, build); }

}  // namespace

MOBIUS_PLUGIN("phi3", "0.1.0", "mobius", register_all)
