// plugins.cpp - discovery (manifests first, code last), Boost.DLL loading, ABI and manifest checks.
#include "mobius/plugins.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "checkpoint_files.hpp"
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

// Runs the plugin's code: load, info and ABI check, register into `registry`. Throws with the
// reason. Used in-process, and in a child process to probe a plugin not yet known to be safe.
void run_plugin(PluginRecord& rec, int priority, ModelRegistry& registry,
                boost::dll::shared_library& lib) {
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
  const mobius_plugin_info* raw_info = nullptr;
  try {
    raw_info = get_info();
  } catch (...) {
    throw Error("mobius_plugin_get_info let an exception cross the C ABI");
  }
  if (!raw_info || !MOBIUS_HAS_FIELD(raw_info, mobius_plugin_info, abi_version))
    throw Error("mobius_plugin_get_info returned no valid info");
  if (raw_info->abi_version != MOBIUS_ABI_VERSION)
    throw Error("plugin was built for ABI version " + std::to_string(raw_info->abi_version) +
                ", this host speaks ABI version " + std::to_string(MOBIUS_ABI_VERSION));
  const mobius_plugin_info info_v =
      read_abi_struct(raw_info, MOBIUS_PLUGIN_INFO_SIZE_V1, "mobius_plugin_get_info's info");
  const mobius_plugin_info* info = &info_v;
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
}

// Probes plugins in a child process and remembers the ones that crashed or hung until their
// file changes (and the ones that loaded cleanly, so they are not probed again).
class PluginScanner {
 public:
  PluginScanner() : path_(cache_path()) { load(); }

  // "" when the plugin may be loaded in-process; else why it must be skipped.
  std::string check(const PluginRecord& rec) {
    std::error_code ec;
    fs::path lib = fs::canonical(rec.library, ec);
    if (ec) return "";  // the in-process loader reports a missing file itself
    std::string id = identity(lib);
    std::string key = lib.string();
    if (auto it = cache_.find(key); it != cache_.end() && it->value("id", "") == id) {
      if (it->value("status", "") == "ok") return "";
      return it->value("error", "failed in an earlier scan") +
             " (remembered from an earlier scan; probed again when the file changes)";
    }
    std::string err = probe(rec);
    if (err.empty()) {
      cache_[key] = {{"id", id}, {"status", "ok"}};
      save();
    } else if (err.rfind("crashed", 0) == 0 || err.rfind("hung", 0) == 0) {
      cache_[key] = {{"id", id}, {"status", "failed"}, {"error", err}};
      save();
    }
    return err;
  }

 private:
  static fs::path cache_path() {
    if (const char* p = std::getenv("MOBIUS_PLUGIN_CACHE")) return p;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "mobius" / "plugin-scan.json";
    if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "mobius" / "plugin-scan.json";
    return {};
  }

  // Size, modification time and inode: a rebuilt or replaced file is probed again.
  static std::string identity(const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return "";
    return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ino);
  }

  static int timeout_ms() {
    if (const char* t = std::getenv("MOBIUS_PLUGIN_SCAN_TIMEOUT")) {
      double s = std::atof(t);
      if (s > 0) return static_cast<int>(s * 1000);
    }
    return 10000;
  }

  void load() {
    if (path_.empty()) return;
    std::ifstream in(path_);
    if (!in) return;
    try {
      nlohmann::json j = nlohmann::json::parse(in);
      if (j.is_object()) cache_ = std::move(j);
    } catch (const std::exception&) {
      // A damaged cache only costs a rescan.
    }
  }

  void save() const {
    if (path_.empty()) return;
    std::error_code ec;
    fs::create_directories(path_.parent_path(), ec);
    fs::path tmp = path_.string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp);
      if (!out) return;
      out << cache_.dump(1);
    }
    fs::rename(tmp, path_, ec);
    if (ec) fs::remove(tmp, ec);
  }

  // Loads and registers the plugin in a forked child; reports what happened to it.
  static std::string probe(const PluginRecord& rec) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return "";  // cannot probe: load in-process as before
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return "";
    }
    if (pid == 0) {
      ::close(fds[0]);
      // The host's own crash handlers (a test framework's, say) must not report the child's.
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT})
        ::signal(sig, SIG_DFL);
      std::string answer = "ok";
      try {
        PluginRecord r = rec;
        ModelRegistry scratch;
        boost::dll::shared_library lib;
        run_plugin(r, 0, scratch, lib);
      } catch (const std::exception& e) {
        answer = std::string("error:") + e.what();
      }
      const char* p = answer.data();
      size_t n = answer.size();
      while (n > 0) {
        ssize_t w = ::write(fds[1], p, n);
        if (w <= 0) break;
        p += w;
        n -= static_cast<size_t>(w);
      }
      ::_exit(0);  // no destructors, no atexit handlers of the parent's state
    }
    ::close(fds[1]);
    std::string answer;
    bool timed_out = false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms());
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      pollfd pfd{fds[0], POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        timed_out = r == 0;
        break;
      }
      char buf[4096];
      ssize_t got = ::read(fds[0], buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      if (answer.size() < 65536) answer.append(buf, static_cast<size_t>(got));
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
      return "hung while loading or registering (no answer within " +
             std::to_string(timeout_ms() / 1000.0).substr(0, 4) + " s); skipped";
    if (WIFSIGNALED(st))
      return "crashed while loading or registering (signal " + std::to_string(WTERMSIG(st)) + ", " +
             strsignal(WTERMSIG(st)) + "); skipped";
    if (answer == "ok") return "";
    if (answer.rfind("error:", 0) == 0) return answer.substr(6);
    return "exited while loading or registering (status " +
           std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1) + "); skipped";
  }

  fs::path path_;
  nlohmann::json cache_ = nlohmann::json::object();
};

struct PluginHost::Impl {
  PluginScanner scan;
  std::vector<boost::dll::shared_library> libs;
  std::set<fs::path> seen;  // canonical manifests/libraries already considered
  // Model types a load() asked for; empty: every plugin runs.
  std::set<std::string> wanted;
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
      if (!path_within(root, real))
        throw Error("library " + rec.library.string() + " resolves outside the plugin folder");
    } else {
      rec.library = path;
      throw Error("no manifest: expected plugin.yaml (or <name>.plugin.yaml) beside the library");
    }

    // A command that needs only some model types reads the other plugins' manifests alone.
    if (!impl_->wanted.empty() &&
        std::none_of(rec.model_types.begin(), rec.model_types.end(),
                     [&](const std::string& t) { return impl_->wanted.count(t) > 0; })) {
      rec.deferred = true;
      return rec;
    }

    // A plugin not yet known to be safe runs first in a child process: if it crashes or hangs
    // while loading or registering, only the child dies (GStreamer's plugin scanner does this).
    if (std::string err = impl_->scan.check(rec); !err.empty()) throw Error(err);
    boost::dll::shared_library lib;
    run_plugin(rec, priority, registry, lib);
    impl_->libs.push_back(std::move(lib));
    rec.loaded = true;
  } catch (const std::exception& e) {
    rec.error = e.what();
    std::replace(rec.error.begin(), rec.error.end(), '\n', ' ');
  }
  return rec;
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
        if (!rec.library.empty()) {
          // Its library is accounted for, also when the same folder is reached again through
          // another entry of the search path (then the manifest is skipped as seen).
          fs::path cl = fs::weakly_canonical(rec.library, ec);
          claimed.insert(cl);
          impl_->seen.insert(cl);
        }
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
