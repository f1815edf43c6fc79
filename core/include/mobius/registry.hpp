// mobius/registry.hpp - the model-type registry: model_type -> the plugin code that builds it.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "mobius/plugin.h"

namespace mobius {

// One registered architecture. The callbacks throw mobius::Error with the plugin's message and
// the kind it reported (a plugin error when it reported none).
struct Registration {
  std::string model_type;
  std::string task;                // the first of `tasks`: what `mobius list` shows first
  std::vector<std::string> tasks;  // every task it builds (BuildOptions::task chooses one)
  std::string plugin;       // plugin name; "" for architectures registered in-process
  std::string plugin_path;  // its library, when it came from a plugin
  std::string version;      // plugin version
  std::string vendor;       // plugin vendor
  int priority = 0;         // higher wins (see PluginPriority)
  // The graphs one checkpoint of this type becomes when more than one (mobius_architecture's
  // `graphs`), each built with BuildOptions::graph set to it; empty: one graph.
  std::vector<std::string> graphs;
  // The graphs are files of one model folder, each named after its graph (an encoder-decoder's
  // onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx), instead of folders of their own.
  bool graphs_in_one_folder = false;
  // The runtime a build lays the folder out for when the user names none (the task's);
  // empty: ort-genai.
  std::string default_runtime;
  // A manifest's alias (`aliases: {this_type: alias_of}`): built by alias_of's registration,
  // which target_plugin (at target_path) registered; plugin and plugin_path name the manifest
  // that declared the alias. Empty for a type a plugin's code registered itself.
  std::string alias_of, target_plugin, target_path;
  // The manifest names this type its pack's `fallback`: an unknown model type whose config.json
  // has a decoder's fields and whose checkpoint holds exactly the tensors this type reads is
  // built as this type (mobius::build).
  bool fallback = false;
  // config.json text -> normalized config JSON text (defaults filled in).
  std::function<std::string(mobius_context* ctx, const std::string& config_json)> parse_config;
  // Builds the graph and weight plan into ctx from the normalized config.
  std::function<void(mobius_context* ctx, const std::string& normalized_config)> build;
};

// Where a plugin was found; a type registered from a higher priority shadows lower ones.
enum PluginPriority : int {
  kPriorityInProcess = 0,
  kPriorityDefault = 1,      // the installed plugins folder (or the build tree's)
  kPriorityEnvironment = 2,  // MOBIUS_PLUGIN_PATH
  kPriorityCommandLine = 3,  // --plugin-path
};

// A plain object: tests make their own; the CLI fills one from plugins.
class ModelRegistry {
 public:
  // Adds a registration. Same model type at a lower priority: recorded as shadowed. At the
  // same priority: throws mobius::Error naming both registrants. At a higher priority: the
  // new one wins and the old one is recorded as shadowed.
  void register_architecture(Registration r);
  // Throws mobius::Error listing close matches and what is registered.
  const Registration& get(std::string_view model_type) const;
  // nullptr when absent.
  const Registration* get_registration(std::string_view model_type) const;
  bool contains(std::string_view model_type) const;
  std::vector<std::string> architectures() const;  // sorted
  // The registrations marked fallback, by model type.
  std::vector<const Registration*> fallbacks() const;
  // Model types a plugin's manifest claims (its model_types and aliases), loaded or not: a type
  // a broken plugin claims is that plugin's error, never built by a fallback.
  void note_claimed(const std::string& model_type) { claimed_.insert(model_type); }
  bool claimed(std::string_view model_type) const { return claimed_.count(model_type) > 0; }
  size_t size() const { return entries_.size(); }
  // Registrations that lost to a higher-priority one, in the order they lost.
  const std::vector<Registration>& shadowed() const { return shadowed_; }
  // Registered names closest to `name` (edit distance and prefix), best first.
  std::vector<std::string> near_matches(std::string_view name, size_t max = 3) const;
  // Throws mobius::Error if any of `regs` conflicts with an existing same-priority entry;
  // otherwise registers them all (all or nothing).
  void register_all(std::vector<Registration> regs);
  // Registers `new_type` as another name of the registered `existing_type` (built by the same
  // code, as a manifest's alias is), in this registry only and in-process: "", the in-process
  // priority. Throws mobius::Error when `new_type` is not a model type name (letters, digits,
  // '_', '-', '.'), is already registered, or `existing_type` is not.
  void register_alias(const std::string& new_type, const std::string& existing_type);

 private:
  void check_conflict(const Registration& r) const;
  std::map<std::string, Registration, std::less<>> entries_;
  std::vector<Registration> shadowed_;
  std::set<std::string, std::less<>> claimed_;
};

std::string describe_registrant(const Registration& r);

// `target` under the name `new_type`: built by target's code (an alias of an alias by the
// registration the first names), alias_of, target_plugin and target_path set. The caller sets
// who declared it (plugin, plugin_path, version, vendor, priority).
Registration alias_registration(const Registration& target, const std::string& new_type);

}  // namespace mobius
