// info_graph.cpp - `mobius info`: one parsed graph described (info_model.hpp): its inputs and
// outputs, opsets, nodes, initializers by dtype, and the external data files they need.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "info/info_model.hpp"
#include "util/untrusted.hpp"  // quote_name

namespace mobius::info {

namespace fs = std::filesystem;

std::string dtype_name(int32_t t) {
  switch (t) {
    case 1: return "float32";
    case 2: return "uint8";
    case 3: return "int8";
    case 4: return "uint16";
    case 5: return "int16";
    case 6: return "int32";
    case 7: return "int64";
    case 8: return "string";
    case 9: return "bool";
    case 10: return "float16";
    case 11: return "float64";
    case 12: return "uint32";
    case 13: return "uint64";
    case 14: return "complex64";
    case 15: return "complex128";
    case 16: return "bfloat16";
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 21: return "uint4";
    case 22: return "int4";
    case 23: return "float4e2m1";
    case 24: return "float8e8m0";
    case 0: return "undefined";
    default: return "dtype(" + std::to_string(t) + ")";
  }
}

namespace {

// Bits per element of a fixed-size dtype; 0 for string and unknown types.
int dtype_bits(int32_t t) {
  switch (t) {
    case 2: case 3: case 9: case 17: case 18: case 19: case 20: case 24: return 8;
    case 4: case 5: case 10: case 16: return 16;
    case 1: case 6: case 12: return 32;
    case 7: case 11: case 13: case 14: return 64;
    case 15: return 128;
    case 21: case 22: case 23: return 4;
    default: return 0;
  }
}

// A strict unsigned decimal; nullopt for anything else (sign, spaces, overflow).
std::optional<uint64_t> parse_u64(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v))
      return std::nullopt;
  }
  return v;
}

std::string type_text(const onnx::TypeProto& t, int depth) {
  if (depth > kMaxDepth) return "...";
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType:
      return dtype_name(t.tensor_type().elem_type());
    case onnx::TypeProto::kSparseTensorType:
      return "sparse " + dtype_name(t.sparse_tensor_type().elem_type());
    case onnx::TypeProto::kSequenceType:
      return "sequence<" + type_text(t.sequence_type().elem_type(), depth + 1) + ">";
    case onnx::TypeProto::kOptionalType:
      return "optional<" + type_text(t.optional_type().elem_type(), depth + 1) + ">";
    case onnx::TypeProto::kMapType:
      return "map<" + dtype_name(t.map_type().key_type()) + ", " +
             type_text(t.map_type().value_type(), depth + 1) + ">";
    default:
      return "?";
  }
}

json shape_json(const onnx::TypeProto& t) {
  const onnx::TensorShapeProto* s = nullptr;
  if (t.has_tensor_type() && t.tensor_type().has_shape()) s = &t.tensor_type().shape();
  if (t.has_sparse_tensor_type() && t.sparse_tensor_type().has_shape()) s = &t.sparse_tensor_type().shape();
  if (!s) return nullptr;
  json dims = json::array();
  for (const auto& d : s->dim()) {
    if (d.has_dim_value())
      dims.push_back(d.dim_value());
    else if (d.has_dim_param() && !d.dim_param().empty())
      dims.push_back(d.dim_param());
    else
      dims.push_back(nullptr);
  }
  return dims;
}

Value value_of(const onnx::ValueInfoProto& v) {
  return Value{v.name(), v.has_type() ? type_text(v.type(), 0) : "?",
               v.has_type() ? shape_json(v.type()) : json(nullptr)};
}

class GraphReader {
 public:
  GraphReader(Graph& g, Problems& problems) : g_(g), problems_(problems) {}

  void read(const onnx::ModelProto& m) {
    g_.ir_version = m.ir_version();
    g_.producer = m.producer_name();
    g_.producer_version = m.producer_version();
    for (const auto& o : m.opset_import())
      g_.opsets.emplace_back(o.domain().empty() ? "ai.onnx" : o.domain(), o.version());
    g_.functions = static_cast<uint64_t>(m.functions_size());
    const onnx::GraphProto& graph = m.graph();
    std::set<std::string> init_names;
    for (const auto& t : graph.initializer()) init_names.insert(t.name());
    for (const auto& v : graph.input())
      if (!init_names.count(v.name())) g_.inputs.push_back(value_of(v));
    for (const auto& v : graph.output()) g_.outputs.push_back(value_of(v));
    visit(graph, 0);
  }

 private:
  void visit(const onnx::GraphProto& graph, int depth) {
    if (depth > kMaxDepth) {
      problems_.add(g_.file + ": subgraphs nest deeper than " + std::to_string(kMaxDepth) + " (not counted)");
      return;
    }
    (depth == 0 ? g_.nodes : g_.subgraph_nodes) += static_cast<uint64_t>(graph.node_size());
    if (depth > 0) ++g_.subgraphs;
    for (const auto& t : graph.initializer()) tensor(t);
    for (const auto& n : graph.node())
      for (const auto& a : n.attribute()) {
        if (a.has_g()) visit(a.g(), depth + 1);
        for (const auto& sg : a.graphs()) visit(sg, depth + 1);
      }
  }

  void tensor(const onnx::TensorProto& t) {
    ++g_.initializers;
    const std::string who = g_.file + ": initializer " + quote_name(t.name());
    // The bytes its shape and dtype need, when that is a fixed size.
    std::optional<uint64_t> expected;
    if (const int bits = dtype_bits(t.data_type()); bits > 0) {
      uint64_t n = 1;
      bool ok = true;
      for (int64_t d : t.dims()) ok = ok && d >= 0 && !__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
      uint64_t total_bits = 0;
      if (ok && !__builtin_mul_overflow(n, static_cast<uint64_t>(bits), &total_bits))
        expected = (total_bits + 7) / 8;
      else
        problems_.add(who + " has an impossible shape");
    }
    uint64_t bytes = 0;
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      std::string location;
      bool has_location = false;
      uint64_t offset = 0;
      std::optional<uint64_t> length;
      for (const auto& e : t.external_data()) {
        if (e.key() == "location") {
          location = e.value();
          has_location = true;
        } else if (e.key() == "offset" || e.key() == "length") {
          const auto v = parse_u64(e.value());
          if (!v) {
            problems_.add(who + ": external data " + e.key() + " " + quote_name(e.value()) + " is not a number");
            continue;
          }
          if (e.key() == "offset")
            offset = *v;
          else
            length = *v;
        }
      }
      bytes = length.value_or(expected.value_or(0));
      if (length && expected && *length != *expected)
        problems_.add(who + ": external data length " + std::to_string(*length) + " but its shape and dtype need " +
                      std::to_string(*expected) + " bytes");
      if (!has_location) {
        problems_.add(who + " is stored externally without a location");
      } else if (g_.data.count(location) || g_.data.size() < kMaxDataFiles) {
        DataFile& f = g_.data[location];
        ++f.tensors;
        uint64_t end = 0;
        if (__builtin_add_overflow(offset, bytes, &end)) end = UINT64_MAX;
        f.needed = std::max(f.needed, end);
      } else if (!g_.data_truncated) {
        g_.data_truncated = true;
        problems_.add(g_.file + ": more than " + std::to_string(kMaxDataFiles) +
                      " external data locations (the rest not checked)");
      }
    } else if (t.has_raw_data()) {
      bytes = t.raw_data().size();
    } else if (t.data_type() == onnx::TensorProto::STRING) {
      for (const auto& s : t.string_data()) bytes += s.size();
    } else {
      bytes = expected.value_or(0);
    }
    DtypeCount& c = g_.dtypes[t.data_type()];
    ++c.tensors;
    c.bytes += bytes;
    if (__builtin_add_overflow(g_.weight_bytes, bytes, &g_.weight_bytes)) g_.weight_bytes = UINT64_MAX;
  }

  Graph& g_;
  Problems& problems_;
};

}  // namespace

void read_graph(const onnx::ModelProto& m, Graph& g, Problems& problems) { GraphReader(g, problems).read(m); }

std::string tjs_dtype_of(const std::string& file) {
  std::string stem = fs::path(file).stem().string();
  static const std::pair<const char*, const char*> kSuffixes[] = {
      {"_q4f16", "q4f16"}, {"_fp16", "fp16"}, {"_quantized", "q8"}, {"_q4", "q4"},
      {"_int8", "int8"},   {"_uint8", "uint8"}, {"_bnb4", "bnb4"}};
  for (const auto& [suffix, dtype] : kSuffixes) {
    const std::string_view sv(suffix);
    if (stem.size() > sv.size() && stem.compare(stem.size() - sv.size(), sv.size(), sv) == 0) return dtype;
  }
  return "fp32";
}

void check_data_files(Graph& g, int graph_dirfd, Problems& problems) {
  const std::string dir = fs::path(g.file).parent_path().string();
  for (auto& [loc, f] : g.data) {
    const std::string shown = quote_name(dir.empty() ? loc : dir + "/" + loc);
    if (std::string why = location_problem(loc); !why.empty()) {
      f.problem = "location " + why;
      problems.add(g.file + ": external data location " + quote_name(loc) + " (" + std::to_string(f.tensors) +
                   " tensors) " + why);
      continue;
    }
    const FileStat s = stat_at(graph_dirfd, loc);
    if (!s.exists)
      f.problem = "missing";
    else if (s.symlink)
      f.problem = "a symbolic link (not followed)";
    else if (!s.regular)
      f.problem = "not a regular file";
    else {
      f.size = s.size;
      if (s.size < f.needed)
        f.problem = "is " + std::to_string(s.size) + " bytes, its tensors need " + std::to_string(f.needed);
    }
    if (!f.problem.empty()) problems.add(g.file + ": external data file " + shown + " " + f.problem);
  }
}

}  // namespace mobius::info
