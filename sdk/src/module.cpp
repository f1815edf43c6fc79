// module.cpp - parameter declaration, tying, and lazy initializer/plan creation.
#include "mobius/sdk/module.hpp"

namespace mobius::nn {

void Module::declare(const std::string& local, std::vector<int64_t> shape, DType dtype) {
  for (int64_t d : shape)
    if (d < 0)
      throw Error("[module] parameter '" + full_name(local) + "' has a negative dimension");
  params_[local] = ParameterSpec{local, std::move(shape), dtype, ""};
}

void Module::tie(const std::string& local, const std::string& source_full_name) {
  auto it = params_.find(local);
  if (it == params_.end()) throw Error("[module] no parameter '" + full_name(local) + "' to tie");
  it->second.source = source_full_name;
}

void Module::retarget(const std::function<std::optional<std::string>(const std::string& full_name)>& rename) {
  for (auto& [local, p] : params_)
    if (p.source.empty())
      if (std::optional<std::string> to = rename(full_name(local))) p.source = *to;
  for (auto& [n, m] : children_) m->retarget(rename);
}

void Module::attach(const std::string& local, std::unique_ptr<Module> child) {
  child->set_path(full_name(local));
  children_.emplace_back(local, std::move(child));
}

Module* Module::child(const std::string& local) const {
  for (const auto& [n, m] : children_)
    if (n == local) return m.get();
  return nullptr;
}

void Module::set_path(const std::string& p) {
  path_ = p;
  for (auto& [n, m] : children_) m->set_path(full_name(n));
}

const ParameterSpec& Module::parameter(const std::string& local) const {
  auto it = params_.find(local);
  if (it == params_.end()) throw Error("[module] '" + path_ + "' has no parameter '" + local + "'");
  return it->second;
}

std::string Module::source_tensor(const std::string& local) const {
  const ParameterSpec& p = parameter(local);
  return p.source.empty() ? full_name(local) : p.source;
}

Value Module::param(Graph& g, const std::string& local, DType as) const {
  const ParameterSpec& p = parameter(local);
  BuildContext& ctx = g.context();
  DType dt = p.dtype != DType::Undefined ? p.dtype : as != DType::Undefined ? as : ctx.weight_dtype();
  // A tied parameter is the same initializer as its source: one copy of the bytes.
  std::string name = source_tensor(local);
  if (auto v = ctx.graph().find_initializer(name)) return *v;
  std::vector<Dim> dims(p.shape.begin(), p.shape.end());
  Value v = ctx.graph().initializer(name, TensorType(dt, dims));
  ctx.plan_tensor(name, name);
  return v;
}

std::map<std::string, ParameterSpec> Module::parameters() const {
  std::map<std::string, ParameterSpec> out;
  for (const auto& [n, p] : params_) out[full_name(n)] = p;
  for (const auto& [n, m] : children_) out.merge(m->parameters());
  return out;
}

}  // namespace mobius::nn
