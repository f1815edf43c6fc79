// llama4.cpp - Llama 4's text decoder (llama4_text, Llama4ForCausalLM; and the text model of a
// composite llama4 checkpoint): the SDK's decoder (decoder.hpp), its config read as
// decoder_family.hpp's rows read theirs. Semantics follow
// transformers' modeling_llama4.py and configuration_llama4.py:
//   - the rope rotates adjacent pairs (complex multiplication) on the layers no_rope_layers marks
//     1; the others ("NoPE" layers) have no position embedding at all;
//   - on rope layers, with use_qk_norm, q and k go through an RMS norm without a weight after
//     the rope (Llama4TextWeightlessRMSNorm, eps rms_norm_eps);
//   - on NoPE layers, with attn_temperature_tuning, each query is scaled by
//     1 + attn_scale * log1p(floor((slot + 1) / floor_scale)) at its cache slot;
//   - "chunked_attention" layers (by default the rope layers, when attention_chunk_size is set)
//     see only the keys of the query's own chunk of attention_chunk_size slots, counted from the
//     row's first real token (masking_utils' chunked_overlay); "full_attention" layers see all;
//   - the layers moe_layers lists (by default every interleave_moe_layer_step-th) hold the SDK's
//     MoE block (family_config.cpp's llama4_text row: top-k sigmoid scores scaling the chosen
//     experts' inputs, one shared expert, experts stacked as gate_up_proj [E, H, 2I] and
//     down_proj [E, I, H]); the others a gated MLP intermediate_size_mlp wide.
// The attention is the SDK's (attention.hpp): a per-layer q/k norm kind, AttentionCore::chunk and
// Attention::temperature carry the three differences, on the standard operators and on ONNX
// Runtime's GroupQueryAttention alike (whose attention_bias carries the chunks).
#include <cmath>
#include <optional>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using namespace mobius::nn;
using nlohmann::json;

// A positive integer key (absent: `def`), bounded by `max`.
int64_t positive_int(const ConfigReader& r, const char* key, int64_t def, int64_t max) {
  const int64_t v = r.get_int(key, def);
  if (v <= 0 || v > max)
    r.fail(key, "must be a positive integer of at most " + std::to_string(max) + ", got " + std::to_string(v));
  return v;
}

void read_llama4(const ConfigReader& r, ArchitectureConfig& c, json& extra) {
  const int64_t layers = c.num_hidden_layers;
  c.rope.interleaved = true;  // apply_rotary_emb: view_as_complex over adjacent pairs
  c.mlp_bias = false;
  // Dense layers: intermediate_size_mlp wide (the MoE row reads intermediate_size itself).
  c.intermediate_size = positive_int(r, "intermediate_size_mlp", 16384, 1 << 20);

  // no_rope_layers: 1 where the layer rotates, 0 where it has no position embedding; absent
  // (or empty, as transformers reads it): a NoPE layer every no_rope_layer_interval-th.
  std::vector<int64_t> uses = r.get_ints("no_rope_layers", std::vector<int64_t>{});
  if (uses.empty()) {
    const int64_t interval = positive_int(r, "no_rope_layer_interval", 4, 1 << 20);
    for (int64_t i = 0; i < layers; ++i) uses.push_back((i + 1) % interval != 0);
  }
  // transformers indexes the list by layer: it may be longer, never shorter.
  if (static_cast<int64_t>(uses.size()) < layers)
    r.fail("no_rope_layers",
           "has " + std::to_string(uses.size()) + " entries for " + std::to_string(layers) + " layers");
  for (int64_t i = 0; i < layers; ++i)
    if (uses[static_cast<size_t>(i)] == 0) c.no_rope_layers.push_back(i);

  // attention_chunk_size: null turns chunked attention off.
  int64_t chunk = 0;
  if (!r.raw().contains("attention_chunk_size")) chunk = 8192;
  else if (r.has("attention_chunk_size")) chunk = positive_int(r, "attention_chunk_size", 8192, int64_t{1} << 27);
  mobius::default_layer_types(c, [&](int64_t i) {
    return uses[static_cast<size_t>(i)] != 0 && chunk > 0 ? "chunked_attention" : "full_attention";
  });
  mobius::check_layer_types(r, c, {"full_attention", "chunked_attention"}, false);
  for (const auto& t : c.layer_types)
    if (t == "chunked_attention" && chunk == 0)
      r.fail("attention_chunk_size", "is required for the 'chunked_attention' layers of 'layer_types'");
  c.sliding_window = 0;

  // attn_temperature_tuning: a bool, or a number read as its truth value (Llama 4 Scout's
  // published config says 4, which transformers 4.51 wrote and read that way).
  bool tuning = true;
  if (r.raw().contains("attn_temperature_tuning")) {
    const json& t = r.raw().at("attn_temperature_tuning");
    if (t.is_boolean()) tuning = t.get<bool>();
    else if (t.is_number()) tuning = t.get<double>() != 0;
    else if (t.is_null()) tuning = false;
    else r.fail("attn_temperature_tuning", "must be a bool");
  }
  json temperature = nullptr;
  if (tuning) {
    const double floor_scale = r.get_double("floor_scale", 8192.0);
    if (!(floor_scale > 0) || !std::isfinite(floor_scale)) r.fail("floor_scale", "must be a positive number");
    const double attn_scale = r.get_double("attn_scale", 0.1);
    if (!std::isfinite(attn_scale)) r.fail("attn_scale", "must be a finite number");
    temperature = {{"floor_scale", floor_scale}, {"attn_scale", attn_scale}};
  }

  // The MoE layers: moe_layers when the config lists them (an empty list: none), else
  // range(step - 1, num_hidden_layers, step) for step interleave_moe_layer_step.
  c.moe = mobius::MoEConfig::read(r, "llama4_text");
  const auto listed = r.raw().find("moe_layers");
  if (listed == r.raw().end() || listed->is_null()) {
    const int64_t step = positive_int(r, "interleave_moe_layer_step", 1, 1 << 20);
    c.moe->moe_layers.clear();
    for (int64_t i = step - 1; i < layers; i += step) c.moe->moe_layers.push_back(i);
  }
  // No sparse layer (is_moe_layer reads an empty list as "every layer"): a dense model.
  if (c.moe->moe_layers.empty()) c.moe.reset();

  extra["llama4"] = {{"use_qk_norm", r.get_bool("use_qk_norm", true)},
                     {"attention_chunk_size", chunk},
                     {"temperature", temperature}};
}

// The text model of llama4_text, or of a composite llama4 checkpoint
// (Llama4ForConditionalGeneration), whose text weights sit under language_model.model and
// language_model.lm_head beside the vision tower and its projector, which a text build leaves out.
DecoderSpec llama4_spec(const json& j) {
  DecoderSpec s;
  if (j.at("model_type") == "llama4") {
    s.names.text_path = "language_model.model";
    s.names.lm_head = "language_model.lm_head";
    s.ignored = {"vision_model.*", "multi_modal_projector.*"};
  }
  s.names.feed_forward = "feed_forward";
  s.names.attention.qk_norm_after_rope = true;
  MoESpec moe;
  moe.names.router = "router";
  moe.names.shared_experts = "shared_expert";
  StackedExperts banks;
  banks.gate_up = "gate_up_proj";
  banks.gate_up_input_major = true;
  banks.down = "down_proj";
  banks.down_input_major = true;
  moe.experts = stacked_experts(banks);
  s.feed_forward = moe_or_dense(moe);

  const json& own = j.at("llama4");
  const bool qk_norm = own.at("use_qk_norm").get<bool>();
  const int64_t chunk = own.at("attention_chunk_size").get<int64_t>();
  QueryTemperature temperature;
  if (const json& t = own.at("temperature"); !t.is_null()) {
    temperature.floor_scale = t.at("floor_scale").get<double>();
    temperature.scale = t.at("attn_scale").get<double>();
  }
  s.mixer = [qk_norm, chunk, temperature](const ArchitectureConfig& cfg, int64_t layer, const DecoderSpec& spec)
      -> std::unique_ptr<TokenMixer> {
    const bool rope = cfg.uses_rope(layer);
    ArchitectureConfig lc = cfg;
    lc.qk_norm = qk_norm && rope ? "head_weightless" : "none";  // the q/k norm of rope layers only
    auto a = std::make_unique<Attention>(lc, layer, spec.norm_factory(), spec.names.attention);
    if (cfg.layer_types.at(static_cast<size_t>(layer)) == "chunked_attention") a->core.chunk = chunk;
    if (!rope) a->temperature = temperature;  // NoPE layers
    return a;
  };
  return s;
}

// transformers' defaults: vocab, hidden, intermediate (the experts'; dense layers read
// intermediate_size_mlp), layers, heads, kv heads, head_dim, max positions, rms eps, rope theta.
const mobius::DecoderDefaults kDefaults{202048, 5120, 8192, 48, 40, 8, 128, 131072, 1e-5, 500000.0};

// The SDK's decoder-family parse (parse_decoder_family) of the text config, for the text model or
// the composite's.
json parse_llama4(const std::string& model_type, const json& raw) {
  const bool composite = model_type == "llama4";
  if (composite && !(raw.contains("text_config") && raw.at("text_config").is_object()))
    ConfigReader(raw, "config.json").fail("text_config", "is required for llama4 (the text model)");
  const json& text = mobius::text_config(raw);
  ConfigReader r(text, composite ? "config.json text_config" : "config.json");
  mobius::DecoderDefaults d = kDefaults;
  // A composite config may spell tie_word_embeddings at the top; the text config's wins.
  d.tie_word_embeddings = composite && ConfigReader(raw, "config.json").get_bool("tie_word_embeddings", false);
  ArchitectureConfig c = mobius::read_decoder_config(r, model_type, d);
  json extra = json::object();
  read_llama4(r, c, extra);
  c.validate();
  json out = c;
  out.update(extra);
  return out;
}

void register_all(mobius::PluginRegistrar& r) {
  for (const char* type : {"llama4_text", "llama4"}) {
    const std::string t = type;
    r.add(t, "text-generation", [t](const json& raw) { return parse_llama4(t, raw); },
          [](mobius::BuildContext& ctx, const json& j) {
            build_text_generation(ctx, CausalLMModel(j.get<ArchitectureConfig>(), llama4_spec(j)));
          });
  }
}

}  // namespace

MOBIUS_PLUGIN("llama4", "0.1.0", "mobius", register_all)
