// graph.cpp - Graph, Value and BuildContext: the plugin-side builder over the host's C ABI.
#include "mobius/sdk/graph.hpp"

#include <cstring>
#include <sstream>

#include "mobius/sdk/context.hpp"

namespace mobius {

const char* to_string(DType t) {
  switch (t) {
    case DType::Float: return "float32";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::Float16: return "float16";
    case DType::Double: return "float64";
    case DType::BFloat16: return "bfloat16";
    case DType::Undefined: break;
  }
  return "undefined";
}

bool is_floating(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Double;
}

std::string Dim::str() const {
  if (is_symbolic()) return param;
  if (is_static()) return std::to_string(size);
  return "?";
}

std::string TensorType::str() const {
  std::string s = to_string(dtype);
  if (!rank_known) return s + "[...]";
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + dims[i].str();
  return s + "]";
}

Graph& Value::graph() const {
  if (!graph_) throw Error("[graph] use of an empty Value");
  return *graph_;
}
const std::string& Value::name() const { return graph().value_name(id_); }
TensorType Value::type() const { return graph().value_type(id_); }
DType Value::dtype() const { return graph().value_type(id_).dtype; }
int Value::rank() const { return graph().value_type(id_).rank(); }
Dim Value::dim(int axis) const {
  const TensorType& t = graph().value_type(id_);
  int r = t.rank();
  if (r < 0) throw Error("[graph] '" + name() + "' has unknown rank");
  int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r)
    throw Error("[graph] axis " + std::to_string(axis) + " out of range for '" + name() + "' " +
                t.str());
  return t.dims[static_cast<size_t>(a)];
}

AbiTensorType::AbiTensorType(const TensorType& t) {
  dims.reserve(t.dims.size());
  for (const Dim& d : t.dims) {
    mobius_dim m{};
    m.value = d.is_static() ? d.size : -1;
    m.param = d.is_symbolic() ? d.param.c_str() : nullptr;
    dims.push_back(m);
  }
  abi.struct_size = sizeof(mobius_tensor_type);
  abi.dtype = static_cast<mobius_dtype>(t.dtype);
  abi.rank = t.rank_known ? static_cast<int32_t>(t.dims.size()) : -1;
  abi.dims = dims.data();
}

Graph::Graph(BuildContext* ctx, mobius_graph* handle, std::string scope_prefix)
    : ctx_(ctx), handle_(handle), prefix_(std::move(scope_prefix)) {}

void Graph::check(mobius_status st, const std::string& what) const { ctx_->check(st, what); }

Value Graph::make_value(const std::string& name, const TensorType& type) {
  auto [it, inserted] = by_name_.emplace(name, static_cast<uint32_t>(values_.size()));
  if (!inserted) throw Error("[graph] value name '" + name + "' defined twice");
  values_.push_back({name, type});
  return Value(this, it->second);
}

Value Graph::lookup(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw Error("[graph] unknown value '" + name + "'");
  return Value(const_cast<Graph*>(this), it->second);
}

Value Graph::input(const std::string& name, const TensorType& type) {
  AbiTensorType t(type);
  check(ctx_->host()->add_input(handle_, name.c_str(), &t.abi), "input '" + name + "'");
  Value v = make_value(name, type);
  inputs_.emplace(name, v.id_);
  return v;
}

std::optional<TensorType> Graph::input_type(const std::string& name) const {
  auto it = inputs_.find(name);
  if (it == inputs_.end()) return std::nullopt;
  return values_[it->second].type;
}

void Graph::output(Value v, const std::string& name) {
  if (&v.graph() != this) v = outer(v);
  TensorType type = v.type();
  if (v.name() != name) {
    // ONNX names outputs by value: bind the requested name with an Identity.
    std::string src = v.name();
    const char* in = src.c_str();
    const char* out = name.c_str();
    std::string node_name = fresh_name("output");
    mobius_node n{};
    n.struct_size = sizeof(n);
    n.op_type = "Identity";
    n.domain = "";
    n.name = node_name.c_str();
    n.inputs = &in;
    n.n_inputs = 1;
    n.outputs = &out;
    n.n_outputs = 1;
    check(ctx_->host()->add_node(handle_, &n), "output '" + name + "'");
    make_value(name, type);
  }
  AbiTensorType t(type);
  check(ctx_->host()->add_output(handle_, name.c_str(), &t.abi), "output '" + name + "'");
  outputs_.emplace(name, type);
}

std::optional<TensorType> Graph::output_type(const std::string& name) const {
  auto it = outputs_.find(name);
  if (it == outputs_.end()) return std::nullopt;
  return it->second;
}

Value Graph::initializer(const std::string& name, const TensorType& type) {
  auto it = initializers_.find(name);
  if (it != initializers_.end()) {
    Value v(this, it->second);
    const TensorType& have = v.type();
    if (have.dtype != type.dtype || have.dims != type.dims)
      throw Error("[initializer] '" + name + "' declared as " + have.str() + " and as " +
                  type.str());
    return v;
  }
  for (const Dim& d : type.dims)
    if (!d.is_static())
      throw Error("[initializer] '" + name + "' needs a static shape, got " + type.str());
  AbiTensorType t(type);
  check(ctx_->host()->add_initializer(handle_, name.c_str(), &t.abi),
        "initializer '" + name + "'");
  Value v = make_value(name, type);
  initializers_.emplace(name, v.id_);
  return v;
}

std::optional<Value> Graph::find_initializer(const std::string& name) const {
  auto it = initializers_.find(name);
  if (it == initializers_.end()) return std::nullopt;
  return Value(const_cast<Graph*>(this), it->second);
}

Value Graph::constant(const TensorType& type, const void* data, size_t nbytes,
                      const std::string& hint) {
  // Equal small constants (shapes, axes, scalars) are one node, not one per use.
  std::string key;
  if (nbytes <= 4096) {
    key = type.str() + "|";
    key.append(static_cast<const char*>(data), nbytes);
    if (auto it = constants_.find(key); it != constants_.end()) return Value(this, it->second);
  }
  std::string name = fresh_name(hint);
  AbiTensorType t(type);
  check(ctx_->host()->add_constant(handle_, name.c_str(), &t.abi, data, nbytes),
        "constant '" + name + "'");
  Value v = make_value(name, type);
  if (!key.empty()) constants_.emplace(std::move(key), v.id_);
  return v;
}

Value Graph::outer(Value v) {
  if (&v.graph() == this) return v;
  auto it = by_name_.find(v.name());
  if (it != by_name_.end()) return Value(this, it->second);
  return make_value(v.name(), v.type());
}

std::shared_ptr<Graph> Graph::subgraph(const std::string& name) {
  mobius_graph* h = ctx_->host()->create_subgraph(ctx_->handle(), name.c_str());
  if (!h) check(MOBIUS_ERROR, "subgraph '" + name + "'");
  return std::make_shared<Graph>(ctx_, h, fresh_name(name) + "/");
}

void Graph::push_scope(const std::string& s) { scopes_.push_back(s); }
void Graph::pop_scope() {
  if (!scopes_.empty()) scopes_.pop_back();
}

std::string Graph::fresh_name(const std::string& hint) {
  // Scopes joined by '/', except that a module's path replaces its parent's ("model.layers.0"
  // then "model.layers.0.self_attn" names "model.layers.0.self_attn/..."): short names keep
  // model.onnx small.
  std::string base = prefix_;
  size_t last_start = base.size();
  const std::string* last = nullptr;
  for (const auto& s : scopes_) {
    if (last && s.size() > last->size() && s.compare(0, last->size(), *last) == 0 && s[last->size()] == '.')
      base.resize(last_start);
    last_start = base.size();
    base += s + "/";
    last = &s;
  }
  base += hint;
  int& n = name_counts_[base];
  std::string name = n == 0 ? base : base + "_" + std::to_string(n);
  ++n;
  while (by_name_.count(name)) name = base + "_" + std::to_string(n++);
  return name;
}

namespace {
// TensorType() in a node's output types: an optional output the node does not produce.
bool omitted(const TensorType& t) { return t.dtype == DType::Undefined && !t.rank_known; }
}  // namespace

std::vector<Value> Graph::node(const std::string& op_type, const std::vector<Value>& inputs,
                               const std::vector<TensorType>& output_types,
                               const std::vector<Attr>& attrs, const std::string& domain) {
  std::vector<std::string> in_names;
  in_names.reserve(inputs.size());
  for (const Value& v : inputs) {
    if (!v.valid()) {
      in_names.emplace_back();  // omitted optional input
      continue;
    }
    in_names.push_back(&v.graph() == this ? v.name() : outer(v).name());
  }
  std::string node_name = fresh_name(op_type);
  ++op_counts_[op_type];
  std::vector<std::string> out_names;
  for (size_t i = 0; i < output_types.size(); ++i)
    out_names.push_back(omitted(output_types[i]) ? std::string()
                        : output_types.size() == 1 ? node_name + "/out"
                                                   : node_name + "/out" + std::to_string(i));

  // Attributes in ABI form. Storage for pointers lives in these vectors until add_node returns.
  std::vector<mobius_attribute> abi_attrs(attrs.size());
  std::vector<const mobius_attribute*> attr_ptrs;
  std::vector<std::vector<const char*>> string_lists;
  string_lists.reserve(attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) {
    mobius_attribute& a = abi_attrs[i];
    a.struct_size = sizeof(a);
    a.name = attrs[i].name.c_str();
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            a.kind = MOBIUS_ATTR_INT;
            a.i = v;
          } else if constexpr (std::is_same_v<T, float>) {
            a.kind = MOBIUS_ATTR_FLOAT;
            a.f = v;
          } else if constexpr (std::is_same_v<T, std::string>) {
            a.kind = MOBIUS_ATTR_STRING;
            a.s = v.c_str();
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            a.kind = MOBIUS_ATTR_INTS;
            a.ints = v.data();
            a.count = v.size();
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            a.kind = MOBIUS_ATTR_FLOATS;
            a.floats = v.data();
            a.count = v.size();
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            a.kind = MOBIUS_ATTR_STRINGS;
            auto& l = string_lists.emplace_back();
            for (const auto& s : v) l.push_back(s.c_str());
            a.strings = l.data();
            a.count = l.size();
          } else if constexpr (std::is_same_v<T, Attr::TensorData>) {
            a.kind = MOBIUS_ATTR_TENSOR;
            a.tensor_dtype = static_cast<mobius_dtype>(v.dtype);
            a.tensor_rank = static_cast<int32_t>(v.dims.size());
            a.tensor_dims = v.dims.data();
            a.tensor_data = v.bytes.data();
            a.tensor_nbytes = v.bytes.size();
          } else {
            a.kind = MOBIUS_ATTR_GRAPH;
            a.graph = v->handle();
          }
        },
        attrs[i].value);
    attr_ptrs.push_back(&a);
  }
  std::vector<const char*> in_ptrs, out_ptrs;
  for (const auto& s : in_names) in_ptrs.push_back(s.c_str());
  for (const auto& s : out_names) out_ptrs.push_back(s.c_str());

  mobius_node n{};
  n.struct_size = sizeof(n);
  n.op_type = op_type.c_str();
  n.domain = domain.c_str();
  n.name = node_name.c_str();
  n.inputs = in_ptrs.data();
  n.n_inputs = in_ptrs.size();
  n.outputs = out_ptrs.data();
  n.n_outputs = out_ptrs.size();
  n.attributes = attr_ptrs.data();
  n.n_attributes = attr_ptrs.size();
  check(ctx_->host()->add_node(handle_, &n), op_type + " node '" + node_name + "'");

  std::vector<Value> outs;
  for (size_t i = 0; i < output_types.size(); ++i) {
    if (out_names[i].empty()) {
      outs.emplace_back();  // an omitted optional output
      continue;
    }
    outs.push_back(make_value(out_names[i], output_types[i]));
    if (output_types[i].rank_known && output_types[i].dtype != DType::Undefined) {
      AbiTensorType t(output_types[i]);
      check(ctx_->host()->add_value_info(handle_, out_names[i].c_str(), &t.abi),
            "value info '" + out_names[i] + "'");
    }
  }
  return outs;
}

// ---------------------------------------------------------------------------------------------
// BuildContext

BuildContext::BuildContext(const mobius_host_api* host, mobius_context* ctx)
    : host_(host), ctx_(ctx) {
  if (!host_ || host_->abi_version != MOBIUS_ABI_VERSION)
    throw Error(MOBIUS_ERROR_KIND_INTERNAL, "[sdk] host speaks an unexpected ABI version");
  if (host_->struct_size < MOBIUS_HOST_API_SIZE_V1)
    throw Error(MOBIUS_ERROR_KIND_INTERNAL,
                "[sdk] the host's function table is " + std::to_string(host_->struct_size) +
                    " bytes, smaller than version 1's " +
                    std::to_string(MOBIUS_HOST_API_SIZE_V1));
  main_ = std::make_unique<Graph>(this, host_->main_graph(ctx_));
}

void BuildContext::check(mobius_status st, const std::string& what) const {
  if (st == MOBIUS_OK) return;
  const char* msg = host_->last_error(ctx_);
  throw Error(std::string(msg && *msg ? msg : "host call failed") + " (" + what + ")");
}

void BuildContext::require_slot(bool present, const char* slot) const {
  if (present) return;
  throw Error(MOBIUS_ERROR_KIND_PLUGIN,
              std::string("[sdk] the host is too old for this plugin: its function table (") +
                  std::to_string(host_->struct_size) + " bytes) has no '" + slot +
                  "' slot; use a newer mobius");
}

bool BuildContext::host_has_runtime_files() const {
  return MOBIUS_HAS_FIELD(host_, mobius_host_api, add_runtime_file) && host_->add_runtime_file;
}

void BuildContext::add_runtime_file(const std::string& name, const std::string& bytes) {
  require_slot(host_has_runtime_files(), "add_runtime_file");
  check(host_->add_runtime_file(ctx_, name.c_str(), bytes.data(), bytes.size()),
        "runtime file '" + name + "'");
}

std::optional<std::string> BuildContext::source_config() const {
  if (!MOBIUS_HAS_FIELD(host_, mobius_host_api, source_config) || !host_->source_config)
    return std::nullopt;
  const char* text = host_->source_config(ctx_);
  if (!text) return std::nullopt;
  return std::string(text);
}

std::optional<std::string> BuildContext::source_file(const std::string& name) const {
  if (!MOBIUS_HAS_FIELD(host_, mobius_host_api, source_file) || !host_->source_file)
    return std::nullopt;
  const char* text = host_->source_file(ctx_, name.c_str());
  if (!text) return std::nullopt;
  return std::string(text);
}

std::optional<std::string> BuildContext::read_source_file(const std::string& name) const {
  if (!MOBIUS_HAS_FIELD(host_, mobius_host_api, read_source_file) || !host_->read_source_file)
    return source_file(name);
  std::string text;
  mobius_string_sink sink{&text, [](void* o, const char* d, size_t n) {
                            try {
                              static_cast<std::string*>(o)->append(d, n);
                            } catch (...) {
                            }
                          }};
  int32_t found = 0;
  if (host_->read_source_file(ctx_, name.c_str(), &sink, &found) != MOBIUS_OK) {
    const char* why = host_->last_error ? host_->last_error(ctx_) : nullptr;
    throw Error(MOBIUS_ERROR_KIND_CONFIG, why && *why ? why : "[checkpoint] " + name + ": cannot be read");
  }
  if (!found) return std::nullopt;
  return text;
}

std::string BuildContext::runtime() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  if (o && MOBIUS_HAS_FIELD(o, mobius_build_options, runtime) && o->runtime) return o->runtime;
  return "ort-genai";
}

std::string BuildContext::graph_name() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  if (o && MOBIUS_HAS_FIELD(o, mobius_build_options, graph) && o->graph) return o->graph;
  return "";
}

bool BuildContext::runtime_is_default() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && MOBIUS_HAS_FIELD(o, mobius_build_options, runtime_is_default) && o->runtime_is_default;
}

std::string BuildContext::model_file() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  if (o && MOBIUS_HAS_FIELD(o, mobius_build_options, model_file) && o->model_file)
    return o->model_file;
  return "model.onnx";
}

std::string BuildContext::ops() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  if (o && MOBIUS_HAS_FIELD(o, mobius_build_options, ops) && o->ops) return o->ops;
  return "standard";
}

std::string BuildContext::positions() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  if (o && MOBIUS_HAS_FIELD(o, mobius_build_options, positions) && o->positions) return o->positions;
  return runtime() == "ort-genai" ? "slots" : "input";
}

int BuildContext::weight_bits() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && MOBIUS_HAS_FIELD(o, mobius_build_options, weight_bits) ? o->weight_bits : 0;
}

int BuildContext::block_size() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && MOBIUS_HAS_FIELD(o, mobius_build_options, block_size) ? o->block_size : 32;
}

bool BuildContext::symmetric() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && MOBIUS_HAS_FIELD(o, mobius_build_options, symmetric) && o->symmetric;
}

bool BuildContext::expert_loop() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && MOBIUS_HAS_FIELD(o, mobius_build_options, expert_loop) && o->expert_loop != 0;
}

int BuildContext::accuracy_level() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && MOBIUS_HAS_FIELD(o, mobius_build_options, accuracy_level) ? o->accuracy_level : 4;
}

DType BuildContext::weight_dtype() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && o->dtype ? static_cast<DType>(o->dtype) : DType::Float;
}

std::string BuildContext::execution_provider() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && o->execution_provider ? o->execution_provider : "cpu";
}

bool BuildContext::no_weights() const {
  const mobius_build_options* o = host_->build_options(ctx_);
  return o && o->no_weights;
}

void BuildContext::plan_tensor(const std::string& initializer, const std::string& tensor) {
  check(host_->plan_tensor(ctx_, initializer.c_str(), tensor.c_str()),
        "plan '" + initializer + "'");
}

void BuildContext::plan_expert_bank(const std::string& initializer,
                                    const std::vector<std::string>& tensors) {
  std::vector<const char*> p;
  for (const auto& t : tensors) p.push_back(t.c_str());
  check(host_->plan_expert_bank(ctx_, initializer.c_str(), p.data(), p.size()),
        "plan '" + initializer + "'");
}

namespace {
void reason(char* err, size_t err_size, const char* what) {
  if (!err || !err_size) return;
  std::strncpy(err, what, err_size - 1);
  err[err_size - 1] = '\0';
}

// A transform callback from the host: no exception leaves it.
mobius_status run_transform(void* user, const mobius_tensor_view* const* inputs, size_t n,
                            mobius_tensor_view* output, char* err, size_t err_size) {
  try {
    auto* fn = static_cast<WeightTransform*>(user);
    std::vector<HostTensor> in(n);
    for (size_t i = 0; i < n; ++i) {
      in[i].dims.assign(inputs[i]->dims, inputs[i]->dims + inputs[i]->rank);
      in[i].data = static_cast<const float*>(inputs[i]->data);
      in[i].numel = inputs[i]->nbytes / sizeof(float);
    }
    (*fn)(in, static_cast<float*>(output->data), output->nbytes / sizeof(float));
    return MOBIUS_OK;
  } catch (const std::bad_alloc&) {
    reason(err, err_size, "[internal] out of memory in the transform");
  } catch (const std::exception& e) {
    reason(err, err_size, e.what());
  } catch (...) {
    reason(err, err_size, "[internal] the transform threw an unknown exception");
  }
  return MOBIUS_ERROR;
}
void release_transform(void* user) { delete static_cast<WeightTransform*>(user); }
}  // namespace

void BuildContext::plan_transformed(const std::string& initializer,
                                    const std::vector<std::string>& tensors, WeightTransform fn) {
  std::vector<const char*> p;
  for (const auto& t : tensors) p.push_back(t.c_str());
  auto* user = new WeightTransform(std::move(fn));
  mobius_status st = host_->plan_transformed(ctx_, initializer.c_str(), p.data(), p.size(),
                                             &run_transform, user, &release_transform);
  if (st != MOBIUS_OK) delete user;  // the host takes ownership only on success
  check(st, "plan '" + initializer + "'");
}

void BuildContext::plan_layout(const std::string& initializer,
                               const std::vector<std::string>& tensors,
                               const mobius_weight_layout& layout) {
  require_slot(MOBIUS_HAS_FIELD(host_, mobius_host_api, plan_layout) && host_->plan_layout,
               "plan_layout");
  std::vector<const char*> p;
  for (const auto& t : tensors) p.push_back(t.c_str());
  check(host_->plan_layout(ctx_, initializer.c_str(), p.data(), p.size(), &layout),
        "plan '" + initializer + "'");
}

bool BuildContext::interleaved_layouts() const {
  return MOBIUS_HAS_FIELD(host_, mobius_host_api, weight_layout_size) &&
         host_->weight_layout_size >= MOBIUS_WEIGHT_LAYOUT_SIZE_V2;
}

void BuildContext::ignore_tensors(const std::string& glob) {
  check(host_->ignore_tensors(ctx_, glob.c_str()), "ignore '" + glob + "'");
}

std::optional<BuildContext::TensorInfo> BuildContext::query_tensor(
    const std::string& name) const {
  mobius_tensor_info info{};
  info.struct_size = sizeof(info);
  constexpr int32_t kMaxDims = static_cast<int32_t>(sizeof(info.dims) / sizeof(info.dims[0]));
  if (host_->query_tensor(ctx_, name.c_str(), &info) != MOBIUS_OK) {
    // A tensor with more dims than the struct holds is an error, never a truncated shape.
    if (info.rank > kMaxDims) {
      const char* msg = host_->last_error(ctx_);
      throw Error(MOBIUS_ERROR_KIND_CHECKPOINT,
                  msg && *msg ? std::string(msg)
                              : "[checkpoint] tensor '" + name + "' has rank " +
                                    std::to_string(info.rank) + ", more than " +
                                    std::to_string(kMaxDims));
    }
    return std::nullopt;
  }
  TensorInfo r{static_cast<DType>(info.dtype), {}};
  for (int i = 0; i < info.rank && i < 8; ++i) r.dims.push_back(info.dims[i]);
  return r;
}

void BuildContext::log(int level, const std::string& msg) const {
  host_->log(ctx_, level, msg.c_str());
}

}  // namespace mobius
