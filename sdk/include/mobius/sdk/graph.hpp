// mobius/sdk/graph.hpp - the plugin-side graph builder: cheap Value handles over a host graph.
//
// A Graph wraps one host graph (main graph or subgraph) reached through the C ABI. Every
// node is checked here, on the plugin side, when it is built: dtypes must agree and known
// ranks and static sizes must fit, so an error names the operation and the offending value
// at the plugin line that caused it. Errors are thrown as mobius::Error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "mobius/sdk/error.hpp"
#include "mobius/plugin.h"

namespace mobius {

enum class DType : int32_t {
  Undefined = MOBIUS_DTYPE_UNDEFINED,
  Float = MOBIUS_DTYPE_FLOAT,
  UInt8 = MOBIUS_DTYPE_UINT8,
  Int8 = MOBIUS_DTYPE_INT8,
  Int16 = MOBIUS_DTYPE_INT16,
  Int32 = MOBIUS_DTYPE_INT32,
  Int64 = MOBIUS_DTYPE_INT64,
  Bool = MOBIUS_DTYPE_BOOL,
  Float16 = MOBIUS_DTYPE_FLOAT16,
  Double = MOBIUS_DTYPE_DOUBLE,
  BFloat16 = MOBIUS_DTYPE_BFLOAT16,
};

const char* to_string(DType t);
bool is_floating(DType t);

// One dimension: a static size, a named symbolic size, or unknown.
struct Dim {
  int64_t size = -1;  // >= 0 when static
  std::string param;  // non-empty when symbolic
  Dim() = default;
  Dim(int64_t s) : size(s) {}  // NOLINT(google-explicit-constructor): shapes read as {b, 4, 64}
  Dim(const char* p) : param(p) {}  // NOLINT
  Dim(std::string p) : param(std::move(p)) {}  // NOLINT
  bool is_static() const { return param.empty() && size >= 0; }
  bool is_symbolic() const { return !param.empty(); }
  bool known() const { return is_static() || is_symbolic(); }
  bool operator==(const Dim& o) const { return size == o.size && param == o.param; }
  std::string str() const;
};

// A tensor type; `rank_known == false` means nothing is known of the shape.
struct TensorType {
  DType dtype = DType::Undefined;
  bool rank_known = false;
  std::vector<Dim> dims;
  TensorType() = default;
  TensorType(DType t, std::vector<Dim> d) : dtype(t), rank_known(true), dims(std::move(d)) {}
  static TensorType unranked(DType t) {
    TensorType r;
    r.dtype = t;
    return r;
  }
  int rank() const { return rank_known ? static_cast<int>(dims.size()) : -1; }
  std::string str() const;  // e.g. "float32[batch_size,sequence_length,64]"
};

class Graph;
class BuildContext;

// A cheap handle to one value of a graph.
class Value {
 public:
  Value() = default;
  bool valid() const { return graph_ != nullptr; }
  explicit operator bool() const { return valid(); }
  Graph& graph() const;
  const std::string& name() const;
  // By value: building a node may grow the graph's value table, so a reference into it could
  // dangle while an op's arguments are still being evaluated.
  TensorType type() const;
  DType dtype() const;
  int rank() const;
  Dim dim(int axis) const;  // negative axes count from the end

 private:
  friend class Graph;
  Value(Graph* g, uint32_t id) : graph_(g), id_(id) {}
  Graph* graph_ = nullptr;
  uint32_t id_ = 0;
};

class Graph;

// A node attribute. Subgraph attributes hold the Graph that becomes the body.
struct Attr {
  struct TensorData {
    DType dtype;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
               std::vector<std::string>, TensorData, std::shared_ptr<Graph>>
      value;

  Attr(std::string n, int64_t v) : name(std::move(n)), value(v) {}
  Attr(std::string n, int v) : name(std::move(n)), value(static_cast<int64_t>(v)) {}
  Attr(std::string n, float v) : name(std::move(n)), value(v) {}
  Attr(std::string n, double v) : name(std::move(n)), value(static_cast<float>(v)) {}
  Attr(std::string n, const char* v) : name(std::move(n)), value(std::string(v)) {}
  Attr(std::string n, std::string v) : name(std::move(n)), value(std::move(v)) {}
  Attr(std::string n, std::vector<int64_t> v) : name(std::move(n)), value(std::move(v)) {}
  Attr(std::string n, std::initializer_list<int64_t> v)
      : name(std::move(n)), value(std::vector<int64_t>(v)) {}
  Attr(std::string n, std::vector<float> v) : name(std::move(n)), value(std::move(v)) {}
  Attr(std::string n, std::vector<std::string> v) : name(std::move(n)), value(std::move(v)) {}
  Attr(std::string n, TensorData v) : name(std::move(n)), value(std::move(v)) {}
  Attr(std::string n, std::shared_ptr<Graph> g) : name(std::move(n)), value(std::move(g)) {}
};

// One graph under construction (the main graph or a subgraph).
class Graph {
 public:
  Graph(BuildContext* ctx, mobius_graph* handle, std::string scope_prefix = "");
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  BuildContext& context() const { return *ctx_; }
  mobius_graph* handle() const { return handle_; }

  // Graph inputs/outputs and values.
  Value input(const std::string& name, const TensorType& type);
  // The type of graph input `name`; nullopt when the graph has no such input.
  std::optional<TensorType> input_type(const std::string& name) const;
  void output(Value v, const std::string& name);
  // The type of graph output `name`; nullopt when the graph has no such output.
  std::optional<TensorType> output_type(const std::string& name) const;
  // A weight whose bytes come from the weight plan. Declaring the same name twice returns
  // the first declaration (and checks that the type agrees).
  Value initializer(const std::string& name, const TensorType& type);
  std::optional<Value> find_initializer(const std::string& name) const;
  Value constant(const TensorType& type, const void* data, size_t nbytes,
                 const std::string& hint = "const");
  // A value of an enclosing graph, usable inside this subgraph (ONNX outer-scope reference).
  Value outer(Value v);

  // Adds a node whose outputs have the given types; returns the output values. A default
  // TensorType() leaves that (optional) output out: its name is "" and its Value invalid.
  std::vector<Value> node(const std::string& op_type, const std::vector<Value>& inputs,
                          const std::vector<TensorType>& output_types,
                          const std::vector<Attr>& attrs = {}, const std::string& domain = "");

  // How many nodes of `op_type` this graph holds (subgraphs not included).
  size_t op_count(const std::string& op_type) const {
    auto it = op_counts_.find(op_type);
    return it == op_counts_.end() ? 0 : it->second;
  }

  // A new subgraph (Loop/Scan/If body) for a GRAPH attribute.
  std::shared_ptr<Graph> subgraph(const std::string& name);

  // Name scoping: values and nodes built inside a scope get its prefix, e.g.
  // "model.layers.0.self_attn/MatMul_3". Use ScopeGuard.
  void push_scope(const std::string& s);
  void pop_scope();
  std::string fresh_name(const std::string& hint);

  // Value table (for Value's accessors).
  const std::string& value_name(uint32_t id) const { return values_[id].name; }
  const TensorType& value_type(uint32_t id) const { return values_[id].type; }
  Value lookup(const std::string& name) const;  // throws when unknown

 private:
  friend class Value;
  struct Entry {
    std::string name;
    TensorType type;
  };
  Value make_value(const std::string& name, const TensorType& type);
  void check(mobius_status st, const std::string& what) const;

  BuildContext* ctx_;
  mobius_graph* handle_;
  std::vector<Entry> values_;
  std::unordered_map<std::string, uint32_t> by_name_;
  std::unordered_map<std::string, uint32_t> initializers_;
  std::unordered_map<std::string, uint32_t> inputs_;
  std::unordered_map<std::string, TensorType> outputs_;
  std::unordered_map<std::string, uint32_t> constants_;  // dtype+shape+bytes -> value
  std::vector<std::string> scopes_;
  std::unordered_map<std::string, int> name_counts_;
  std::unordered_map<std::string, size_t> op_counts_;
  std::string prefix_;
};

class ScopeGuard {
 public:
  ScopeGuard(Graph& g, const std::string& s) : g_(g) { g_.push_scope(s); }
  ~ScopeGuard() { g_.pop_scope(); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Graph& g_;
};

// Converts tensor types to and from the C ABI form.
struct AbiTensorType {
  explicit AbiTensorType(const TensorType& t);
  mobius_tensor_type abi{};
  std::vector<mobius_dim> dims;
};

}  // namespace mobius
