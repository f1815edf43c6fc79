// mobius/module_build.hpp - build_from_module: turn an nn::CausalLM a C++ program assembled
// itself (from SDK components) into a ModelPackage, in-process, without a plugin.
#pragma once

#include <filesystem>
#include <string>

#include "mobius/build.hpp"
#include "mobius/sdk/nn.hpp"

namespace mobius {

// `task` names the graph I/O contract ("text-generation"). Weights bind by parameter path to
// the tensors of the checkpoint in `checkpoint_dir` (pass BuildOptions::no_weights to build the
// graph alone).
inline ModelPackage build_from_module(const nn::CausalLM& module, const ArchitectureConfig& config,
                                      const std::string& task = "text-generation",
                                      const BuildOptions& opts = {},
                                      const std::filesystem::path& checkpoint_dir = {}) {
  if (task != "text-generation")
    throw Error("[build] task '" + task + "' is not supported (known: text-generation)");
  nlohmann::json cfg = config;
  return build_with(
      config.model_type,
      [&](mobius_context* ctx) {
        BuildContext bc(host_api(), ctx);
        nn::build_text_generation(bc, module);
      },
      opts, checkpoint_dir, cfg.dump());
}

}  // namespace mobius
