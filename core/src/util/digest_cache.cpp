// digest_cache.cpp - see digest_cache.hpp. One small JSON file per source file,
// digests/<device>-<inode>, replaced atomically (a temporary file renamed over it), so concurrent
// builds never read a half-written record; a malformed or foreign record is a miss.
#include "util/digest_cache.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "util/digest.hpp"

namespace mobius {
namespace fs = std::filesystem;

namespace {

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

int64_t ns(const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; }

fs::path record_path(const struct stat& st) {
  const fs::path dir = digest_cache_dir();
  if (dir.empty()) return {};
  return dir / (std::to_string(static_cast<uint64_t>(st.st_dev)) + "-" +
                std::to_string(static_cast<uint64_t>(st.st_ino)));
}

// What a record must match (its name holds the device and inode).
nlohmann::json identity(const struct stat& st) {
  return {{"size", static_cast<uint64_t>(st.st_size)},
          {"mtime_ns", ns(st.st_mtim)},
          {"ctime_ns", ns(st.st_ctim)}};
}

bool same_file_state(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         ns(a.st_mtim) == ns(b.st_mtim) && ns(a.st_ctim) == ns(b.st_ctim);
}

}  // namespace

fs::path digest_cache_dir() {
  std::string base = env("MOBIUS_CACHE_DIR");
  if (base == "none") return {};
  if (base.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    if (!xdg.empty() && xdg[0] == '/') {
      base = xdg + "/mobius";
    } else {
      std::string home = env("HOME");
      if (home.empty())
        if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) home = pw->pw_dir;
      if (home.empty()) return {};
      base = home + "/.cache/mobius";
    }
  }
  return fs::path(base) / "digests";
}

std::string cached_sha256(int fd, const fs::path& path) {
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";
    const fs::path rec = record_path(st);
    if (rec.empty()) return "";
    const int rfd = ::open(rec.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (rfd < 0) return "";
    std::string text(4096, '\0');
    ssize_t n;
    do {
      n = ::read(rfd, text.data(), text.size());
    } while (n < 0 && errno == EINTR);
    ::close(rfd);
    if (n <= 0 || static_cast<size_t>(n) == text.size()) return "";
    text.resize(static_cast<size_t>(n));
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("sha256") || !j["sha256"].is_string()) return "";
    (void)path;
    const nlohmann::json want = identity(st);
    for (const auto& [k, v] : want.items())
      if (!j.contains(k) || j[k] != v) return "";
    const std::string sha = j["sha256"].get<std::string>();
    return is_sha256_hex(sha) ? sha : "";
  } catch (...) {
    return "";
  }
}

void remember_sha256(int fd, const fs::path& path, const struct stat& before,
                     const std::string& sha256) {
  try {
    struct stat now {};
    if (!is_sha256_hex(sha256) || ::fstat(fd, &now) != 0 || !S_ISREG(now.st_mode) ||
        !same_file_state(before, now))
      return;
    const fs::path rec = record_path(now);
    if (rec.empty()) return;
    std::error_code ec;
    fs::create_directories(rec.parent_path(), ec);
    if (ec) return;
    static std::atomic<unsigned> counter{0};
    const fs::path tmp = rec.parent_path() / (".tmp-" + std::to_string(::getpid()) + "-" +
                                              std::to_string(counter++));
    nlohmann::json j = identity(now);
    j["sha256"] = sha256;
    j["path"] = fs::absolute(path, ec).string();  // for whoever reads the cache; not compared
    const std::string text = j.dump() + "\n";
    const int wfd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (wfd < 0) return;
    bool ok = ::write(wfd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = ::close(wfd) == 0 && ok;
    if (!ok || ::rename(tmp.c_str(), rec.c_str()) != 0) ::unlink(tmp.c_str());
  } catch (...) {
  }
}

}  // namespace mobius
