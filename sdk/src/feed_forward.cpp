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

}  // namespace mobius::nn
