// hub_download.cpp - the requests of an online fetch and the download of each blob (see
// hub_session.hpp for the bounds).
//
// Every request carries Accept-Encoding: identity, the token only on the endpoint's own origin,
// and the timeouts of huggingface_hub's variables. A redirect to another origin is followed only
// when net::refuse_redirect allows it (no https to http, nothing more private than the endpoint's
// address), and a connection to another origin is refused at the socket when its address is.
//
// A blob downloads under a flock on its lock file into blobs/<etag>.incomplete (the name no blob
// can have: blob names are hex digests), resumed with Range after a drop. It stops at its limit
// (the announced size, or small_file_limit for a small file) and is refused, with nothing stored,
// when an answer's length disagrees with the announced size or its encoding is not identity.
// It is committed (fsynced, renamed to blobs/<etag>) only once its bytes hash to the ETag: the
// sha256 of an LFS file (streamed), the git blob sha1 of any other. A verified sha256 is recorded in
// the digest cache, so the provenance of a build from it need not read the file again.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <strings.h>
#include <ctime>

#include "util/digest.hpp"
#include "util/digest_cache.hpp"
#include "hub/hub_session.hpp"

namespace mobius::hub {
namespace {

// Seconds a Retry-After header asks for (delta-seconds or an HTTP date), nullopt when absent.
std::optional<double> retry_after(const http::Response& r) {
  const std::string* v = r.header("retry-after");
  if (!v) return std::nullopt;
  if (auto s = parse_u64(v)) return static_cast<double>(*s);
  std::tm tm{};
  if (::strptime(v->c_str(), "%a, %d %b %Y %H:%M:%S", &tm)) {
    double d = std::difftime(::timegm(&tm), std::time(nullptr));
    return d > 0 ? d : 0.0;
  }
  return std::nullopt;
}

double backoff(int attempt) { return std::min(8.0, std::pow(2.0, attempt - 1)); }

int pwrite_all(int fd, const char* p, size_t n, uint64_t off) {
  while (n) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return 0;
}

// blobs/<etag>.incomplete, open; removed when it holds nothing (a download that failed before
// its first byte leaves no trace).
class Incomplete {
 public:
  explicit Incomplete(fs::path p) : path_(std::move(p)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0)
      throw Error(ErrorKind::Io, "[hub] cannot create " + path_.string() + ": " + std::strerror(errno));
  }
  ~Incomplete() {
    if (fd_ < 0) return;
    struct stat st {};
    if (!committed_ && ::fstat(fd_, &st) == 0 && st.st_size == 0) ::unlink(path_.c_str());
    ::close(fd_);
  }
  Incomplete(const Incomplete&) = delete;
  Incomplete& operator=(const Incomplete&) = delete;
  int fd() const { return fd_; }
  const fs::path& path() const { return path_; }
  uint64_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }
  void truncate() {
    if (::ftruncate(fd_, 0) != 0)
      throw Error(ErrorKind::Io, "[hub] cannot truncate " + path_.string() + ": " + std::strerror(errno));
  }
  // The bytes did not hash to their name: nothing of them stays.
  void discard() {
    ::unlink(path_.c_str());
    committed_ = true;
  }
  void committed() { committed_ = true; }

 private:
  fs::path path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Hashes the first `size` bytes of fd with `h` (update/hex_digest); false when they cannot be
// read.
template <typename H>
bool hash_fd(int fd, uint64_t size, H& h) {
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < size;) {
    ssize_t n = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), size - off), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    h.update(buf.data(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

std::optional<uint64_t> parse_u64(const std::string* s) {
  if (!s || s->empty() || s->size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : *s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

void Progress::finish() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  draw(true);  // the elapsed time, and the end of the line
  std::fflush(stderr);
}

void Progress::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    draw(false);
    cv_.wait_for(l, std::chrono::milliseconds(100));
  }
}

void Progress::draw(bool final) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  uint64_t done = static_cast<uint64_t>(std::max<int64_t>(0, done_.load()));
  if (report_) return report_("download", done, total_);
  draw_progress("download", done, total_, secs, final,
                std::to_string(files_done_.load()) + "/" + std::to_string(files_) + " files");
}

bool RetryBudget::wait(double s) {
  if (attempts_ >= kMaxAttempts || waited_ + s > kMaxTotalWait) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
  waited_ += s;
  ++attempts_;
  return true;
}

bool RetryBudget::again_after_status(std::optional<double> asked) {
  return wait(std::min(kMaxRetryAfter, asked.value_or(backoff(attempts_))));
}

bool RetryBudget::again_after(http::TransportError::Kind kind) {
  using K = http::TransportError::Kind;
  switch (kind) {
    case K::Transfer:
      return wait(backoff(attempts_));
    case K::Timeout:
      return ++timeouts_ < kMaxTimeouts && wait(backoff(attempts_));
    case K::Connect:
      return ++connect_failures_ < kMaxConnectFailures && wait(backoff(attempts_));
    default:
      return false;
  }
}

http::Request Session::make_request(bool head, const std::string& url) const {
  http::Request req;
  req.head = head;
  req.url = url;
  req.headers = {"Accept-Encoding: identity"};
  const bool endpoint = http::same_origin(url, cfg_.endpoint);
  // The token goes to the endpoint's own site only, never to a CDN or any other host.
  if (!cfg_.token.empty() && endpoint) req.headers.push_back("Authorization: Bearer " + cfg_.token);
  req.header_timeout_s = head ? cfg_.etag_timeout_s : cfg_.download_timeout_s;
  req.rate_window_s = cfg_.download_timeout_s;
  req.min_rate = kMinRate;
  if (check_sockets_ && !endpoint) req.max_space = context_;
  req.cancelled = opts_.cancelled;
  return req;
}

std::string Session::timeout_note(bool head) const {
  if (head) return " (HF_HUB_ETAG_TIMEOUT is " + http::format_seconds(cfg_.etag_timeout_s) + " s)";
  return " (HF_HUB_DOWNLOAD_TIMEOUT is " + http::format_seconds(cfg_.download_timeout_s) +
         " s; a download must bring at least " + std::to_string(kMinRate) + " bytes/s)";
}

void Session::check_hop(const std::string& from, const std::string& to, const std::string& file) const {
  if (std::optional<std::string> why = net::refuse_redirect(from, to, context_))
    throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(from)) + " redirected " + file + " of " +
                                   at() + " to " + printable(http::origin_of(to)) + ", refused: " + *why +
                                   "; nothing was requested from it");
}

// One request with retries on 429, 5xx, failed connections and timeouts (the status is returned
// once it is final; redirects are returned too).
http::Response Session::request(http::Client& c, bool head, const std::string& url, const std::string& file) {
  const http::Request req = make_request(head, url);
  RetryBudget budget;
  for (;;) {
    if (stop_) throw Stopped{};
    try {
      http::Response r = c.perform(req);
      if (retryable_status(r.status) && budget.again_after_status(retry_after(r))) continue;
      return r;
    } catch (const http::TransportError& e) {
      if (!budget.again_after(e.kind())) fail_transport(e, url, file, head);
    }
  }
}

void Session::publish(const Item& it) {
  if (!rc_.links_to(commit_, it.file, it.meta.etag)) rc_.link(commit_, it.file, it.meta.etag);
}

void Session::fetch(http::Client& c, const Item& it, Progress& pg) {
  const FileMeta& m = it.meta;
  if (rc_.has_blob(m.etag)) {
    publish(it);
    return;
  }
  BlobLock lock(rc_.lock_file(m.etag), [&] {
    if (!opts_.quiet)
      std::fprintf(stderr, "\nmobius: waiting for another process downloading %s (lock %s)\n",
                   it.file.c_str(), rc_.lock_file(m.etag).c_str());
  });
  if (rc_.has_blob(m.etag)) {  // another process finished it meanwhile
    if (m.size) pg.add(static_cast<int64_t>(*m.size));
    pg.file_done();
    publish(it);
    return;
  }
  const fs::path blob = rc_.blob(m.etag);
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  Incomplete inc(rc_.incomplete(m.etag));
  const std::string what = at() + ": " + it.file;
  // An LFS file's sha256 is checked as the bytes stream; a git blob sha1 needs the size first,
  // so the file is read again once complete (a small file).
  const bool sha256_named = m.lfs;
  Sha256 sha;
  // No more bytes than announced, nor than the file's kind may have.
  const uint64_t cap = m.size ? std::min(*m.size, m.limit) : m.limit;
  const std::string limit_text =
      m.size ? "the " + std::to_string(*m.size) + " bytes announced"
             : "the " + human_bytes(static_cast<double>(m.limit)) + " a " +
                   fs::path(it.file).filename().string() + " may have";
  uint64_t have = inc.size();
  if (have > cap) {
    inc.truncate();
    have = 0;
  }
  if (have && sha256_named && !hash_fd(inc.fd(), have, sha)) {
    inc.truncate();  // unreadable: start over
    sha.reset();
    have = 0;
  }
  pg.add(static_cast<int64_t>(have));
  const uint64_t resumed_from = have;

  auto restart = [&] {
    inc.truncate();
    pg.add(-static_cast<int64_t>(have));
    have = 0;
    sha.reset();
  };

  std::string url = m.url;
  int hops = 0;
  RetryBudget budget;
  for (;;) {
    if (m.size && have == *m.size) break;
    if (stop_) throw Stopped{};
    http::Request req = make_request(false, url);
    if (have) req.headers.push_back("Range: bytes=" + std::to_string(have) + "-");
    int write_err = 0;
    bool bad_range = false, over_limit = false;
    std::string refusal;  // an answer that is refused outright, and why
    req.on_headers = [&](const http::Response& r) {
      if (r.status < 200 || r.status >= 300) return true;
      if (const std::string* ce = r.header("content-encoding"); ce && ::strcasecmp(ce->c_str(), "identity") != 0) {
        refusal = "was sent with Content-Encoding " + quote_name(*ce) + " although only identity was accepted";
        return false;
      }
      std::optional<uint64_t> total;  // the whole file's length this answer states
      if (r.status == 206) {
        // "bytes START-END/TOTAL": the part must start where the file ends.
        const std::string* cr = r.header("content-range");
        unsigned long long start = 0, end = 0, tot = 0;
        const int got = cr ? std::sscanf(cr->c_str(), "bytes %llu-%llu/%llu", &start, &end, &tot) : 0;
        if (got < 1 || start != have) {
          bad_range = true;
          return false;
        }
        if (got == 3) total = tot;
      } else {
        if (const std::string* cl = r.header("content-length")) {
          total = parse_u64(cl);
          if (!total) {
            refusal = "was sent with an unusable Content-Length " + quote_name(*cl);
            return false;
          }
        }
        if (have) {  // the whole file is coming again
          if (::ftruncate(inc.fd(), 0) != 0) {
            write_err = errno;
            return false;
          }
          pg.add(-static_cast<int64_t>(have));
          have = 0;
          sha.reset();
        }
      }
      if (total && m.size && *total != *m.size) {
        refusal = "was sent as " + std::to_string(*total) + " bytes, and its metadata announced " +
                  std::to_string(*m.size);
        return false;
      }
      if (total && *total > m.limit) {
        refusal = "was announced at " + std::to_string(*total) + " bytes, over " + limit_text;
        return false;
      }
      return true;
    };
    req.on_body = [&](const char* p, size_t n) {
      if (stop_) return false;
      if (have + n > cap) {
        over_limit = true;
        return false;
      }
      if ((write_err = pwrite_all(inc.fd(), p, n, have)) != 0) return false;
      if (sha256_named) sha.update(p, n);
      have += n;
      pg.add(static_cast<int64_t>(n));
      return true;
    };
    http::Response r;
    try {
      r = c.perform(req);
    } catch (const http::TransportError& e) {
      using K = http::TransportError::Kind;
      if (write_err)
        throw Error(ErrorKind::Io, "[hub] cannot write " + inc.path().string() + ": " + std::strerror(write_err) +
                                       " (the partial file stays and resumes on the next run)");
      if (stop_) throw Stopped{};
      if (over_limit || !refusal.empty()) {
        restart();
        throw Error(ErrorKind::Io, "[hub] " + what + " from " + printable(http::origin_of(url)) + " " +
                                       (over_limit ? "is larger than " + limit_text : refusal) +
                                       "; nothing was stored");
      }
      if (bad_range) {
        restart();
        if (budget.again_after(K::Transfer)) continue;
        throw Error(ErrorKind::Io, "[hub] " + what + " from " + printable(http::origin_of(url)) +
                                       ": the server answered ranges that do not continue the file, " +
                                       std::to_string(budget.attempts()) + " times; nothing was stored");
      }
      if (e.kind() == K::Aborted || !budget.again_after(e.kind())) fail_transport(e, url, it.file, false);
      continue;  // resumed from where it stopped
    }
    if (r.status >= 300 && r.status < 400) {
      const std::string* loc = r.header("location");
      std::optional<std::string> next = loc ? http::resolve_location(url, *loc) : std::nullopt;
      if (!next || ++hops > 10)
        throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(url)) + " redirected " + it.file +
                                       (next ? " too many times" : " to an unusable location"));
      if (!http::same_origin(url, *next)) check_hop(url, *next, it.file);
      url = *next;
      continue;
    }
    if (r.status == 416 && have) {  // the range does not fit what is served: start over
      restart();
      if (budget.again_after(http::TransportError::Kind::Transfer)) continue;
    }
    if (retryable_status(r.status) && budget.again_after_status(retry_after(r))) continue;
    if (r.status >= 200 && r.status < 300) {
      if (!m.size || have == *m.size) break;
      if (budget.again_after(http::TransportError::Kind::Transfer)) continue;
      throw Error(ErrorKind::Io, "[hub] " + what + " from " + printable(http::origin_of(url)) + " ended after " +
                                     std::to_string(have) + " of " + std::to_string(*m.size) + " bytes, " +
                                     std::to_string(budget.attempts()) + " times");
    }
    fail_status(r, url, it.file, commit_);
  }
  if (::fsync(inc.fd()) != 0)
    throw Error(ErrorKind::Io, "[hub] cannot write " + inc.path().string() + ": " + std::strerror(errno));
  // The bytes must be what the ETag names before the blob exists under that name.
  std::string got;
  if (sha256_named) {
    got = sha.hex_digest();
  } else {
    GitBlobSha1 h(have);
    if (!hash_fd(inc.fd(), have, h))
      throw Error(ErrorKind::Io, "[hub] cannot read " + inc.path().string() + ": " + std::strerror(errno));
    got = h.hex_digest();
  }
  if (got != m.etag) {
    inc.discard();
    const char* header = m.lfs ? "X-Linked-Etag" : "ETag";
    throw Error(ErrorKind::Io, "[hub] " + what + " is corrupt: its " + (sha256_named ? "sha256" : "git blob sha1") +
                                   " is " + got + ", the hub announced " + m.etag + " (" + header +
                                   ", downloaded from " + printable(http::origin_of(url)) +
                                   "); the download was deleted and nothing was stored, run again");
  }
  if (::rename(inc.path().c_str(), blob.c_str()) != 0)
    throw Error(ErrorKind::Io, "[hub] cannot move " + inc.path().string() + " to " + blob.string() + ": " +
                                   std::strerror(errno));
  inc.committed();
  sync_dir(blob.parent_path());
  if (sha256_named) {
    // The digest just verified, for the provenance of the builds that read this blob.
    struct stat st {};
    if (::fstat(inc.fd(), &st) == 0) remember_sha256(inc.fd(), blob, st, got);
  }
  {
    std::lock_guard<std::mutex> l(items_mu_);
    fetched_bytes_ += have - resumed_from;
    ++fetched_files_;
  }
  pg.file_done();
  publish(it);
}

void Session::download_all() {
  std::vector<const Item*> todo;
  uint64_t total = 0;
  for (const Item& it : items_) {
    if (rc_.links_to(commit_, it.file, it.meta.etag)) continue;
    if (rc_.has_blob(it.meta.etag)) {
      publish(it);
      continue;
    }
    todo.push_back(&it);
    total += it.meta.size.value_or(0);
  }
  if (todo.empty()) return;
  Progress pg(opts_.progress, total, todo.size(), opts_.on_progress);
  run_parallel(todo.size(), kWorkers, stop_, [&](size_t i, http::Client& c) { fetch(c, *todo[i], pg); });
  pg.finish();
}

}  // namespace mobius::hub
