// mobius/sdk/plugin.hpp - registering architectures from C++ and the MOBIUS_PLUGIN entry macro.
//
// The hourglass: plugin code is C++, the boundary is the C ABI of mobius/plugin.h. Every
// callback the host makes into a plugin goes through detail::run_guarded(), which turns a C++
// exception into a status, an error kind and a message, so no exception ever crosses the
// boundary.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/plugin.h"
#include "mobius/sdk/context.hpp"

namespace mobius {

// Validates config.json and returns the architecture's normalized config (defaults filled in).
using ConfigParser = std::function<nlohmann::json(const nlohmann::json& config_json)>;
// Builds the graph and plans the weights from the normalized config.
using GraphBuilder = std::function<void(BuildContext& ctx, const nlohmann::json& config)>;

class PluginRegistrar {
 public:
  PluginRegistrar(const mobius_host_api* host, mobius_registrar* reg) : host_(host), reg_(reg) {}
  // Registers one model type. Throws mobius::Error when the host refuses it. `graphs`: the
  // graphs one checkpoint of the type becomes when more than one (e.g. {"encoder", "decoder"}),
  // each built by its own call of `build`, which reads BuildContext::graph_name().
  void add(const std::string& model_type, const std::string& task, ConfigParser parse,
           GraphBuilder build, std::vector<std::string> graphs = {});
  // Registers several model types of one family: `parse` also receives the model type.
  using TypedParser = std::function<nlohmann::json(const std::string& model_type, const nlohmann::json& config_json)>;
  void add_each(const std::vector<std::string>& model_types, const std::string& task,
                const TypedParser& parse, const GraphBuilder& build);
  // Registers a model type that builds several tasks (e.g. an encoder's "feature-extraction",
  // "sequence-classification", "token-classification", "fill-mask"; the first is the default).
  // The build driver chooses the task (detail::choose_task: the user's --task, else the head
  // config.json's architectures name, else the first), hands it to `parse`, and records it in
  // the normalized config as "task" (a key `parse` must not set), where `build` reads it.
  using TaskConfigParser = std::function<nlohmann::json(const nlohmann::json& config_json, const std::string& task)>;
  void add_tasks(const std::string& model_type, std::vector<std::string> tasks, TaskConfigParser parse,
                 GraphBuilder build);
  const mobius_host_api* host() const { return host_; }

 private:
  const mobius_host_api* host_;
  mobius_registrar* reg_;
};

using RegisterFn = void (*)(PluginRegistrar&);

namespace detail {
mobius_status run_register(const mobius_host_api* host, mobius_registrar* reg, RegisterFn fn);

// Reports the exception being handled to the host (set_error_kind; set_error on a host without
// it): a mobius::Error with its kind, or `unspecified` when it did not say (config while parsing
// config.json, plugin while building); a std::bad_alloc or an unknown exception as internal;
// any other exception as a plugin error. Call only inside a catch block; never throws.
void report_current_exception(const mobius_host_api* host, mobius_context* ctx,
                              mobius_error_kind unspecified) noexcept;

// Runs `fn` for a callback of the C ABI: MOBIUS_OK, or MOBIUS_ERROR with the failure reported.
template <class F>
mobius_status run_guarded(const mobius_host_api* host, mobius_context* ctx,
                          mobius_error_kind unspecified, F&& fn) noexcept {
  try {
    fn();
    return MOBIUS_OK;
  } catch (...) {
    report_current_exception(host, ctx, unspecified);
  }
  return MOBIUS_ERROR;
}

// The text-generation task's runtime files for the build's runtime, handed to the host with
// add_runtime_file (nothing on a host too old to take them):
// - ort-genai: genai_config.json (genai_config.hpp), and tokenizer_config.json when GenAI needs
//   it adapted (the chat template of chat_template.jinja merged in, a usable model_max_length).
//   A model GenAI cannot run is refused with the reason (mobius::Error, config kind).
// - transformers.js: tokenizer_config.json when its model_max_length is unusable.
// - onnxruntime: nothing.
void add_text_generation_files(BuildContext& ctx, const std::string& model_type,
                               const nlohmann::json& normalized_config);
// The checkpoint's config.json as transformers.js must read it to load a folder of `model_type`
// (runtime_files.cpp says when and why it differs); nullopt when it can be copied as it is.
std::optional<std::string> transformers_js_config(BuildContext& ctx, const std::string& model_type);
}  // namespace detail

}  // namespace mobius

// Defines the plugin's two exported entry points. REGISTER_FN: void(mobius::PluginRegistrar&).
#define MOBIUS_PLUGIN(NAME, VERSION, VENDOR, REGISTER_FN)                                     \
  extern "C" MOBIUS_PLUGIN_EXPORT const mobius_plugin_info* mobius_plugin_get_info(void) {    \
    static const mobius_plugin_info info = {sizeof(mobius_plugin_info), MOBIUS_ABI_VERSION,   \
                                            NAME, VERSION, VENDOR};                           \
    return &info;                                                                              \
  }                                                                                            \
  extern "C" MOBIUS_PLUGIN_EXPORT mobius_status mobius_plugin_register(                       \
      const mobius_host_api* host, mobius_registrar* reg) {                                    \
    return ::mobius::detail::run_register(host, reg, &(REGISTER_FN));                          \
  }
