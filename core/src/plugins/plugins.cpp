// plugins.cpp - discovery: the search path, scanning plugin folders (manifests first, code last),
// loading each plugin (policy.hpp, manifest.hpp, probe.hpp) and resolving manifest aliases.
#include "mobius/plugins.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include <boost/dll/shared_library.hpp>

#include "checkpoint/checkpoint_files.hpp"  // path_within
#include "mobius/error.hpp"
#include "plugins/manifest.hpp"
#include "plugins/policy.hpp"
#include "plugins/probe.hpp"

#ifndef MOBIUS_BUILD_ROOT
#define MOBIUS_BUILD_ROOT ""
#endif
#ifndef MOBIUS_PLUGIN_INSTALL_DIR
#define MOBIUS_PLUGIN_INSTALL_DIR "/usr/local/lib/mobius/plugins"
#endif
#ifndef MOBIUS_BINDIR
#define MOBIUS_BINDIR "/usr/local/bin"
#endif

namespace mobius {
namespace fs = std::filesystem;
using namespace plugin_policy;

std::vector<fs::path> default_plugin_dirs() {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    fs::path exe_dir = exe.parent_path();
    std::string build_root = MOBIUS_BUILD_ROOT;
    if (!build_root.empty()) {
      fs::path br = fs::canonical(build_root, ec);
      if (!ec && path_within(br, exe_dir) && fs::is_directory(br / "plugins")) {
        out.push_back(br / "plugins");
        return out;  // run from the build tree: its plugins, never an installed copy
      }
    }
    fs::path rel = fs::path(MOBIUS_PLUGIN_INSTALL_DIR).lexically_relative(MOBIUS_BINDIR);
    if (!rel.empty()) {
      fs::path p = (exe_dir / rel).lexically_normal();
      if (fs::is_directory(p)) out.push_back(p);
    }
  }
  // The configured folder only when the one beside the executable is missing: a moved or staged
  // install must not also load the original install's plugins.
  fs::path installed = MOBIUS_PLUGIN_INSTALL_DIR;
  if (out.empty() && fs::is_directory(installed) &&
      std::find(out.begin(), out.end(), installed) == out.end()) {
    std::error_code e2;
    bool dup = false;
    for (const auto& o : out) dup |= fs::equivalent(o, installed, e2);
    if (!dup) out.push_back(installed);
  }
  return out;
}

std::vector<PluginSearchDir> plugin_search_path(const std::vector<std::string>& cli_paths,
                                               const std::optional<std::vector<fs::path>>& default_dirs) {
  std::vector<PluginSearchDir> dirs;
  for (const auto& p : cli_paths) dirs.push_back({p, kPriorityCommandLine, "--plugin-path"});
  if (const char* env = std::getenv("MOBIUS_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) dirs.push_back({item, kPriorityEnvironment, "MOBIUS_PLUGIN_PATH"});
  }
  for (const auto& p : default_dirs ? *default_dirs : default_plugin_dirs())
    dirs.push_back({p, kPriorityDefault, "default"});
  return dirs;
}

struct PluginHost::Impl {
  PluginScanner scan;
  std::vector<boost::dll::shared_library> libs;
  std::set<fs::path> seen;  // manifests and libraries already considered (real paths, as shown)
  // Model types a load() asked for; empty: every plugin runs.
  std::set<std::string> wanted;

  PluginRecord load_manifest(const Folder& folder, const std::string& name, int priority,
                             const std::string& origin, ModelRegistry& registry);
  void scan_folder(const Folder& folder, const std::vector<std::string>& names, bool is_root,
                   const PluginSearchDir& dir, ModelRegistry& registry,
                   std::vector<PluginRecord>& out);
  void resolve_aliases(std::vector<PluginRecord>& records, ModelRegistry& registry,
                       PluginHost& host);
};

// Registers the aliases of every loaded manifest: alias -> a copy of the registration of the
// type it names, under the alias's name and the declaring manifest's priority. An alias may
// name another alias; one that names a type nobody registers (or a cycle) makes its manifest a
// plugin error like any other. When only some model types were asked for, a plugin deferred
// because its types were not asked for is loaded after all if a wanted alias names one of them.
void PluginHost::Impl::resolve_aliases(std::vector<PluginRecord>& records,
                                       ModelRegistry& registry, PluginHost& host) {
  auto has_aliases = [](const PluginRecord& r) { return r.loaded && !r.aliases.empty(); };
  if (std::none_of(records.begin(), records.end(), has_aliases)) return;
  const std::set<std::string> asked = wanted;
  std::set<const PluginRecord*> failed;
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& rec : records) {
      if (!has_aliases(rec) || failed.count(&rec)) continue;
      for (const auto& [from, to] : rec.aliases) {
        if (std::find(rec.registered.begin(), rec.registered.end(), from) != rec.registered.end())
          continue;
        if (!asked.empty() && !asked.count(from)) continue;
        const Registration* target = registry.get_registration(to);
        if (!target) {
          // A deferred plugin that declares the target: load it now.
          for (size_t i = 0; i < records.size() && !target; ++i) {
            PluginRecord& d = records[i];
            if (!d.deferred || d.manifest.empty() ||
                std::find(d.model_types.begin(), d.model_types.end(), to) == d.model_types.end())
              continue;
            wanted = {to};
            PluginRecord again = host.load_one(d.manifest, d.priority, d.origin, registry);
            wanted = asked;
            records[i] = std::move(again);
            target = registry.get_registration(to);
            progress = true;
          }
          if (!target) continue;
        }
        Registration r = alias_registration(*target, from);
        r.plugin = rec.name;
        r.plugin_path = rec.manifest.string();
        r.version = rec.version;
        r.vendor = rec.vendor;
        r.priority = rec.priority;
        try {
          registry.register_architecture(std::move(r));
        } catch (const std::exception& e) {
          rec.error = shown_message(std::string("[plugin] alias ") + quote_text(from) + ": " + e.what());
          rec.loaded = false;
          failed.insert(&rec);
          break;
        }
        rec.registered.push_back(from);
        progress = true;
      }
    }
  }
  for (auto& rec : records) {
    if (!has_aliases(rec)) continue;
    for (const auto& [from, to] : rec.aliases) {
      if (std::find(rec.registered.begin(), rec.registered.end(), from) != rec.registered.end())
        continue;
      if (!asked.empty() && !asked.count(from)) continue;
      rec.error = shown_message(
          "[plugin] alias " + quote_text(from) + " names model type " + quote_text(to) +
          (rec.aliases.count(to) || std::any_of(records.begin(), records.end(), [&](const PluginRecord& o) {
             return o.aliases.count(to) > 0;
           })
               ? ", an alias that does not resolve (a cycle, or an alias of a type no plugin registers)"
               : ", which no loaded plugin registers"));
      rec.loaded = false;
      break;
    }
  }
}

namespace {

// A record for what was refused before any manifest was read: a folder or a file, and why.
PluginRecord refused(const fs::path& path, const PluginSearchDir& dir, const std::string& why,
                     bool is_manifest_path = false) {
  PluginRecord rec;
  (is_manifest_path ? rec.manifest : rec.library) = shown_path(path);
  rec.origin = dir.origin;
  rec.priority = dir.priority;
  rec.error = shown_message(why);
  return rec;
}

}  // namespace

PluginRecord PluginHost::Impl::load_manifest(const Folder& folder, const std::string& name,
                                             int priority, const std::string& origin,
                                             ModelRegistry& registry) {
  PluginRecord rec;
  rec.origin = origin;
  rec.priority = priority;
  rec.manifest = shown_path(folder.path / name);
  try {
    const std::string lib_name = read_manifest(folder, name, rec);
    if (lib_name.empty()) {
      // A manifest-only pack: no code to run. Its aliases are registered once every plugin has
      // loaded (resolve_aliases), as the types they name may come from any folder.
      rec.deferred = !wanted.empty() &&
                     std::none_of(rec.model_types.begin(), rec.model_types.end(),
                                  [&](const std::string& t) { return wanted.count(t) > 0; });
      rec.loaded = !rec.deferred;
      return rec;
    }
    if (rec.abi_version != MOBIUS_ABI_VERSION)
      throw Error("manifest declares ABI version " + std::to_string(rec.abi_version) +
                  ", this host speaks ABI version " + std::to_string(MOBIUS_ABI_VERSION));
    const CheckedFile lib = open_library(folder, lib_name);

    // A command that needs only some model types reads the other plugins' manifests alone.
    if (!wanted.empty() &&
        std::none_of(rec.model_types.begin(), rec.model_types.end(),
                     [&](const std::string& t) { return wanted.count(t) > 0; })) {
      rec.deferred = true;
      return rec;
    }

    // A plugin not yet known to be safe runs first in a child process: if it crashes or hangs
    // while loading or registering, only the child dies (GStreamer's plugin scanner does this).
    if (std::string err = scan.check(rec, lib); !err.empty()) throw Error(err);
    boost::dll::shared_library dl;
    run_plugin(rec, lib, priority, registry, dl);
    libs.push_back(std::move(dl));
    rec.loaded = true;
  } catch (const std::exception& e) {
    rec.error = shown_message(e.what());
  }
  return rec;
}

// One folder of a scan: its manifests in name order, then the libraries no manifest claimed.
void PluginHost::Impl::scan_folder(const Folder& folder, const std::vector<std::string>& names,
                                   bool is_root, const PluginSearchDir& dir,
                                   ModelRegistry& registry, std::vector<PluginRecord>& out) {
  std::vector<std::string> manifests, libraries;
  for (const auto& n : names) {
    if (!is_manifest(n) && !is_library(n)) continue;
    if (!clean_text(n)) {
      out.push_back(refused(folder.path / n, dir,
                            quoted_path(folder.path / n) +
                                " has a name that is not printable text; it is not loaded"));
      continue;
    }
    (is_manifest(n) ? manifests : libraries).push_back(n);
  }
  if (manifests.empty() && libraries.empty()) return;
  // The plugin folder itself was checked before its scan began.
  if (!is_root) {
    if (std::string why = untrusted_reason(folder.st); !why.empty()) {
      out.push_back(refused(folder.path, dir,
                            "folder " + quoted_path(folder.path) + " " + why + "; " + kTrustRule));
      return;
    }
  }
  std::set<fs::path> claimed;
  bool refused_manifest = false;  // one that was refused before it named its library
  for (const auto& m : manifests) {
    if (!seen.insert(shown_path(folder.path / m)).second) continue;
    PluginRecord rec = load_manifest(folder, m, dir.priority, dir.origin, registry);
    refused_manifest |= rec.library.empty() && rec.aliases.empty();
    if (!rec.library.empty()) {
      // Its library is accounted for, also when the same folder is reached again through
      // another entry of the search path (then the manifest is skipped as seen).
      claimed.insert(rec.library);
      seen.insert(rec.library);
    }
    out.push_back(std::move(rec));
  }
  for (const auto& l : libraries) {
    const fs::path p = shown_path(folder.path / l);
    if (claimed.count(p) || !seen.insert(p).second) continue;
    struct stat st {};
    const bool link = ::fstatat(folder.fd.get(), l.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISLNK(st.st_mode);
    out.push_back(refused(folder.path / l, dir,
                          link               ? link_refusal(folder, l)
                          : refused_manifest ? "no manifest: none beside the library could be read"
                                             : "no manifest: expected plugin.yaml (or "
                                               "<name>.plugin.yaml) beside the library"));
  }
}

PluginHost::PluginHost() : impl_(std::make_unique<Impl>()) {}
PluginHost::~PluginHost() = default;

PluginRecord PluginHost::load_one(const fs::path& path, int priority, const std::string& origin,
                                  ModelRegistry& registry) {
  const PluginSearchDir dir{path.parent_path(), priority, origin};
  if (!is_manifest_path(path))
    return refused(path, dir,
                   "no manifest: expected plugin.yaml (or <name>.plugin.yaml) beside the library");
  Folder folder;
  try {
    folder = open_named_folder(path.parent_path());
  } catch (const std::exception& e) {
    return refused(path, dir, e.what(), true);
  }
  if (std::string why = untrusted_reason(folder.st); !why.empty())
    return refused(path, dir,
                   "folder " + quoted_path(folder.path) + " " + why + "; " + kTrustRule, true);
  return impl_->load_manifest(folder, path.filename().native(), priority, origin, registry);
}

std::vector<PluginRecord> PluginHost::load(const std::vector<PluginSearchDir>& dirs,
                                           ModelRegistry& registry,
                                           const std::vector<std::string>& only_model_types) {
  impl_->wanted = std::set<std::string>(only_model_types.begin(), only_model_types.end());
  struct Reset {
    std::set<std::string>& w;
    ~Reset() { w.clear(); }
  } reset{impl_->wanted};
  std::vector<PluginRecord> out;
  // Higher priority first, so a type from --plugin-path wins over the installed one and the
  // lower one is recorded as shadowed.
  std::vector<PluginSearchDir> order = dirs;
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.priority > b.priority; });
  for (const auto& d : order) {
    // The folder as named, resolved once; below it, nothing through a link.
    Folder root;
    try {
      root = open_named_folder(d.path);
    } catch (const std::exception& e) {
      if (d.origin != "default") out.push_back(refused(d.path, d, e.what()));
      continue;
    }
    if (std::string why = untrusted_reason(root.st); !why.empty()) {
      out.push_back(refused(root.path, d,
                            "plugin folder " + quoted_path(root.path) + " " + why + "; " + kTrustRule));
      continue;
    }
    size_t budget = kMaxScanEntries;
    std::vector<std::string> names;
    try {
      names = folder_names(root, budget);
    } catch (const std::exception& e) {
      out.push_back(refused(root.path, d, e.what()));
      continue;
    }
    // Candidates: the folder itself and its immediate subfolders (not meson's *.p folders).
    std::vector<std::string> subfolders;
    for (const auto& n : names) {
      struct stat st {};
      if (::fstatat(root.fd.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        if (n.size() > 2 && n.compare(n.size() - 2, 2, ".p") == 0) continue;
        if (!clean_text(n)) {
          out.push_back(refused(root.path / n, d,
                                quoted_path(root.path / n) +
                                    " has a name that is not printable text; it is not scanned"));
          continue;
        }
        subfolders.push_back(n);
      } else if (S_ISLNK(st.st_mode) && !is_manifest(n) && !is_library(n)) {
        // A link to a folder would have been scanned as a subfolder: say why it is not.
        struct stat target {};
        if (::fstatat(root.fd.get(), n.c_str(), &target, 0) == 0 && S_ISDIR(target.st_mode))
          out.push_back(refused(root.path / n, d, link_refusal(root, n)));
      }
    }
    impl_->scan_folder(root, names, true, d, registry, out);
    for (const auto& s : subfolders) {
      Folder sub;
      std::vector<std::string> sub_names;
      try {
        sub = open_subfolder(root, s);
        sub_names = folder_names(sub, budget);
      } catch (const std::exception& e) {
        out.push_back(refused(root.path / s, d, e.what()));
        if (budget == 0) break;
        continue;
      }
      impl_->scan_folder(sub, sub_names, false, d, registry, out);
    }
  }
  impl_->resolve_aliases(out, registry, *this);
  for (const auto& rec : out) {
    for (const auto& t : rec.model_types) registry.note_claimed(t);
    for (const auto& [from, to] : rec.aliases) registry.note_claimed(from);
  }
  return out;
}

}  // namespace mobius
