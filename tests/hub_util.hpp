// hub_util.hpp - the loopback hub of tests/hub_server.mjs (with a CDN on another host, and the
// misbehaviours of tests/hub_hostile.mjs) and the helpers the hub tests share: `mobius` runs
// with only the hub settings given, and checks of huggingface_hub's cache layout.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <set>

#include "golden_util.hpp"
#include "hub/http.hpp"
#include "hub/hub.hpp"
#include "hub/hub_cache.hpp"
#include "util/digest.hpp"

extern char** environ;

namespace mobius::test {


// No proxy, token or hub setting of the caller's environment reaches the runs below.
inline void isolate_env() {
  for (const char* k : {"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy",
                        "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                        "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT",
                        "HF_HOME", "XDG_CACHE_HOME"})
    ::unsetenv(k);
  ::setenv("NO_PROXY", "*", 1);
  ::setenv("no_proxy", "*", 1);
}

inline std::string sha256_of(const std::string& bytes) {
  Sha256 s;
  s.update(bytes);
  return s.hex_digest();
}

// The loopback hub of tests/hub_server.mjs, stopped (its stdin closed) when this goes.
class HubServer {
 public:
  HubServer(const fs::path& dir, const nlohmann::json& config) {
    isolate_env();
    write_text(dir / "hub-config.json", config.dump());
    int in[2], out[2];
    REQUIRE(::pipe(in) == 0);
    REQUIRE(::pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::string script = env_or_empty("MOBIUS_SOURCE_ROOT") + "/tests/hub_server.mjs";
    std::string cfg = (dir / "hub-config.json").string();
    std::vector<char*> argv = {const_cast<char*>("node"), script.data(), cfg.data(), nullptr};
    int rc = posix_spawnp(&pid_, "node", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    REQUIRE(rc == 0);
    std::string line;
    pollfd p{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && ::poll(&p, 1, 20000) > 0) {
      char buf[256];
      ssize_t n = ::read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    INFO(line);
    REQUIRE(line.find('\n') != std::string::npos);
    nlohmann::json j = nlohmann::json::parse(line);
    port_ = j["port"].get<int>();
    cdn_ = j["cdn"].get<std::string>();
    trap_ = j.value("trap", "");
  }
  ~HubServer() {
    ::close(stdin_);
    ::kill(pid_, SIGTERM);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& cdn() const { return cdn_; }
  const std::string& trap() const { return trap_; }  // the trap server, when config has trapHost

  nlohmann::json control(const std::string& what, const std::string& query = "") {
    http::Client c;
    http::Request r;
    r.url = endpoint() + "/_control/" + what + query;
    std::string body;
    r.on_body = [&](const char* p, size_t n) {
      body.append(p, n);
      return true;
    };
    http::Response resp = c.perform(r);
    REQUIRE(resp.status == 200);
    return nlohmann::json::parse(body);
  }
  void faults(const nlohmann::json& f) { control("faults", "?set=" + http::url_encode(f.dump(), false)); }
  nlohmann::json log() { return control("log"); }
  void reset() { control("reset"); }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int port_ = 0;
  std::string cdn_;
  std::string trap_;
};

// `mobius ARGS` with the hub settings given as VAR=value words (and nothing from the caller's).
inline RunResult mobius_cli(const std::string& env, const std::string& args) {
  return run("env " + env + " " + quote(env_or_empty("MOBIUS_CLI")) + " " + args);
}

inline std::string hub_env(const HubServer& s, const fs::path& home, const std::string& extra = "") {
  return "HF_ENDPOINT=" + s.endpoint() + " HF_HOME=" + quote(home.string()) + " " + extra;
}

inline fs::path repo_dir(const fs::path& home, const std::string& repo) {
  return home / "hub" / hub::repo_folder_name(repo);
}

// The one snapshot of a repository in the cache.
inline std::string only_commit(const fs::path& home, const std::string& repo) {
  std::vector<std::string> c;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(repo_dir(home, repo) / "snapshots", ec))
    c.push_back(e.path().filename().string());
  REQUIRE(c.size() == 1);
  return c[0];
}

// Whether any snapshot of the repository has an entry (even a dangling link) named `file`.
inline bool any_snapshot_has(const fs::path& home, const std::string& repo, const std::string& file) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(repo_dir(home, repo) / "snapshots", ec))
    if (fs::exists(fs::symlink_status(e.path() / file))) return true;
  return false;
}

// huggingface_hub's layout: refs/main holds the commit; every snapshot entry is a relative link
// into ../../blobs/ that resolves; nothing half-written remains in blobs/.
inline void check_layout(const fs::path& home, const std::string& repo, const std::set<std::string>& files) {
  const fs::path rd = repo_dir(home, repo);
  const std::string commit = only_commit(home, repo);
  CHECK(hub::is_commit_hash(commit));
  CHECK(read_text(rd / "refs" / "main") == commit);
  std::set<std::string> seen;
  for (const auto& e : fs::recursive_directory_iterator(rd / "snapshots" / commit)) {
    if (e.is_directory()) continue;
    std::string rel = e.path().lexically_relative(rd / "snapshots" / commit).string();
    seen.insert(rel);
    CAPTURE(rel);
    REQUIRE(fs::is_symlink(e.symlink_status()));
    fs::path target = fs::read_symlink(e.path());
    CHECK(target.is_relative());
    std::string up = "../..";
    for (char c : rel)
      if (c == '/') up += "/..";
    CHECK(target.parent_path() == fs::path(up) / "blobs");
    CHECK(fs::is_regular_file(e.path()));
  }
  CHECK(seen == files);
  for (const auto& e : fs::directory_iterator(rd / "blobs")) {
    CHECK_MESSAGE(e.is_regular_file(), e.path());
    CHECK(e.path().extension() != ".incomplete");
  }
}

inline std::vector<nlohmann::json> requests(const nlohmann::json& log, const std::string& server,
                                     const std::string& method = "", const std::string& file = "") {
  std::vector<nlohmann::json> v;
  for (const auto& e : log)
    if (e["server"] == server && (method.empty() || e["method"] == method) &&
        (file.empty() || (e["file"].is_string() && e["file"] == file)))
      v.push_back(e);
  return v;
}

inline RunResult local_build(const fs::path& ckpt, const fs::path& out) {
  return mobius_cli("", "build -q --model " + quote(ckpt.string()) + " " + quote(out.string()));
}

inline void copy_dir(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

inline nlohmann::json repos(std::initializer_list<std::pair<std::string, fs::path>> list) {
  nlohmann::json r = nlohmann::json::object();
  for (const auto& [id, dir] : list) r[id] = {{"dir", dir.string()}, {"tags", {"v1"}}};
  return r;
}


}  // namespace mobius::test
