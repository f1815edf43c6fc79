// hub_cache.cpp - huggingface_hub's cache configuration and layout (see hub_cache.hpp).
#include "hub/hub_cache.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "util/digest.hpp"
#include "mobius/error.hpp"
#include "util/untrusted.hpp"

namespace mobius::hub {
namespace {

std::string getenv_str(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

std::string home_dir() {
  std::string h = getenv_str("HOME");
  if (!h.empty()) return h;
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/";
}

// os.path.expanduser then expandvars, as huggingface_hub applies them to its paths.
fs::path expand(const std::string& s) {
  std::string p = s;
  if (p == "~" || p.rfind("~/", 0) == 0) p = home_dir() + p.substr(1);
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '$') {
      out += p[i];
      continue;
    }
    size_t b = i + 1, e;
    bool brace = b < p.size() && p[b] == '{';
    if (brace) {
      e = p.find('}', b);
      if (e == std::string::npos) {
        out += p.substr(i);
        break;
      }
      std::string name = p.substr(b + 1, e - b - 1);
      const char* v = std::getenv(name.c_str());
      out += v ? v : p.substr(i, e - i + 1);
      i = e;
      continue;
    }
    e = b;
    while (e < p.size() && (std::isalnum(static_cast<unsigned char>(p[e])) || p[e] == '_')) ++e;
    if (e == b) {
      out += '$';
      continue;
    }
    std::string name = p.substr(b, e - b);
    const char* v = std::getenv(name.c_str());
    out += v ? v : p.substr(i, e - i);
    i = e - 1;
  }
  return fs::path(out);
}

// huggingface_hub's token cleaning: surrounding whitespace and line breaks removed.
std::string clean_token(std::string t) {
  std::string out;
  for (char c : t)
    if (c != '\r' && c != '\n') out += c;
  size_t b = out.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = out.find_last_not_of(" \t");
  return out.substr(b, e - b + 1);
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool valid_repo_part(std::string_view p) {
  if (p.empty() || p.size() > 96) return false;
  for (char c : p)
    if (!word_char(c) && c != '-' && c != '.') return false;
  return word_char(p.front()) && word_char(p.back());
}

std::atomic<uint64_t> g_temp_counter{0};

// A timeout variable: unset or empty gives the default; else a positive number of seconds.
double timeout_from_env(const char* name, double def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v, &end);
  if (errno || end == v || *end || !(d > 0) || d > 86400)
    throw Error("[hub] " + std::string(name) + " is " + quote_name(v) +
                ": expected a positive number of seconds (at most 86400); the default is " +
                std::to_string(static_cast<int>(def)));
  return d;
}

}  // namespace

bool env_true(const char* value) {
  if (!value) return false;
  std::string v = value;
  for (auto& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

Config Config::from_env() {
  Config c;
  std::string home = getenv_str("HF_HOME");
  if (home.empty()) {
    std::string xdg = getenv_str("XDG_CACHE_HOME");
    home = (xdg.empty() ? home_dir() + "/.cache" : xdg) + "/huggingface";
  }
  c.home = expand(home);
  std::string cache = getenv_str("HF_HUB_CACHE");
  if (cache.empty()) cache = getenv_str("HUGGINGFACE_HUB_CACHE");
  c.cache = cache.empty() ? c.home / "hub" : expand(cache);
  c.endpoint = getenv_str("HF_ENDPOINT");
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (c.endpoint.empty()) c.endpoint = kDefaultEndpoint;
  const char* off = std::getenv("HF_HUB_OFFLINE");
  if (!off || !*off) off = std::getenv("TRANSFORMERS_OFFLINE");
  c.offline = env_true(off);
  c.etag_timeout_s = timeout_from_env("HF_HUB_ETAG_TIMEOUT", 10);
  c.download_timeout_s = timeout_from_env("HF_HUB_DOWNLOAD_TIMEOUT", 10);

  for (const char* k : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    std::string t = clean_token(getenv_str(k));
    if (!t.empty()) {
      c.token = t;
      c.token_source = k;
      break;
    }
  }
  if (c.token.empty()) {
    std::string tp = getenv_str("HF_TOKEN_PATH");
    fs::path file = tp.empty() ? c.home / "token" : expand(tp);
    std::ifstream in(file, std::ios::binary);
    if (in) {
      std::string t(4096, '\0');
      in.read(t.data(), static_cast<std::streamsize>(t.size()));
      t.resize(static_cast<size_t>(in.gcount()));
      c.token = clean_token(t);
      if (!c.token.empty()) c.token_source = file.string();
    }
  }
  for (unsigned char ch : c.token)
    if (ch < 0x20 || ch == 0x7f)
      throw Error("[hub] the token from " + c.token_source +
                  " holds a control character: it cannot be sent in a header");
  return c;
}

bool is_valid_repo_id(std::string_view id, bool require_namespace) {
  if (id.find("--") != std::string_view::npos || id.find("..") != std::string_view::npos)
    return false;
  if (id.size() >= 4 && id.substr(id.size() - 4) == ".git") return false;
  size_t slash = id.find('/');
  if (slash == std::string_view::npos) return !require_namespace && valid_repo_part(id);
  return valid_repo_part(id.substr(0, slash)) && valid_repo_part(id.substr(slash + 1));
}

bool is_commit_hash(std::string_view s) { return is_sha1_hex(s); }

bool is_valid_revision(std::string_view rev) {
  if (rev.empty() || rev.size() > 255 || rev == "@") return false;
  if (rev.front() == '/' || rev.back() == '/' || rev.back() == '.') return false;
  if (rev.find("..") != std::string_view::npos || rev.find("//") != std::string_view::npos ||
      rev.find("@{") != std::string_view::npos)
    return false;
  for (unsigned char c : rev)
    if (c < 0x20 || c == 0x7f || c == ' ' || std::strchr("~^:?*[\\", c)) return false;
  size_t start = 0;
  while (start <= rev.size()) {
    size_t end = rev.find('/', start);
    if (end == std::string_view::npos) end = rev.size();
    std::string_view comp = rev.substr(start, end - start);
    if (comp.empty() || comp.front() == '.') return false;
    if (comp.size() >= 5 && comp.substr(comp.size() - 5) == ".lock") return false;
    start = end + 1;
  }
  return true;
}

bool is_safe_repo_path(std::string_view path) {
  if (path.empty() || path.size() > 1024 || path.front() == '/') return false;
  for (unsigned char c : path)
    if (c < 0x20 || c == 0x7f || c == '\\') return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view comp = path.substr(start, end - start);
    if (comp.empty() || comp == "." || comp == "..") return false;
    start = end + 1;
  }
  return true;
}

std::string normalize_etag(std::string_view etag) {
  std::string_view e = etag;
  if (e.rfind("W/", 0) == 0) e.remove_prefix(2);
  while (!e.empty() && e.front() == '"') e.remove_prefix(1);
  while (!e.empty() && e.back() == '"') e.remove_suffix(1);
  return std::string(e);
}

bool is_blob_name(std::string_view etag) { return is_sha256_hex(etag) || is_sha1_hex(etag); }

std::string repo_folder_name(std::string_view repo_id) {
  std::string s = "models--";
  for (char c : repo_id) {
    if (c == '/')
      s += "--";
    else
      s += c;
  }
  return s;
}

RepoCache::RepoCache(fs::path cache, std::string repo_id)
    : cache_(std::move(cache)), repo_id_(std::move(repo_id)), dir_(cache_ / repo_folder_name(repo_id_)) {}

fs::path RepoCache::lock_file(const std::string& etag) const {
  return cache_ / ".locks" / repo_folder_name(repo_id_) / (etag + ".lock");
}

std::optional<std::string> RepoCache::read_ref(const std::string& revision) const {
  std::ifstream in(dir_ / "refs" / revision, std::ios::binary);
  if (!in) return std::nullopt;
  std::string s(128, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (!is_commit_hash(s)) return std::nullopt;
  return s;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (read_ref(revision) == commit) return;
  const fs::path p = dir_ / "refs" / revision;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  const fs::path tmp = temp_sibling(p);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out.flush())
      throw Error(ErrorKind::Io, "[hub] cannot write " + tmp.string() + ": " + std::strerror(errno));
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(ErrorKind::Io, "[hub] cannot write " + p.string() + ": " + ec.message());
  }
}

bool RepoCache::has_file(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::is_regular_file(pointer(commit, file), ec);
}

bool RepoCache::has_blob(const std::string& etag) const {
  std::error_code ec;
  return fs::is_regular_file(fs::symlink_status(blob(etag), ec));
}

namespace {
fs::path link_target(const std::string& file, const std::string& etag) {
  fs::path t = "../..";
  for (size_t i = 0; i < file.size(); ++i)
    if (file[i] == '/') t /= "..";
  return t / "blobs" / etag;
}
}  // namespace

bool RepoCache::links_to(const std::string& commit, const std::string& file,
                         const std::string& etag) const {
  std::error_code ec;
  fs::path t = fs::read_symlink(pointer(commit, file), ec);
  return !ec && t == link_target(file, etag) && has_blob(etag);
}

void RepoCache::link(const std::string& commit, const std::string& file, const std::string& etag) const {
  const fs::path p = pointer(commit, file);
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) throw Error(ErrorKind::Io, "[hub] cannot create " + p.parent_path().string() + ": " + ec.message());
  const fs::path tmp = temp_sibling(p);
  fs::create_symlink(link_target(file, etag), tmp, ec);
  if (!ec) fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    throw Error(ErrorKind::Io, "[hub] cannot link " + p.string() + ": " + ec.message());
  }
}

bool RepoCache::known_missing(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::exists(dir_ / ".no_exist" / commit / file, ec);
}

void RepoCache::mark_missing(const std::string& commit, const std::string& file) const {
  const fs::path p = dir_ / ".no_exist" / commit / file;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0) ::close(fd);
}

BlobLock::BlobLock(const fs::path& path, const std::function<void()>& on_wait) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(ErrorKind::Io, "[hub] cannot open the lock " + path.string() + ": " + std::strerror(errno));
  auto t0 = std::chrono::steady_clock::now();
  bool told = false;
  for (;;) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (errno != EWOULDBLOCK && errno != EINTR) {
      int err = errno;
      ::close(fd_);
      fd_ = -1;
      throw Error(ErrorKind::Io, "[hub] cannot lock " + path.string() + ": " + std::strerror(err));
    }
    if (!told && on_wait && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      told = true;
      on_wait();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

BlobLock::~BlobLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

fs::path temp_sibling(const fs::path& p) {
  return p.parent_path() / ("." + p.filename().string() + ".tmp." + std::to_string(::getpid()) +
                            "." + std::to_string(g_temp_counter++));
}

void sync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace mobius::hub
