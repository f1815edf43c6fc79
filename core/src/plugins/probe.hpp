// probe.hpp - running a plugin's code: loading it, checking its info and ABI, registering it;
// first in a child process (PluginScanner) for a plugin not yet known to be safe, so a crash or
// a hang while loading or registering costs only the child.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include "mobius/plugins.hpp"
#include "mobius/registry.hpp"
#include "plugins/policy.hpp"

namespace mobius::plugin_policy {

// Runs the plugin's code: load, info and ABI check, register into `registry`. Throws with the
// reason. Used in-process, and in a child process to probe a plugin not yet known to be safe.
void run_plugin(PluginRecord& rec, const CheckedFile& file, int priority, ModelRegistry& registry,
                boost::dll::shared_library& lib);

// Probes plugins in a child process and remembers the ones that crashed or hung until their
// file changes (and the ones that loaded cleanly, so they are not probed again).
class PluginScanner {
 public:
  PluginScanner();

  // "" when the plugin may be loaded in-process; else why it must be skipped.
  std::string check(const PluginRecord& rec, const CheckedFile& file);

 private:
  static fs::path cache_path();
  // Size, modification time and inode: a rebuilt or replaced file is probed again.
  static std::string identity(const struct stat& st);
  static int timeout_ms();
  void load();
  void save() const;
  // Loads and registers the plugin in a forked child; reports what happened to it.
  static std::string probe(const PluginRecord& rec, const CheckedFile& file);

  fs::path path_;
  nlohmann::json cache_ = nlohmann::json::object();
};

}  // namespace mobius::plugin_policy
