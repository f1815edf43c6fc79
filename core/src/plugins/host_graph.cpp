// host_graph.cpp - the host's side of the C ABI for building graphs: inputs, outputs,
// initializers, constants, nodes with their attributes and subgraphs, value types. Every entry
// validates its arguments and runs guarded (host_calls.hpp).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "mobius/error.hpp"
#include "plugins/host_calls.hpp"
#include "util/untrusted.hpp"

namespace mobius::host {
namespace {

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

}  // namespace

void add_graph_calls(mobius_host_api& a) {
  a.main_graph = &api_main_graph;
  a.create_subgraph = &api_create_subgraph;
  a.add_input = &api_add_input;
  a.add_output = &api_add_output;
  a.add_initializer = &api_add_initializer;
  a.add_constant = &api_add_constant;
  a.add_node = &api_add_node;
  a.add_value_info = &api_add_value_info;
}

}  // namespace mobius::host
