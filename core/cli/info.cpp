// info.cpp - `mobius info OUT`: a built model folder described for the app that will use it.
//
// Everything read from the folder is untrusted: the graph is parsed from at most kMaxGraphBytes,
// the JSON files within kConfigLimits, every field is type-checked, and every value quoted from a
// file is printed through printable() (text) or as escaped ASCII JSON (--json).
#include "info.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dirent.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mobius/error.hpp"
#include "onnx/onnx_pb.h"
#include "checkpoint/checkpoint_files.hpp"
#include "save/layout.hpp"
#include "util/untrusted.hpp"  // printable, quote_name, parse_json_limited

namespace mobius::cli {

namespace {

namespace fs = std::filesystem;
// Output keeps its keys in the order written (the facts a reader looks for first, first).
using json = nlohmann::ordered_json;

// The largest graph file parsed: protobuf parses at most INT_MAX bytes. A graph with external
// data holds no weights, so even the largest models' graphs are far below this.
constexpr uint64_t kMaxGraphBytes = static_cast<uint64_t>(INT_MAX);
constexpr size_t kMaxGraphFiles = 256;     // onnx/*.onnx of a transformers.js folder
constexpr size_t kMaxDataFiles = 1024;     // distinct external data locations looked at
constexpr size_t kMaxProblems = 50;        // problems listed (the rest are counted)
constexpr size_t kMaxFilesShown = 20;      // provenance "files" printed as text
constexpr int kMaxDepth = 64;              // subgraph and type nesting followed

constexpr const char* kProvenance = "mobius_provenance.json";
constexpr const char* kGenaiConfig = "genai_config.json";
constexpr const char* kConfig = "config.json";

[[noreturn]] void fail(const std::string& what, const std::string& reason) {
  throw Error(ErrorKind::Io, "[info] " + printable(what, 4096) + ": " + reason);
}

std::string errno_message(int err) { return std::strerror(err); }

// ---------------------------------------------------------------------------------------------
// Formatting

std::string grouped(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string human(uint64_t b) {
  if (b < 1024) return std::to_string(b) + " B";
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = -1;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

// ---------------------------------------------------------------------------------------------
// Files: opened relative to the folder, the last component never followed when a link.

using Fd = mobius::OwnedFd;

struct FileStat {
  bool exists = false;
  bool regular = false;
  bool symlink = false;
  bool directory = false;
  uint64_t size = 0;
};

FileStat stat_at(int dirfd, const std::string& name) {
  FileStat s;
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return s;
  s.exists = true;
  s.regular = S_ISREG(st.st_mode);
  s.symlink = S_ISLNK(st.st_mode);
  s.directory = S_ISDIR(st.st_mode);
  s.size = static_cast<uint64_t>(st.st_size);
  return s;
}

// A sub-folder (one plain name) of dirfd, not followed when a link; an invalid Fd when absent.
Fd open_subdir(int dirfd, const std::string& name) {
  return Fd(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// The whole of a regular file, at most `max` bytes; nullopt when it does not exist. `shown` is
// the path named in errors.
std::optional<std::string> read_file(int dirfd, const std::string& name, uint64_t max,
                                     const std::string& shown) {
  Fd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.ok()) {
    const int err = errno;
    if (err == ENOENT) return std::nullopt;
    if (err == ELOOP) fail(shown, "is a symbolic link (not followed)");
    fail(shown, "cannot open: " + errno_message(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(shown, "cannot stat: " + errno_message(errno));
  if (!S_ISREG(st.st_mode)) fail(shown, "is not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max)
    fail(shown, "is " + human(size) + ", more than the " + human(max) +
                    " read of it (a graph keeps its weights in external data; a config is small)");
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(shown, "cannot read: " + errno_message(errno));
    if (n == 0) break;  // shrank while read
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

// ONNX TensorProto.DataType, by number (the list grows past what Debian's onnx 1.12 names).
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

// Why an external-data location is not a plain file name beside the graph; "" when it is.
std::string location_problem(const std::string& loc) {
  if (loc.empty()) return "is empty";
  if (loc == "." || loc == "..") return "is not a file name";
  if (loc.find('/') != std::string::npos || loc.find('\\') != std::string::npos)
    return "is a path, not a file name beside the graph (not followed)";
  for (unsigned char c : loc)
    if (c < 0x20 || c == 0x7F) return "holds control bytes";
  return "";
}

// ---------------------------------------------------------------------------------------------
// What is gathered

struct Problems {
  std::vector<std::string> list;
  size_t more = 0;
  void add(std::string p) {
    if (list.size() < kMaxProblems)
      list.push_back(std::move(p));
    else
      ++more;
  }
};

struct Value {
  std::string name;
  std::string type;  // "float32", "sequence<int64>", ...
  json shape;        // array of int / string / null per dim; null when the rank is unknown
};

struct DataFile {
  uint64_t tensors = 0;
  uint64_t needed = 0;  // largest offset + length
  std::string problem;  // a bad location, or what is wrong with the file
  std::optional<uint64_t> size;
};

struct DtypeCount {
  uint64_t tensors = 0;
  uint64_t bytes = 0;
};

struct Graph {
  std::string file;  // relative to the folder, "model.onnx" or "onnx/model_fp16.onnx"
  uint64_t size = 0;
  int64_t ir_version = 0;
  std::string producer, producer_version;
  std::vector<std::pair<std::string, int64_t>> opsets;
  uint64_t nodes = 0, subgraph_nodes = 0, subgraphs = 0, functions = 0;
  uint64_t initializers = 0, weight_bytes = 0;
  std::map<int32_t, DtypeCount> dtypes;
  std::map<std::string, DataFile> data;  // by location
  bool data_truncated = false;           // more than kMaxDataFiles locations
  std::vector<Value> inputs, outputs;
  std::string tjs_dtype;  // transformers.js dtype from the file name suffix
};

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

std::string shape_text(const json& shape) {
  if (shape.is_null()) return "(shape unknown)";
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    const json& d = shape[i];
    if (d.is_number_integer())
      s += std::to_string(d.get<int64_t>());
    else if (d.is_string())
      s += printable(d.get<std::string>(), 64);
    else
      s += "?";
  }
  return s + "]";
}

Value value_of(const onnx::ValueInfoProto& v) {
  return Value{v.name(), v.has_type() ? type_text(v.type(), 0) : "?",
               v.has_type() ? shape_json(v.type()) : json(nullptr)};
}

// The transformers.js dtype a graph file name's suffix stands for ("model_fp16.onnx" -> fp16).
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

// Checks each external data location: a plain file name beside the graph, that file present and
// large enough. Only its metadata is looked at (lstat); no link is followed.
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

// ---------------------------------------------------------------------------------------------
// Provenance: every field type-checked; what is kept is re-emitted, nothing else.

struct Provenance {
  bool present = false;
  json fields = json::object();     // the well-typed fields
  std::vector<std::string> graphs;  // valid relative graph paths
};

bool plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && location_problem(s).empty();
}

// "model.onnx" or "onnx/model_fp16.onnx": at most one folder, plain names, ending in .onnx.
bool valid_graph_path(const std::string& p) {
  if (p.size() < 6 || p.compare(p.size() - 5, 5, ".onnx") != 0) return false;
  const size_t slash = p.find('/');
  if (slash == std::string::npos) return plain_name(p);
  return plain_name(p.substr(0, slash)) && plain_name(p.substr(slash + 1));
}

Provenance read_provenance(int dirfd, Problems& problems) {
  Provenance p;
  json j;
  try {
    auto text = read_file(dirfd, kProvenance, kConfigLimits.max_bytes, kProvenance);
    if (!text) return p;
    p.present = true;
    j = json(parse_json_limited(*text, kProvenance, kConfigLimits, "info"));
  } catch (const Error& e) {
    problems.add(e.what());
    return p;
  }
  if (!j.is_object()) {
    problems.add(std::string(kProvenance) + " is not a JSON object");
    return p;
  }
  auto wrong = [&](const std::string& key, const char* want) {
    problems.add(std::string(kProvenance) + ": " + quote_name(key) + " is not " + want + " (ignored)");
  };
  for (const char* key : {"producer", "producer_version", "model_type", "plugin", "plugin_version",
                          "weight_dtype", "runtime", "checkpoint", "execution_provider", "ops"}) {
    if (!j.contains(key)) continue;
    if (j[key].is_string())
      p.fields[key] = j[key];
    else
      wrong(key, "a string");
  }
  if (j.contains("quantization")) {
    const json& q = j["quantization"];
    const bool ok = q.is_object() && q.value("operator", json()).is_string() &&
                    q.value("bits", json()).is_number_integer() &&
                    q.value("block_size", json()).is_number_integer() &&
                    q.value("accuracy_level", json()).is_number_integer() &&
                    q.value("symmetric", json()).is_boolean();
    if (ok)
      p.fields["quantization"] = {{"operator", q["operator"]}, {"bits", q["bits"]},
                                  {"block_size", q["block_size"]},
                                  {"accuracy_level", q["accuracy_level"]},
                                  {"symmetric", q["symmetric"]}};
    else
      wrong("quantization", "an object of operator, bits, block_size, accuracy_level, symmetric");
  }
  for (const char* key : {"onnx_ir_version", "onnx_opset"}) {
    if (!j.contains(key)) continue;
    if (j[key].is_number_integer())
      p.fields[key] = j[key];
    else
      wrong(key, "an integer");
  }
  if (j.contains("graphs")) {
    const json& g = j["graphs"];
    if (!g.is_array()) {
      wrong("graphs", "a list of file names");
    } else {
      json kept = json::array();
      for (const auto& e : g) {
        if (e.is_string() && valid_graph_path(e.get<std::string>())) {
          if (p.graphs.size() >= kMaxGraphFiles) break;
          p.graphs.push_back(e.get<std::string>());
          kept.push_back(e);
        } else {
          problems.add(std::string(kProvenance) + ": graph " +
                       (e.is_string() ? quote_name(e.get<std::string>()) : std::string("entry")) +
                       " is not a .onnx file name in the folder or its onnx/ folder (ignored)");
        }
      }
      p.fields["graphs"] = kept;
    }
  }
  if (j.contains("source")) {
    const json& s = j["source"];
    if (!s.is_object()) {
      wrong("source", "an object");
    } else {
      json kept = json::object();
      for (const char* key : {"repo", "revision", "commit"}) {
        if (!s.contains(key)) continue;
        if (s[key].is_string())
          kept[key] = s[key];
        else
          wrong(std::string("source.") + key, "a string");
      }
      p.fields["source"] = kept;
    }
  }
  if (j.contains("files")) {
    const json& f = j["files"];
    if (!f.is_array()) {
      wrong("files", "a list");
    } else {
      json kept = json::array();
      size_t bad = 0;
      for (const auto& e : f) {
        if (e.is_object() && e.contains("name") && e["name"].is_string() &&
            (!e.contains("size") || e["size"].is_number_unsigned()) &&
            (!e.contains("sha256") || e["sha256"].is_string())) {
          json k = {{"name", e["name"]}};
          if (e.contains("size")) k["size"] = e["size"];
          if (e.contains("sha256")) k["sha256"] = e["sha256"];
          // How the digest was had: "computed" from the file's bytes, or "hub-blob", the name of
          // the hub cache's blob holding the file. Provenances without it computed it.
          if (e.contains("sha256_source") && e["sha256_source"].is_string())
            k["sha256_source"] = e["sha256_source"];
          kept.push_back(std::move(k));
        } else {
          ++bad;
        }
      }
      if (bad)
        problems.add(std::string(kProvenance) + ": " + std::to_string(bad) +
                     " entries of 'files' are not {name, size, sha256} (ignored)");
      p.fields["files"] = kept;
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Layout

struct Layout {
  std::string runtime;         // one of mobius::runtimes(), or "" when the files say nothing
  std::string runtime_source;  // "mobius_provenance.json" or "files"
  std::vector<std::string> graphs;
  std::string graphs_source;
};

// The layout the files alone show.
Layout detect(int dirfd, Problems& problems) {
  Layout l;
  l.runtime_source = l.graphs_source = "files";
  const FileStat model = stat_at(dirfd, "model.onnx");
  if (model.exists) {
    l.runtime = stat_at(dirfd, kGenaiConfig).exists ? kRuntimeGenai : kRuntimeOrt;
    l.graphs = {"model.onnx"};
    return l;
  }
  Fd sub = open_subdir(dirfd, "onnx");
  if (!sub.ok()) return l;
  DIR* d = ::fdopendir(::dup(sub.get()));
  if (!d) return l;
  std::vector<std::string> names;
  size_t skipped = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() < 6 || n.compare(n.size() - 5, 5, ".onnx") != 0 || !plain_name(n)) continue;
    if (!stat_at(sub.get(), n).regular) continue;
    if (names.size() < kMaxGraphFiles)
      names.push_back(n);
    else
      ++skipped;
  }
  ::closedir(d);
  if (skipped) problems.add("onnx/ holds more than " + std::to_string(kMaxGraphFiles) + " .onnx files; " +
                            std::to_string(skipped) + " not shown");
  std::sort(names.begin(), names.end());
  for (const auto& n : names) l.graphs.push_back("onnx/" + n);
  if (!l.graphs.empty()) l.runtime = kRuntimeTransformersJs;
  return l;
}

Layout layout(int dirfd, const Provenance& prov, Problems& problems) {
  Layout files = detect(dirfd, problems);
  Layout l = files;
  if (prov.fields.contains("runtime")) {
    const std::string r = prov.fields["runtime"].get<std::string>();
    if (const auto known = runtimes(); std::find(known.begin(), known.end(), r) != known.end()) {
      l.runtime = r;
      l.runtime_source = kProvenance;
      // ort-genai and onnxruntime share a layout (genai_config.json is checked on its own).
      const auto tjs = [](const std::string& x) { return x == kRuntimeTransformersJs; };
      if (!files.runtime.empty() && tjs(files.runtime) != tjs(r))
        problems.add(std::string(kProvenance) + " records runtime " + r + ", but the files are laid out for " +
                     files.runtime);
    } else {
      problems.add(std::string(kProvenance) + ": unknown runtime " + quote_name(r) + " (the files decide)");
    }
  }
  if (!prov.graphs.empty()) {
    l.graphs = prov.graphs;
    l.graphs_source = kProvenance;
  }
  return l;
}

// ---------------------------------------------------------------------------------------------
// Runtime config

json genai_config(int dirfd, const std::vector<Graph>& graphs, Problems& problems) {
  json out = json::object();
  json j;
  try {
    auto text = read_file(dirfd, kGenaiConfig, kConfigLimits.max_bytes, kGenaiConfig);
    if (!text) {
      problems.add(std::string(kGenaiConfig) + " is missing (onnxruntime-genai needs it)");
      return nullptr;
    }
    out["size"] = text->size();
    j = json(parse_json_limited(*text, kGenaiConfig, kConfigLimits, "info"));
  } catch (const Error& e) {
    problems.add(e.what());
    return out;
  }
  const json* model = j.is_object() && j.contains("model") && j["model"].is_object() ? &j["model"] : nullptr;
  if (!model) {
    problems.add(std::string(kGenaiConfig) + " has no 'model' object");
    return out;
  }
  if (model->contains("type") && (*model)["type"].is_string()) out["model_type"] = (*model)["type"];
  if (model->contains("context_length") && (*model)["context_length"].is_number_integer())
    out["context_length"] = (*model)["context_length"];
  if (j.contains("search") && j["search"].is_object() && j["search"].contains("max_length") &&
      j["search"]["max_length"].is_number_integer())
    out["max_length"] = j["search"]["max_length"];
  const json* dec = model->contains("decoder") && (*model)["decoder"].is_object() ? &(*model)["decoder"] : nullptr;
  if (dec && dec->contains("filename") && (*dec)["filename"].is_string()) {
    const std::string f = (*dec)["filename"].get<std::string>();
    out["decoder_filename"] = f;
    if (std::none_of(graphs.begin(), graphs.end(), [&](const Graph& g) { return g.file == f; }))
      problems.add(std::string(kGenaiConfig) + ": model.decoder.filename " + quote_name(f) +
                   " is not a graph of this folder");
  } else {
    problems.add(std::string(kGenaiConfig) + " names no model.decoder.filename");
  }
  return out;
}

json tjs_config(int dirfd, Problems& problems) {
  json j;
  try {
    auto text = read_file(dirfd, kConfig, kConfigLimits.max_bytes, kConfig);
    if (!text) {
      problems.add(std::string(kConfig) + " is missing (transformers.js needs it)");
      return nullptr;
    }
    j = json(parse_json_limited(*text, kConfig, kConfigLimits, "info"));
  } catch (const Error& e) {
    problems.add(e.what());
    return nullptr;
  }
  if (!j.is_object() || !j.contains("transformers.js_config") || !j["transformers.js_config"].is_object()) {
    problems.add(std::string(kConfig) + " has no \"transformers.js_config\" object");
    return nullptr;
  }
  return j["transformers.js_config"];
}

// ---------------------------------------------------------------------------------------------
// Output

json graph_json(const Graph& g) {
  json opsets = json::array();
  for (const auto& [d, v] : g.opsets) opsets.push_back({{"domain", d}, {"version", v}});
  json dtypes = json::array();
  for (const auto& [t, c] : g.dtypes)
    dtypes.push_back({{"dtype", dtype_name(t)}, {"tensors", c.tensors}, {"bytes", c.bytes}});
  auto values = [](const std::vector<Value>& vs) {
    json a = json::array();
    for (const auto& v : vs) a.push_back({{"name", v.name}, {"dtype", v.type}, {"shape", v.shape}});
    return a;
  };
  json data = json::array();
  for (const auto& [loc, f] : g.data) {
    json d = {{"location", loc}, {"tensors", f.tensors}, {"bytes_needed", f.needed},
              {"size", f.size ? json(*f.size) : json(nullptr)}};
    if (!f.problem.empty()) d["problem"] = f.problem;
    data.push_back(std::move(d));
  }
  json j = {{"file", g.file},
            {"size", g.size},
            {"ir_version", g.ir_version},
            {"producer", {{"name", g.producer}, {"version", g.producer_version}}},
            {"opset_imports", opsets},
            {"node_count", g.nodes},
            {"subgraph_node_count", g.subgraph_nodes},
            {"initializer_count", g.initializers},
            {"weight_bytes", g.weight_bytes},
            {"weight_dtypes", dtypes},
            {"external_data", data},
            {"inputs", values(g.inputs)},
            {"outputs", values(g.outputs)}};
  if (!g.tjs_dtype.empty()) j["transformers_js_dtype"] = g.tjs_dtype;
  return j;
}

// "float16 (290 tensors), float32 (2 tensors)": most tensors first.
std::string dtypes_text(const Graph& g) {
  std::vector<std::pair<int32_t, DtypeCount>> v(g.dtypes.begin(), g.dtypes.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.tensors > b.second.tensors; });
  std::string s;
  for (const auto& [t, c] : v)
    s += (s.empty() ? "" : ", ") + dtype_name(t) + " (" + std::to_string(c.tensors) +
         (c.tensors == 1 ? " tensor)" : " tensors)");
  return s.empty() ? "none" : s;
}

void print_values(std::ostream& os, const char* title, const std::vector<Value>& vs) {
  os << "  " << title << (vs.empty() ? "  none" : "") << "\n";
  size_t wn = 0, wt = 0;
  for (const auto& v : vs) {
    wn = std::max(wn, std::min<size_t>(printable(v.name).size(), 40));
    wt = std::max(wt, printable(v.type).size());
  }
  for (const auto& v : vs)
    os << "    " << pad(printable(v.name), wn) << "  " << pad(printable(v.type), wt) << "  "
       << shape_text(v.shape) << "\n";
}

void print_text(std::ostream& os, const std::string& folder, const Layout& l, const std::vector<Graph>& graphs,
                const json& runtime_config, const Provenance& prov, const Problems& problems) {
  const auto str = [](const json& j, const char* k) {
    return j.contains(k) && j[k].is_string() ? printable(j[k].get<std::string>()) : std::string();
  };
  os << printable(folder, 4096) << ": laid out for " << l.runtime
     << (l.runtime_source == kProvenance ? " (recorded in mobius_provenance.json)" : " (detected from its files)")
     << "\n";
  for (const Graph& g : graphs) {
    os << "\n" << printable(g.file) << "  " << human(g.size) << ", ONNX IR " << g.ir_version;
    if (!g.producer.empty())
      os << ", produced by " << printable(g.producer) << (g.producer_version.empty() ? "" : " ")
         << printable(g.producer_version);
    os << "\n";
    std::string ops;
    for (const auto& [d, v] : g.opsets) ops += (ops.empty() ? "" : ", ") + printable(d) + ":" + std::to_string(v);
    os << "  opset imports  " << (ops.empty() ? "none" : ops) << "\n";
    os << "  nodes          " << grouped(g.nodes);
    if (g.subgraphs)
      os << " (and " << grouped(g.subgraph_nodes) << " in " << g.subgraphs << " subgraphs)";
    if (g.functions) os << " (" << g.functions << " local functions)";
    os << "\n";
    os << "  weights        " << dtypes_text(g) << "\n";
    os << "  initializers   " << grouped(g.initializers) << ", " << human(g.weight_bytes) << " ("
       << grouped(g.weight_bytes) << " bytes)\n";
    if (!g.tjs_dtype.empty()) os << "  dtype          " << g.tjs_dtype << " (transformers.js, from the file name)\n";
    for (const auto& [loc, f] : g.data) {
      os << "  external data  " << quote_name(loc);
      if (f.size) os << "  " << human(*f.size) << " (" << grouped(*f.size) << " bytes)";
      os << ", " << grouped(f.tensors) << (f.tensors == 1 ? " tensor" : " tensors");
      if (!f.problem.empty()) os << "  PROBLEM: " << f.problem;
      os << "\n";
    }
    if (g.data.empty()) os << "  external data  none (weights, if any, are inside the graph)\n";
    print_values(os, "inputs", g.inputs);
    print_values(os, "outputs", g.outputs);
  }
  if (l.runtime == kRuntimeGenai && runtime_config.is_object()) {
    os << "\n" << kGenaiConfig;
    if (runtime_config.contains("size")) os << "  " << human(runtime_config["size"].get<uint64_t>());
    os << "\n";
    if (auto s = str(runtime_config, "model_type"); !s.empty()) os << "  model type      " << s << "\n";
    if (runtime_config.contains("context_length"))
      os << "  context length  " << runtime_config["context_length"].get<int64_t>() << "\n";
    if (runtime_config.contains("max_length"))
      os << "  max length      " << runtime_config["max_length"].get<int64_t>() << "\n";
    if (auto s = str(runtime_config, "decoder_filename"); !s.empty()) os << "  decoder         " << s << "\n";
  } else if (l.runtime == kRuntimeTransformersJs && runtime_config.is_object()) {
    os << "\nconfig.json transformers.js_config\n";
    for (const auto& [k, v] : runtime_config.items())
      os << "  " << pad(printable(k, 40), 26) << "  "
         << printable(v.dump(-1, ' ', true, json::error_handler_t::replace), 400) << "\n";
  }
  os << "\nprovenance";
  if (!prov.present) {
    os << "  none (no mobius_provenance.json)\n";
  } else {
    os << " (mobius_provenance.json)\n";
    const json& f = prov.fields;
    if (auto p = str(f, "producer"); !p.empty()) os << "  built by       " << p << " " << str(f, "producer_version") << "\n";
    if (auto t = str(f, "model_type"); !t.empty()) os << "  model type     " << t << "\n";
    if (auto p = str(f, "plugin"); !p.empty()) os << "  plugin         " << p << " " << str(f, "plugin_version") << "\n";
    if (auto d = str(f, "weight_dtype"); !d.empty()) os << "  weight dtype   " << d << "\n";
    if (auto e = str(f, "execution_provider"); !e.empty())
      os << "  target         " << e << ", " << str(f, "ops") << " operators\n";
    if (f.contains("quantization") && f["quantization"].is_object()) {
      const json& q = f["quantization"];
      auto num = [&](const char* k) { return q.value(k, json("?")).dump(); };
      os << "  quantization   " << str(q, "operator") << " " << num("bits") << "-bit, block "
         << num("block_size") << ", " << (q.value("symmetric", false) ? "symmetric" : "asymmetric")
         << ", accuracy_level " << num("accuracy_level") << "\n";
    }
    if (auto c = str(f, "checkpoint"); !c.empty()) os << "  checkpoint     " << c << "\n";
    if (f.contains("source")) {
      const json& s = f["source"];
      os << "  source         " << str(s, "repo");
      if (auto r = str(s, "revision"); !r.empty()) os << " @ " << r;
      if (auto c = str(s, "commit"); !c.empty()) os << " (commit " << c << ")";
      os << "\n";
    }
    if (f.contains("onnx_ir_version") || f.contains("onnx_opset"))
      os << "  onnx           IR " << f.value("onnx_ir_version", json("?")).dump() << ", opset "
         << f.value("onnx_opset", json("?")).dump() << "\n";
    if (f.contains("files") && !f["files"].empty()) {
      os << "  checkpoint files\n";
      size_t shown = 0, w = 0;
      for (const auto& e : f["files"]) w = std::max(w, std::min<size_t>(printable(e["name"].get<std::string>()).size(), 40));
      for (const auto& e : f["files"]) {
        if (shown++ == kMaxFilesShown) {
          os << "    ... and " << f["files"].size() - kMaxFilesShown << " more\n";
          break;
        }
        os << "    " << pad(printable(e["name"].get<std::string>()), w);
        if (e.contains("size")) os << "  " << pad(human(e["size"].get<uint64_t>()), 10);
        if (e.contains("sha256")) {
          os << "  sha256 " << printable(e["sha256"].get<std::string>(), 64);
          if (e.value("sha256_source", "") == "hub-blob") os << " (hub blob name)";
        }
        os << "\n";
      }
    }
  }
  if (!problems.list.empty()) {
    os << "\nproblems\n";
    for (const auto& p : problems.list) os << "  - " << printable(p, 1000) << "\n";
    if (problems.more) os << "  - ... and " << problems.more << " more\n";
  }
}

}  // namespace

int run_info(const fs::path& out, const InfoOptions& opts, std::ostream& os) {
  const std::string folder = out.string();
  Fd dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.ok()) {
    const int err = errno;
    if (err == ENOENT) fail(folder, "no such folder");
    if (err == ENOTDIR) fail(folder, "is not a folder (expected the OUT folder of `mobius build`)");
    fail(folder, "cannot open: " + errno_message(err));
  }
  Problems problems;
  const Provenance prov = read_provenance(dir.get(), problems);
  const Layout l = layout(dir.get(), prov, problems);
  if (l.graphs.empty())
    fail(folder, "not a mobius output folder: it holds no model.onnx (the ort-genai and onnxruntime layouts) "
                 "and no onnx/*.onnx (the transformers.js layout)");

  std::vector<Graph> graphs;
  for (const std::string& file : l.graphs) {
    Graph g;
    g.file = file;
    const fs::path shown = out / file;
    const size_t slash = file.find('/');
    Fd sub;
    if (slash != std::string::npos) {
      sub = open_subdir(dir.get(), file.substr(0, slash));
      const int err = errno;
      if (!sub.ok())
        fail((out / file.substr(0, slash)).string(),
             err == ENOENT ? "missing (named in " + l.graphs_source + ")" : "is not a folder (links are not followed)");
    }
    const int gdir = sub.ok() ? sub.get() : dir.get();
    const std::string name = slash == std::string::npos ? file : file.substr(slash + 1);
    std::optional<std::string> bytes = read_file(gdir, name, kMaxGraphBytes, shown.string());
    if (!bytes) fail(shown.string(), "missing (named in " + l.graphs_source + ")");
    g.size = bytes->size();
    onnx::ModelProto m;
    if (!m.ParseFromArray(bytes->data(), static_cast<int>(bytes->size())))
      fail(shown.string(), "is not a valid ONNX model (the protobuf does not parse)");
    if (!m.has_graph() || m.ir_version() <= 0)
      fail(shown.string(), "is not an ONNX model (no graph or no IR version)");
    bytes.reset();
    GraphReader(g, problems).read(m);
    check_data_files(g, gdir, problems);
    if (l.runtime == kRuntimeTransformersJs) g.tjs_dtype = tjs_dtype_of(file);
    graphs.push_back(std::move(g));
  }

  json runtime_config = nullptr;
  if (l.runtime == kRuntimeGenai) runtime_config = genai_config(dir.get(), graphs, problems);
  if (l.runtime == kRuntimeTransformersJs) runtime_config = tjs_config(dir.get(), problems);

  if (opts.json) {
    json j = {{"folder", folder},
              {"runtime", l.runtime},
              {"runtime_source", l.runtime_source == kProvenance ? "provenance" : "files"},
              {"graphs", json::array()},
              {"provenance", prov.present ? prov.fields : json(nullptr)},
              {"problems", problems.list}};
    for (const Graph& g : graphs) j["graphs"].push_back(graph_json(g));
    if (l.runtime == kRuntimeGenai) j["genai_config"] = runtime_config;
    if (l.runtime == kRuntimeTransformersJs) j["transformers.js_config"] = runtime_config;
    if (problems.more) j["problems"].push_back("... and " + std::to_string(problems.more) + " more");
    // ASCII only: every string from a file is escaped, so the output is safe on a terminal too.
    os << j.dump(2, ' ', true, json::error_handler_t::replace) << "\n";
  } else {
    print_text(os, folder, l, graphs, runtime_config, prov, problems);
  }
  return 0;
}

std::unique_ptr<InfoCommand> add_info_command(CLI::App& app) {
  auto cmd = std::make_unique<InfoCommand>();
  cmd->app = app.add_subcommand(
      "info", "Show what a built model folder holds: runtime, graph inputs and outputs, weights, provenance");
  cmd->app->footer(
      "For wiring a built model into an app: the runtime the folder is laid out for (ort-genai,\n"
      "onnxruntime, transformers.js), each graph's inputs and outputs with dtype and shape (named\n"
      "dims by name, static by size, unknown as '?'), opset imports, node count, weight dtypes,\n"
      "initializers and bytes, graph and external data file sizes, the runtime config and the\n"
      "provenance (mobius_provenance.json). Problems found (a missing or short data file, an\n"
      "external data location that is a path) are listed. The folder is only read, never\n"
      "changed; external data files are looked at, not opened.\n"
      "Exit status 1 when OUT is not a mobius output or a graph cannot be read.");
  cmd->app->add_option("out", cmd->out, "Folder written by `mobius build`")->required()->type_name("OUT");
  cmd->app->add_flag("--json", cmd->opts.json, "Print the same facts as one JSON object");
  return cmd;
}

}  // namespace mobius::cli
