// mobius/sdk/module_build.hpp - build_from_module: turn an nn::CausalLM a C++ program assembled
// itself (from SDK components) into a ModelPackage, in-process, without a plugin.
//
// For programs that link both libmobius and the SDK: the module is built by SDK code through the
// host's C entry points, exactly as a plugin's build is (build_with with a C callback), so no
// C++ type of the SDK reaches the host. Plugins never include this header.
#pragma once

#include <filesystem>
#include <string>

#include "mobius/build.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace mobius {
namespace detail {

struct ModuleBuild {
  const nn::CausalLM* module;
  const ArchitectureConfig* config;
};

// The build callback in C terms: the text-generation task of the module, its runtime files, and
// every failure reported to the host as a status and an error kind.
inline mobius_status build_module_callback(void* user, const mobius_host_api* host,
                                           mobius_context* ctx) {
  const auto* m = static_cast<const ModuleBuild*>(user);
  return run_guarded(host, ctx, MOBIUS_ERROR_KIND_PLUGIN, [&] {
    BuildContext bc(host, ctx);
    nn::build_text_generation(bc, *m->module);
    add_text_generation_files(bc, m->config->model_type, nlohmann::json(*m->config));
  });
}

}  // namespace detail

// `task` names the graph I/O contract ("text-generation"; another task throws
// mobius::sdk::Error). Weights bind by parameter path to the tensors of the checkpoint in
// `checkpoint_dir` (pass BuildOptions::no_weights to build the graph alone). A failure of the
// build throws the host's mobius::Error with its kind.
inline ModelPackage build_from_module(const nn::CausalLM& module, const ArchitectureConfig& config,
                                      const std::string& task = "text-generation",
                                      const BuildOptions& opts = {},
                                      const std::filesystem::path& checkpoint_dir = {}) {
  if (task != "text-generation")
    throw sdk::Error("[build] task '" + task + "' is not supported (known: text-generation)");
  detail::ModuleBuild request{&module, &config};
  nlohmann::json cfg = config;
  return build_with(config.model_type, &detail::build_module_callback, &request, opts,
                    checkpoint_dir, cfg.dump());
}

}  // namespace mobius
