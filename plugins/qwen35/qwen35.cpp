// qwen35.cpp - the Qwen3.5 pack: qwen3_5_text and the text model of the composite qwen3_5.
//
// A hybrid decoder: each layer's token mixer is Gated DeltaNet (linear attention, recurrent
// state in the cache) or gated full attention, by config.layer_types. Both components come from
// the SDK; this file is the config table, the layer that picks the mixer, and the model whose
// text weights sit under "model" (qwen3_5_text) or "model.language_model" (qwen3_5).
#include <algorithm>
#include <map>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/gated_deltanet.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using mobius::DType;
using mobius::Graph;
using mobius::Value;
using nlohmann::json;
namespace nn = mobius::nn;

// Qwen3_5TextConfig's defaults (configuration_qwen3_5.py) for keys a config.json may omit.
// Its partial_rotary_factor is 0.25 wherever the key is spelled.
const mobius::DecoderDefaults kDefaults{248320, 4096, 12288, 32, 16, 4, 256, 32768, 1e-6,
                                            10000.0, 0, false, "silu", "hidden_act", 0.25};
constexpr int64_t kFullAttentionInterval = 4;

ArchitectureConfig parse(const std::string& model_type, const json& raw) {
  const bool composite = model_type == "qwen3_5";
  if (composite && !(raw.contains("text_config") && raw.at("text_config").is_object()))
    ConfigReader(raw, "config.json")
        .fail("text_config", "is required for qwen3_5 (the text model)");
  ConfigReader r(mobius::text_config(raw), composite ? "config.json text_config" : "config.json");
  mobius::DecoderDefaults d = kDefaults;
  // A composite config may spell tie_word_embeddings at the top; the text config's wins.
  d.tie_word_embeddings =
      composite && ConfigReader(raw, "config.json").get_bool("tie_word_embeddings", false);
  ArchitectureConfig c = mobius::read_decoder_config(r, model_type, d);
  if (c.num_hidden_layers <= 0) r.fail("num_hidden_layers", "must be positive");
  // mrope_section / mrope_interleaved: a text-only model feeds the same position to all three
  // sections, which makes multimodal rope the plain rope.
  c.sliding_window = 0;
  c.qk_norm = "head";
  if (c.layer_types.empty()) {
    int64_t interval = r.get_int("full_attention_interval", kFullAttentionInterval);
    if (interval <= 0) r.fail("full_attention_interval", "must be positive");
    mobius::default_layer_types(c, [&](int64_t i) { return (i + 1) % interval ? "linear_attention" : "full_attention"; });
  }
  for (auto& t : c.layer_types) {  // transformers' remap_legacy_layer_types
    if (t == "attention") t = "full_attention";
    if (t == "mamba") t = "linear_attention";
  }
  mobius::check_layer_types(r, c, {"linear_attention", "full_attention"}, false);
  // The linear_* keys, with Qwen3.5's defaults (family_config.cpp).
  c.linear_attn = mobius::GatedDeltaNetConfig::read(r, model_type);
  c.validate();
  return c;
}

// Whether a narrower build keeps the linear-attention input side in float32: only when the
// checkpoint has it in float32. This block is the one most sensitive to weight rounding: with
// every weight of qwen35-tiny-sharded rounded to float16 and everything computed in float32, the
// decode2 logits move by 2.3e-2, past the f16 parity tolerance (2e-2 + 2e-2 * |x|) whatever the
// graph does; keeping these weights float32 brings the f16 builds of all qwen35 cases to <= 1e-2,
// the level of the llama family. bfloat16 checkpoints (the released Qwen3.5 ones) convert to
// float16 without rounding (within its range), so they stay all float16 and pay nothing.
bool keep_linear_inputs_float32(mobius::BuildContext& ctx, const ArchitectureConfig& cfg,
                                const std::string& text_path) {
  if (ctx.weight_dtype() == DType::Float) return false;
  for (size_t i = 0; i < cfg.layer_types.size(); ++i) {
    if (cfg.layer_types[i] != "linear_attention") continue;
    auto info = ctx.query_tensor(text_path + ".layers." + std::to_string(i) +
                                 ".linear_attn.in_proj_qkv.weight");
    return info && info->dtype == DType::Float;
  }
  return false;
}

// Pre-norm layers with (1 + w) norms; the token mixer is Gated DeltaNet or gated attention by
// layer type. The text weights sit under "model" (qwen3_5_text) or "model.language_model"
// (qwen3_5); multi-token-prediction heads are a drafting aid, not part of the causal LM
// (transformers drops them on load too), and a text-only build leaves out the vision tower.
void build(mobius::BuildContext& ctx, const json& j) {
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  const bool composite = cfg.model_type == "qwen3_5";
  nn::DecoderSpec spec;
  spec.norm = nn::NormKind::OffsetRMS;
  spec.names.text_path = composite ? "model.language_model" : "model";
  spec.names.mixer_by_layer_type = {{"linear_attention", "linear_attn"}};
  const bool float32_inputs = keep_linear_inputs_float32(ctx, cfg, spec.names.text_path);
  if (float32_inputs)
    ctx.log(MOBIUS_LOG_INFO,
            "qwen35: the float32 checkpoint's linear-attention input projections "
            "stay float32 in this build");
  spec.mixer = nn::mixer_by_layer_type({{"linear_attention", nn::gated_deltanet_mixer(float32_inputs)},
                                        {"full_attention", nn::attention_mixer(true)}});
  spec.ignored = {"mtp.*"};
  if (composite) spec.ignored.push_back("model.visual.*");
  // transformers.js drives every Qwen3.5 model as a Qwen-VL one: position_ids [3, batch, seq]
  // (models/qwen2_vl get_rope_index), the three rows equal for text.
  spec.position_id_rows = [](const std::string& runtime) { return runtime == "transformers.js" ? 3 : 1; };
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) {
  for (const char* type : {"qwen3_5_text", "qwen3_5"}) {
    std::string t = type;
    r.add(t, "text-generation", [t](const json& raw) { return json(parse(t, raw)); }, build);
  }
}

}  // namespace

MOBIUS_PLUGIN("qwen35", "0.1.0", "mobius", register_all)
