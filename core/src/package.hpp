// package.hpp - the state behind ModelPackage, shared by build.cpp and save.cpp.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint.hpp"
#include "context.hpp"
#include "layout.hpp"
#include "mobius/build.hpp"

namespace mobius {

struct ModelPackage::Impl {
  std::filesystem::path source_dir;
  std::string model_type;
  std::string normalized_config;
  std::string plugin, plugin_version;  // who built the graph ("" for in-process builds)
  std::string plugin_path;             // its library
  std::string weight_dtype = "f32";
  OutputLayout layout;
  std::string source_repo, source_revision, source_commit;  // a hub model's id and commit
  std::unique_ptr<CheckpointReader> checkpoint;
  std::unique_ptr<mobius_context> ctx;
};

std::unique_ptr<ModelPackage::Impl> build_impl(const Registration& reg,
                                               const std::filesystem::path& dir,
                                               const std::string& config_text,
                                               const BuildOptions& opts);
void save_package(const ModelPackage::Impl& pkg, const std::filesystem::path& out,
                  const SaveOptions& opts);

}  // namespace mobius
