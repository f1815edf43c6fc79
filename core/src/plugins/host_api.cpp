// host_api.cpp - the host's side of the C ABI: every entry validates its arguments, catches
// every exception and turns it into a status plus last_error (the hourglass). Structs from a
// plugin are read through read_abi_struct: only the bytes its struct_size declares.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>

#include "checkpoint/checkpoint_files.hpp"
#include "plugins/context.hpp"
#include "save/layout.hpp"
#include "mobius/build.hpp"
#include "mobius/error.hpp"
#include "util/untrusted.hpp"

#include <nlohmann/json.hpp>

mobius_context::mobius_context() {
  options.struct_size = sizeof(options);
  options.dtype = MOBIUS_DTYPE_FLOAT;
  options.execution_provider = execution_provider.c_str();
  // The operator set and weight quantization; a build sets them from its options.
  options.ops = ops.c_str();
  options.weight_bits = 0;
  options.block_size = 32;
  options.symmetric = 0;
  options.accuracy_level = 4;
  graphs.emplace_back();
  mobius_graph& g = graphs.front();
  g.ctx = this;
  g.proto = model.mutable_graph();
  g.is_main = true;
}

namespace mobius {
namespace {

thread_local std::string g_orphan_error;  // errors of calls made without a context

// Records `message` as the last error without ever throwing itself.
void record(mobius_context* ctx, const char* message) noexcept {
  try {
    (ctx ? ctx->last_error : g_orphan_error) = message;
  } catch (...) {
    // Out of memory for the message itself: the status still says the call failed.
  }
}

template <class F>
mobius_status guarded(mobius_context* ctx, F&& f) noexcept {
  try {
    f();
    return MOBIUS_OK;
  } catch (const std::bad_alloc&) {
    record(ctx, "[internal] out of memory");
  } catch (const std::exception& e) {
    record(ctx, e.what());
  } catch (...) {
    record(ctx, "[internal] unknown exception in the host");
  }
  return MOBIUS_ERROR;
}

std::string str(const char* s, const char* what) {
  if (!s) throw Error(std::string("[abi] ") + what + " is NULL");
  return s;
}

void check_name(const std::string& name, const char* what) {
  if (name.empty()) throw Error(std::string("[abi] empty ") + what + " name");
  if (name.size() > 4096) throw Error(std::string("[abi] ") + what + " name too long");
}

bool known_dtype(int32_t dt) { return dtype_size(dt) != 0 || dt == MOBIUS_DTYPE_BOOL; }

// --- the build budget (mobius_build_budget in context.hpp) ---

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t saturating_mul(uint64_t a, uint64_t b) {
  return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

std::string bytes_text(uint64_t n) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return std::to_string(n) + " bytes";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

// The keys that size a model, named by every budget message: the budget is reached when the
// config describes a much larger model than any real one (or than its checkpoint holds).
constexpr const char* kSizeKeys =
    "num_hidden_layers, hidden_size, intermediate_size, vocab_size, the head counts and the "
    "expert counts in config.json";

[[noreturn]] void over_budget(const std::string& what) {
  throw Error(ErrorKind::Config,
              "[config] the graph exceeds the build's budget: " + what + " (check " + kSizeKeys + ")");
}

void count_node(mobius_context* ctx, const std::string& name) {
  mobius_build_budget& b = ctx->budget;
  if (++b.nodes > b.max_nodes)
    over_budget("more than " + std::to_string(b.max_nodes) + " nodes, at node " + quote_name(name) +
                "; no real model needs that many");
}

void count_value_info(mobius_context* ctx, const std::string& name) {
  mobius_build_budget& b = ctx->budget;
  if (++b.value_infos > b.max_value_infos)
    over_budget("more than " + std::to_string(b.max_value_infos) +
                " graph inputs, outputs and value types, at " + quote_name(name));
}

void count_planned(mobius_context* ctx, size_t n) {
  mobius_build_budget& b = ctx->budget;
  b.planned_tensors = saturating_add(b.planned_tensors, n);
  if (b.planned_tensors > b.max_planned_tensors)
    over_budget("the weight plan names more than " + std::to_string(b.max_planned_tensors) +
                " checkpoint tensors");
}

void count_initializer(mobius_context* ctx, const std::string& name, int32_t dtype,
                       const std::vector<int64_t>& dims) {
  mobius_build_budget& b = ctx->budget;
  if (!b.max_bytes) {
    if (ctx->checkpoint) {
      uint64_t total = 0;
      for (const auto& t : ctx->checkpoint->tensors()) total = saturating_add(total, t.nbytes);
      b.max_bytes = saturating_add(saturating_mul(total, b.checkpoint_factor), b.checkpoint_slack);
    } else {
      b.max_bytes = b.max_bytes_without_checkpoint;
    }
  }
  if (++b.initializers > b.max_initializers)
    over_budget("more than " + std::to_string(b.max_initializers) + " initializers, at " +
                quote_name(name));
  uint64_t n = dtype_size(dtype);
  for (int64_t d : dims) n = saturating_mul(n, static_cast<uint64_t>(d));
  b.initializer_bytes = saturating_add(b.initializer_bytes, n);
  if (b.initializer_bytes <= *b.max_bytes) return;
  const std::string limit =
      ctx->checkpoint ? bytes_text(*b.max_bytes) + " (" + std::to_string(b.checkpoint_factor) +
                            " times the checkpoint's tensors plus " + bytes_text(b.checkpoint_slack) +
                            "), so the config describes a larger model than the checkpoint holds"
                      : bytes_text(*b.max_bytes) +
                            " for a build without weights, more than any released model needs";
  over_budget("initializer " + quote_name(name) + " (" + bytes_text(n) +
              ") takes the weights past the budget of " + limit);
}

mobius_tensor_type tensor_type(const mobius_tensor_type* t, const std::string& name) {
  return read_abi_struct(t, MOBIUS_TENSOR_TYPE_SIZE_V1, "tensor type of " + quote_name(name));
}

void fill_type(onnx::TypeProto* tp, const mobius_tensor_type* type, const std::string& name) {
  const mobius_tensor_type tv = tensor_type(type, name);
  const mobius_tensor_type* t = &tv;
  if (!known_dtype(t->dtype))
    throw Error("[abi] " + quote_name(name) + ": unknown dtype " + std::to_string(t->dtype));
  auto* tt = tp->mutable_tensor_type();
  tt->set_elem_type(t->dtype);
  if (t->rank < 0) return;  // unknown rank
  if (t->rank > 64) throw Error("[abi] " + quote_name(name) + ": rank " + std::to_string(t->rank));
  if (t->rank > 0 && !t->dims) throw Error("[abi] " + quote_name(name) + ": dims is NULL");
  auto* shape = tt->mutable_shape();
  for (int32_t i = 0; i < t->rank; ++i) {
    auto* d = shape->add_dim();
    const mobius_dim& md = t->dims[i];
    if (md.param && *md.param) d->set_dim_param(md.param);
    else if (md.value >= 0) d->set_dim_value(md.value);
  }
}

std::vector<int64_t> static_dims(const mobius_tensor_type* type, const std::string& name) {
  const mobius_tensor_type tv = tensor_type(type, name);
  const mobius_tensor_type* t = &tv;
  if (t->rank < 0) throw Error("[abi] " + quote_name(name) + ": needs a ranked tensor type");
  if (t->rank > 64) throw Error("[abi] " + quote_name(name) + ": rank " + std::to_string(t->rank));
  if (t->rank > 0 && !t->dims) throw Error("[abi] " + quote_name(name) + ": dims is NULL");
  std::vector<int64_t> dims;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (t->dims[i].param && *t->dims[i].param)
      throw Error("[abi] " + quote_name(name) + ": weights need static dims");
    if (t->dims[i].value < 0) throw Error("[abi] " + quote_name(name) + ": negative dim");
    dims.push_back(t->dims[i].value);
  }
  return dims;
}

void define(mobius_graph* g, const std::string& name) {
  if (!g->defined.insert(name).second)
    throw Error("[graph] value " + quote_name(name) + " is defined twice");
}

mobius_graph* graph_checked(mobius_graph* g) {
  if (!g || !g->ctx) throw Error("[abi] NULL graph");
  if (g->consumed) throw Error("[abi] subgraph was already attached to a node");
  return g;
}

void fill_tensor(onnx::TensorProto* t, const std::string& name, int32_t dtype,
                 const std::vector<int64_t>& dims, const void* data, size_t nbytes) {
  if (!known_dtype(dtype)) throw Error("[abi] " + quote_name(name) + ": unknown dtype");
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error("[abi] " + quote_name(name) + ": negative dim");
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d))
      throw Error("[abi] " + quote_name(name) + ": size overflows");
    n *= static_cast<uint64_t>(d);
  }
  size_t es = dtype == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(dtype);
  if (n * es != nbytes)
    throw Error("[abi] constant " + quote_name(name) + ": " + std::to_string(nbytes) + " bytes for " +
                std::to_string(n) + " elements of " + dtype_name(dtype));
  if (nbytes && !data) throw Error("[abi] constant " + quote_name(name) + ": data is NULL");
  if (nbytes > (64u << 20))
    throw Error("[abi] constant " + quote_name(name) + " is larger than 64 MiB: use an initializer");
  t->set_name(name);
  t->set_data_type(dtype);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(data, nbytes);
}

// --- diagnostics ---

void api_log(mobius_context* ctx, int32_t level, const char* message) {
  if (!message) return;
  if (ctx && ctx->quiet && level < MOBIUS_LOG_WARNING) return;
  if (level < MOBIUS_LOG_INFO) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  try {
    // A plugin's words may quote its config: made safe for the terminal and cut.
    std::cerr << "mobius: " << names[std::clamp(level, 0, 3)] << ": " << printable_lines(message)
              << "\n";
  } catch (...) {
    // A log line that cannot be written is dropped.
  }
}

const char* api_last_error(mobius_context* ctx) {
  return ctx ? ctx->last_error.c_str() : g_orphan_error.c_str();
}

constexpr size_t kMaxPluginMessage = 64u << 10;

std::string cut_message(const char* message) {
  const size_t len = ::strnlen(message, kMaxPluginMessage + 1);
  if (len <= kMaxPluginMessage) return std::string(message, len);
  size_t n = kMaxPluginMessage;
  while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  return std::string(message, n) + "... (cut at " + std::to_string(kMaxPluginMessage >> 10) +
         " KiB)";
}

void api_set_error_kind(mobius_context* ctx, mobius_error_kind kind, const char* message) {
  try {
    // A copy first: the message may be last_error(ctx) itself. A plugin's message may quote
    // its config at any length; the host keeps at most kMaxPluginMessage bytes of it.
    std::string m = message ? cut_message(message) : "unknown plugin error";
    if (ctx) {
      ctx->plugin_error = m;
      ctx->plugin_error_kind = kind;
      ctx->last_error = m;
    } else {
      g_orphan_error = m;
    }
  } catch (...) {
    if (ctx) ctx->plugin_error_kind = MOBIUS_ERROR_KIND_INTERNAL;
  }
}

// The version-1 call: a plugin error, unless the message says it is about the config.
void api_set_error(mobius_context* ctx, const char* message) {
  bool config = message && std::strncmp(message, "[config]", 8) == 0;
  api_set_error_kind(ctx, config ? MOBIUS_ERROR_KIND_CONFIG : MOBIUS_ERROR_KIND_PLUGIN, message);
}

// The exception for a plugin callback that failed: the kind and message the plugin set, or
// `fallback` (a plugin error) when it set none.
Error plugin_failure(mobius_context* ctx, const std::string& fallback) {
  if (ctx->plugin_error.empty()) return Error(ErrorKind::Plugin, fallback);
  return Error(error_kind_from_abi(ctx->plugin_error_kind), ctx->plugin_error);
}

// --- registration ---

mobius_status api_register_architecture(mobius_registrar* reg, const mobius_architecture* arch) {
  if (!reg) return MOBIUS_ERROR;
  try {
    const mobius_architecture av =
        read_abi_struct(arch, MOBIUS_ARCHITECTURE_SIZE_V1, "register_architecture: architecture");
    const mobius_architecture* a = &av;
    std::string model_type = str(a->model_type, "model_type");
    std::string task = str(a->task, "task");
    check_name(model_type, "model type");
    if (!a->build || !a->parse_config)
      throw Error("[abi] model type " + quote_name(model_type) + ": build or parse_config is NULL");
    Registration r;
    r.model_type = model_type;
    r.task = task;
    r.plugin = reg->plugin_name;
    r.plugin_path = reg->plugin_path;
    r.version = reg->version;
    r.vendor = reg->vendor;
    r.priority = reg->priority;
    if (a->n_graphs > 0) {  // zero when the plugin's struct ends before the field
      if (!a->graphs || a->n_graphs > 64)
        throw Error("[abi] model type " + quote_name(model_type) +
                    ": graphs is NULL or lists more than 64 names");
      for (size_t i = 0; i < a->n_graphs; ++i) {
        std::string g = str(a->graphs[i], "graph name");
        if (g.empty() || g.size() > 64 ||
            !std::all_of(g.begin(), g.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_';
            }) ||
            std::find(r.graphs.begin(), r.graphs.end(), g) != r.graphs.end())
          throw Error("[abi] model type " + quote_name(model_type) + ": graph name " +
                      quote_name(g) + " is empty, repeated, or not letters, digits and '_'");
        r.graphs.push_back(std::move(g));
      }
    }
    if (a->default_runtime) {  // NULL when the plugin's struct ends before the field
      r.default_runtime = str(a->default_runtime, "default_runtime");
      const std::vector<std::string> known = runtimes();
      if (std::find(known.begin(), known.end(), r.default_runtime) == known.end())
        throw Error("[abi] model type " + quote_name(model_type) + ": default_runtime " +
                    quote_name(r.default_runtime) + " is not a runtime mobius lays folders out for");
    }
    if (a->n_tasks > 0) {  // zero when the plugin's struct ends before the field
      if (!a->tasks || a->n_tasks > 64)
        throw Error("[abi] model type " + quote_name(model_type) + ": tasks is NULL or lists more than 64");
      for (size_t i = 0; i < a->n_tasks; ++i) {
        std::string t = str(a->tasks[i], "task");
        if (t.empty() || std::find(r.tasks.begin(), r.tasks.end(), t) != r.tasks.end())
          throw Error("[abi] model type " + quote_name(model_type) + ": task " + quote_name(t) +
                      " is empty or listed twice");
        r.tasks.push_back(std::move(t));
      }
      if (std::find(r.tasks.begin(), r.tasks.end(), task) == r.tasks.end())
        throw Error("[abi] model type " + quote_name(model_type) + ": its task " + quote_name(task) +
                    " is not one of its tasks");
    } else {
      r.tasks.push_back(task);
    }
    auto parse = a->parse_config;
    auto build = a->build;
    void* user = a->user;
    r.parse_config = [parse, user, model_type](mobius_context* ctx, const std::string& json) {
      struct Sink {
        std::string text;
        bool failed = false;
      } out;
      mobius_string_sink sink{&out, [](void* o, const char* d, size_t n) {
                                auto* s = static_cast<Sink*>(o);
                                try {
                                  if (d) s->text.append(d, n);
                                } catch (...) {
                                  s->failed = true;  // never throw into the plugin
                                }
                              }};
      // The text a plugin parses is within the config limits (size, nesting, value count),
      // whoever read it: the plugin's parser never sees a document it could choke on.
      parse_json_limited(json, "config.json", kConfigLimits);
      ctx->plugin_error.clear();
      ctx->plugin_error_kind = 0;
      mobius_status st = MOBIUS_ERROR;
      try {
        st = parse(user, ctx, json.c_str(), &sink);
      } catch (...) {
        throw Error(ErrorKind::Internal, "[plugin] parse_config of " + quote_name(model_type) +
                                             " let an exception cross the C ABI");
      }
      if (st != MOBIUS_OK)
        throw plugin_failure(ctx, "[plugin] parse_config of " + quote_name(model_type) +
                                      " failed without a message");
      if (out.failed) throw Error(ErrorKind::Internal, "[internal] out of memory");
      return std::move(out.text);
    };
    r.build = [build, user, model_type](mobius_context* ctx, const std::string& json) {
      ctx->plugin_error.clear();
      ctx->plugin_error_kind = 0;
      mobius_status st = MOBIUS_ERROR;
      try {
        st = build(user, ctx, json.c_str());
      } catch (...) {
        throw Error(ErrorKind::Internal,
                    "[plugin] build of " + quote_name(model_type) + " let an exception cross the C ABI");
      }
      if (st != MOBIUS_OK)
        throw plugin_failure(ctx, "[plugin] build of " + quote_name(model_type) + " failed without a message");
    };
    for (const auto& existing : reg->registrations)
      if (existing.model_type == model_type)
        throw Error("[registry] model type " + quote_name(model_type) + " registered twice");
    reg->registrations.push_back(std::move(r));
    return MOBIUS_OK;
  } catch (const std::exception& e) {
    try {
      if (reg->error.empty()) reg->error = e.what();
    } catch (...) {
    }
  } catch (...) {
    try {
      if (reg->error.empty()) reg->error = "[internal] unknown exception in the host";
    } catch (...) {
    }
  }
  return MOBIUS_ERROR;
}

void api_registrar_error(mobius_registrar* reg, const char* message) {
  try {
    if (reg && reg->error.empty()) reg->error = message ? message : "unknown error";
  } catch (...) {
  }
}

const mobius_build_options* api_build_options(mobius_context* ctx) {
  return ctx ? &ctx->options : nullptr;
}

// --- graph building ---

mobius_graph* api_main_graph(mobius_context* ctx) { return ctx ? ctx->main() : nullptr; }

mobius_graph* api_create_subgraph(mobius_context* ctx, const char* name) {
  if (!ctx) return nullptr;
  mobius_graph* out = nullptr;
  guarded(ctx, [&] {
    mobius_graph& g = ctx->graphs.emplace_back();
    g.ctx = ctx;
    g.owned = std::make_unique<onnx::GraphProto>();
    g.owned->set_name(name && *name ? name : "body");
    g.proto = g.owned.get();
    out = &g;
  });
  return out;
}

mobius_status api_add_input(mobius_graph* g, const char* name, const mobius_tensor_type* type) {
  return guarded(g ? g->ctx : nullptr, [&] {
    graph_checked(g);
    std::string n = str(name, "input name");
    check_name(n, "input");
    count_value_info(g->ctx, n);
    onnx::ValueInfoProto vi;
    vi.set_name(n);
    fill_type(vi.mutable_type(), type, n);
    define(g, n);
    *g->proto->add_input() = std::move(vi);
  });
}

mobius_status api_add_output(mobius_graph* g, const char* name, const mobius_tensor_type* type) {
  return guarded(g ? g->ctx : nullptr, [&] {
    graph_checked(g);
    std::string n = str(name, "output name");
    check_name(n, "output");
    if (g->is_main && !g->defined.count(n))
      throw Error("[graph] output " + quote_name(n) + " is not produced by any node");
    for (const auto& o : g->proto->output())
      if (o.name() == n) throw Error("[graph] output " + quote_name(n) + " declared twice");
    count_value_info(g->ctx, n);
    onnx::ValueInfoProto vi;
    vi.set_name(n);
    fill_type(vi.mutable_type(), type, n);
    *g->proto->add_output() = std::move(vi);
  });
}

mobius_status api_add_initializer(mobius_graph* g, const char* name,
                                  const mobius_tensor_type* type) {
  return guarded(g ? g->ctx : nullptr, [&] {
    graph_checked(g);
    std::string n = str(name, "initializer name");
    check_name(n, "initializer");
    if (!g->is_main) throw Error("[graph] initializer " + quote_name(n) + " must live in the main graph");
    std::vector<int64_t> dims = static_dims(type, n);
    if (!known_dtype(type->dtype) || type->dtype == MOBIUS_DTYPE_BOOL)
      throw Error("[graph] initializer " + quote_name(n) + ": unsupported dtype");
    if (g->defined.count(n)) throw Error("[graph] value " + quote_name(n) + " is defined twice");
    count_initializer(g->ctx, n, type->dtype, dims);
    g->ctx->plan.declare(n, type->dtype, dims);
    define(g, n);
    auto* t = g->proto->add_initializer();
    t->set_name(n);
    t->set_data_type(type->dtype);
    for (int64_t d : dims) t->add_dims(d);
  });
}

mobius_status api_add_constant(mobius_graph* g, const char* name, const mobius_tensor_type* type,
                               const void* data, size_t nbytes) {
  return guarded(g ? g->ctx : nullptr, [&] {
    graph_checked(g);
    std::string n = str(name, "constant name");
    check_name(n, "constant");
    std::vector<int64_t> dims = static_dims(type, n);
    count_node(g->ctx, n);
    // A Constant node, so constants may live in subgraphs too and never mix with weights.
    onnx::NodeProto node;
    node.set_op_type("Constant");
    node.set_name(n);
    node.add_output(n);
    auto* attr = node.add_attribute();
    attr->set_name("value");
    attr->set_type(onnx::AttributeProto::TENSOR);
    fill_tensor(attr->mutable_t(), n, type->dtype, dims, data, nbytes);
    define(g, n);
    *g->proto->add_node() = std::move(node);
  });
}

void fill_attribute(mobius_context* ctx, onnx::AttributeProto* out, const mobius_attribute* attr,
                    const std::string& node) {
  const mobius_attribute av =
      read_abi_struct(attr, MOBIUS_ATTRIBUTE_SIZE_V1, "attribute of node " + quote_name(node));
  const mobius_attribute* a = &av;
  std::string name = str(a->name, "attribute name");
  check_name(name, "attribute");
  out->set_name(name);
  auto need = [&](const void* p) {
    if (a->count && !p) throw Error("[abi] attribute " + quote_name(name) + ": NULL list");
  };
  switch (a->kind) {
    case MOBIUS_ATTR_FLOAT: out->set_type(onnx::AttributeProto::FLOAT); out->set_f(a->f); break;
    case MOBIUS_ATTR_INT: out->set_type(onnx::AttributeProto::INT); out->set_i(a->i); break;
    case MOBIUS_ATTR_STRING:
      out->set_type(onnx::AttributeProto::STRING);
      out->set_s(str(a->s, "string attribute"));
      break;
    case MOBIUS_ATTR_INTS:
      need(a->ints);
      out->set_type(onnx::AttributeProto::INTS);
      for (size_t i = 0; i < a->count; ++i) out->add_ints(a->ints[i]);
      break;
    case MOBIUS_ATTR_FLOATS:
      need(a->floats);
      out->set_type(onnx::AttributeProto::FLOATS);
      for (size_t i = 0; i < a->count; ++i) out->add_floats(a->floats[i]);
      break;
    case MOBIUS_ATTR_STRINGS:
      need(a->strings);
      out->set_type(onnx::AttributeProto::STRINGS);
      for (size_t i = 0; i < a->count; ++i) out->add_strings(str(a->strings[i], "string"));
      break;
    case MOBIUS_ATTR_TENSOR: {
      out->set_type(onnx::AttributeProto::TENSOR);
      if (a->tensor_rank < 0 || a->tensor_rank > 64 || (a->tensor_rank && !a->tensor_dims))
        throw Error("[abi] attribute " + quote_name(name) + ": bad tensor rank");
      std::vector<int64_t> dims(a->tensor_dims, a->tensor_dims + a->tensor_rank);
      fill_tensor(out->mutable_t(), "", a->tensor_dtype, dims, a->tensor_data, a->tensor_nbytes);
      break;
    }
    case MOBIUS_ATTR_GRAPH: {
      mobius_graph* sg = a->graph;
      if (!sg || sg->ctx != ctx || sg->is_main || !sg->owned)
        throw Error("[abi] attribute " + quote_name(name) + ": not a subgraph of this build");
      if (sg->consumed) throw Error("[abi] attribute " + quote_name(name) + ": subgraph used twice");
      out->set_type(onnx::AttributeProto::GRAPH);
      *out->mutable_g() = std::move(*sg->owned);
      sg->consumed = true;
      break;
    }
    default:
      throw Error("[abi] attribute " + quote_name(name) + ": unknown kind " + std::to_string(a->kind));
  }
}

mobius_status api_add_node(mobius_graph* g, const mobius_node* node_in) {
  return guarded(g ? g->ctx : nullptr, [&] {
    graph_checked(g);
    const mobius_node nv = read_abi_struct(node_in, MOBIUS_NODE_SIZE_V1, "node");
    const mobius_node* n = &nv;
    std::string op = str(n->op_type, "op_type");
    check_name(op, "op type");
    std::string domain = n->domain ? n->domain : "";
    std::string name = n->name && *n->name ? n->name : op + "_" + std::to_string(g->ctx->node_counter);
    ++g->ctx->node_counter;
    count_node(g->ctx, name);
    if ((n->n_inputs && !n->inputs) || (n->n_outputs && !n->outputs) ||
        (n->n_attributes && !n->attributes))
      throw Error("[graph] node " + quote_name(name) + ": NULL array");
    if (n->n_inputs > 4096 || n->n_outputs > 4096 || n->n_attributes > 256)
      throw Error("[graph] node " + quote_name(name) + ": too many inputs, outputs or attributes");
    onnx::NodeProto node;
    node.set_op_type(op);
    node.set_name(name);
    if (!domain.empty() && domain != "ai.onnx") node.set_domain(domain);
    for (size_t i = 0; i < n->n_inputs; ++i) {
      std::string in = str(n->inputs[i], "input name");
      // The main graph has no outer scope: everything it reads must be defined already.
      if (!in.empty() && g->is_main && !g->defined.count(in))
        throw Error("[graph] node " + quote_name(name) + " (" + printable(op) + ") reads undefined value " + quote_name(in));
      node.add_input(in);
    }
    for (size_t i = 0; i < n->n_outputs; ++i) {
      std::string out = str(n->outputs[i], "output name");
      node.add_output(out);
    }
    for (size_t i = 0; i < n->n_attributes; ++i)
      fill_attribute(g->ctx, node.add_attribute(), n->attributes[i], name);
    std::set<std::string> outs;
    for (const auto& out : node.output())
      if (!out.empty() && (g->defined.count(out) || !outs.insert(out).second))
        throw Error("[graph] node " + quote_name(name) + " (" + printable(op) + ") redefines value " + quote_name(out));
    for (const auto& out : outs) define(g, out);
    if (!node.domain().empty()) g->ctx->domains.insert(node.domain());
    *g->proto->add_node() = std::move(node);
  });
}

mobius_status api_add_value_info(mobius_graph* g, const char* name,
                                 const mobius_tensor_type* type) {
  return guarded(g ? g->ctx : nullptr, [&] {
    graph_checked(g);
    std::string n = str(name, "value name");
    count_value_info(g->ctx, n);
    auto* vi = g->proto->add_value_info();
    vi->set_name(n);
    fill_type(vi->mutable_type(), type, n);
  });
}

// --- weight planning ---

std::vector<std::string> names(const char* const* p, size_t n) {
  if (n && !p) throw Error("[abi] NULL tensor name list");
  if (n > (1u << 20)) throw Error("[abi] tensor name list too long");
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(str(p[i], "tensor name"));
    check_name(out.back(), "tensor");
  }
  return out;
}

mobius_status api_plan_tensor(mobius_context* ctx, const char* init, const char* tensor) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    count_planned(ctx, 1);
    ctx->plan.set_source(str(init, "initializer"),
                         StreamingWeightSource{str(tensor, "checkpoint tensor")});
  });
}

mobius_status api_plan_expert_bank(mobius_context* ctx, const char* init,
                                   const char* const* tensors, size_t n) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    if (n == 0) throw Error("[plan] expert bank " + quote_name(str(init, "initializer")) + " has no experts");
    count_planned(ctx, n);
    ctx->plan.set_source(str(init, "initializer"), StreamingExpertBankSource{names(tensors, n)});
  });
}

mobius_status api_plan_transformed(mobius_context* ctx, const char* init,
                                   const char* const* tensors, size_t n, mobius_transform_fn fn,
                                   void* user, void (*release)(void*)) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    if (!fn) throw Error("[plan] transform for " + quote_name(str(init, "initializer")) + " is NULL");
    count_planned(ctx, n);
    ctx->plan.set_source(str(init, "initializer"),
                         StreamingTransformedWeightSource{names(tensors, n), fn, user, release});
  });
}

mobius_status api_plan_layout(mobius_context* ctx, const char* init, const char* const* tensors,
                              size_t n, const mobius_weight_layout* layout) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    const std::string name = str(init, "initializer");
    const mobius_weight_layout l =
        read_abi_struct(layout, MOBIUS_WEIGHT_LAYOUT_SIZE_V1, "layout of " + quote_name(name));
    count_planned(ctx, n);
    ctx->plan.set_source(name, StreamingLayoutSource{names(tensors, n), l});
  });
}

mobius_status api_ignore_tensors(mobius_context* ctx, const char* pattern) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    ctx->plan.ignore(str(pattern, "pattern"));
  });
}

// Writes only the version-1 fields of `out`, which the caller's struct_size covers.
mobius_status api_query_tensor(mobius_context* ctx, const char* name, mobius_tensor_info* out) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    std::string n = str(name, "tensor name");
    read_abi_struct(out, MOBIUS_TENSOR_INFO_SIZE_V1, "query_tensor of " + quote_name(n) + ": result");
    if (!ctx->checkpoint) throw Error("[checkpoint] no checkpoint in this build");
    const TensorMeta* m = ctx->checkpoint->find(n);
    if (!m) throw Error("[checkpoint] no tensor " + quote_name(n));
    constexpr size_t kMaxDims = sizeof(out->dims) / sizeof(out->dims[0]);
    out->dtype = m->dtype;
    out->rank = static_cast<int32_t>(std::min<size_t>(m->shape.size(), INT32_MAX));
    if (m->shape.size() > kMaxDims)
      throw Error("[checkpoint] tensor " + quote_name(n) + " has rank " + std::to_string(m->shape.size()) +
                  "; query_tensor describes at most " + std::to_string(kMaxDims) + " dims");
    for (int32_t i = 0; i < out->rank; ++i) out->dims[i] = m->shape[static_cast<size_t>(i)];
  });
}

// --- appended after version 1 ---

bool reserved_file(const std::string& n) {
  return n == "model.onnx" || n == "model.onnx.data" || n == "mobius_provenance.json";
}

mobius_status api_add_runtime_file(mobius_context* ctx, const char* name, const void* data,
                                   size_t size) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    std::string n = str(name, "runtime file name");
    bool bare = !n.empty() && n.size() <= 255 && n[0] != '.' &&
                n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789._-") == std::string::npos;
    if (!bare)
      throw Error("[abi] runtime file name " + quote_name(n) +
                  " is not a bare file name (letters, digits, '.', '_', '-'; not starting with '.')");
    if (reserved_file(n)) throw Error("[abi] runtime file " + quote_name(n) + " is written by the host itself");
    if (size && !data) throw Error("[abi] runtime file " + quote_name(n) + ": data is NULL");
    if (size > (64u << 20)) throw Error("[abi] runtime file " + quote_name(n) + " is larger than 64 MiB");
    for (const auto& f : ctx->runtime_files)
      if (f.first == n) throw Error("[abi] runtime file " + quote_name(n) + " added twice");
    ctx->runtime_files.emplace_back(n, std::string(static_cast<const char*>(data), size));
  });
}

// The config.json text, only when it is within the config limits (so a plugin that parses it
// again never sees a document it could choke on); else none.
const char* api_source_config(mobius_context* ctx) {
  if (!ctx || !ctx->source_config) return nullptr;
  if (!ctx->source_config_ok) {
    try {
      parse_json_limited(*ctx->source_config, "config.json", kConfigLimits);
      ctx->source_config_ok = true;
    } catch (...) {
      ctx->source_config_ok = false;
    }
  }
  return *ctx->source_config_ok ? ctx->source_config->c_str() : nullptr;
}

// The small files a plugin may read from the checkpoint folder: the runtime files a runtime
// config is made from, a sentence-transformers folder's modules.json, and a module's config
// ("<module>/config.json", the module one folder name of letters, digits, '_', '-' and '.', not
// starting with '.').
bool allowed_source_file(const std::string& n) {
  static const char* const kAllowed[] = {"generation_config.json", "tokenizer_config.json",
                                         "special_tokens_map.json", "chat_template.jinja", "modules.json"};
  if (std::find(std::begin(kAllowed), std::end(kAllowed), n) != std::end(kAllowed)) return true;
  const size_t slash = n.find('/');
  if (slash == std::string::npos || n.substr(slash) != "/config.json") return false;
  return is_component_name(n.substr(0, slash));
}

// A small file of the checkpoint folder, read once under the folder's rule; JSON files only
// when within the config limits. nullopt when the folder has none; throws mobius::Error
// "[checkpoint] <file>: <reason>" when it cannot be read.
const std::optional<std::string>& read_source_file(mobius_context* ctx, const std::string& n) {
  if (!allowed_source_file(n))
    throw Error("[abi] " + quote_name(n) + " is not a file of the checkpoint folder a plugin may read");
  auto it = ctx->source_files.find(n);
  if (it != ctx->source_files.end()) return it->second;
  std::optional<std::string> text;
  const std::filesystem::path shown = ctx->source_dir / n;
  const mobius::ModelFolder folder(ctx->source_dir);
  const size_t slash = n.find('/');
  if (slash == std::string::npos ? folder.has(n) : folder.has(n.substr(0, slash))) {
    FolderResult r = folder.try_open(n);
    if (r.error == FolderError::Missing) {
      // A module folder without the file: absent.
    } else {
      text = folder.read_text(n, shown.string(), "checkpoint", kConfigLimits.max_bytes);
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) parse_json_limited(*text, shown.string(), kConfigLimits);
      if (text->find('\0') != std::string::npos)
        throw Error("[checkpoint] " + shown.string() + ": holds a NUL byte; it is not a text file");
    }
  }
  return ctx->source_files.emplace(n, std::move(text)).first->second;
}

// source_file: read_source_file with every failure as absence.
const char* api_source_file(mobius_context* ctx, const char* name) {
  if (!ctx || !name || ctx->source_dir.empty()) return nullptr;
  try {
    const std::optional<std::string>& text = read_source_file(ctx, name);
    return text ? text->c_str() : nullptr;
  } catch (...) {
    return nullptr;  // unreadable, too large or too deep: as if absent
  }
}

mobius_status api_read_source_file(mobius_context* ctx, const char* name, mobius_string_sink* out, int32_t* found) {
  if (found) *found = 0;
  return guarded(ctx, [&] {
    if (!name || !out || !out->write || !found) throw Error("[abi] read_source_file: NULL argument");
    if (ctx->source_dir.empty()) return;
    const std::optional<std::string>& text = read_source_file(ctx, name);
    if (!text) return;
    *found = 1;
    out->write(out->opaque, text->data(), text->size());
  });
}

mobius_host_api make_api() {
  mobius_host_api a{};
  a.struct_size = sizeof(a);
  a.abi_version = MOBIUS_ABI_VERSION;
  a.log = &api_log;
  a.last_error = &api_last_error;
  a.set_error = &api_set_error;
  a.register_architecture = &api_register_architecture;
  a.registrar_error = &api_registrar_error;
  a.build_options = &api_build_options;
  a.main_graph = &api_main_graph;
  a.create_subgraph = &api_create_subgraph;
  a.add_input = &api_add_input;
  a.add_output = &api_add_output;
  a.add_initializer = &api_add_initializer;
  a.add_constant = &api_add_constant;
  a.add_node = &api_add_node;
  a.add_value_info = &api_add_value_info;
  a.plan_tensor = &api_plan_tensor;
  a.plan_expert_bank = &api_plan_expert_bank;
  a.plan_transformed = &api_plan_transformed;
  a.ignore_tensors = &api_ignore_tensors;
  a.query_tensor = &api_query_tensor;
  a.set_error_kind = &api_set_error_kind;
  a.add_runtime_file = &api_add_runtime_file;
  a.source_config = &api_source_config;
  a.source_file = &api_source_file;
  a.plan_layout = &api_plan_layout;
  a.read_source_file = &api_read_source_file;
  return a;
}

}  // namespace

const mobius_host_api* host_api() {
  static const mobius_host_api api = make_api();
  return &api;
}

void run_plugin_register(mobius_plugin_register_fn fn, mobius_registrar& reg) {
  mobius_status st = MOBIUS_ERROR;
  try {
    st = fn(host_api(), &reg);
  } catch (...) {
    throw Error(ErrorKind::Internal, "mobius_plugin_register let an exception cross the C ABI");
  }
  if (st != MOBIUS_OK)
    throw Error(reg.error.empty() ? "register() failed without a message" : reg.error);
  if (!reg.error.empty()) throw Error(reg.error);
}

}  // namespace mobius
