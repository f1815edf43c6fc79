// context.hpp - the host-side state behind the opaque handles of the C ABI.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "mobius/error.hpp"
#include "mobius/plugin.h"
#include "mobius/registry.hpp"
#include "onnx/onnx_pb.h"
#include "weight_plan.hpp"

struct mobius_graph {
  mobius_context* ctx = nullptr;
  onnx::GraphProto* proto = nullptr;       // points into the model (main) or `owned`
  std::unique_ptr<onnx::GraphProto> owned;  // subgraphs until a node takes them
  bool is_main = false;
  bool consumed = false;
  std::set<std::string> defined;  // value names defined in this graph
};

struct mobius_context {
  mobius_build_options options{};
  std::string execution_provider = "cpu";  // the ABI field's value; nothing else is offered
  std::string last_error;
  std::string plugin_error;  // what the plugin reported with set_error / set_error_kind
  mobius_error_kind plugin_error_kind = 0;
  // The config.json text the build started from (source_config); absent for in-process builds
  // without a checkpoint folder.
  std::optional<std::string> source_config;
  // Files the plugin handed over for the runtime (add_runtime_file), in the order added; written
  // unchanged beside the model.
  std::vector<std::pair<std::string, std::string>> runtime_files;
  onnx::ModelProto model;
  std::deque<mobius_graph> graphs;  // graphs[0] is the main graph
  mobius::StreamingWeightPlan plan;
  const mobius::CheckpointReader* checkpoint = nullptr;
  std::set<std::string> domains;  // non-default domains used by nodes
  int node_counter = 0;
  bool quiet = false;

  mobius_context();
  mobius_graph* main() { return &graphs.front(); }
};

struct mobius_registrar {
  std::string plugin_name, plugin_path, version, vendor;
  int priority = 0;
  std::vector<mobius::Registration> registrations;
  std::string error;
};

namespace mobius {
// Runs a plugin's register entry point against `reg`; throws mobius::Error with the plugin's
// message when it fails (an exception thrown across the C boundary included).
void run_plugin_register(mobius_plugin_register_fn fn, mobius_registrar& reg);

// A struct the other side of the ABI wrote, as this host knows it: refused when its struct_size
// cannot hold the fields of version 1 (`v1_size`); the bytes inside the declared size are
// copied, and fields past it (appended after the writer's version) keep their zero default.
// The copy keeps the writer's struct_size, so MOBIUS_HAS_FIELD on it tells what was sent.
template <class T>
T read_abi_struct(const T* p, size_t v1_size, const std::string& what) {
  if (!p) throw Error("[abi] " + what + " is NULL");
  if (p->struct_size < v1_size)
    throw Error("[abi] " + what + ": struct_size " + std::to_string(p->struct_size) +
                " is smaller than version 1's " + std::to_string(v1_size) + " bytes");
  T out{};
  std::memcpy(static_cast<void*>(&out), p, std::min<size_t>(p->struct_size, sizeof(T)));
  return out;
}
}  // namespace mobius
