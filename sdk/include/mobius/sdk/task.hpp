// mobius/sdk/task.hpp - a task is a row of one table: what a model of it is, the runtimes that
// can run its folder (and, for each other runtime, why not), the runtime a build lays the
// folder out for when the user names none, the graph inputs and outputs it promises, and the
// runtime files it writes beside the graph. The SDK's build driver (plugin.cpp) reads the row
// around the plugin's own build: the runtime is checked before the plugin builds anything, the
// graph's inputs and outputs after, then the runtime files are written. A plugin registers
// (model type, task) and builds its graph; it never checks runtimes or writes runtime files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/context.hpp"

namespace mobius {

struct TaskRow {
  std::string name;  // "text-generation", "text-encoding", "image-unet", "image-vae", ...
  std::string what;  // what a model of the task is, for messages: "a text encoder"
  // The runtimes whose folder layout runs it, the first the default when the user names none.
  std::vector<std::string> runtimes;
  // For a runtime not in `runtimes`: why it cannot run the task (a clause: "it runs
  // text-generation decoders only").
  std::vector<std::pair<std::string, std::string>> why_not;
  // Graph inputs and outputs every model of the task has (a graph missing one is the plugin's
  // error).
  std::vector<std::string> inputs, outputs;
  // How transformers names a model class of the task, as the end of config.json's
  // architectures[0] ("ForSequenceClassification"; "Model" for a base model), for a model type
  // that builds several tasks (detail::choose_task).
  std::vector<std::string> class_suffixes;
  // A task whose model runs as several graphs of one folder (an encoder-decoder's
  // "encoder_model" and "decoder_model_merged"): their names, each built by its own call of the
  // family's build (BuildContext::graph_name()); `inputs` and `outputs` are the last one's.
  // Empty: one graph.
  std::vector<std::string> graphs;
  // Writes the task's runtime files for the build's runtime (nullptr: none).
  void (*runtime_files)(BuildContext& ctx, const std::string& model_type, const nlohmann::json& cfg) = nullptr;
};

// The task table; find_task returns nullptr for a task it does not list (a third-party plugin's
// own task: no runtime files, every runtime left to the plugin).
const std::vector<TaskRow>& task_table();
const TaskRow* find_task(const std::string& name);

namespace detail {
// Refuses the build's runtime when the task cannot run there (mobius::Error, config kind, naming
// the model type, the task, the runtime and why, and the runtime that can). A runtime the user
// did not choose is never refused: the host then lays the folder out for the task's default.
void check_task_runtime(const BuildContext& ctx, const TaskRow& task, const std::string& model_type);
// The graph has every input and output the task promises (mobius::Error, plugin kind).
void check_task_graph(BuildContext& ctx, const TaskRow& task, const std::string& model_type);
// The task a build of a model type that builds `tasks` builds: `chosen` (the user's --task;
// "" for none), else the one whose class suffix ends config.json's architectures[0] (the
// longest that does), else the first. A checkpoint whose architectures[0] names a head the type
// does not build is refused (mobius::Error, config kind, naming the class and what --task builds).
std::string choose_task(const std::string& model_type, const std::vector<std::string>& tasks,
                        const std::string& chosen, const nlohmann::json& config_json);
}  // namespace detail

}  // namespace mobius
