// feed_forward.cpp - GatedMLP (feed_forward.hpp).
#include "mobius/sdk/feed_forward.hpp"

namespace mobius::nn {

using namespace mobius::op;

GatedMLP::GatedMLP(int64_t hidden, int64_t inter, bool bias, std::string a, const MLPNames& names)
    : intermediate(inter), act(std::move(a)) {
  if (!names.gate_up.empty()) {
    gate_up_proj = &add<Linear>(names.gate_up, hidden, 2 * inter, bias);
  } else {
    gate_proj = &add<Linear>(names.gate, hidden, inter, bias);
    up_proj = &add<Linear>(names.up, hidden, inter, bias);
  }
  down_proj = &add<Linear>(names.down, inter, hidden, bias);
}

Value GatedMLP::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value gate, up;
  if (gate_up_proj) {
    auto parts = Split(gate_up_proj->forward(g, x), {intermediate, intermediate}, -1);
    gate = parts[0];
    up = parts[1];
  } else {
    gate = gate_proj->forward(g, x);
    up = up_proj->forward(g, x);
  }
  return down_proj->forward(g, Mul(activation(act, gate), up));
}

namespace {

// xIELU's learned scalars, below the MLP as act_fn.*.
class XIELU : public Module {
 public:
  XIELU() {
    declare("alpha_p", {1}, DType::Float);
    declare("alpha_n", {1}, DType::Float);
    declare("beta", {}, DType::Float);
    declare("eps", {}, DType::Float);
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    Value xf = Cast(x, DType::Float);
    Value beta = param(g, "beta");
    Value ap = Softplus(param(g, "alpha_p"));
    Value an = Add(beta, Softplus(param(g, "alpha_n")));
    Value pos = Add(Mul(Mul(ap, xf), xf), Mul(beta, xf));
    Value e = Min(xf, param(g, "eps"));
    Value expm1 = Sub(Exp(e), ScalarLike(e, 1.0));
    Value neg = Add(Mul(Sub(expm1, xf), an), Mul(beta, xf));
    return Cast(Where(Greater(xf, ScalarLike(xf, 0.0)), pos, neg), x.dtype());
  }
};

}  // namespace

MLP::MLP(int64_t hidden, int64_t inter, bool bias, std::string a, const MLPNames& names) : act(std::move(a)) {
  up_proj = &add<Linear>(names.up, hidden, inter, bias, names.in_out);
  down_proj = &add<Linear>(names.down, inter, hidden, bias, names.in_out);
  if (act == "xielu") xielu = &add<XIELU>("act_fn");
}

Value MLP::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value h = up_proj->forward(g, x);
  h = xielu ? static_cast<const XIELU*>(xielu)->forward(g, h) : activation(act, h);
  return down_proj->forward(g, h);
}

}  // namespace mobius::nn
