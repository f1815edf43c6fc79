// probe.cpp - loading and registering a plugin, in-process or probed in a child (probe.hpp).
#include "plugins/probe.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
#include <vector>

#include "mobius/error.hpp"
#include "plugins/context.hpp"
#include "plugins/manifest.hpp"
#include "util/untrusted.hpp"

namespace mobius::plugin_policy {

void run_plugin(PluginRecord& rec, const CheckedFile& file, int priority, ModelRegistry& registry,
                boost::dll::shared_library& lib) {
  const LoadName ln = load_name(file);
  try {
    lib.load(boost::dll::fs::path(ln.name),
             boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    // Boost folds the loader's reason into a longer message; ask the loader again for it. A
    // name that failed to load is not taken, so asking again is safe.
    std::string reason = e.what();
    if (void* h = ::dlopen(ln.name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      ::dlclose(h);
    } else if (const char* dl = ::dlerror()) {
      reason = dl;
    }
    // The loader names the file by the name it got: show the library's path instead.
    const std::string path = rec.library.string();
    for (size_t at = reason.find(ln.name); at != std::string::npos;
         at = reason.find(ln.name, at + path.size()))
      reason.replace(at, ln.name.size(), path);
    throw Error("cannot load as a shared object: " + shown(reason, 1024));
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
    throw Error("manifest names the plugin " + quote_text(rec.name) + " but the library says " +
                quote_text(iname));
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
    throw Error(std::string("register failed: ") + shown(e.what(), 1024));
  }
  std::vector<std::string> a, b = rec.model_types;
  for (const auto& r : reg.registrations) a.push_back(r.model_type);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b)
    throw Error("manifest lists model types [" + join_shown(b) + "] but the plugin registered [" +
                join_shown(a) + "]");
  // The model types are the manifest's, checked; the task is shown by `mobius list`.
  for (const auto& r : reg.registrations)
    if (r.task.size() > kMaxManifestString || !clean_text(r.task))
      throw Error("model type " + quote_text(r.model_type) +
                  " was registered with a task that is not printable text of at most " +
                  std::to_string(kMaxManifestString) + " bytes: " + quote_text(r.task));
  for (auto& r : reg.registrations) {
    rec.registered.push_back(r.model_type);
    r.fallback = !rec.fallback.empty() && r.model_type == rec.fallback;
  }
  registry.register_all(std::move(reg.registrations));
}

PluginScanner::PluginScanner() : path_(cache_path()) { load(); }

std::string PluginScanner::check(const PluginRecord& rec, const CheckedFile& file) {
  std::string id = identity(file.st);
  std::string key = rec.library.string();
  if (auto it = cache_.find(key); it != cache_.end() && it->is_object() && it->value("id", "") == id) {
    if (it->value("status", "") == "ok") return "";
    return it->value("error", "failed in an earlier scan") +
           " (remembered from an earlier scan; probed again when the file changes)";
  }
  std::string err = probe(rec, file);
  if (err.empty()) {
    cache_[key] = {{"id", id}, {"status", "ok"}};
    save();
  } else if (err.rfind("crashed", 0) == 0 || err.rfind("hung", 0) == 0) {
    cache_[key] = {{"id", id}, {"status", "failed"}, {"error", err}};
    save();
  }
  return err;
}

fs::path PluginScanner::cache_path() {
  if (const char* p = std::getenv("MOBIUS_PLUGIN_CACHE")) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "mobius" / "plugin-scan.json";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "mobius" / "plugin-scan.json";
  return {};
}

std::string PluginScanner::identity(const struct stat& st) {
  return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ino);
}

int PluginScanner::timeout_ms() {
  if (const char* t = std::getenv("MOBIUS_PLUGIN_SCAN_TIMEOUT")) {
    double s = std::atof(t);
    if (s > 0) return static_cast<int>(s * 1000);
  }
  return 10000;
}

void PluginScanner::load() {
  if (path_.empty()) return;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;
  try {
    // Read within the same limits as any other JSON: a damaged or planted cache file must not
    // nest deep enough to overflow the stack when it is written back.
    in.seekg(0, std::ios::end);
    const auto size = static_cast<size_t>(std::max<std::streamoff>(0, in.tellg()));
    if (size > kConfigLimits.max_bytes) return;
    in.seekg(0);
    std::string text(size, '\0');
    in.read(text.data(), static_cast<std::streamsize>(size));
    text.resize(static_cast<size_t>(in.gcount()));
    nlohmann::json j = parse_json_limited(text, path_.string(), kConfigLimits);
    if (j.is_object()) cache_ = std::move(j);
  } catch (const std::exception&) {
    // A damaged cache only costs a rescan.
  }
}

void PluginScanner::save() const {
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

std::string PluginScanner::probe(const PluginRecord& rec, const CheckedFile& file) {
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
      run_plugin(r, file, 0, scratch, lib);
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

}  // namespace mobius::plugin_policy
