// qwen3_next.cpp - the Qwen3-Next pack (model type qwen3_next).
//
// A hybrid decoder: each layer's token mixer is Gated DeltaNet (linear attention, its conv and
// recurrent states in the cache) or gated full attention, by config.layer_types, as in Qwen3.5;
// the feed-forward is a sparse mixture of experts with one shared expert scaled by
// sigmoid(shared_expert_gate(x)), or a dense MLP on mlp_only_layers. Every norm is (1 + w) except
// the gated norm inside the linear attention. All of it is the SDK's: this file is the config
// table and the spec. What differs from Qwen3.5 is data: the checkpoint stores the linear
// attention's input projections fused (in_proj_qkvz, in_proj_ba: GatedDeltaNetOptions::
// fused_projections), the MoE block (mlp.gate, mlp.experts.E.*, mlp.shared_expert.*,
// mlp.shared_expert_gate) and the defaults. Semantics follow transformers'
// modeling_qwen3_next.py / configuration_qwen3_next.py.
#include <memory>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/gated_deltanet.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using mobius::DType;
using nlohmann::json;
namespace nn = mobius::nn;

// Qwen3NextConfig's defaults for keys a config.json may omit; its partial_rotary_factor is 0.25
// wherever the key is spelled.
const mobius::DecoderDefaults kDefaults{151936, 2048, 5632, 48, 16, 2, 256, 32768, 1e-6,
                                        10000.0, 0, false, "silu", "hidden_act", 0.25};
constexpr int64_t kFullAttentionInterval = 4;

// The Gated DeltaNet keys (linear_*) with Qwen3NextConfig's defaults.
const mobius::FamilyRow<mobius::GatedDeltaNetConfig>& linear_attention_row() {
  static const mobius::FamilyRow<mobius::GatedDeltaNetConfig> row{
      "qwen3_next",
      {.num_k_heads = 16, .num_v_heads = 32, .k_head_dim = 128, .v_head_dim = 128, .conv_kernel = 4},
      {"conv_kernel", "k_head_dim", "v_head_dim", "num_k_heads", "num_v_heads"}};
  return row;
}

json parse(const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "qwen3_next", kDefaults);
  if (c.num_hidden_layers <= 0) r.fail("num_hidden_layers", "must be positive");
  c.sliding_window = 0;
  c.qk_norm = "head";
  c.mlp_bias = false;
  if (c.layer_types.empty()) {
    const int64_t interval = r.get_int("full_attention_interval", kFullAttentionInterval);
    if (interval <= 0) r.fail("full_attention_interval", "must be positive");
    mobius::default_layer_types(c, [&](int64_t i) {
      return (i + 1) % interval ? "linear_attention" : "full_attention";
    });
  }
  mobius::check_layer_types(r, c, {"linear_attention", "full_attention"}, false);
  c.linear_attn = mobius::GatedDeltaNetConfig::read(r, linear_attention_row());
  c.moe = mobius::MoEConfig::read(r, "qwen3_next");
  c.validate();
  return json(c);
}

// Whether a narrower build keeps the linear-attention input side in float32: only when the
// checkpoint has it in float32, for the reason the qwen35 plugin gives (this block amplifies the
// rounding of those weights most; bfloat16 checkpoints convert to float16 without rounding).
bool keep_linear_inputs_float32(mobius::BuildContext& ctx, const ArchitectureConfig& cfg) {
  if (ctx.weight_dtype() == DType::Float) return false;
  for (size_t i = 0; i < cfg.layer_types.size(); ++i) {
    if (cfg.layer_types[i] != "linear_attention") continue;
    auto info = ctx.query_tensor("model.layers." + std::to_string(i) +
                                 ".linear_attn.in_proj_qkvz.weight");
    return info && info->dtype == DType::Float;
  }
  return false;
}

void build(mobius::BuildContext& ctx, const json& j) {
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  nn::DecoderSpec spec;
  spec.norm = nn::NormKind::OffsetRMS;
  spec.names.mixer_by_layer_type = {{"linear_attention", "linear_attn"}};
  const bool float32_inputs = keep_linear_inputs_float32(ctx, cfg);
  if (float32_inputs)
    ctx.log(MOBIUS_LOG_INFO,
            "qwen3_next: the float32 checkpoint's linear-attention input projections "
            "stay float32 in this build");
  nn::MixerFactory linear = [float32_inputs](const ArchitectureConfig& c, int64_t,
                                             const nn::DecoderSpec&) {
    auto opt = nn::GatedDeltaNetOptions::from_config(c);
    opt.float32_inputs = float32_inputs;
    opt.fused_projections = true;
    return std::make_unique<nn::GatedDeltaNet>(opt);
  };
  spec.mixer = nn::mixer_by_layer_type(
      {{"linear_attention", linear}, {"full_attention", nn::attention_mixer(true)}});
  nn::MoESpec moe;
  moe.names.shared_experts = "shared_expert";
  spec.feed_forward = nn::moe_or_dense(moe);
  // Multi-token-prediction heads are a drafting aid, not part of the causal LM (transformers
  // drops them on load too).
  spec.ignored = {"mtp.*"};
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) {
  r.add("qwen3_next", "text-generation", parse, build);
}

}  // namespace

MOBIUS_PLUGIN("qwen3_next", "0.1.0", "mobius", register_all)
