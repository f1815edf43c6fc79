// deepseek.cpp - the DeepSeek pack: deepseek_v2 and deepseek_v3 (MLA attention, DeepSeek MoE).
//
// Both types share one decoder layer (MLA + a dense MLP for the first first_k_dense_replace
// layers, a sparse MoE after); they differ in their defaults, their router (V2: softmax with
// greedy or group-limited greedy top-k; V3: sigmoid with e_score_correction_bias and noaux_tc)
// and their rope layout. Semantics follow transformers' modeling_deepseek_v2/v3.py.
#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/mla.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// transformers' configuration_deepseek_v2.py / configuration_deepseek_v3.py defaults of the
// decoder's keys (head_dim is MLA's rope part, set below); the MLA and MoE keys are read by their
// family tables (family_config.cpp).
const std::map<std::string, mobius::DecoderDefaults>& defaults() {
  static const std::map<std::string, mobius::DecoderDefaults> d = {
      {"deepseek_v2", {32000, 4096, 11008, 32, 32, 0, 64, 2048}},
      {"deepseek_v3", {129280, 7168, 18432, 61, 128, 0, 64, 4096}},
  };
  return d;
}

ArchitectureConfig parse(const std::string& model_type, const json& raw) {
  const bool v3 = model_type == "deepseek_v3";
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, model_type, defaults().at(model_type));
  // kv_b_proj gives every head its own key and value; transformers' repeat_kv only works when
  // the two counts agree.
  if (c.num_key_value_heads != c.num_attention_heads)
    r.fail("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) +
                                      ") must equal 'num_attention_heads' (" +
                                      std::to_string(c.num_attention_heads) + ") for MLA");
  // V2 multiplies adjacent pairs as complex numbers. V3 with rope_interleave permutes each
  // head's pairs apart and applies rotate_half: the same rotation of the same pairs.
  c.rope.interleaved = v3 ? r.get_bool("rope_interleave", true) : true;
  if (v3) c.mlp_bias = false;  // V3 has no such key
  if (c.mlp_bias) r.fail("mlp_bias", "is not supported: DeepSeek's routed experts have no biases");
  c.sliding_window = 0;
  c.layer_types.clear();
  c.mla = mobius::MLAConfig::read(r, model_type);
  c.head_dim = c.mla->qk_rope_head_dim;  // transformers' head_dim: the rope part
  c.moe = mobius::MoEConfig::read(r, model_type);
  c.num_nextn_predict_layers = r.get_int("num_nextn_predict_layers", 0);
  c.validate();  // the decoder's keys, then the MLA and MoE configs with them
  return c;
}

// Pre-norm layers: MLA, then the dense MLP below first_k_dense_replace and the sparse MoE from
// there on. The multi-token-prediction layers after the decoder's are left out by the SDK.
void build(mobius::BuildContext& ctx, const json& j) {
  using namespace mobius::nn;
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  DecoderSpec spec;
  spec.mixer = mla_mixer();
  spec.feed_forward = moe_or_dense();
  build_text_generation(ctx, CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) {
  std::vector<std::string> types;
  for (const auto& [type, d] : defaults()) types.push_back(type);
  r.add_each(types, "text-generation", [](const std::string& t, const json& raw) { return json(parse(t, raw)); },
             build);
}

}  // namespace

MOBIUS_PLUGIN("deepseek", "0.1.0", "mobius", register_all)
