// package.hpp - the state behind ModelPackage, shared by build.cpp and save.cpp.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "plugins/context.hpp"
#include "save/layout.hpp"
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

// `fallback`: the config names a type nobody registers and `reg` is asked to build it
// (mobius_build_options::fallback).
std::unique_ptr<ModelPackage::Impl> build_impl(const Registration& reg,
                                               const std::filesystem::path& dir,
                                               const std::string& config_text,
                                               const BuildOptions& opts, bool fallback = false);
// A model folder's config.json: the resolved folder, the file's path as the user spelled it, its
// text and the model type it declares (model_type, a composite's text_config model_type, or a
// diffusers component's _class_name).
struct FolderConfig {
  std::filesystem::path dir, config_file;
  std::string text, model_type;
};
FolderConfig read_folder_config(const std::filesystem::path& dir, const ModelRegistry* registry);
// Builds the folder with `reg`; errors say whose fault they are, as build() does.
ModelPackage build_folder(const FolderConfig& c, const Registration& reg, const BuildOptions& opts);

void save_package(const ModelPackage::Impl& pkg, const std::filesystem::path& out,
                  const SaveOptions& opts);
// The builds of one checkpoint's graphs saved into one folder (Registration::graphs_in_one_folder):
// each graph file and its data as save_package writes one, the runtime files of all of them (a
// later build's replacing an earlier one's of the same name), one provenance listing the graphs.
void save_packages(const std::vector<const ModelPackage::Impl*>& parts, const std::filesystem::path& out,
                   const SaveOptions& opts);

// Fills a new folder and puts it in place of OUT as save_package does: OUT must not be or hold
// any of `sources` (check_output_folder), may only replace an earlier model; `fill` writes into
// the temporary folder beside OUT (fsynced files), which is then fsynced and renamed (or
// exchanged) into place. On failure OUT is as it was.
void save_folder(const std::filesystem::path& out, const std::vector<std::filesystem::path>& sources,
                 const std::function<void(const std::filesystem::path& tmp)>& fill);
// The package's graph as it is saved (graph name, IR version, producer, opset imports, output
// identities folded), without its weights' external data.
onnx::ModelProto finalized_model(const ModelPackage::Impl& pkg);
// Writes a whole small file and fsyncs it.
void write_synced_file(const std::filesystem::path& p, const std::string& bytes);

}  // namespace mobius
