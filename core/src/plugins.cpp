// plugins.cpp - discovery (manifests first, code last), Boost.DLL loading, ABI and manifest checks.
#include "mobius/plugins.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "context.hpp"
#include "mobius/error.hpp"

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

namespace {

bool is_manifest(const fs::path& p) {
  std::string f = p.filename().string();
  return f == "plugin.yaml" || (f.size() > 12 && f.compare(f.size() - 12, 12, ".plugin.yaml") == 0);
}

bool is_library(const fs::path& p) { return p.extension() == ".so"; }

bool inside(const fs::path& child, const fs::path& root) {
  auto rel = child.lexically_relative(root);
  return !rel.empty() && *rel.begin() != ".." && !rel.is_absolute();
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// Reads and validates a manifest; throws mobius::Error with the reason.
void read_manifest(const fs::path& manifest, PluginRecord& rec) {
  YAML::Node y;
  try {
    y = YAML::LoadFile(manifest.string());
  } catch (const YAML::Exception& e) {
    throw Error("manifest is not valid YAML: " + std::string(e.what()));
  }
  if (!y.IsMap()) throw Error("manifest is not a YAML mapping");
  auto text = [&](const char* key, bool required) -> std::string {
    YAML::Node n = y[key];
    if (!n) {
      if (required) throw Error(std::string("manifest has no '") + key + "'");
      return "";
    }
    if (!n.IsScalar()) throw Error(std::string("manifest '") + key + "' is not a string");
    return n.as<std::string>();
  };
  rec.name = text("name", true);
  rec.version = text("version", true);
  rec.vendor = text("vendor", false);
  rec.description = text("description", false);
  std::string abi = text("abi_version", true);
  try {
    size_t used = 0;
    unsigned long v = std::stoul(abi, &used);
    if (used != abi.size() || v > 1000000) throw std::invalid_argument(abi);
    rec.abi_version = static_cast<uint32_t>(v);
  } catch (const std::exception&) {
    throw Error("manifest 'abi_version' is not a number: '" + abi + "'");
  }
  std::string lib = text("library", true);
  fs::path lp(lib);
  if (lib.empty() || lp.is_absolute() || lp.filename() != lp || lib.find('\0') != std::string::npos)
    throw Error("manifest 'library' must be a file name beside the manifest, got '" + lib + "'");
  rec.library = manifest.parent_path() / lp;
  YAML::Node types = y["model_types"];
  if (!types || !types.IsSequence() || types.size() == 0)
    throw Error("manifest 'model_types' must be a non-empty list");
  for (const auto& t : types) {
    if (!t.IsScalar()) throw Error("manifest 'model_types' holds a non-string entry");
    rec.model_types.push_back(t.as<std::string>());
  }
}

}  // namespace

std::vector<fs::path> default_plugin_dirs() {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    fs::path exe_dir = exe.parent_path();
    std::string build_root = MOBIUS_BUILD_ROOT;
    if (!build_root.empty()) {
      fs::path br = fs::canonical(build_root, ec);
      if (!ec && inside(exe_dir, br) && fs::is_directory(br / "plugins")) {
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
  fs::path installed = MOBIUS_PLUGIN_INSTALL_DIR;
  if (fs::is_directory(installed) &&
      std::find(out.begin(), out.end(), installed) == out.end()) {
    std::error_code e2;
    bool dup = false;
    for (const auto& o : out) dup |= fs::equivalent(o, installed, e2);
    if (!dup) out.push_back(installed);
  }
  return out;
}

std::vector<PluginSearchDir> plugin_search_path(const std::vector<std::string>& cli_paths) {
  std::vector<PluginSearchDir> dirs;
  for (const auto& p : cli_paths) dirs.push_back({p, kPriorityCommandLine, "--plugin-path"});
  if (const char* env = std::getenv("MOBIUS_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) dirs.push_back({item, kPriorityEnvironment, "MOBIUS_PLUGIN_PATH"});
  }
  for (const auto& p : default_plugin_dirs()) dirs.push_back({p, kPriorityDefault, "default"});
  return dirs;
}

struct PluginHost::Impl {
  std::vector<boost::dll::shared_library> libs;
  std::set<fs::path> seen;  // canonical manifests/libraries already considered
};

PluginHost::PluginHost() : impl_(std::make_unique<Impl>()) {}
PluginHost::~PluginHost() = default;

PluginRecord PluginHost::load_one(const fs::path& path, int priority, const std::string& origin,
                                  ModelRegistry& registry) {
  PluginRecord rec;
  rec.origin = origin;
  rec.priority = priority;
  try {
    if (is_manifest(path)) {
      rec.manifest = path;
      read_manifest(path, rec);
      if (rec.abi_version != MOBIUS_ABI_VERSION)
        throw Error("manifest declares ABI version " + std::to_string(rec.abi_version) +
                    ", this host speaks ABI version " + std::to_string(MOBIUS_ABI_VERSION));
      std::error_code ec;
      fs::path root = fs::canonical(path.parent_path(), ec);
      fs::path real = fs::canonical(rec.library, ec);
      if (ec) throw Error("library " + rec.library.filename().string() + " not found beside the manifest");
      if (!inside(real, root))
        throw Error("library " + rec.library.string() + " resolves outside the plugin folder");
    } else {
      rec.library = path;
      throw Error("no manifest: expected plugin.yaml (or <name>.plugin.yaml) beside the library");
    }

    boost::dll::shared_library lib;
    try {
      lib.load(boost::dll::fs::path(rec.library.string()),
               boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
      // Boost folds the loader's reason into a longer message; ask the loader again for it.
      std::string reason = e.what();
      if (void* h = ::dlopen(rec.library.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        ::dlclose(h);
      } else if (const char* dl = ::dlerror()) {
        reason = dl;
      }
      throw Error("cannot load as a shared object: " + reason);
    }
    if (!lib.has(MOBIUS_PLUGIN_GET_INFO_SYMBOL))
      throw Error(std::string("missing entry point '") + MOBIUS_PLUGIN_GET_INFO_SYMBOL +
                  "' (not a mobius plugin?)");
    auto get_info = lib.get<const mobius_plugin_info*()>(MOBIUS_PLUGIN_GET_INFO_SYMBOL);
    const mobius_plugin_info* info = get_info();
    if (!info || info->struct_size < sizeof(uint32_t) * 2)
      throw Error("mobius_plugin_get_info returned no valid info");
    if (info->abi_version != MOBIUS_ABI_VERSION)
      throw Error("plugin was built for ABI version " + std::to_string(info->abi_version) +
                  ", this host speaks ABI version " + std::to_string(MOBIUS_ABI_VERSION));
    if (info->struct_size < sizeof(mobius_plugin_info))
      throw Error("mobius_plugin_get_info returned a truncated info struct");
    std::string iname = info->name ? info->name : "";
    if (iname != rec.name)
      throw Error("manifest names the plugin '" + rec.name + "' but the library says '" + iname +
                  "'");
    if (!lib.has(MOBIUS_PLUGIN_REGISTER_SYMBOL))
      throw Error(std::string("missing entry point '") + MOBIUS_PLUGIN_REGISTER_SYMBOL + "'");
    auto reg_fn = lib.get<mobius_status(const mobius_host_api*, mobius_registrar*)>(
        MOBIUS_PLUGIN_REGISTER_SYMBOL);

    mobius_registrar reg;
    reg.plugin_name = rec.name;
    reg.plugin_path = rec.library.string();
    reg.version = rec.version;
    reg.vendor = rec.vendor;
    reg.priority = priority;
    try {
      run_plugin_register(reg_fn, reg);
    } catch (const std::exception& e) {
      throw Error(std::string("register failed: ") + e.what());
    }
    for (const auto& r : reg.registrations) rec.registered.push_back(r.model_type);
    std::vector<std::string> a = rec.registered, b = rec.model_types;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b)
      throw Error("manifest lists model types [" + join(b) + "] but the plugin registered [" +
                  join(a) + "]");
    registry.register_all(std::move(reg.registrations));
    impl_->libs.push_back(std::move(lib));
    rec.loaded = true;
  } catch (const std::exception& e) {
    rec.error = e.what();
    std::replace(rec.error.begin(), rec.error.end(), '\n', ' ');
  }
  return rec;
}

std::vector<PluginRecord> PluginHost::load(const std::vector<PluginSearchDir>& dirs,
                                           ModelRegistry& registry) {
  std::vector<PluginRecord> out;
  // Higher priority first, so a type from --plugin-path wins over the installed one and the
  // lower one is recorded as shadowed.
  std::vector<PluginSearchDir> order = dirs;
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.priority > b.priority; });
  for (const auto& d : order) {
    std::error_code ec;
    if (!fs::is_directory(d.path, ec)) {
      if (d.origin != "default") {
        PluginRecord rec;
        rec.library = d.path;
        rec.origin = d.origin;
        rec.priority = d.priority;
        rec.error = "plugin folder does not exist or is not a folder";
        out.push_back(rec);
      }
      continue;
    }
    // Candidates: the folder itself and its immediate subfolders.
    std::vector<fs::path> folders{d.path};
    for (const auto& e : fs::directory_iterator(d.path, ec))
      if (e.is_directory(ec) && e.path().extension() != ".p") folders.push_back(e.path());
    std::sort(folders.begin() + 1, folders.end());
    for (const auto& f : folders) {
      std::vector<fs::path> manifests, libs;
      for (const auto& e : fs::directory_iterator(f, ec)) {
        if (!e.is_regular_file(ec)) continue;
        if (is_manifest(e.path())) manifests.push_back(e.path());
        else if (is_library(e.path())) libs.push_back(e.path());
      }
      std::sort(manifests.begin(), manifests.end());
      std::sort(libs.begin(), libs.end());
      std::set<fs::path> claimed;
      for (const auto& m : manifests) {
        fs::path cm = fs::weakly_canonical(m, ec);
        if (!impl_->seen.insert(cm).second) continue;
        PluginRecord rec = load_one(m, d.priority, d.origin, registry);
        if (!rec.library.empty()) claimed.insert(fs::weakly_canonical(rec.library, ec));
        out.push_back(std::move(rec));
      }
      for (const auto& l : libs) {
        fs::path cl = fs::weakly_canonical(l, ec);
        if (claimed.count(cl) || !impl_->seen.insert(cl).second) continue;
        out.push_back(load_one(l, d.priority, d.origin, registry));
      }
    }
  }
  return out;
}

}  // namespace mobius
