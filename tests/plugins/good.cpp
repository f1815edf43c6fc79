// good.cpp - a well-formed test plugin: registers "toy", a one-layer projection y = relu(x W^T + b).
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

nlohmann::json parse(const nlohmann::json& c) {
  int64_t hidden = c.value("hidden_size", 4);
  int64_t out = c.value("out_size", 3);
  if (hidden <= 0) throw mobius::Error("[config] 'hidden_size' must be positive");
  if (out <= 0) throw mobius::Error("[config] 'out_size' must be positive");
  return {{"hidden_size", hidden}, {"out_size", out}};
}

void build(mobius::BuildContext& ctx, const nlohmann::json& cfg) {
  using namespace mobius;
  int64_t h = cfg.at("hidden_size"), o = cfg.at("out_size");
  Graph& g = ctx.graph();
  Value x = g.input("x", TensorType(DType::Float, {"batch_size", h}));
  Value w = g.initializer("proj.weight", TensorType(ctx.weight_dtype(), {o, h}));
  Value b = g.initializer("proj.bias", TensorType(ctx.weight_dtype(), {o}));
  ctx.plan_tensor("proj.weight", "proj.weight");
  ctx.plan_tensor("proj.bias", "proj.bias");
  ctx.ignore_tensors("unused.*");
  Value y = op::MatMul(x, op::Transpose(op::Cast(w, DType::Float), {1, 0}));
  y = op::Relu(op::Add(y, op::Cast(b, DType::Float)));
  g.output(y, "y");
}

void register_all(mobius::PluginRegistrar& r) { r.add("toy", "toy-projection", parse, build); }

}  // namespace

MOBIUS_PLUGIN("toy", "1.2.3", "mobius tests", register_all)
