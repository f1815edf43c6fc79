// manifest.cpp - reading and checking a plugin's manifest (manifest.hpp).
#include "plugins/manifest.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <map>
#include <set>

#include <yaml-cpp/yaml.h>

#include "mobius/error.hpp"
#include "util/untrusted.hpp"

namespace mobius::plugin_policy {

bool is_manifest(std::string_view f) {
  return f == "plugin.yaml" || (f.size() > 12 && f.substr(f.size() - 12) == ".plugin.yaml");
}
bool is_manifest_path(const fs::path& p) { return is_manifest(std::string_view(p.filename().native())); }

bool is_library(std::string_view f) { return f.size() > 3 && f.substr(f.size() - 3) == ".so"; }

std::string join_shown(const std::vector<std::string>& v) {
  std::string s;
  const size_t n = std::min<size_t>(v.size(), 16);
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + shown(v[i], kMaxManifestString);
  if (n < v.size()) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

std::string read_manifest(const Folder& folder, const std::string& name, PluginRecord& rec) {
  const CheckedFile file = open_checked(folder, name, "manifest");
  const std::string what = "manifest " + quote_text(name);
  const auto fail = [&](const std::string& reason) -> void {
    throw Error("[plugin] " + what + ": " + reason);
  };
  const size_t max = kManifestLimits.max_bytes;
  if (static_cast<uint64_t>(file.st.st_size) > max)
    fail("larger than " + std::to_string(max >> 10) + " KiB (" + std::to_string(file.st.st_size) +
         " bytes)");
  // At most one byte past the limit: a file that grew since fstat is refused by the parser.
  std::string text(max + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t r = ::read(file.fd.get(), text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot be read: " + os_error(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  text.resize(got);
  const YAML::Node y = parse_yaml_limited(text, what, kManifestLimits);

  if (!y.IsMap()) fail("is not a YAML mapping");
  std::set<std::string> keys;
  for (auto it = y.begin(); it != y.end(); ++it) {
    if (!it->first.IsScalar()) fail("has a key that is not a string");
    const std::string& k = it->first.Scalar();
    // Keys of a later manifest format are skipped, so a newer plugin's manifest still reads here
    // (its size and value count are bounded by kManifestLimits).
    if (!keys.insert(k).second) fail("key " + quote_text(k) + " appears twice");
  }
  // A string value: present when required, at most `max_len` bytes of printable text.
  const auto string_at = [&](const YAML::Node& n, const std::string& key, size_t max_len) {
    if (!n.IsScalar()) fail(key + " is not a string");
    const std::string& s = n.Scalar();
    if (s.size() > max_len)
      fail(key + " is longer than " + std::to_string(max_len) + " bytes (" +
           std::to_string(s.size()) + ")");
    if (!clean_text(s)) fail(key + " is not printable text: " + quote_text(s));
    return s;
  };
  const auto text_of = [&](const char* key, bool required, size_t max_len = kMaxManifestString) {
    const std::string k = std::string("'") + key + "'";
    const YAML::Node n = y[key];
    if (!n) {
      if (required) fail(k + " is missing");
      return std::string();
    }
    std::string s = string_at(n, k, max_len);
    if (required && s.empty()) fail(k + " is empty");
    return s;
  };
  std::string plugin_name = text_of("name", true);
  std::string version = text_of("version", true);
  std::string vendor = text_of("vendor", false);
  std::string description = text_of("description", false, kMaxDescription);
  // aliases: {new_type: existing_type, ...}: model types built by another registration.
  std::map<std::string, std::string> aliases;
  if (const YAML::Node a = y["aliases"]) {
    if (!a.IsMap() || a.size() == 0)
      fail("'aliases' must be a non-empty mapping of model type to model type "
           "(e.g. {my_new_arch: llama})");
    if (a.size() > kMaxModelTypes)
      fail("'aliases' has more than " + std::to_string(kMaxModelTypes) + " entries (" +
           std::to_string(a.size()) + ")");
    for (auto it = a.begin(); it != a.end(); ++it) {
      std::string from = string_at(it->first, "a key of 'aliases'", kMaxManifestString);
      std::string to = string_at(it->second, "the value of alias " + quote_text(from), kMaxManifestString);
      if (from.empty() || to.empty()) fail("'aliases' holds an empty model type");
      if (from == to) fail("alias " + quote_text(from) + " names itself");
      if (!aliases.emplace(std::move(from), std::move(to)).second)
        fail("'aliases' lists " + quote_text(it->first.Scalar()) + " twice");
    }
  }
  const YAML::Node lib_node = y["library"];
  const bool manifest_only = !lib_node;
  if (manifest_only && aliases.empty())
    fail("'library' is missing (only a pack that declares 'aliases' has no library)");
  uint32_t abi_version = 0;
  std::string lib;
  if (!manifest_only || y["abi_version"]) {
    const std::string abi = text_of("abi_version", true);
    if (abi.size() > 7 || abi.find_first_not_of("0123456789") != std::string::npos)
      fail("'abi_version' is not a number: " + quote_text(abi));
    abi_version = static_cast<uint32_t>(std::stoul(abi));
  }
  if (!manifest_only) {
    lib = string_at(lib_node, "'library'", NAME_MAX);
    if (lib.empty() || lib == "." || lib == ".." || lib.find('/') != std::string::npos)
      fail("'library' must be a file name beside the manifest, got " + quote_text(lib));
  }
  const YAML::Node types = y["model_types"];
  std::vector<std::string> model_types;
  if (types || !manifest_only) {
    if (!types || !types.IsSequence() || types.size() == 0)
      fail("'model_types' must be a non-empty list");
    if (types.size() > kMaxModelTypes)
      fail("'model_types' lists more than " + std::to_string(kMaxModelTypes) + " entries (" +
           std::to_string(types.size()) + ")");
    std::set<std::string> unique;
    for (const auto& t : types) {
      std::string s = string_at(t, "an entry of 'model_types'", kMaxManifestString);
      if (s.empty()) fail("'model_types' holds an empty entry");
      if (!unique.insert(s).second) fail("'model_types' lists " + quote_text(s) + " twice");
      model_types.push_back(std::move(s));
    }
  }
  if (manifest_only && !model_types.empty()) {
    // A pack without code registers nothing but its aliases.
    std::vector<std::string> names;
    for (const auto& [from, to] : aliases) names.push_back(from);
    std::vector<std::string> listed = model_types;
    std::sort(listed.begin(), listed.end());
    if (listed != names)
      fail("'model_types' lists [" + join_shown(listed) + "], but a pack without a library "
           "registers only its aliases [" + join_shown(names) + "]");
  }
  for (const auto& [from, to] : aliases)
    if (!manifest_only && std::find(model_types.begin(), model_types.end(), from) != model_types.end())
      fail("model type " + quote_text(from) + " is both in 'model_types' and an alias");
  if (manifest_only && model_types.empty())
    for (const auto& [from, to] : aliases) model_types.push_back(from);
  // fallback: one of the model types the library registers.
  std::string fallback = text_of("fallback", false);
  if (!fallback.empty() && (manifest_only || std::find(model_types.begin(), model_types.end(), fallback) == model_types.end()))
    fail("'fallback' names " + quote_text(fallback) + ", which is not one of its 'model_types'");

  rec.name = std::move(plugin_name);
  rec.version = std::move(version);
  rec.vendor = std::move(vendor);
  rec.description = std::move(description);
  rec.abi_version = abi_version;
  rec.model_types = std::move(model_types);
  rec.aliases = std::move(aliases);
  rec.fallback = std::move(fallback);
  if (!lib.empty()) rec.library = shown_path(folder.path / lib);
  return lib;
}

}  // namespace mobius::plugin_policy
