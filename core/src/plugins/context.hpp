// context.hpp - the host-side state behind the opaque handles of the C ABI.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "mobius/error.hpp"
#include "mobius/plugin.h"
#include "mobius/registry.hpp"
#include "onnx/onnx_pb.h"
#include "weights/weight_plan.hpp"

struct mobius_graph {
  mobius_context* ctx = nullptr;
  onnx::GraphProto* proto = nullptr;       // points into the model (main) or `owned`
  std::unique_ptr<onnx::GraphProto> owned;  // subgraphs until a node takes them
  bool is_main = false;
  bool consumed = false;
  std::set<std::string> defined;  // value names defined in this graph
};

// How large a build may grow before the host refuses it. Checked as nodes and initializers are
// added (host_api.cpp), so a config that describes an absurd model is stopped after a few
// cheap steps, whatever the plugin or the config checks let through. The limits are members so
// an in-process build (and a test) may set its own.
struct mobius_build_budget {
  // Nodes of every graph, Constant nodes and subgraph bodies included. A decoder layer is 60 to
  // 150 nodes (llama, gemma, deepseek, qwen35), so real models stay below 20 000 and even 1024
  // layers (the SDK's bound on num_hidden_layers) below 200 000: 10 times that is refused.
  uint64_t max_nodes = 2'000'000;
  uint64_t max_value_infos = 2'000'000;
  // Initializers: a real model has a few dozen per layer (an expert bank is one).
  uint64_t max_initializers = 1u << 20;
  // Checkpoint tensor names in the weight plan (per-expert tensors of banks included): the
  // largest mixtures of experts name about 70 000.
  uint64_t max_planned_tensors = 1u << 22;
  // Bytes of all initializers, with a checkpoint: every initializer's bytes come from it, and a
  // float32 build of an 8-bit checkpoint is 4 times its size; 1 GiB on top for small ones.
  uint64_t checkpoint_factor = 4;
  uint64_t checkpoint_slack = 1ull << 30;
  // Without a checkpoint (--no-weights): twice a float32 build of the largest released
  // checkpoints (about 1 trillion parameters, 3.7 TiB in float32).
  uint64_t max_bytes_without_checkpoint = 8ull << 40;

  uint64_t nodes = 0, value_infos = 0, initializers = 0, initializer_bytes = 0;
  uint64_t planned_tensors = 0;
  std::optional<uint64_t> max_bytes;  // computed at the first initializer
};

struct mobius_context {
  mobius_build_options options{};
  std::string execution_provider = "cpu";  // backing storage of options.execution_provider: cpu | cuda
  std::string last_error;
  std::string plugin_error;  // what the plugin reported with set_error / set_error_kind
  mobius_error_kind plugin_error_kind = 0;
  // The config.json text the build started from (source_config); absent for in-process builds
  // without a checkpoint folder.
  std::optional<std::string> source_config;
  // The checkpoint folder (source_file reads from it); empty for builds without one.
  std::filesystem::path source_dir;
  // source_file's answers, read once each (nullopt: absent or refused).
  std::map<std::string, std::optional<std::string>> source_files;
  // Backing storage of options.runtime, options.model_file, options.graph, options.task and
  // options.positions.
  std::string runtime, model_file, graph, task, positions;
  // Backing storage of options.ops: "ort" (ONNX Runtime's contrib operators) or "standard".
  std::string ops = "ort";
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
  mobius_build_budget budget;
  // source_config within the config limits (checked when a plugin first asks for it).
  std::optional<bool> source_config_ok;

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
