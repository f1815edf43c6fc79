// granitemoehybrid.cpp - granitemoehybrid: Granite 4.0's hybrid of Mamba-2 and attention layers
// with a mixture of experts (GraniteMoeHybridForCausalLM).
//
// Pre-norm layers, each a Mamba-2 mixer ("mamba") or attention ("self_attn") by layer_types
// ("mamba" / "attention" in older configs), then post_attention_layernorm and the feed-forward:
// block_sparse_moe(x) + shared_mlp(x) (Granite-MoE's stacked experts and router, and a gated MLP
// of shared_intermediate_size with fused input_linear), or shared_mlp(x) alone when
// num_local_experts is 0. Granite's multipliers: embeddings times embedding_multiplier, each
// sub-block's output times residual_multiplier, attention_multiplier as the attention scale,
// logits divided by logits_scaling. The attention rotates only with position_embedding_type
// "rope" (Granite 4.0-H checkpoints say "nope").
#include "pack.hpp"

#include <algorithm>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/moe.hpp"

namespace mobius_mamba2 {
namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using mobius::Graph;
using mobius::Value;
using nlohmann::json;

// GraniteMoeHybridConfig's defaults (configuration_granitemoehybrid.py) for keys a config.json
// may omit.
const mobius::DecoderDefaults kDefaults{32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0};

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "granitemoehybrid", kDefaults);
  mobius::read_granite_multipliers(r, c);
  if (!(c.attention_multiplier > 0)) r.fail("attention_multiplier", "must be positive");
  c.sliding_window = 0;
  c.mlp_bias = false;
  const std::string positions = r.has("position_embedding_type") ? r.get_string("position_embedding_type") : "";
  c.position_embedding = positions == "rope" ? "rope" : "none";
  // layer_types: every layer Mamba-2 when absent; the older spellings remapped as transformers
  // does (remap_legacy_layer_types).
  mobius::default_layer_types(c, [](int64_t) { return "linear_attention"; });
  for (auto& t : c.layer_types) {
    if (t == "mamba") t = "linear_attention";
    if (t == "attention") t = "full_attention";
  }
  mobius::check_layer_types(r, c, {"linear_attention", "full_attention"}, false);
  // Granite-MoE's expert keys and defaults (num_local_experts 8, num_experts_per_tok 2, experts
  // intermediate_size wide, a softmax over the top k logits); 0 experts: no MoE block.
  c.moe = mobius::MoEConfig::read(r, "granitemoehybrid");
  const int64_t shared = r.get_int("shared_intermediate_size", 1024);
  if (shared <= 0) r.fail("shared_intermediate_size", "must be positive");
  nn::Mamba2Config m = nn::read_mamba2_config(r, c.hidden_size, mamba_prefixed_keys(), mamba_prefixed_defaults());
  c.validate();
  json j = c;
  j["mamba2"] = m;
  j["shared_intermediate_size"] = shared;
  return j;
}

// block_sparse_moe(x) + shared_mlp(x), or shared_mlp(x) alone without experts. Attached under
// the layer's own path: its parts are the layer's "block_sparse_moe" and "shared_mlp".
class SharedMLPMoE : public nn::FeedForward {
 public:
  SharedMLPMoE(const ArchitectureConfig& cfg, int64_t layer, int64_t shared_width) {
    if (cfg.moe && cfg.moe->is_moe_layer(layer)) {
      nn::MoESpec spec;
      spec.names.router = "router.layer";
      spec.names.experts = "";  // the banks sit in the block itself
      nn::StackedExperts banks;
      banks.gate_up = "input_linear.weight";  // [E, 2I, H]: each expert's gate rows, then its up rows
      banks.down = "output_linear.weight";    // [E, H, I]
      spec.experts = nn::stacked_experts(banks);
      moe = &add<nn::SparseMoE>("block_sparse_moe", nn::MoEConfig::from(cfg), spec);
    }
    nn::MLPNames names;
    names.gate_up = "input_linear";  // [gate | up]
    names.down = "output_linear";
    shared_mlp = &add<nn::GatedMLP>("shared_mlp", cfg.hidden_size, shared_width, false, cfg.hidden_act, names);
  }
  Value forward(Graph& g, Value x) const override {
    Value y = shared_mlp->forward(g, x);
    return moe ? mobius::op::Add(moe->forward(g, x), y) : y;
  }
  const nn::SparseMoE* moe = nullptr;
  const nn::GatedMLP* shared_mlp;
};

void build(mobius::BuildContext& ctx, const json& j) {
  const auto cfg = j.get<ArchitectureConfig>();
  const auto m = j.at("mamba2").get<nn::Mamba2Config>();
  const int64_t shared = j.at("shared_intermediate_size").get<int64_t>();
  nn::DecoderSpec spec;
  spec.names.mixer_by_layer_type = {{"linear_attention", "mamba"}};
  spec.names.feed_forward = "";  // the MoE block and the shared MLP sit in the layer itself
  spec.mixer = nn::mixer_by_layer_type(
      {{"linear_attention", nn::mamba2_mixer(m)}, {"full_attention", nn::attention_mixer()}});
  spec.feed_forward = [shared](const ArchitectureConfig& c, int64_t layer, const nn::DecoderSpec&) {
    return std::make_unique<SharedMLPMoE>(c, layer, shared);
  };
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

}  // namespace

void register_granitemoehybrid(mobius::PluginRegistrar& r) {
  r.add("granitemoehybrid", "text-generation", parse, build);
}

}  // namespace mobius_mamba2
