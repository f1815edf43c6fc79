// tasks.cpp - renamed_bert, a BERT family under other tensor names and config keys that is one
// row of the SDK's encoder spec (mobius/sdk/encoder.hpp); and two model types of task
// "text-encoding" (the SDK's task table): task_encoder has
// the graph the task promises (input_ids -> last_hidden_state, pooler_output);
// task_encoder_unpooled forgets pooler_output. Neither checks a runtime or writes a runtime file:
// the SDK's build driver does, from the task's row.
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

nlohmann::json parse(const nlohmann::json& c) { return {{"hidden_size", c.value("hidden_size", 4)}}; }

void build(mobius::BuildContext& ctx, const nlohmann::json& cfg, bool pooled) {
  using namespace mobius;
  const int64_t h = cfg.at("hidden_size");
  Graph& g = ctx.graph();
  Value ids = g.input("input_ids", TensorType(DType::Int64, {"batch_size", "sequence_length"}));
  Value table = g.initializer("embed.weight", TensorType(ctx.weight_dtype(), {8, h}));
  ctx.plan_tensor("embed.weight", "embed.weight");
  Value hidden = op::Cast(op::Gather(table, ids, 0), DType::Float);
  g.output(hidden, "last_hidden_state");
  if (pooled) g.output(op::ReduceMean(hidden, {1}, false), "pooler_output");
}

// A BERT family under other names (tensors and config keys): one spec row, no code of its own.
const mobius::nn::EncoderSpec& renamed_bert() {
  static const mobius::nn::EncoderSpec s = [] {
    mobius::nn::EncoderSpec e = mobius::nn::EncoderSpec::of("renamed_bert", "");
    e.keys.hidden = "width";
    e.keys.layers = "depth";
    e.names.word = "emb.tokens";
    e.names.position = "emb.positions";
    e.names.token_type = "emb.segments";
    e.names.embed_norm = "emb.norm";
    e.names.layer = "blocks.";
    e.names.query = "attn.q";
    e.names.key = "attn.k";
    e.names.value = "attn.v";
    e.names.attn_out = "attn.o";
    e.names.attn_norm = "norm1";
    e.names.ffn_in = "mlp.up";
    e.names.ffn_out = "mlp.down";
    e.names.ffn_norm = "norm2";
    e.names.pooler = "pool";
    return e;
  }();
  return s;
}

void register_all(mobius::PluginRegistrar& r) {
  mobius::nn::register_encoder(r, renamed_bert());
  r.add("task_encoder", "text-encoding", parse,
        [](mobius::BuildContext& c, const nlohmann::json& j) { build(c, j, true); });
  r.add("task_encoder_unpooled", "text-encoding", parse,
        [](mobius::BuildContext& c, const nlohmann::json& j) { build(c, j, false); });
}

}  // namespace

MOBIUS_PLUGIN("tasks", "1.0.0", "mobius tests", register_all)
