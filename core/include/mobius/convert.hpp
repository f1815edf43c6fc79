// mobius/convert.hpp - what `mobius build` does, as one call: a hub id or a folder resolved, the
// plugins that register its model type loaded, the build of one graph, of a model type's several
// graphs or of a diffusers pipeline, ready to save. The CLI and the Python package both use it,
// so a build gives the same folder, and the same errors, from either.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mobius/build.hpp"
#include "mobius/hub.hpp"
#include "mobius/pipeline.hpp"
#include "mobius/plugins.hpp"
#include "mobius/registry.hpp"

namespace mobius {

// Plugins loaded into a registry of their own; their libraries stay loaded while it lives (a
// registration's code, and a package built with it, is the plugin's).
struct PluginSet {
  PluginHost host;
  ModelRegistry registry;
  std::vector<PluginRecord> records;      // every plugin found, loaded or not
  std::vector<PluginSearchDir> searched;  // where they were looked for
  // One line per plugin found that did not load: "plugin <library> not loaded: <reason>".
  std::vector<std::string> failures() const;
};

// Loads every plugin of `dirs`, or (with `model_types`) only those whose manifest claims one of
// them (the others' manifests are read, their code is not run). Never throws for a bad plugin.
std::shared_ptr<PluginSet> load_plugins(const std::vector<PluginSearchDir>& dirs,
                                        const std::vector<std::string>& model_types = {});

struct ConvertOptions {
  BuildOptions build;
  std::string revision;                 // hub branch, tag or commit (or the id's @REV)
  std::vector<std::string> components;  // a diffusers pipeline's parts to build (empty: all)
  // The folder the build will be saved to, when known: refused before any build when it is the
  // checkpoint folder or holds it (check_output_folder).
  std::filesystem::path out;
  // Where plugins are looked for when convert() is given no PluginSet: the model's own plugins
  // are loaded from there (all of them when none claims its model type).
  std::vector<std::string> plugin_paths;
  std::optional<std::vector<std::filesystem::path>> default_plugin_dirs;
  bool download_progress = false;  // a bar on stderr while hub files download
  // Progress (stage "download" or "weights", done, total) and cancellation; see HubOptions and
  // SaveOptions.
  std::function<void(const char*, uint64_t, uint64_t)> on_progress;
  std::function<bool()> cancelled;
  // Warnings, each one line: a plugin that did not load, a pipeline component skipped.
  std::function<void(const std::string&)> warn;
};

// A build ready to save: one graph (saved as OUT), the graphs of one folder, or several folders.
class ConvertedModel {
 public:
  struct Part {
    std::string folder;     // OUT/<folder>; "" when the graph lies in OUT itself
    std::string component;  // the pipeline component ("vae"); "" for one checkpoint
    std::string graph;      // the model type's graph name ("encoder"); "" for a one-graph type
    const ModelPackage* package;
  };

  const ModelSource& source() const { return source_; }
  std::vector<Part> parts() const;
  // A pipeline's components not built, each with the reason; what is copied unchanged.
  const std::vector<MultiGraphPackage::Skipped>& skipped() const;
  const std::vector<std::string>& copied() const;
  // The runtime the folders are laid out for.
  std::string runtime() const;
  // The plugins that built it (kept loaded while the model lives).
  const PluginSet& plugins() const { return *plugins_; }

  // Writes OUT transactionally, as ModelPackage::save and MultiGraphPackage::save do. OUT that is
  // the checkpoint folder or holds it is refused first; on failure OUT is as it was.
  void save(const std::filesystem::path& out, const SaveOptions& opts = {}) const;

 private:
  friend ConvertedModel convert(const std::string&, const ConvertOptions&, std::shared_ptr<const PluginSet>);
  ConvertedModel(ModelSource source, std::shared_ptr<const PluginSet> plugins)
      : source_(std::move(source)), plugins_(std::move(plugins)) {}
  ModelSource source_;
  std::shared_ptr<const PluginSet> plugins_;
  std::optional<ModelPackage> one_;
  std::optional<MultiGraphPackage> many_;
};

// Builds `model` (a local folder when that path exists, else a hub id "org/name[@REV]" fetched
// into huggingface_hub's cache) as `mobius build` does. With `plugins`, its registry resolves the
// model type; without, the plugins are loaded from opts' search path. Throws mobius::Error with
// the message the CLI prints; nothing is written but the hub cache.
ConvertedModel convert(const std::string& model, const ConvertOptions& opts,
                       std::shared_ptr<const PluginSet> plugins = nullptr);

}  // namespace mobius
