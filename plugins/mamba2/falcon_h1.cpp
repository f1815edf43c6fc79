// falcon_h1.cpp - falcon_h1: attention and a Mamba-2 mixer side by side in every layer
// (FalconH1ForCausalLM), with muP multipliers.
//
// Per layer, x = input_layernorm(h):
//   h += mamba(x) * ssm_out_multiplier + self_attn(x * attention_in_multiplier) * attention_out_multiplier
//   h += feed_forward(pre_ff_layernorm(h)),  feed_forward = down(up(x) * act(gate(x) * m0)) * m1
// with mlp_multipliers [m0, m1]. The mixer multiplies its input by ssm_in_multiplier and in_proj's
// output by the mup vector of ssm_multipliers [z, x, B, C, dt]; the attention's keys are
// multiplied by key_multiplier, which is the attention scale multiplied by it (q.(m k) = m q.k,
// rope being linear). Embeddings are multiplied by embedding_multiplier, logits by
// lm_head_multiplier. Each layer's cache is the attention's key and value and the mixer's
// conv_state and ssm_state.
#include "pack.hpp"

#include <cmath>

#include "mobius/sdk/decoder_config.hpp"

namespace mobius_mamba2 {
namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using mobius::Graph;
using mobius::Value;
using nlohmann::json;
using namespace mobius::op;

// FalconH1Config's defaults (configuration_falcon_h1.py) for keys a config.json may omit.
const mobius::DecoderDefaults kDefaults{128000, 4096, 14336, 32, 32, 8, 0, 8192, 1e-5, 10000.0};

nn::Mamba2Config mixer_defaults() {
  nn::Mamba2Config d = mamba_prefixed_defaults();
  d.intermediate = 1024;  // mamba_d_ssm; null: mamba_expand * hidden_size
  return d;
}

// The multipliers of one layer (the same for every layer).
struct Multipliers {
  double attention_in = 1.0, attention_out = 1.0, ssm_out = 1.0, mlp_gate = 1.0, mlp_down = 1.0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Multipliers, attention_in, attention_out, ssm_out,
                                                mlp_gate, mlp_down)

// A list of `n` finite numbers under `key`; absent or null: `def`.
std::vector<double> numbers(const ConfigReader& r, const std::string& key, size_t n, std::vector<double> def) {
  if (!r.has(key)) return def;
  const json& v = r.raw().at(key);
  if (!v.is_array() || v.size() != n)
    r.fail(key, "must be a list of " + std::to_string(n) + " numbers, got " + mobius::describe_value(v));
  std::vector<double> out;
  for (const auto& e : v) {
    if (!e.is_number() || !std::isfinite(e.get<double>()))
      r.fail(key, "must be a list of " + std::to_string(n) + " finite numbers");
    out.push_back(e.get<double>());
  }
  return out;
}

double finite(const ConfigReader& r, const std::string& key, double def = 1.0) {
  const double v = r.has(key) ? r.get_double(key) : def;
  if (!std::isfinite(v)) r.fail(key, "must be a finite number");
  return v;
}

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "falcon_h1", kDefaults);
  c.layer_types.clear();  // every layer is both ("hybrid"): the spec's one mixer
  c.sliding_window = 0;
  // FalconH1's rotary table spans the whole head (its rope ignores partial_rotary_factor).
  c.rope.partial_rotary_factor = 1.0;
  c.embedding_multiplier = finite(r, "embedding_multiplier");
  c.logits_multiplier = finite(r, "lm_head_multiplier");
  if (c.logits_multiplier == 0) r.fail("lm_head_multiplier", "must not be 0");
  const double key_multiplier = finite(r, "key_multiplier");
  if (!(key_multiplier > 0))
    r.fail("key_multiplier", "must be positive (it scales the attention scores)");
  c.attention_multiplier = key_multiplier / std::sqrt(static_cast<double>(c.head_dim));

  nn::Mamba2Keys keys = mamba_prefixed_keys();
  keys.intermediate = "mamba_d_ssm";
  keys.out_proj_bias = "projectors_bias";
  nn::Mamba2Config m = nn::read_mamba2_config(r, c.hidden_size, keys, mixer_defaults());
  if (!r.get_bool("mamba_rms_norm", false)) m.gate_norm = nn::Mamba2GateNorm::None;
  else if (r.get_bool("mamba_norm_before_gate", true)) m.gate_norm = nn::Mamba2GateNorm::NormThenGate;
  else m.gate_norm = nn::Mamba2GateNorm::GateThenNorm;
  m.in_multiplier = finite(r, "ssm_in_multiplier");
  m.projection_multipliers = numbers(r, "ssm_multipliers", 5, {1, 1, 1, 1, 1});
  m.validate();

  Multipliers mult;
  mult.attention_in = finite(r, "attention_in_multiplier");
  mult.attention_out = finite(r, "attention_out_multiplier");
  mult.ssm_out = finite(r, "ssm_out_multiplier");
  const auto mlp = numbers(r, "mlp_multipliers", 2, {1, 1});
  mult.mlp_gate = mlp[0];
  mult.mlp_down = mlp[1];
  c.validate();
  json j = c;
  j["mamba2"] = m;
  j["falcon_h1"] = mult;
  return j;
}

Value scaled(Value v, double m) { return m == 1.0 ? v : Mul(v, ScalarLike(v, m)); }

// The attention and the Mamba-2 mixer of one layer, both reading the layer's normed input; their
// scaled outputs summed. Attached under the layer's own path: its parts are the layer's "mamba"
// and "self_attn".
class ParallelMixer : public nn::TokenMixer {
 public:
  ParallelMixer(const ArchitectureConfig& cfg, int64_t layer, const nn::DecoderSpec& spec,
                const nn::Mamba2Config& m, const Multipliers& mult)
      : mult(mult) {
    mamba = &add<nn::Mamba2>("mamba", m);
    attn = &add<nn::Attention>("self_attn", cfg, layer, spec.norm_factory(), spec.names.attention);
  }
  Value forward(Graph& g, Value x, nn::SharedInputs& shared, const nn::CacheMap& past,
                nn::CacheMap& present) const override {
    Value s = scaled(mamba->forward(g, x, shared, past, present), mult.ssm_out);
    Value a = scaled(attn->forward(g, scaled(x, mult.attention_in), shared, past, present), mult.attention_out);
    return Add(s, a);
  }
  std::vector<nn::CacheEntry> cache_entries(mobius::DType act) const override {
    auto e = attn->cache_entries(act);
    for (auto& s : mamba->cache_entries(act)) e.push_back(std::move(s));
    return e;
  }
  bool reads_position_ids(const mobius::BuildContext& ctx) const override {
    return attn->reads_position_ids(ctx);
  }

  Multipliers mult;
  const nn::Mamba2* mamba;
  const nn::Attention* attn;
};

// FalconH1MLP: down(up(x) * act(gate(x) * mlp_gate)) * mlp_down.
class MultipliedMLP : public nn::FeedForward {
 public:
  MultipliedMLP(const ArchitectureConfig& cfg, const Multipliers& mult) : mult(mult), act(cfg.hidden_act) {
    gate_proj = &add<nn::Linear>("gate_proj", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
    up_proj = &add<nn::Linear>("up_proj", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
    down_proj = &add<nn::Linear>("down_proj", cfg.intermediate_size, cfg.hidden_size, cfg.mlp_bias);
  }
  Value forward(Graph& g, Value x) const override {
    mobius::ScopeGuard s(g, path());
    Value gate = nn::activation(act, scaled(gate_proj->forward(g, x), mult.mlp_gate));
    return scaled(down_proj->forward(g, Mul(up_proj->forward(g, x), gate)), mult.mlp_down);
  }
  Multipliers mult;
  std::string act;
  const nn::Linear* gate_proj;
  const nn::Linear* up_proj;
  const nn::Linear* down_proj;
};

void build(mobius::BuildContext& ctx, const json& j) {
  const auto cfg = j.get<ArchitectureConfig>();
  const auto m = j.at("mamba2").get<nn::Mamba2Config>();
  const auto mult = j.at("falcon_h1").get<Multipliers>();
  nn::DecoderSpec spec;
  spec.names.final_norm = "final_layernorm";
  spec.names.post_attention_norm = "pre_ff_layernorm";
  spec.names.feed_forward = "feed_forward";
  spec.names.mixer = "";  // the parallel mixer's parts sit in the layer itself
  spec.mixer = [m, mult](const ArchitectureConfig& c, int64_t layer, const nn::DecoderSpec& s) {
    return std::make_unique<ParallelMixer>(c, layer, s, m, mult);
  };
  spec.feed_forward = [mult](const ArchitectureConfig& c, int64_t, const nn::DecoderSpec&) {
    return std::make_unique<MultipliedMLP>(c, mult);
  };
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

}  // namespace

void register_falcon_h1(mobius::PluginRegistrar& r) {
  r.add("falcon_h1", "text-generation", parse, build);
}

}  // namespace mobius_mamba2
