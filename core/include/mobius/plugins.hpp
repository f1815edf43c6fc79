// mobius/plugins.hpp - plugin discovery and loading: manifests, ABI checks, failure isolation.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mobius/registry.hpp"

namespace mobius {

struct PluginSearchDir {
  std::filesystem::path path;
  int priority;        // PluginPriority
  std::string origin;  // "--plugin-path", "MOBIUS_PLUGIN_PATH", "default"
};

// What discovery found for one plugin, loaded or not. Every string is printable text: manifest
// values are refused unless they are, and paths and reasons have control bytes escaped (\xNN).
struct PluginRecord {
  std::filesystem::path manifest;  // plugin.yaml (empty for a library without one)
  std::filesystem::path library;
  std::string name, version, vendor, description;
  uint32_t abi_version = 0;              // as the manifest states it
  std::vector<std::string> model_types;  // as the manifest lists them
  std::vector<std::string> registered;   // what the plugin registered (aliases included)
  // The manifest's `aliases`: model type -> the registered model type it is built as. A manifest
  // without a library declares only aliases (a pack that registers existing architectures under
  // other names, with no code of its own).
  std::map<std::string, std::string> aliases;
  // The manifest's `fallback`: one of its model types, which builds a model type nobody
  // registers when the config and the checkpoint's tensors are that type's (Registration::fallback).
  std::string fallback;
  std::string origin;
  int priority = 0;
  bool loaded = false;
  // The manifest was read and is valid, but none of its model types was asked for, so none of
  // the plugin's code ran (see PluginHost::load's only_model_types).
  bool deferred = false;
  std::string error;  // one line: why it did not load
};

// The search path: every --plugin-path, then MOBIUS_PLUGIN_PATH (colon-separated), then the
// default folder (the build tree's plugins when run from it, else <libdir>/mobius/plugins), or
// `default_dirs` instead when given (the Python package's own plugins folder).
std::vector<PluginSearchDir> plugin_search_path(
    const std::vector<std::string>& cli_paths,
    const std::optional<std::vector<std::filesystem::path>>& default_dirs = std::nullopt);
// The installed (or build-tree) default plugins folders for this executable.
std::vector<std::filesystem::path> default_plugin_dirs();

// Loads plugins and keeps their libraries loaded for its lifetime; must outlive every use of
// the registrations it made.
class PluginHost {
 public:
  PluginHost();
  ~PluginHost();
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  // Discovers and loads every plugin under `dirs` into `registry`. Never throws for a bad
  // plugin: its record carries the reason and every other plugin still loads. Each folder is
  // resolved once; inside it no symbolic link is followed, and what holds a plugin must be
  // owned by root or the current user and writable by no other user (see plugins.cpp). With
  // `only_model_types`, every manifest is still read and checked, but only the plugins whose
  // manifest lists one of those model types are probed and loaded; the others are `deferred`.
  std::vector<PluginRecord> load(const std::vector<PluginSearchDir>& dirs,
                                 ModelRegistry& registry,
                                 const std::vector<std::string>& only_model_types = {});
  // Loads one plugin from its manifest (or a bare library) into `registry`, under the same rules
  // with the manifest's folder as the plugin folder.
  PluginRecord load_one(const std::filesystem::path& manifest_or_library, int priority,
                        const std::string& origin, ModelRegistry& registry);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mobius
