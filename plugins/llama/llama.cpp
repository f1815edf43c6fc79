// llama.cpp - the llama family pack: decoders with RMS norms, rotary attention and a gated MLP,
// and their kin. Each model type is a row of the SDK's decoder table (decoder_family.hpp):
// transformers' configuration defaults, the few keys of its own, and its decoder spec.
#include <cmath>
#include <map>

#include "mobius/sdk/decoder_family.hpp"
#include "mobius/sdk/nn.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using namespace mobius::nn;
using nlohmann::json;

// Layers "sliding_attention" where the config names no layer_types: every `period`-th layer
// (i + 1) % period == 0 is full (full_last) or sliding.
void periodic_layers(ArchitectureConfig& c, int64_t period, bool full_last) {
  mobius::default_layer_types(c, [&](int64_t i) {
    const bool last = (i + 1) % period == 0;
    return last == full_last ? "full_attention" : "sliding_attention";
  });
}

DecoderSpec post_norm(const json&) {
  DecoderSpec s;
  s.placement = NormPlacement::Post;  // a norm after each block (OLMo-2, OLMo-3, EXAONE 4)
  return s;
}

// GLM: q/k/v biases (attention_bias, on by default), never one on o_proj; partial rotary of
// adjacent pairs.
void glm_attention(const ConfigReader& r, ArchitectureConfig& c) {
  c.qkv_bias = r.get_bool("attention_bias", true);
  c.o_bias = false;
  c.rope.interleaved = true;
  mobius::check_attention_layer_types(r, c);
}

DecoderSpec glm_spec() {
  DecoderSpec s;
  s.names.mlp.gate_up = "gate_up_proj";  // [gate | up]
  return s;
}

const std::map<std::string, DecoderFamily>& families() {
  using D = mobius::DecoderDefaults;
  static const std::map<std::string, DecoderFamily> f = {
      // vocab, hidden, intermediate, layers, heads, kv heads (0: heads), head_dim (0: hidden /
      // heads), max positions, rms eps, rope theta
      {"llama", {D{32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) { mobius::check_attention_layer_types(r, c); }}},
      {"mistral", {D{32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1e-6, 10000.0},
                   [](const ConfigReader& r, ArchitectureConfig& c, json&) { mobius::check_attention_layer_types(r, c); }}},
      {"ministral", {D{32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1e-6, 10000.0, 4096},
                     [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                       if (r.raw().contains("sliding_window") && r.raw().at("sliding_window").is_null())
                         c.sliding_window = 0;
                       mobius::default_layer_types(c, [](int64_t) { return "sliding_attention"; });
                       mobius::check_attention_layer_types(r, c);
                     }}},
      {"qwen2", {D{151936, 4096, 22016, 32, 32, 32, 0, 32768, 1e-6, 10000.0},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                   c.qkv_bias = true;  // qwen2 always has q/k/v biases and no o_proj bias
                   c.o_bias = false;
                   mobius::read_qwen_window(r, c);
                 }}},
      {"qwen3", {D{151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 10000.0},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                   mobius::read_qwen_window(r, c);
                   c.qk_norm = "head";
                 }}},
      {"granite", {D{32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0},
                   [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                     mobius::read_granite_multipliers(r, c);
                     mobius::check_attention_layer_types(r, c);
                   }}},
      {"olmo2", {D{50304, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 10000.0},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                   c.qk_norm = "full";
                   mobius::check_attention_layer_types(r, c);
                 },
                 post_norm}},
      {"olmo3", {D{50304, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 500000.0, 4096},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                   c.qk_norm = "full";
                   periodic_layers(c, 4, true);
                   // A rope given once (not per layer type) is the full layers'; the sliding ones
                   // keep the default.
                   if (!c.has_sliding_rope) {
                     c.has_sliding_rope = true;
                     c.sliding_rope = mobius::RopeConfig{};
                     c.sliding_rope.theta = 500000.0;
                   }
                   mobius::check_attention_layer_types(r, c);
                 },
                 post_norm}},
      {"exaone4", {D{102400, 4096, 16384, 32, 32, 32, 0, 2048, 1e-5, 10000.0, 4096},
                   [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                     c.qk_norm = "head";
                     c.qkv_bias = c.o_bias = false;  // attention_bias is not read
                     const bool windowed = !(r.raw().contains("sliding_window") && r.raw().at("sliding_window").is_null());
                     if (!windowed) c.sliding_window = 0;
                     if (c.layer_types.empty() && windowed) {
                       const int64_t pattern = r.get_int("sliding_window_pattern", 4);
                       if (pattern <= 0) r.fail("sliding_window_pattern", "must be positive");
                       periodic_layers(c, pattern, true);
                     }
                     mobius::check_attention_layer_types(r, c);
                     // Only sliding layers rotate (every layer when there is no window).
                     if (windowed)
                       for (int64_t i = 0; i < c.num_hidden_layers; ++i)
                         if (!c.is_sliding(i)) c.no_rope_layers.push_back(i);
                   },
                   post_norm}},
      {"helium", {D{48000, 2560, 7040, 24, 20, 20, 128, 4096, 1e-8, 100000.0},
                  [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                    c.rope.interleaved = true;  // adjacent pairs
                    c.o_bias = false;           // o_proj never has one
                    mobius::check_attention_layer_types(r, c);
                  }}},
      {"smollm3", {D{128256, 2048, 11008, 36, 16, 4, 0, 32768, 1e-6, 2000000.0, 0, true},
                   [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                     // no_rope_layers: 1 where the layer rotates, 0 where it has no position
                     // embedding (every no_rope_layer_interval-th layer by default).
                     std::vector<int64_t> uses = r.get_ints("no_rope_layers", std::vector<int64_t>{});
                     if (uses.empty()) {
                       const int64_t interval = r.get_int("no_rope_layer_interval", 4);
                       if (interval <= 0) r.fail("no_rope_layer_interval", "must be positive");
                       for (int64_t i = 0; i < c.num_hidden_layers; ++i) uses.push_back((i + 1) % interval != 0);
                     }
                     if (static_cast<int64_t>(uses.size()) != c.num_hidden_layers)
                       r.fail("no_rope_layers", "has " + std::to_string(uses.size()) + " entries for " +
                                                    std::to_string(c.num_hidden_layers) + " layers");
                     for (int64_t i = 0; i < c.num_hidden_layers; ++i)
                       if (uses[static_cast<size_t>(i)] == 0) c.no_rope_layers.push_back(i);
                     const bool window = r.get_bool("use_sliding_window", false) && c.sliding_window > 0;
                     mobius::default_layer_types(c, [&](int64_t i) {
                       return window && uses[static_cast<size_t>(i)] == 0 ? "sliding_attention" : "full_attention";
                     });
                     mobius::check_attention_layer_types(r, c);
                   }}},
      {"arcee", {D{32000, 2560, 18432, 32, 32, 0, 0, 4096, 1e-5, 10000.0, 0, false, "relu2"},
                 [](const ConfigReader& r, ArchitectureConfig& c, json&) { mobius::check_attention_layer_types(r, c); },
                 [](const json&) {
                   DecoderSpec s;
                   s.feed_forward = plain_mlp();  // down(relu(up(x))^2), no gate
                   return s;
                 }}},
      {"apertus", {D{131072, 4096, 14336, 32, 32, 0, 0, 65536, 1e-5, 12000000.0, 0, false, "xielu"},
                   [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                     c.qk_norm = "head";
                     c.mlp_bias = false;  // never
                     // llama3 scaling unless the config gives a rope of its own.
                     if (!r.has("rope_parameters") && !r.has("rope_scaling")) {
                       c.rope = mobius::RopeConfig{};
                       c.rope.type = "llama3";
                       c.rope.theta = 12000000.0;
                       c.rope.factor = 8.0;
                       c.rope.original_max_position_embeddings = 8192;
                     }
                     mobius::check_attention_layer_types(r, c);
                   },
                   [](const json&) {
                     DecoderSpec s;
                     s.feed_forward = plain_mlp();
                     s.names.input_norm = "attention_layernorm";
                     s.names.post_attention_norm = "feedforward_layernorm";
                     return s;
                   }}},
      {"ernie4_5", {D{103424, 1024, 3072, 18, 16, 2, 128, 131072, 1e-5, 500000.0, 0, true},
                    [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                      c.rope.interleaved = true;
                      c.qkv_bias = c.o_bias = c.mlp_bias = r.get_bool("use_bias", false);
                      mobius::check_attention_layer_types(r, c);
                    }}},
      {"hunyuan_v1_dense", {D{290943, 4096, 11008, 32, 32, 0, 0, 2048, 1e-5, 10000.0},
                            [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                              mobius::read_hunyuan_attention(r, c);
                              c.mlp_bias = false;
                            },
                            [](const json&) {
                              DecoderSpec s;
                              s.names.attention.q_norm = "query_layernorm";
                              s.names.attention.k_norm = "key_layernorm";
                              s.names.attention.qk_norm_after_rope = true;
                              return s;
                            }}},
      {"seed_oss", {D{155136, 4096, 27648, 64, 80, 8, 128, 524288, 1e-6, 10000000.0},
                    [](const ConfigReader& r, ArchitectureConfig& c, json&) {
                      c.qkv_bias = r.get_bool("attention_bias", true);
                      c.o_bias = r.get_bool("attention_out_bias", false);
                      mobius::check_attention_layer_types(r, c);
                    }}},
      {"glm", {D{151552, 4096, 13696, 40, 32, 2, 128, 131072, 1.5625e-7, 10000.0, 0, false, "silu", "hidden_act", 0.5},
               [](const ConfigReader& r, ArchitectureConfig& c, json&) { glm_attention(r, c); },
               [](const json&) { return glm_spec(); }}},
      {"glm4", {D{151552, 4096, 13696, 40, 32, 2, 128, 131072, 1.5625e-7, 10000.0, 0, false, "silu", "hidden_act", 0.5},
                [](const ConfigReader& r, ArchitectureConfig& c, json&) { glm_attention(r, c); },
                [](const json&) {
                  // A norm after each block too: post_attention_layernorm is the one before the MLP.
                  DecoderSpec s = glm_spec();
                  s.placement = NormPlacement::Sandwich;
                  s.names.post_attention_norm = "post_self_attn_layernorm";
                  s.names.pre_feedforward_norm = "post_attention_layernorm";
                  s.names.post_feedforward_norm = "post_mlp_layernorm";
                  return s;
                }}},
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) { register_decoder_families(r, families()); }

}  // namespace

MOBIUS_PLUGIN("llama", "0.1.0", "mobius", register_all)
