// info_print.cpp - `mobius info`: the facts gathered, as text for a person and as one JSON object
// (info_model.hpp). Every value quoted from a file goes through printable() (text) or is
// escaped by the JSON writer.
#include <algorithm>
#include <cstdio>
#include <ostream>

#include "info/info_model.hpp"
#include "save/layout.hpp"  // the runtime names
#include "util/untrusted.hpp"  // printable

namespace mobius::info {

namespace {

std::string grouped(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}


}  // namespace

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

namespace {

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
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

}  // namespace

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


namespace {

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

}  // namespace

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

}  // namespace mobius::info
