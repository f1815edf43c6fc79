// mobius/sdk/module.hpp - nn::Module: a tree of named parameters whose dotted paths equal
// the checkpoint's tensor names.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mobius/sdk/context.hpp"
#include "mobius/sdk/graph.hpp"

namespace mobius::nn {

struct ParameterSpec {
  std::string name;          // local name, e.g. "weight"
  std::vector<int64_t> shape;
  DType dtype = DType::Undefined;  // Undefined: the build's weight dtype
  std::string source;        // full checkpoint tensor name when it differs from the path
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Dotted path of this module, e.g. "model.layers.0.self_attn" ("" for the root).
  const std::string& path() const { return path_; }
  // Full name of a parameter or child of this module.
  // An empty `local` is this module's own path (a child attached under "" shares it: OPT's fc1
  // and fc2 sit in the layer itself).
  std::string full_name(const std::string& local) const {
    if (local.empty()) return path_;
    return path_.empty() ? local : path_ + "." + local;
  }

  // The graph value of a declared parameter. The first use declares the initializer, named
  // by the parameter's full path, and plans its weights from the checkpoint tensor of the
  // same name (or the tensor it was tied to).
  // `as`: the dtype the initializer is stored in when the parameter was declared without one
  // (default: the build's weight dtype), so a consumer that computes in another dtype reads it
  // without a Cast node (the host converts while streaming).
  Value param(Graph& g, const std::string& local, DType as = DType::Undefined) const;
  // The declaration of a parameter (throws when there is none).
  const ParameterSpec& parameter(const std::string& local) const;
  // The checkpoint tensor a parameter's bytes come from: its full name, or the tensor it is tied to.
  std::string source_tensor(const std::string& local) const;
  bool has_param(const std::string& local) const { return params_.count(local) > 0; }

  // Every parameter below this module: full name -> spec (sorted).
  std::map<std::string, ParameterSpec> parameters() const;

  // Takes a parameter's bytes from another checkpoint tensor (tied weights), e.g.
  // lm_head.weight from model.embed_tokens.weight.
  void tie(const std::string& local, const std::string& source_full_name);
  // Reads every parameter below this module (not already tied) from the tensor `rename` names
  // for its full name, where it names one (e.g. transformers' legacy "LayerNorm.gamma" for
  // "LayerNorm.weight"); nullopt keeps the parameter's own name.
  void retarget(const std::function<std::optional<std::string>(const std::string& full_name)>& rename);

 protected:
  void declare(const std::string& local, std::vector<int64_t> shape,
               DType dtype = DType::Undefined);
  template <class M, class... Args>
  M& add(const std::string& local, Args&&... args) {
    auto m = std::make_unique<M>(std::forward<Args>(args)...);
    M& ref = *m;
    attach(local, std::move(m));
    return ref;
  }
  void attach(const std::string& local, std::unique_ptr<Module> child);
  Module* child(const std::string& local) const;

 private:
  void set_path(const std::string& p);
  std::string path_;
  std::map<std::string, ParameterSpec> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace mobius::nn
