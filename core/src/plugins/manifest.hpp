// manifest.hpp - plugin manifests (plugin.yaml): recognizing them and reading one, checked,
// into a PluginRecord before any of the plugin's code runs.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "mobius/plugins.hpp"
#include "plugins/policy.hpp"

namespace mobius::plugin_policy {

bool is_manifest(std::string_view file_name);
bool is_manifest_path(const fs::path& p);
bool is_library(std::string_view file_name);

// Up to 16 entries, each shown, comma-separated: "a, b, ... (40 in all)".
std::string join_shown(const std::vector<std::string>& v);

// Reads and checks the manifest `name` in `folder` into `rec`; returns its library's file name,
// or "" for a manifest-only pack (no library: `aliases` only).
// Throws mobius::Error with the reason; `rec` is filled only when the manifest is valid.
std::string read_manifest(const Folder& folder, const std::string& name, PluginRecord& rec);

}  // namespace mobius::plugin_policy
