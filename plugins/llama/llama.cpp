// llama.cpp - the llama family pack: llama, mistral, qwen2, qwen3, granite, olmo2.
//
// The family is data: one table of Hugging Face defaults per model type and a few flags that
// select SDK components (biases, q/k norm, sliding window, multipliers, post-norm layers).
#include <map>

#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_<type>.py defaults for keys a config.json may omit.
struct Defaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads;  // 0: same as num_attention_heads
  int64_t head_dim;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  double rms_norm_eps, rope_theta;
  int64_t sliding_window;       // 0: none
};

const std::map<std::string, Defaults>& defaults() {
  static const std::map<std::string, Defaults> d = {
      {"llama", {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0, 0}},
      {"mistral", {32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1e-6, 10000.0, 4096}},
      {"qwen2", {151936, 4096, 22016, 32, 32, 32, 0, 32768, 1e-6, 10000.0, 4096}},
      {"qwen3", {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 10000.0, 4096}},
      {"granite", {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0, 0}},
      {"olmo2", {50304, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 10000.0, 0}},
  };
  return d;
}

ArchitectureConfig parse(const std::string& model_type, const json& raw) {
  const Defaults& d = defaults().at(model_type);
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c;
  c.model_type = model_type;
  c.vocab_size = r.get_int("vocab_size", d.vocab_size);
  c.hidden_size = r.get_int("hidden_size", d.hidden_size);
  c.intermediate_size = r.get_int("intermediate_size", d.intermediate_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", d.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", d.num_attention_heads);
  c.num_key_value_heads =
      r.get_int("num_key_value_heads", d.num_key_value_heads ? d.num_key_value_heads : c.num_attention_heads);
  if (c.num_attention_heads <= 0) r.fail("num_attention_heads", "must be positive");
  if (r.has("head_dim")) {
    c.head_dim = r.get_int("head_dim");
  } else if (d.head_dim) {
    c.head_dim = d.head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("hidden_size", "(" + std::to_string(c.hidden_size) + ") is not a multiple of 'num_attention_heads' (" +
                                std::to_string(c.num_attention_heads) + ") and there is no 'head_dim'");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.hidden_act = r.get_string("hidden_act", "silu");
  c.rms_norm_eps = r.get_double("rms_norm_eps", d.rms_norm_eps);
  c.max_position_embeddings = r.get_int("max_position_embeddings", d.max_position_embeddings);
  c.rope = mobius::read_rope(r, d.rope_theta);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  c.mlp_bias = r.get_bool("mlp_bias", false);
  bool attention_bias = r.get_bool("attention_bias", false);
  c.qkv_bias = c.o_bias = attention_bias;

  if (model_type == "mistral") {
    c.sliding_window = r.has("sliding_window") ? r.get_int("sliding_window") : 0;
  } else if (model_type == "qwen2" || model_type == "qwen3") {
    if (model_type == "qwen2") {
      c.qkv_bias = true;  // qwen2 always has q/k/v biases and no o_proj bias
      c.o_bias = false;
    }
    bool use_sliding = r.get_bool("use_sliding_window", false);
    int64_t window = r.has("sliding_window") ? r.get_int("sliding_window") : 0;
    c.sliding_window = use_sliding ? window : 0;
    int64_t max_window_layers = r.get_int("max_window_layers", 28);
    c.layer_types = r.get_strings("layer_types");
    if (c.layer_types.empty())
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        c.layer_types.push_back(c.sliding_window > 0 && i >= max_window_layers ? "sliding_attention"
                                                                                : "full_attention");
    if (model_type == "qwen3") c.qk_norm = "head";
  } else if (model_type == "granite") {
    c.embedding_multiplier = r.get_double("embedding_multiplier", 1.0);
    c.attention_multiplier = r.get_double("attention_multiplier", 1.0);
    c.residual_multiplier = r.get_double("residual_multiplier", 1.0);
    c.logits_scaling = r.get_double("logits_scaling", 1.0);
    if (c.logits_scaling == 0) r.fail("logits_scaling", "must not be 0");
  } else if (model_type == "olmo2") {
    c.qk_norm = "full";
    c.post_norm = true;
  }
  if (c.layer_types.empty() && r.has("layer_types")) c.layer_types = r.get_strings("layer_types");
  for (const auto& t : c.layer_types)
    if (t != "full_attention" && t != "sliding_attention")
      r.fail("layer_types", "has unknown layer type '" + t + "'");
  if (c.sliding_window < 0) r.fail("sliding_window", "must not be negative");
  mobius::nn::check_activation(r, "hidden_act", c.hidden_act);
  c.validate();
  return c;
}

void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  if (cfg.post_norm) spec.placement = NormPlacement::Post;  // OLMo-2
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
