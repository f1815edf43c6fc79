// mamba2.cpp - mamba2: an attention-free decoder of Mamba-2 blocks (Mamba2ForCausalLM).
//
// backbone.embeddings, then per layer h + mixer(norm(h)) with the SDK's Mamba-2 mixer, then
// backbone.norm_f and lm_head. No layer reads positions, so the graph has no position_ids input;
// the one thing a step needs besides its tokens, whether it continues a cache, comes from the
// attention mask (its width minus the step's tokens is the past length).
#include "pack.hpp"

namespace mobius_mamba2 {
namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;

// Mamba2Config's defaults (configuration_mamba2.py) for keys a config.json may omit.
nn::Mamba2Config mixer_defaults() {
  nn::Mamba2Config d;
  d.num_heads = 128;
  d.head_dim = 64;
  d.state_size = 128;
  d.n_groups = 8;
  d.conv_kernel = 4;
  d.chunk_size = 256;
  d.conv_bias = true;
  d.in_proj_bias = d.out_proj_bias = false;
  d.norm_eps = 1e-5;
  return d;
}

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c;
  c.model_type = "mamba2";
  c.vocab_size = r.get_int("vocab_size", 32768);
  c.hidden_size = r.get_int("hidden_size", 4096);
  c.num_hidden_layers = r.get_int("num_hidden_layers", 64);
  c.rms_norm_eps = r.get_double("layer_norm_epsilon", 1e-5);
  if (!(c.rms_norm_eps > 0)) r.fail("layer_norm_epsilon", "must be positive");
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  c.hidden_act = r.get_string("hidden_act", "silu");
  nn::check_activation(r, "hidden_act", c.hidden_act);
  // Mamba2Config's keys: num_heads, head_dim, state_size, n_groups, conv_kernel, expand,
  // chunk_size, use_conv_bias, use_bias (in_proj and out_proj), hidden_act,
  // layer_norm_epsilon (also the gated norm's), time_step_limit.
  nn::Mamba2Config m = nn::read_mamba2_config(r, c.hidden_size, nn::Mamba2Keys{}, mixer_defaults());
  // No attention and no MLP: the decoder's attention fields describe the SSM heads, so the
  // SDK's size checks see the model's real shape.
  c.num_attention_heads = c.num_key_value_heads = m.num_heads;
  c.head_dim = m.head_dim;
  c.intermediate_size = 0;
  c.position_embedding = "none";
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "linear_attention");
  c.validate();
  json j = c;
  j["mamba2"] = m;
  return j;
}

void build(mobius::BuildContext& ctx, const json& j) {
  const auto cfg = j.get<ArchitectureConfig>();
  const auto mixer = j.at("mamba2").get<nn::Mamba2Config>();
  nn::DecoderSpec spec;
  spec.names.text_path = "backbone";
  spec.names.embed = "embeddings";
  spec.names.final_norm = "norm_f";
  // Checkpoints from before transformers' rename store backbone.embedding.weight (Mamba2Model's
  // load_hook reads them so).
  if (!ctx.query_tensor("backbone.embeddings.weight") && ctx.query_tensor("backbone.embedding.weight"))
    spec.names.embed = "embedding";
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec, [mixer](const ArchitectureConfig& c, int64_t) {
    return std::make_unique<NormBlock>("norm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.rms_norm_eps),
                                       "mixer", std::make_unique<nn::Mamba2>(mixer));
  }));
}

}  // namespace

void register_mamba2(mobius::PluginRegistrar& r) { r.add("mamba2", "text-generation", parse, build); }

}  // namespace mobius_mamba2
