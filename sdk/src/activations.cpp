// activations.cpp - transformers' activation functions by name (layers.hpp).
#include "mobius/sdk/layers.hpp"

#include <algorithm>
#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

namespace {

Value gelu_erf(Value x) {
  Value inner = Erf(Mul(x, ScalarLike(x, M_SQRT1_2)));
  return Mul(Mul(x, ScalarLike(x, 0.5)), Add(inner, ScalarLike(x, 1.0)));
}

Value gelu_tanh(Value x) {
  Value x3 = Mul(Mul(x, x), x);
  Value inner = Mul(ScalarLike(x, std::sqrt(2.0 / M_PI)), Add(x, Mul(ScalarLike(x, 0.044715), x3)));
  return Mul(Mul(x, ScalarLike(x, 0.5)), Add(Tanh(inner), ScalarLike(x, 1.0)));
}

// transformers' ACT2FN, by name (activations.py): each as its module computes it.
struct ActivationRow {
  const char* name;
  Value (*f)(Value);
};
const ActivationRow kActivations[] = {
    {"silu", [](Value x) { return Mul(x, Sigmoid(x)); }},
    {"swish", [](Value x) { return Mul(x, Sigmoid(x)); }},
    {"relu", [](Value x) { return Relu(x); }},
    {"gelu", gelu_erf},          // GELUActivation: the exact erf form
    {"gelu_python", gelu_erf},
    {"gelu_pytorch_tanh", gelu_tanh},  // the tanh approximation, under each of its names
    {"gelu_new", gelu_tanh},
    {"gelu_fast", gelu_tanh},
    {"gelu_tanh", gelu_tanh},
    {"gelu_accurate", gelu_tanh},
    {"quick_gelu", [](Value x) { return Mul(x, Sigmoid(Mul(x, ScalarLike(x, 1.702)))); }},
    {"gelu_10", [](Value x) { return Min(Max(gelu_erf(x), ScalarLike(x, -10.0)), ScalarLike(x, 10.0)); }},
    {"relu6", [](Value x) { return Min(Relu(x), ScalarLike(x, 6.0)); }},
    {"relu2", [](Value x) { Value r = Relu(x); return Mul(r, r); }},
    {"sigmoid", [](Value x) { return Sigmoid(x); }},
    {"tanh", [](Value x) { return Tanh(x); }},
    {"linear", [](Value x) { return x; }},
    {"mish", [](Value x) { return Mul(x, Tanh(Softplus(x))); }},
    // Learned per layer: MLP holds its parameters (feed_forward.hpp).
    {"xielu", [](Value) -> Value { throw Error("[activation] xielu has learned parameters: an MLP computes it"); }},
};

std::string known_activations() {
  std::string known;
  for (const ActivationRow& a : kActivations) known += std::string(known.empty() ? "" : ", ") + a.name;
  return known;
}

}  // namespace

void check_activation(const ConfigReader& r, const std::string& key, const std::string& name) {
  for (const ActivationRow& a : kActivations)
    if (name == a.name) return;
  r.fail(key, "has unknown activation '" + name + "' (known: " + known_activations() + ")");
}

Value activation(const std::string& name, Value x) {
  for (const ActivationRow& a : kActivations)
    if (name == a.name) return a.f(x);
  throw Error("[activation] unknown hidden_act '" + name + "' (known: " + known_activations() + ")");
}

Value activation_f32(const std::string& name, Value x) {
  Value xf = x.dtype() == DType::Float16 ? Cast(x, DType::Float) : x;
  return Cast(activation(name, xf), x.dtype());
}

Value encoder_activation(Graph& g, const std::string& name, Value x) {
  const bool erf = name == "gelu" || name == "gelu_python";
  const bool tanh = name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast" ||
                    name == "gelu_python_tanh" || name == "gelu_accurate";
  if (!ort_ops(g.context()) || !(erf || tanh) || (x.dtype() != DType::Float && x.dtype() != DType::Float16))
    return activation_f32(name, x);
  Value xf = Cast(x, DType::Float);
  Value y = g.node(erf ? "Gelu" : "FastGelu", {xf}, {xf.type()}, {}, "com.microsoft")[0];
  return Cast(y, x.dtype());
}

}  // namespace mobius::nn
