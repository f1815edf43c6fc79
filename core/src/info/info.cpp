// info.cpp - a built model folder described for the app that will use it (`mobius info`).
//
// Everything read from the folder is untrusted: the graph is parsed from at most kMaxGraphBytes,
// the JSON files within kConfigLimits, every field is type-checked, and every value quoted from a
// file is printed through printable() (text) or as escaped ASCII JSON.
#include "mobius/info.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "info/info_model.hpp"
#include "save/layout.hpp"

namespace mobius {

namespace fs = std::filesystem;
using namespace info;

void describe_folder(const fs::path& out, std::ostream& os, bool text) {
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
    read_graph(m, g, problems);
    check_data_files(g, gdir, problems);
    if (l.runtime == kRuntimeTransformersJs) g.tjs_dtype = tjs_dtype_of(file);
    graphs.push_back(std::move(g));
  }

  json runtime_config = nullptr;
  if (l.runtime == kRuntimeGenai) runtime_config = genai_config(dir.get(), graphs, problems);
  if (l.runtime == kRuntimeTransformersJs) runtime_config = tjs_config(dir.get(), problems);

  if (!text) {
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
}

std::string describe_folder_json(const fs::path& out) {
  std::ostringstream os;
  describe_folder(out, os);
  return os.str();
}

}  // namespace mobius
