// info_model.hpp - what `mobius info` gathers from a model folder, and the steps that gather and
// print it: the folder's files, provenance, layout and runtime config (info_folder.cpp), each
// graph (info_graph.cpp), the text and JSON output (info_print.cpp). info.cpp ties them.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.hpp"  // OwnedFd
#include "onnx/onnx_pb.h"

namespace mobius::info {

// Output keeps its keys in the order written (the facts a reader looks for first, first).
using json = nlohmann::ordered_json;

// The largest graph file parsed: protobuf parses at most INT_MAX bytes. A graph with external
// data holds no weights, so even the largest models' graphs are far below this.
inline constexpr uint64_t kMaxGraphBytes = static_cast<uint64_t>(INT_MAX);
inline constexpr size_t kMaxGraphFiles = 256;     // onnx/*.onnx of a transformers.js folder
inline constexpr size_t kMaxDataFiles = 1024;     // distinct external data locations looked at
inline constexpr size_t kMaxProblems = 50;        // problems listed (the rest are counted)
inline constexpr size_t kMaxFilesShown = 20;      // provenance "files" printed as text
inline constexpr int kMaxDepth = 64;              // subgraph and type nesting followed

inline constexpr const char* kProvenance = "mobius_provenance.json";
inline constexpr const char* kGenaiConfig = "genai_config.json";
inline constexpr const char* kConfig = "config.json";

[[noreturn]] void fail(const std::string& what, const std::string& reason);
std::string errno_message(int err);

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

struct Provenance {
  bool present = false;
  json fields = json::object();     // the well-typed fields
  std::vector<std::string> graphs;  // valid relative graph paths
};

struct Layout {
  std::string runtime;         // one of mobius::runtimes(), or "" when the files say nothing
  std::string runtime_source;  // "mobius_provenance.json" or "files"
  std::vector<std::string> graphs;
  std::string graphs_source;
};

// --- the folder's files (info_folder.cpp): opened relative to the folder, the last component
// never followed when a link.
using Fd = mobius::OwnedFd;

struct FileStat {
  bool exists = false;
  bool regular = false;
  bool symlink = false;
  bool directory = false;
  uint64_t size = 0;
};
FileStat stat_at(int dirfd, const std::string& name);
// A sub-folder (one plain name) of dirfd, not followed when a link; an invalid Fd when absent.
Fd open_subdir(int dirfd, const std::string& name);
// The whole of a regular file, at most `max` bytes; nullopt when it does not exist. `shown` is
// the path named in errors.
std::optional<std::string> read_file(int dirfd, const std::string& name, uint64_t max,
                                     const std::string& shown);
// Why an external-data location is not a plain file name beside the graph; "" when it is.
std::string location_problem(const std::string& loc);

Provenance read_provenance(int dirfd, Problems& problems);
// The runtime and graphs: as the provenance records them when it does (checked against the
// files), else as the files alone show.
Layout layout(int dirfd, const Provenance& prov, Problems& problems);
// The layout's runtime config (genai_config.json, config.json's transformers.js_config),
// checked; null when missing.
json genai_config(int dirfd, const std::vector<Graph>& graphs, Problems& problems);
json tjs_config(int dirfd, Problems& problems);

// --- each graph (info_graph.cpp)
// ONNX TensorProto.DataType, by number (the list grows past what Debian's onnx 1.12 names).
std::string dtype_name(int32_t t);
// Fills `g` from the parsed model: I/O, opsets, node and initializer counts, weight dtypes and
// bytes, external data locations.
void read_graph(const onnx::ModelProto& m, Graph& g, Problems& problems);
// Checks each external data location: a plain file name beside the graph, that file present and
// large enough. Only its metadata is looked at (lstat); no link is followed.
void check_data_files(Graph& g, int graph_dirfd, Problems& problems);
// The transformers.js dtype a graph file name's suffix stands for ("model_fp16.onnx" -> fp16).
std::string tjs_dtype_of(const std::string& file);

// --- output (info_print.cpp)
std::string human(uint64_t bytes);
json graph_json(const Graph& g);
void print_text(std::ostream& os, const std::string& folder, const Layout& l,
                const std::vector<Graph>& graphs, const json& runtime_config,
                const Provenance& prov, const Problems& problems);

}  // namespace mobius::info
