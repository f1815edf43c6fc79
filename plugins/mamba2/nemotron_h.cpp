// nemotron_h.cpp - nemotron_h: NVIDIA's Nemotron-H, a stack of single-part blocks
// (NemotronHForCausalLM).
//
// backbone.embeddings, then per layer h + mixer(norm(h)) where the mixer is, by the layer's type
// (layers_block_type; older configs: hybrid_override_pattern, one character per layer):
//   linear_attention  "M"  the SDK's Mamba-2 mixer (width mamba_num_heads * mamba_head_dim)
//   full_attention    "*"  attention without positions (no rope), no biases
//   mlp               "-"  down(act(up(x))), mlp_hidden_act (relu2)
//   moe               "E"  routed experts of that MLP's shape plus one shared expert; a sigmoid
//                          router with e_score_correction_bias choosing in groups (DeepSeek-V3's
//                          noaux_tc), the weights renormalised and scaled
// then backbone.norm_f and lm_head. Positions are read by no layer: the graph has no
// position_ids input.
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
using namespace mobius::op;

// NemotronHConfig's defaults (configuration_nemotron_h.py) for keys a config.json may omit.
mobius::DecoderDefaults defaults() {
  mobius::DecoderDefaults d{131072, 4096, 21504, 4, 32, 8, 128, 4096, 1e-5, 10000.0,
                            0, false, "relu2", "mlp_hidden_act"};
  d.keys = {{"rms_norm_eps", {"layer_norm_epsilon"}}};
  return d;
}

nn::Mamba2Config mixer_defaults() {
  nn::Mamba2Config d;
  d.num_heads = 128;
  d.head_dim = 64;
  d.state_size = 128;
  d.n_groups = 8;
  d.conv_kernel = 4;
  d.chunk_size = 128;
  d.conv_bias = true;
  d.in_proj_bias = d.out_proj_bias = false;
  return d;
}

// The experts' keys and NemotronHConfig's defaults, as a MoE family row of the SDK's table.
mobius::FamilyRow<mobius::MoEConfig> moe_row() {
  mobius::MoEConfig d;
  d.moe_intermediate_size = 7688;
  d.n_routed_experts = 8;
  d.n_shared_experts = 1;  // one plain MLP, moe_shared_expert_intermediate_size wide
  d.shared_expert_intermediate_size = 7688;
  d.num_experts_per_tok = 2;
  d.scoring = "sigmoid";
  d.correction_bias = true;
  d.topk_method = "noaux_tc";
  d.n_group = 1;
  d.topk_group = 1;
  d.norm_topk_prob = true;
  d.routed_scaling_factor = 1.0;
  return {"nemotron_h",
          d,
          {"moe_intermediate_size", mobius::FieldKey("n_routed_experts").or_key("num_local_experts"),
           "num_experts_per_tok", mobius::FieldKey("n_group").null_is(1),
           mobius::FieldKey("topk_group").null_is(1), "norm_topk_prob", "routed_scaling_factor",
           mobius::FieldKey("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")}};
}

// The layer types: layers_block_type (layer_types), else hybrid_override_pattern, else
// NemotronHConfig's default; the older spellings remapped as transformers does.
std::vector<std::string> layer_types(const ConfigReader& r) {
  std::vector<std::string> t;
  const char* key = r.has("layers_block_type") ? "layers_block_type" : "layer_types";
  if (r.has(key)) {
    t = r.get_strings(key);
    for (auto& s : t) {
      if (s == "mamba") s = "linear_attention";
      if (s == "attention") s = "full_attention";
      if (s != "linear_attention" && s != "full_attention" && s != "mlp" && s != "moe")
        r.fail(key, "has unknown layer type " + mobius::quote_value(s) +
                        " (known: linear_attention, full_attention, mlp, moe)");
    }
  } else if (r.has("hybrid_override_pattern")) {
    for (char ch : r.get_string("hybrid_override_pattern")) {
      if (ch == 'M') t.push_back("linear_attention");
      else if (ch == '*') t.push_back("full_attention");
      else if (ch == '-') t.push_back("mlp");
      else if (ch == 'E') t.push_back("moe");
      else
        r.fail("hybrid_override_pattern", "has " + mobius::quote_value(std::string(1, ch)) +
                                              " (known: M Mamba-2, * attention, - MLP, E MoE)");
    }
  } else {
    t = {"linear_attention", "moe", "full_attention", "mlp"};
  }
  if (t.empty() || t.size() > 1024)
    r.fail(r.has("hybrid_override_pattern") && !r.has(key) ? "hybrid_override_pattern" : key,
           "must name from 1 to 1024 layers");
  return t;
}

// The mixer's keys: transformers still reads the older mamba_* spellings where a config has them.
nn::Mamba2Keys mamba_keys(const ConfigReader& r) {
  auto either = [&](const char* old, const char* key) { return std::string(r.has(old) ? old : key); };
  nn::Mamba2Keys k;
  k.num_heads = "mamba_num_heads";
  k.head_dim = "mamba_head_dim";
  k.state_size = "ssm_state_size";
  k.n_groups = either("mamba_n_groups", "n_groups");
  k.conv_kernel = either("mamba_d_conv", "conv_kernel");
  k.expand = "";  // the width is mamba_num_heads * mamba_head_dim
  k.chunk_size = either("mamba_chunk_size", "chunk_size");
  k.conv_bias = either("mamba_conv_bias", "use_conv_bias");
  k.in_proj_bias = k.out_proj_bias = "use_bias";
  k.act = "mamba_hidden_act";
  k.norm_eps = "layer_norm_epsilon";
  k.time_step_limit = either("mamba_dt_limit", "time_step_limit");
  return k;
}

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "nemotron_h", defaults());
  c.layer_types = layer_types(r);
  // num_hidden_layers is the layer types' count (NemotronHConfig ignores the key).
  c.num_hidden_layers = static_cast<int64_t>(c.layer_types.size());
  c.position_embedding = "none";
  c.qkv_bias = c.o_bias = false;  // NemotronHAttention has no biases
  c.sliding_window = 0;
  if (r.has("moe_latent_size"))
    r.fail("moe_latent_size", "is not supported (experts computed in a latent width)");
  const bool any_moe = std::count(c.layer_types.begin(), c.layer_types.end(), "moe") > 0;
  if (any_moe) {
    c.moe = mobius::MoEConfig::read(r, moe_row());
    if (c.moe->shared_expert_intermediate_size <= 0)
      r.fail("moe_shared_expert_intermediate_size", "must be positive");
  }
  nn::Mamba2Config m = nn::read_mamba2_config(r, c.hidden_size, mamba_keys(r), mixer_defaults());
  c.validate();
  json j = c;
  j["mamba2"] = m;
  return j;
}

// Routed experts of one MLP each, down(act(up(x))), stored per expert (E.up_proj.weight
// [I, H], E.down_proj.weight [H, I]) and stacked into two banks while the weights stream.
class UpDownExpertBank : public nn::ExpertBank {
 public:
  UpDownExpertBank(int64_t e, int64_t h, int64_t i, std::string act) : ExpertBank(e, h, i), act(std::move(act)) {
    declare("up_proj", {e, i, h});
    declare("down_proj", {e, h, i});
  }
  std::string act;

 protected:
  Value bank(Graph& g, const std::string& local) const {
    mobius::BuildContext& ctx = g.context();
    Graph& main = ctx.graph();
    const std::string name = full_name(local);
    if (auto v = main.find_initializer(name)) return *v;
    std::vector<std::string> sources;
    for (int64_t e = 0; e < experts; ++e) sources.push_back(full_name(std::to_string(e) + "." + local + ".weight"));
    const std::vector<mobius::Dim> dims = local == "up_proj" ? std::vector<mobius::Dim>{experts, intermediate, hidden}
                                                             : std::vector<mobius::Dim>{experts, hidden, intermediate};
    Value v = main.initializer(name, mobius::TensorType(ctx.weight_dtype(), dims));
    ctx.plan_expert_bank(name, sources);
    return v;
  }
  Value expert(Graph& b, Value e, Value xe) const override {
    const mobius::DType adt = xe.dtype();
    // Weights on the left, so that only the n token rows are transposed.
    Value up = Cast(Gather(b.outer(bank(b, "up_proj")), e, 0), adt);      // [I, H]
    Value down = Cast(Gather(b.outer(bank(b, "down_proj")), e, 0), adt);  // [H, I]
    Value mid = nn::activation(act, MatMul(up, Transpose(xe, {1, 0})));   // [I, n]
    return Transpose(MatMul(down, mid), {1, 0});                          // [n, H]
  }
};


void build(mobius::BuildContext& ctx, const json& j) {
  const auto cfg = j.get<ArchitectureConfig>();
  const auto m = j.at("mamba2").get<nn::Mamba2Config>();
  nn::DecoderSpec spec;
  spec.names.text_path = "backbone";
  spec.names.embed = "embeddings";
  spec.names.final_norm = "norm_f";
  // Multi-token-prediction layers are a drafting aid, not part of the causal LM.
  spec.ignored = {"mtp.*"};
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec, [&spec, m](const ArchitectureConfig& c, int64_t i) {
    auto norm = std::make_unique<nn::RMSNorm>(c.hidden_size, c.rms_norm_eps);
    const std::string& type = c.layer_types.at(static_cast<size_t>(i));
    if (type == "linear_attention")
      return std::make_unique<NormBlock>("norm", std::move(norm), "mixer", std::make_unique<nn::Mamba2>(m));
    if (type == "full_attention")
      return std::make_unique<NormBlock>("norm", std::move(norm), "mixer",
                                         std::make_unique<nn::Attention>(c, i, spec.norm_factory(), spec.names.attention));
    std::unique_ptr<nn::FeedForward> ff;
    if (type == "moe") {
      // NemotronHMoE: the routed experts of that MLP's shape and the shared expert, both on x.
      nn::MoESpec moe;
      moe.plain_shared = true;
      moe.experts = [](const nn::MoEConfig& mc, const nn::MoENames&) -> std::unique_ptr<nn::ExpertBank> {
        return std::make_unique<UpDownExpertBank>(mc.n_routed_experts, mc.hidden, mc.moe_intermediate_size,
                                                  mc.hidden_act);
      };
      ff = std::make_unique<nn::SparseMoE>(nn::MoEConfig::from(c), moe);
    }
    else ff = std::make_unique<nn::MLP>(c.hidden_size, c.intermediate_size, c.mlp_bias, c.hidden_act);
    return std::make_unique<NormBlock>("norm", std::move(norm), "mixer", std::move(ff));
  }));
}

}  // namespace

void register_nemotron_h(mobius::PluginRegistrar& r) { r.add("nemotron_h", "text-generation", parse, build); }

}  // namespace mobius_mamba2
