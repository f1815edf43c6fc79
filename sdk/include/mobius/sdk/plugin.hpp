// mobius/sdk/plugin.hpp - registering architectures from C++ and the MOBIUS_PLUGIN entry macro.
//
// The hourglass: plugin code is C++, the boundary is the C ABI of mobius/plugin.h. Every
// callback the host makes into a plugin goes through run_guarded(), which turns a C++
// exception into a status plus a message, so no exception ever crosses the boundary.
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
  // Registers one model type. Throws mobius::Error when the host refuses it.
  void add(const std::string& model_type, const std::string& task, ConfigParser parse,
           GraphBuilder build);
  // Registers several model types of one family: `parse` also receives the model type.
  using TypedParser = std::function<nlohmann::json(const std::string& model_type, const nlohmann::json& config_json)>;
  void add_each(const std::vector<std::string>& model_types, const std::string& task,
                const TypedParser& parse, const GraphBuilder& build);
  const mobius_host_api* host() const { return host_; }

 private:
  const mobius_host_api* host_;
  mobius_registrar* reg_;
};

using RegisterFn = void (*)(PluginRegistrar&);

namespace detail {
mobius_status run_register(const mobius_host_api* host, mobius_registrar* reg, RegisterFn fn);
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
