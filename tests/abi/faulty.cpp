// faulty.cpp - an SDK plugin whose code fails on purpose, as config.json asks: "fail_in" is
// "parse" or "build", "fail" says how ("config", "std", "alloc", "int"); "fail": "rank" queries a
// tensor of rank 9, "fail": "transform" plans a weight whose transform throws while it is saved.
//
// "abi_faulty": y = MatMul(x, Transpose(proj.weight)), x [batch_size, 4], proj.weight [3, 4].
#include <new>
#include <stdexcept>

#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using nlohmann::json;

void fail(const std::string& how) {
  if (how == "config") throw mobius::Error("[config] 'fail' asks for a config error");
  if (how == "std") throw std::out_of_range("vector::_M_range_check: __n (which is 7)");
  if (how == "alloc") throw std::bad_alloc();
  if (how == "int") throw 42;
}

json parse(const json& c) {
  json out = {{"fail_in", c.value("fail_in", "")}, {"fail", c.value("fail", "")}};
  if (out["fail_in"] == "parse") fail(out["fail"]);
  return out;
}

void build(mobius::BuildContext& ctx, const json& cfg) {
  using namespace mobius;
  std::string how = cfg.at("fail");
  if (cfg.at("fail_in") == "build") fail(how);
  if (how == "rank") ctx.query_tensor("big");
  Graph& g = ctx.graph();
  Value x = g.input("x", TensorType(DType::Float, {"batch_size", 4}));
  Value w = g.initializer("proj.weight", TensorType(ctx.weight_dtype(), {3, 4}));
  if (how == "transform") {
    ctx.plan_transformed("proj.weight", {"proj.weight"},
                         [](const std::vector<HostTensor>&, float*, size_t) {
                           throw std::runtime_error("the transform failed on purpose");
                         });
  } else {
    ctx.plan_tensor("proj.weight", "proj.weight");
  }
  ctx.ignore_tensors("big");
  g.output(op::MatMul(x, op::Transpose(op::Cast(w, DType::Float), {1, 0})), "y");
}

void register_all(mobius::PluginRegistrar& r) {
  r.add("abi_faulty", "toy-projection", parse, build);
}

}  // namespace

MOBIUS_PLUGIN("abi_faulty", "1.0.0", "mobius tests", register_all)
