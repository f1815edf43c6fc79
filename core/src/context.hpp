// context.hpp - the host-side state behind the opaque handles of the C ABI.
#pragma once

#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint.hpp"
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
  std::string execution_provider = "cpu";
  std::string last_error;
  std::string plugin_error;  // what the plugin reported with set_error
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
// message when it fails.
void run_plugin_register(mobius_plugin_register_fn fn, mobius_registrar& reg);
}  // namespace mobius
