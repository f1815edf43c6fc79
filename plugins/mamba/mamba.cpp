// mamba.cpp - the Mamba pack: model type mamba (transformers' MambaForCausalLM).
//
// A stack of Mamba blocks, each h + mixer(norm(h)): no attention, no feed-forward, no positions.
// The mixer is the SDK's (mamba.hpp); the block is this file's own layer, since a decoder spec's
// layer always has a feed-forward. Weights sit under "backbone": embeddings, layers.<i>.norm,
// layers.<i>.mixer, norm_f; lm_head is tied to the embeddings unless the checkpoint stores one.
#include <memory>
#include <tuple>

#include "mobius/sdk/mamba.hpp"
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

// MambaConfig's defaults (configuration_mamba.py) for keys a config.json may omit.
constexpr int64_t kVocab = 50280, kHidden = 768, kLayers = 32;
constexpr double kNormEps = 1e-5;

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c;
  c.model_type = "mamba";
  c.vocab_size = r.get_int("vocab_size", kVocab);
  c.hidden_size = r.get_int("hidden_size", kHidden);
  c.num_hidden_layers = r.get_int("num_hidden_layers", kLayers);
  c.rms_norm_eps = r.get_double("layer_norm_epsilon", kNormEps);
  if (!(c.rms_norm_eps > 0)) r.fail("layer_norm_epsilon", "must be positive");
  c.hidden_act = r.get_string("hidden_act", "silu");
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  c.position_embedding = "none";
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "linear_attention");
  nn::MambaConfig m = nn::MambaConfig::read(r, "mamba", c.hidden_size);
  // The decoder's sizes as ArchitectureConfig::validate() bounds them: the mixer's width stands
  // for the MLP's, one head of the hidden size for the attention Mamba does not have.
  c.intermediate_size = m.intermediate;
  c.num_attention_heads = c.num_key_value_heads = 1;
  c.head_dim = c.hidden_size;
  c.validate();
  json j = c;
  j["mamba"] = m;
  // residual_in_fp32: each block adds its output to a float32 residual stream.
  j["residual_in_fp32"] = r.get_bool("residual_in_fp32", true);
  return j;
}

// MambaBlock: h + mixer(norm(h)). With residual_in_fp32 in a build narrower than float32 the
// stream between blocks stays float32, as transformers keeps it (the norm reads it cast to the
// activation dtype); the last block hands the final norm the activation dtype. Otherwise the
// mixer's output is left pending, so that the next norm adds it (one
// SkipSimplifiedLayerNormalization with ONNX Runtime's operators).
class MambaBlock : public nn::DecoderLayerBase {
 public:
  MambaBlock(const ArchitectureConfig& cfg, const nn::MambaConfig& m, bool residual_in_fp32,
             bool last)
      : residual_in_fp32(residual_in_fp32), last(last) {
    norm = &add<nn::RMSNorm>("norm", cfg.hidden_size, cfg.rms_norm_eps);
    mixer = &add<nn::Mamba>("mixer", m);
  }
  Value forward(Graph& g, Value h, nn::SharedInputs& shared, const nn::CacheMap& past,
                nn::CacheMap& present) const override {
    return forward_residual(g, {h, Value()}, shared, past, present).sum();
  }
  nn::Residual forward_residual(Graph& g, const nn::Residual& r, nn::SharedInputs& shared,
                                const nn::CacheMap& past, nn::CacheMap& present) const override {
    mobius::ScopeGuard s(g, path());
    using mobius::op::Cast;
    const DType act = shared.act;
    if (!residual_in_fp32 || act == DType::Float) {
      Value x, h;
      if (r.branch) {
        std::tie(x, h) = norm->forward_skip(g, r.branch, r.h);
      } else {
        h = r.h;
        x = norm->forward(g, h);
      }
      return {h, mixer->forward(g, x, shared, past, present)};
    }
    Value h = Cast(r.sum(), DType::Float);
    Value x = norm->forward(g, Cast(h, act));
    h = mobius::op::Add(h, Cast(mixer->forward(g, x, shared, past, present), DType::Float));
    return {last ? Cast(h, act) : h, Value()};
  }
  std::vector<nn::CacheEntry> cache_entries(DType act) const override {
    return mixer->cache_entries(act);
  }
  bool reads_position_ids(const mobius::BuildContext&) const override { return false; }

  bool residual_in_fp32, last;
  const nn::Norm* norm;
  const nn::Mamba* mixer;
};

void build(mobius::BuildContext& ctx, const json& j) {
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  const auto m = j.at("mamba").get<nn::MambaConfig>();
  const bool fp32 = j.value("residual_in_fp32", true);
  nn::DecoderSpec spec;
  spec.names.text_path = "backbone";
  // Checkpoints converted before transformers renamed the table store "embedding" (MambaModel's
  // load_hook reads it as "embeddings").
  spec.names.embed = ctx.query_tensor("backbone.embedding.weight") &&
                             !ctx.query_tensor("backbone.embeddings.weight")
                         ? "embedding"
                         : "embeddings";
  spec.names.final_norm = "norm_f";
  const int64_t layers = cfg.num_hidden_layers;
  nn::CausalLMModel model(cfg, spec, [&](const ArchitectureConfig& c, int64_t i) {
    return std::make_unique<MambaBlock>(c, m, fp32, i == layers - 1);
  });
  nn::build_text_generation(ctx, model);
}

void register_all(mobius::PluginRegistrar& r) { r.add("mamba", "text-generation", parse, build); }

}  // namespace

MOBIUS_PLUGIN("mamba", "0.1.0", "mobius", register_all)
