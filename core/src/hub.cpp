// hub.cpp - models from the Hugging Face Hub through huggingface_hub's cache and protocol.
//
// Online, for each file a build needs: HEAD {endpoint}/{repo}/resolve/{revision}/{file} (only
// relative or same-site redirects followed) gives X-Repo-Commit, the ETag (X-Linked-Etag for
// LFS files: the content's sha256) and the size (X-Linked-Size or Content-Length), and for LFS
// files a redirect to a CDN. The first file's commit pins every other request, so all files
// come from one commit. A file whose snapshot entry exists is not requested again (the revision
// is then a commit); a blob that exists is linked, not downloaded. Otherwise, under a flock on
// the blob's lock file, the GET streams into blobs/<etag>.incomplete (resumed with Range after a
// drop, retried on 429, 5xx and dropped connections), is checked (size, and sha256 for LFS
// files), fsynced and renamed to blobs/<etag>; then the snapshot link is made atomically and,
// once every file is in, refs/<revision> records the commit.
//
// A repository without config.json but with model_index.json is a diffusers pipeline: the index
// is fetched first (its commit pins the rest) and read for its components; each component C is a
// model when C/config.json exists (its weights are looked for under C/ by every name a diffusers
// or transformers folder uses, an index's shards relative to C/), else a folder whose known
// small files (scheduler, feature extractor and tokenizer files) are taken when they exist.
#include "hub.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint_files.hpp"
#include "progress.hpp"
#include "sha256.hpp"
#include "untrusted.hpp"

namespace mobius {
namespace hub {
namespace {

bool is_sha256(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::optional<uint64_t> parse_u64(const std::string* s) {
  if (!s || s->empty() || s->size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : *s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

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

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
}

bool retryable_status(long s) { return s == 429 || (s >= 500 && s <= 599); }

// One progress line on stderr for all files: bar, bytes, throughput, ETA, files done.
class Progress {
 public:
  Progress(bool enabled, uint64_t total, size_t files)
      : enabled_(enabled), total_(total), files_(files), t0_(std::chrono::steady_clock::now()) {
    if (enabled_) thread_ = std::thread([this] { loop(); });
  }
  ~Progress() { finish(); }
  void add(int64_t n) { done_ += n; }
  void file_done() { ++files_done_; }
  void finish() {
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

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      draw(false);
      cv_.wait_for(l, std::chrono::milliseconds(100));
    }
  }
  void draw(bool final) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    uint64_t done = static_cast<uint64_t>(std::max<int64_t>(0, done_.load()));
    draw_progress("download", done, total_, secs, final,
                  std::to_string(files_done_.load()) + "/" + std::to_string(files_) + " files");
  }

  bool enabled_;
  uint64_t total_;
  size_t files_;
  std::chrono::steady_clock::time_point t0_;
  std::atomic<int64_t> done_{0};
  std::atomic<size_t> files_done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Thrown by a worker that stopped because another one failed; never reported.
struct Stopped {};

// Runs fn(i, client) for i in [0, n) on up to `workers` threads, each with its own connection
// cache. The first failure stops the others (`stop` is raised) and is rethrown here.
template <typename Fn>
void run_parallel(size_t n, size_t workers, std::atomic<bool>& stop, Fn fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    try {
      http::Client client;
      for (size_t i = next++; i < n && !stop; i = next++) fn(i, client);
    } catch (const Stopped&) {
    } catch (...) {
      std::lock_guard<std::mutex> l(mu);
      if (!error) error = std::current_exception();
      stop = true;
    }
  };
  workers = std::min(workers, n);
  if (workers <= 1) {
    if (n) work();
  } else {
    std::vector<std::thread> pool;
    for (size_t i = 0; i < workers; ++i) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

// An open file descriptor, closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

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

class Session {
 public:
  Session(const Config& cfg, std::string repo, std::string revision, const HubOptions& opts)
      : cfg_(cfg), repo_(std::move(repo)), rev_(std::move(revision)), opts_(opts), rc_(cfg.cache, repo_) {}

  ModelSource run();

 private:
  struct Item {
    std::string file;
    FileMeta meta;
  };
  enum class Probe { Cached, Found, Missing };

  std::vector<std::string> base_headers(const std::string& url) const;
  http::Response request(http::Client& c, bool head, const std::string& url,
                         const std::vector<std::string>& extra, const std::string& file);
  std::optional<FileMeta> head(http::Client& c, const std::string& file, const std::string& rev,
                               std::string* absent_at = nullptr);
  Probe probe(http::Client& c, const std::string& file, Item* out);
  void probe_all(const std::vector<std::string>& files, bool required);
  void add_item(Item it);
  void resolve_root(http::Client& c);
  void fetch_now(http::Client& c, const Item& item);
  void choose_weights(http::Client& c, const std::string& component);
  void fetch_pipeline();
  void download_all();
  void fetch(http::Client& c, const Item& item, Progress& pg);
  void publish(const Item& item);

  [[noreturn]] void fail_status(const http::Response& r, const std::string& url,
                                const std::string& file, const std::string& rev) const;
  [[noreturn]] void fail_transport(const http::TransportError& e, const std::string& url,
                                   const std::string& file) const;
  [[noreturn]] void fail_missing(const std::string& file) const;
  std::string at() const { return repo_ + (rev_ == "main" ? "" : "@" + printable(rev_)); }
  // "org/name (commit <hash>): <file>", for what a file of the pinned commit holds.
  std::string in_commit(const std::string& file) const {
    return at() + " (commit " + commit_ + "): " + file;
  }

  const Config& cfg_;
  std::string repo_;
  std::string rev_;
  const HubOptions& opts_;
  RepoCache rc_;
  std::string commit_;
  bool pipeline_ = false;  // model_index.json at the root, no config.json
  std::mutex items_mu_;
  std::vector<Item> items_;  // files to link or download
  std::atomic<bool> stop_{false};
  uint64_t fetched_bytes_ = 0;
  size_t fetched_files_ = 0;
};

std::vector<std::string> Session::base_headers(const std::string& url) const {
  std::vector<std::string> h = {"Accept-Encoding: identity"};
  // The token goes to the endpoint's own site only, never to a CDN or any other host.
  if (!cfg_.token.empty() && http::same_origin(url, cfg_.endpoint))
    h.push_back("Authorization: Bearer " + cfg_.token);
  return h;
}

// One request with retries on 429, 5xx and failed connections (the status is returned once it
// is final; redirects are returned too).
http::Response Session::request(http::Client& c, bool head, const std::string& url,
                                const std::vector<std::string>& extra, const std::string& file) {
  http::Request req;
  req.head = head;
  req.url = url;
  req.headers = base_headers(url);
  req.headers.insert(req.headers.end(), extra.begin(), extra.end());
  for (int attempt = 1;; ++attempt) {
    if (stop_) throw Stopped{};
    try {
      http::Response r = c.perform(req);
      if (retryable_status(r.status) && attempt < kMaxAttempts) {
        sleep_s(std::min(kMaxRetryAfter, retry_after(r).value_or(backoff(attempt))));
        continue;
      }
      return r;
    } catch (const http::TransportError& e) {
      using K = http::TransportError::Kind;
      bool again = e.kind() == K::Transfer ? attempt < kMaxAttempts
                   : e.kind() == K::Connect ? attempt < 2
                                            : false;
      if (!again) fail_transport(e, url, file);
      sleep_s(backoff(attempt));
    }
  }
}

// The file's metadata at rev, or nullopt when the repository has no such file (then *absent_at
// is the commit the hub named in its answer, when it named one).
std::optional<FileMeta> Session::head(http::Client& c, const std::string& file, const std::string& rev,
                                      std::string* absent_at) {
  std::string url = resolve_url(cfg_.endpoint, repo_, rev, file);
  for (int hops = 0;; ++hops) {
    http::Response r = request(c, /*head=*/true, url, {}, file);
    if (r.status >= 300 && r.status < 400) {
      const std::string* loc = r.header("location");
      std::optional<std::string> next = loc ? http::resolve_location(url, *loc) : std::nullopt;
      if (!next)
        throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " redirected " + file +
                                       " to an unusable location " + quote_name(loc ? *loc : ""));
      if (http::is_relative_reference(*loc) || http::same_origin(*next, url)) {
        // A renamed repository, on the same site: followed.
        if (hops >= 10)
          throw Error(ErrorKind::Io, "[hub] too many redirects for " + file + " at " + http::origin_of(url));
        url = *next;
        continue;
      }
      return file_meta(r, *next, file);  // to a CDN: the metadata is in this response
    }
    if (r.status >= 200 && r.status < 300) return file_meta(r, url, file);
    const std::string* code = r.header("x-error-code");
    if (code ? *code == "EntryNotFound" : r.status == 404) {
      const std::string* commit = r.header("x-repo-commit");
      if (absent_at && commit && is_commit_hash(*commit)) *absent_at = *commit;
      return std::nullopt;
    }
    fail_status(r, url, file, rev);
  }
}

// Whether the repository has `file` at the session's commit: the snapshot already holds it
// (no request), the cache knows it is absent, or a HEAD says.
Session::Probe Session::probe(http::Client& c, const std::string& file, Item* out) {
  if (rc_.has_file(commit_, file)) return Probe::Cached;
  if (rc_.known_missing(commit_, file)) return Probe::Missing;
  std::optional<FileMeta> m = head(c, file, commit_);
  if (!m) {
    rc_.mark_missing(commit_, file);
    return Probe::Missing;
  }
  if (m->commit != commit_)
    throw Error(ErrorKind::Io, "[hub] " + at() + ": " + file + " was served from commit " + m->commit +
                                   ", not " + commit_ + " as asked");
  *out = Item{file, std::move(*m)};
  return Probe::Found;
}

void Session::probe_all(const std::vector<std::string>& files, bool required) {
  run_parallel(files.size(), kWorkers, stop_, [&](size_t i, http::Client& c) {
    Item it;
    Probe p = probe(c, files[i], &it);
    if (p == Probe::Missing && required) fail_missing(files[i]);
    if (p == Probe::Found) add_item(std::move(it));
  });
}

void Session::add_item(Item it) {
  std::lock_guard<std::mutex> l(items_mu_);
  items_.push_back(std::move(it));
}

// A file needed before the others can be named (an index): downloaded now, without a progress bar.
void Session::fetch_now(http::Client& c, const Item& item) {
  Progress none(false, 0, 0);
  fetch(c, item, none);
}

// The first weights of weight_names(component) the repository has: an index (fetched now, then
// every shard it names, which must all exist) or the single file. A model or model component
// without any is an error.
void Session::choose_weights(http::Client& c, const std::string& component) {
  const std::vector<WeightNames> names = weight_names(component);
  for (const WeightNames& f : names) {
    Item idx;
    Probe p = probe(c, f.index, &idx);
    if (p != Probe::Missing) {
      if (p == Probe::Found) fetch_now(c, idx);  // the index names the shards
      std::vector<std::string> shards =
          index_shards(rc_.pointer(commit_, f.index), in_commit(f.index),
                       component.empty() ? "the repository"
                                         : "the component folder " + quote_name(component + "/"));
      if (!component.empty())
        for (std::string& s : shards) s = component + "/" + s;
      probe_all(shards, /*required=*/true);
      return;
    }
    Item single;
    p = probe(c, f.single, &single);
    if (p == Probe::Found) add_item(std::move(single));
    if (p != Probe::Missing) return;
  }
  std::string list;
  for (const WeightNames& f : names) list += (list.empty() ? "" : ", ") + f.index + ", " + f.single;
  if (component.empty())
    throw Error("[hub] " + at() + " has no weights: none of " + list + " is in the repository");
  throw Error("[hub] " + at() + ": component " + quote_name(component) + " has no weights (" +
              component + "/config.json is there, so it is a model): none of " + list +
              " is in the repository");
}

// Which kind of repository this is, at which commit: config.json at rev makes a model; else
// model_index.json makes a pipeline (its commit pins the rest, and it is fetched now, to be read).
void Session::resolve_root(http::Client& c) {
  if (is_commit_hash(rev_) && rc_.has_file(rev_, "config.json")) {
    commit_ = rev_;
    return;
  }
  if (is_commit_hash(rev_) && rc_.has_file(rev_, kModelIndex) && rc_.known_missing(rev_, "config.json")) {
    commit_ = rev_;
    pipeline_ = true;
    return;
  }
  std::string absent_at;
  std::optional<FileMeta> m = head(c, "config.json", rev_, &absent_at);
  if (m) {
    if (is_commit_hash(rev_) && m->commit != rev_)
      throw Error(ErrorKind::Io, "[hub] " + at() + ": config.json was served from commit " + m->commit);
    commit_ = m->commit;
    add_item(Item{"config.json", std::move(*m)});
    return;
  }
  std::optional<FileMeta> p = head(c, kModelIndex, rev_);
  if (!p)
    throw Error("[hub] " + at() + ": 'config.json' does not exist in the repository, nor does '" +
                kModelIndex + "' (a diffusers pipeline's index): it is neither a model nor a pipeline");
  if (is_commit_hash(rev_) && p->commit != rev_)
    throw Error(ErrorKind::Io, "[hub] " + at() + ": " + kModelIndex + " was served from commit " + p->commit);
  commit_ = p->commit;
  if (absent_at == commit_) {
    rc_.mark_missing(commit_, "config.json");
  } else {
    // The hub named no commit for the missing config.json, or the branch moved between the two
    // requests: the commit model_index.json came from decides.
    Item cfg;
    Probe pr = probe(c, "config.json", &cfg);
    if (pr != Probe::Missing) {
      if (pr == Probe::Found) add_item(std::move(cfg));
      return;
    }
  }
  pipeline_ = true;
  fetch_now(c, Item{kModelIndex, std::move(*p)});
}

// A pipeline's components: C/config.json of each (a model when it exists); the known small files
// of the others; the weights of the models.
void Session::fetch_pipeline() {
  const std::vector<std::string> comps =
      pipeline_components(rc_.pointer(commit_, kModelIndex), in_commit(kModelIndex));
  std::vector<char> is_model(comps.size(), 0);
  run_parallel(comps.size(), kWorkers, stop_, [&](size_t i, http::Client& c) {
    Item it;
    Probe p = probe(c, comps[i] + "/config.json", &it);
    is_model[i] = p != Probe::Missing;
    if (p == Probe::Found) add_item(std::move(it));
  });
  std::vector<std::string> small, models;
  for (size_t i = 0; i < comps.size(); ++i) {
    if (is_model[i]) {
      models.push_back(comps[i]);
      continue;
    }
    for (const std::string& f : component_files()) small.push_back(comps[i] + "/" + f);
  }
  probe_all(small, /*required=*/false);
  if (opts_.weights)
    run_parallel(models.size(), kWorkers, stop_,
                 [&](size_t i, http::Client& c) { choose_weights(c, models[i]); });
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
  const fs::path inc = rc_.incomplete(m.etag);
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  Fd fd;
  fd.fd = ::open(inc.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd.fd < 0)
    throw Error(ErrorKind::Io, "[hub] cannot create " + inc.string() + ": " + std::strerror(errno));
  struct stat st{};
  ::fstat(fd.fd, &st);
  uint64_t have = static_cast<uint64_t>(st.st_size);
  Sha256 sha;
  if (m.size && have > *m.size) {
    if (::ftruncate(fd.fd, 0) != 0)
      throw Error(ErrorKind::Io, "[hub] cannot truncate " + inc.string() + ": " + std::strerror(errno));
    have = 0;
  }
  if (have && m.lfs) {
    // A resumed download: the bytes already on disk count in the digest.
    std::vector<char> buf(1 << 20);
    uint64_t off = 0;
    while (off < have) {
      ssize_t n = ::pread(fd.fd, buf.data(), std::min<uint64_t>(buf.size(), have - off), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        have = off;
        break;
      }
      sha.update(buf.data(), static_cast<size_t>(n));
      off += static_cast<uint64_t>(n);
    }
  }
  pg.add(static_cast<int64_t>(have));
  const uint64_t resumed_from = have;

  auto restart = [&] {
    if (::ftruncate(fd.fd, 0) != 0)
      throw Error(ErrorKind::Io, "[hub] cannot truncate " + inc.string() + ": " + std::strerror(errno));
    pg.add(-static_cast<int64_t>(have));
    have = 0;
    sha.reset();
  };

  std::string url = m.url;
  int hops = 0;
  for (int attempt = 1;;) {
    if (m.size && have == *m.size) break;
    if (stop_) throw Stopped{};
    std::vector<std::string> headers = base_headers(url);
    if (have) headers.push_back("Range: bytes=" + std::to_string(have) + "-");
    int write_err = 0;
    bool bad_range = false, too_long = false;
    http::Request req;
    req.url = url;
    req.headers = headers;
    req.on_headers = [&](const http::Response& r) {
      if (r.status == 206) {
        // "bytes START-END/TOTAL": the part must start where the file ends.
        const std::string* cr = r.header("content-range");
        unsigned long long start = 0;
        if (!cr || std::sscanf(cr->c_str(), "bytes %llu-", &start) != 1 || start != have) {
          bad_range = true;
          return false;
        }
      } else if (r.status >= 200 && r.status < 300 && have) {
        // The whole file is coming again.
        if (::ftruncate(fd.fd, 0) != 0) {
          write_err = errno;
          return false;
        }
        pg.add(-static_cast<int64_t>(have));
        have = 0;
        sha.reset();
      }
      return true;
    };
    req.on_body = [&](const char* p, size_t n) {
      if (stop_) return false;
      if (m.size && have + n > *m.size) {
        too_long = true;
        return false;
      }
      if ((write_err = pwrite_all(fd.fd, p, n, have)) != 0) return false;
      if (m.lfs) sha.update(p, n);
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
        throw Error(ErrorKind::Io, "[hub] cannot write " + inc.string() + ": " + std::strerror(write_err) +
                                       " (the partial file stays and resumes on the next run)");
      if (stop_) throw Stopped{};
      if (too_long) {
        restart();
        throw Error(ErrorKind::Io, "[hub] " + at() + ": " + it.file + " from " + http::origin_of(url) +
                                       " is larger than the " + std::to_string(*m.size) + " bytes announced");
      }
      if (bad_range) {
        restart();
      } else if (e.kind() == K::Fatal || e.kind() == K::Aborted ||
                 (e.kind() == K::Connect && attempt >= 2) || attempt >= kMaxAttempts) {
        fail_transport(e, url, it.file);
      } else {
        sleep_s(backoff(attempt));  // resumed from where it stopped
      }
      ++attempt;
      continue;
    }
    if (r.status >= 300 && r.status < 400) {
      const std::string* loc = r.header("location");
      std::optional<std::string> next = loc ? http::resolve_location(url, *loc) : std::nullopt;
      if (!next || ++hops > 10)
        throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " redirected " + it.file +
                                       (next ? " too many times" : " to an unusable location"));
      url = *next;
      continue;
    }
    if (r.status == 416 && have) {  // the range does not fit what is served: start over
      restart();
      ++attempt;
      continue;
    }
    if (retryable_status(r.status) && attempt < kMaxAttempts) {
      sleep_s(std::min(kMaxRetryAfter, retry_after(r).value_or(backoff(attempt))));
      ++attempt;
      continue;
    }
    if (r.status >= 200 && r.status < 300) {
      if (!m.size || have == *m.size) break;
      if (attempt >= kMaxAttempts)
        throw Error(ErrorKind::Io, "[hub] " + at() + ": " + it.file + " from " + http::origin_of(url) +
                                       " ended after " + std::to_string(have) + " of " +
                                       std::to_string(*m.size) + " bytes, " +
                                       std::to_string(kMaxAttempts) + " times");
      sleep_s(backoff(attempt++));
      continue;
    }
    fail_status(r, url, it.file, commit_);
  }
  if (::fsync(fd.fd) != 0)
    throw Error(ErrorKind::Io, "[hub] cannot write " + inc.string() + ": " + std::strerror(errno));
  if (m.lfs) {
    std::string got = sha.hex_digest();
    if (got != m.etag) {
      ::unlink(inc.c_str());
      throw Error(ErrorKind::Io, "[hub] " + at() + ": " + it.file + " is corrupt: its sha256 is " + got +
                                     ", the hub announced " + m.etag +
                                     " (X-Linked-Etag); the download was deleted, run again");
    }
  }
  ::close(fd.fd);
  fd.fd = -1;
  if (::rename(inc.c_str(), blob.c_str()) != 0)
    throw Error(ErrorKind::Io, "[hub] cannot move " + inc.string() + " to " + blob.string() + ": " +
                                   std::strerror(errno));
  sync_dir(blob.parent_path());
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
  Progress pg(opts_.progress, total, todo.size());
  run_parallel(todo.size(), kWorkers, stop_, [&](size_t i, http::Client& c) { fetch(c, *todo[i], pg); });
  pg.finish();
}

ModelSource Session::run() {
  http::Client c;
  resolve_root(c);
  if (pipeline_) {
    fetch_pipeline();
  } else {
    probe_all(optional_files(), /*required=*/false);
    if (opts_.weights) choose_weights(c, "");
  }
  download_all();
  if (rev_ != commit_) rc_.write_ref(rev_, commit_);
  const char* root = pipeline_ ? kModelIndex : "config.json";
  if (!rc_.has_file(commit_, root))
    throw Error(ErrorKind::Io, "[hub] " + rc_.pointer(commit_, root).string() +
                                   " is missing after the download");
  if (!opts_.quiet && fetched_files_)
    std::fprintf(stderr, "mobius: %s: fetched %zu file%s (%s) of commit %s into %s\n", at().c_str(),
                 fetched_files_, fetched_files_ == 1 ? "" : "s",
                 human_bytes(static_cast<double>(fetched_bytes_)).c_str(), commit_.c_str(),
                 rc_.dir().c_str());
  return ModelSource{rc_.snapshot(commit_), repo_, rev_, commit_};
}

void Session::fail_missing(const std::string& file) const {
  throw Error("[hub] " + at() + ": " + quote_name(file) + " does not exist in the repository");
}

void Session::fail_status(const http::Response& r, const std::string& url, const std::string& file,
                          const std::string& rev) const {
  const std::string* code_h = r.header("x-error-code");
  const std::string* msg_h = r.header("x-error-message");
  const std::string code = code_h ? *code_h : "";
  const std::string page = cfg_.endpoint + "/" + repo_;
  const std::string token_note = cfg_.token.empty() ? "" : " (the token from " + cfg_.token_source + " is used)";
  const bool from_hub = http::same_origin(url, cfg_.endpoint);  // not a CDN
  if (!from_hub) {
    throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " answered " + std::to_string(r.status) +
                                   " for " + file + " of " + at() +
                                   (retryable_status(r.status)
                                        ? " (after " + std::to_string(kMaxAttempts) + " attempts; try again later)"
                                        : ""));
  }
  if (code == "GatedRepo")
    throw Error("[hub] " + repo_ + " is a gated model: accept the conditions on the model page (" + page +
                "), then set HF_TOKEN to an access token of that account" +
                (cfg_.token.empty() ? "" : "; the token from " + cfg_.token_source + " has no access to it yet"));
  if (code == "RepoNotFound" || (r.status == 401 && code.empty() && cfg_.token.empty()))
    throw Error("[hub] " + repo_ + " was not found on " + cfg_.endpoint +
                ": the repository does not exist, or it is private" +
                (cfg_.token.empty()
                     ? "; if it is private, set HF_TOKEN to an access token that can read it"
                     : " and the token from " + cfg_.token_source + " cannot read it"));
  if (code == "RevisionNotFound")
    throw Error("[hub] " + repo_ + ": revision " + quote_name(rev) +
                " does not exist (no branch, tag or commit of that name)");
  if (code == "EntryNotFound" || r.status == 404)
    throw Error("[hub] " + at() + ": " + quote_name(file) + " does not exist in the repository");
  if (code == "DisabledRepo")
    throw Error("[hub] " + repo_ + " has been disabled on " + cfg_.endpoint);
  if (r.status == 401)
    throw Error("[hub] " + http::origin_of(url) + " refused the token" + token_note +
                " (401): it is invalid or expired");
  std::string what = "[hub] " + http::origin_of(url) + " answered " + std::to_string(r.status) + " for " +
                     file + " of " + at();
  if (msg_h) what += ": " + printable(*msg_h);
  if (retryable_status(r.status))
    what += " (after " + std::to_string(kMaxAttempts) + " attempts; try again later)";
  throw Error(ErrorKind::Io, what);
}

void Session::fail_transport(const http::TransportError& e, const std::string& url,
                             const std::string& file) const {
  const bool endpoint = http::same_origin(url, cfg_.endpoint);
  std::string msg = "[hub] cannot " + std::string(endpoint ? "reach the hub at " : "download from ") +
                    http::origin_of(url) + " (" + file + " of " + at() + "): " + printable(e.what());
  if (endpoint && std::getenv("HF_ENDPOINT")) msg += "; HF_ENDPOINT is " + quote_name(cfg_.endpoint);
  std::optional<std::string> cached = is_commit_hash(rev_) ? std::optional(rev_) : rc_.read_ref(rev_);
  if (cached && (rc_.has_file(*cached, "config.json") || rc_.has_file(*cached, kModelIndex)))
    msg += "; the cache has " + at() + " (commit " + *cached + "): set HF_HUB_OFFLINE=1 to build from it";
  else
    msg += "; check the network and any proxy (HTTPS_PROXY)";
  throw Error(ErrorKind::Io, msg);
}

[[noreturn]] void fail_offline(const Config& cfg, const std::string& repo, const std::string& what) {
  (void)cfg;
  throw Error("[hub] " + what + " and HF_HUB_OFFLINE is set: run once without HF_HUB_OFFLINE "
              "(`mobius download " + repo + "`) to fetch it");
}

}  // namespace

FileMeta file_meta(const http::Response& r, const std::string& url, const std::string& file) {
  FileMeta m;
  const std::string* commit = r.header("x-repo-commit");
  if (!commit || !is_commit_hash(*commit))
    throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " sent " +
                                   (commit ? "an invalid X-Repo-Commit " + quote_name(*commit) : "no X-Repo-Commit") +
                                   " for " + file + ": it does not look like a Hugging Face hub (check HF_ENDPOINT and any proxy)");
  m.commit = *commit;
  const std::string* linked = r.header("x-linked-etag");
  const std::string* etag = linked ? linked : r.header("etag");
  if (!etag)
    throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " sent no ETag for " + file);
  m.etag = normalize_etag(*etag);
  m.lfs = linked != nullptr;
  if (!is_safe_etag(m.etag))
    throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " sent an unusable ETag " +
                                   quote_name(*etag) + " for " + file);
  if (m.lfs && !is_sha256(m.etag))
    throw Error(ErrorKind::Io, "[hub] " + http::origin_of(url) + " sent an X-Linked-Etag for " + file +
                                   " that is not a sha256: " + quote_name(*etag));
  if (const std::string* ls = r.header("x-linked-size"))
    m.size = parse_u64(ls);
  else if (r.status >= 200 && r.status < 300)
    m.size = parse_u64(r.header("content-length"));
  m.url = url;
  return m;
}

namespace {

// The whole text of a cached file of at most max_bytes (a whole number of MiB).
std::string read_limited(const fs::path& file, const std::string& display, size_t max_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("[hub] cannot read " + file.string());
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes)
      throw Error("[hub] " + display + ": larger than " + std::to_string(max_bytes >> 20) + " MiB");
  }
  return text;
}

}  // namespace

bool is_component_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.'))
      return false;
  return true;
}

std::vector<std::string> pipeline_components(const fs::path& index_file, const std::string& display) {
  constexpr TextLimits kIndexLimits{1u << 20, 64, 1u << 16};
  const std::string text = read_limited(index_file, display, kIndexLimits.max_bytes);
  const nlohmann::json j = parse_json_limited(text, display, kIndexLimits, "hub");
  if (!j.is_object()) throw Error("[hub] " + display + ": not a JSON object");
  std::vector<std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (key.empty() || key[0] == '_') continue;  // _class_name, _diffusers_version, ...
    if (!value.is_array()) continue;             // settings such as requires_safety_checker
    const std::string where = "[hub] " + display + ": component " + quote_name(key);
    if (value.size() != 2)
      throw Error(where + ": expected [library, class], got " + std::to_string(value.size()) +
                  " entries; nothing was requested for it");
    if (value[0].is_null() && value[1].is_null()) continue;  // an optional component left out
    if (!value[0].is_string() || !value[1].is_string())
      throw Error(where + ": expected [library, class] as two strings or two nulls; nothing was "
                          "requested for it");
    if (!is_component_name(key))
      throw Error(where + " is not a folder name (letters, digits, '_', '-' and '.', not starting "
                          "with '.'): it would not be a folder of the pipeline; nothing was "
                          "requested for it");
    out.push_back(key);
  }
  if (out.size() > kMaxComponents)
    throw Error("[hub] " + display + ": more than " + std::to_string(kMaxComponents) + " components");
  return out;
}

std::vector<WeightNames> weight_names(const std::string& component) {
  std::vector<WeightNames> v;
  if (component.empty()) {
    for (const WeightFormat& f : kWeightFormats) v.push_back({f.index, f.single});
  } else {
    for (const CheckpointFormat& f : ::mobius::kWeightFormats)
      v.push_back({component + "/" + f.index_name, component + "/" + f.single_name});
  }
  return v;
}

std::vector<std::string> index_shards(const fs::path& index_file, const std::string& display,
                                      const std::string& scope) {
  constexpr TextLimits kIndexLimits{100u << 20, 64, 1u << 24};
  const std::string text = read_limited(index_file, display, kIndexLimits.max_bytes);
  nlohmann::json j = parse_json_limited(text, display, kIndexLimits, "hub");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error("[hub] " + display + ": no 'weight_map' object");
  std::set<std::string> names;
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string())
      throw Error("[hub] " + display + ": tensor " + quote_name(tensor) + " maps to a non-string shard");
    const std::string& s = shard.get_ref<const std::string&>();
    // Names are shown in messages as they are: nothing printable() would escape or cut.
    if (!is_safe_repo_path(s) || printable(s, 1024) != s)
      throw Error("[hub] " + display + ": shard " + quote_name(s) + " is not a relative file name inside " +
                  scope + " (absolute, '..' or a bad character); nothing was requested for it");
    names.insert(s);
  }
  if (names.empty()) throw Error("[hub] " + display + ": the weight_map lists no shard");
  if (names.size() > 100000) throw Error("[hub] " + display + ": more than 100000 shards");
  return {names.begin(), names.end()};
}

std::string resolve_url(const std::string& endpoint, const std::string& repo,
                        const std::string& revision, const std::string& file) {
  return endpoint + "/" + repo + "/resolve/" + http::url_encode(revision, false) + "/" +
         http::url_encode(file, true);
}

namespace {

// The weights of the model (component empty) or model component at commit are in the cache: the
// first index of weight_names with every shard it names, or a single file. Throws the offline
// error naming what is missing.
void check_offline_weights(const Config& cfg, const RepoCache& rc, const std::string& commit,
                           const std::string& at, const std::string& component) {
  const std::string snap = rc.snapshot(commit).string();
  const std::string prefix = component.empty() ? "" : component + "/";
  for (const WeightNames& f : weight_names(component)) {
    if (rc.has_file(commit, f.index)) {
      const std::string display = at + " (commit " + commit + "): " + f.index;
      for (const std::string& s :
           index_shards(rc.pointer(commit, f.index), display,
                        component.empty() ? "the repository"
                                          : "the component folder " + quote_name(prefix)))
        if (!rc.has_file(commit, prefix + s))
          fail_offline(cfg, rc.repo_id(), "shard " + quote_name(prefix + s) + " of " + at +
                                              " is not in the cache (" + snap + ")");
      return;
    }
    if (rc.has_file(commit, f.single)) return;
  }
  if (component.empty())
    fail_offline(cfg, rc.repo_id(), "the weights of " + at + " (model.safetensors, or its index, or pytorch_model.bin) are not in the cache (" +
                                        snap + ")");
  fail_offline(cfg, rc.repo_id(),
               "the weights of component " + quote_name(component) + " of " + at + " (" + prefix +
                   "diffusion_pytorch_model.safetensors, or another name diffusers or transformers "
                   "gives weights, or its index) are not in the cache (" + snap + ")");
}

}  // namespace

ModelSource offline_snapshot(const Config& cfg, const std::string& repo, const std::string& revision,
                             bool weights) {
  RepoCache rc(cfg.cache, repo);
  const std::string at = repo + (revision == "main" ? "" : "@" + printable(revision));
  std::optional<std::string> commit = is_commit_hash(revision) ? std::optional(revision) : rc.read_ref(revision);
  std::error_code ec;
  if (!commit || !fs::is_directory(rc.snapshot(*commit), ec))
    fail_offline(cfg, repo, at + " is not in the cache " + cfg.cache.string());
  const fs::path snap = rc.snapshot(*commit);
  if (rc.has_file(*commit, "config.json")) {
    if (weights) check_offline_weights(cfg, rc, *commit, at, "");
  } else if (rc.has_file(*commit, kModelIndex)) {
    // A pipeline: each component a model (its config.json and weights) or a folder of files.
    for (const std::string& c : pipeline_components(rc.pointer(*commit, kModelIndex),
                                                    at + " (commit " + *commit + "): " + kModelIndex)) {
      const std::string config = c + "/config.json";
      if (rc.has_file(*commit, config)) {
        if (weights) check_offline_weights(cfg, rc, *commit, at, c);
      } else if (!rc.known_missing(*commit, config) && !fs::is_directory(snap / c, ec)) {
        // Neither fetched nor known to be absent: the cache holds no part of the component.
        fail_offline(cfg, repo, "component " + quote_name(c) + " of " + at + " is not in the cache (no " +
                                    config + " nor any other file of " + c + "/ in " + snap.string() + ")");
      }
    }
  } else {
    fail_offline(cfg, repo, "config.json (or model_index.json, for a diffusers pipeline) of " + at +
                                " is not in the cache (" + snap.string() + ")");
  }
  return ModelSource{snap, repo, revision, *commit};
}

ModelSource online_snapshot(const Config& cfg, const std::string& repo, const std::string& revision,
                            const HubOptions& opts) {
  Session s(cfg, repo, revision, opts);
  return s.run();
}

}  // namespace hub

std::optional<HubSpec> parse_hub_spec(std::string_view spec) {
  HubSpec h;
  size_t at = spec.find('@');
  h.repo_id = std::string(spec.substr(0, at));
  if (at != std::string_view::npos) {
    h.revision = std::string(spec.substr(at + 1));
    if (!hub::is_valid_revision(h.revision)) return std::nullopt;
  }
  if (!hub::is_valid_repo_id(h.repo_id)) return std::nullopt;
  return h;
}

ModelSource fetch_from_hub(const std::string& spec, const HubOptions& opts) {
  std::optional<HubSpec> h = parse_hub_spec(spec);
  if (!h)
    throw Error("[hub] " + quote_name(spec) +
                " is not a hub id: expected org/name or org/name@revision (letters, digits, '-', '_', "
                "'.', at most 96 per part, no '--' or '..')");
  std::string rev = h->revision;
  if (!opts.revision.empty()) {
    if (!rev.empty() && rev != opts.revision)
      throw Error("[hub] " + quote_name(spec) + " names revision " + quote_name(rev) +
                  " but --revision is " + quote_name(opts.revision));
    rev = opts.revision;
  }
  if (rev.empty()) rev = "main";
  if (!hub::is_valid_revision(rev))
    throw Error("[hub] revision " + quote_name(rev) + " is not a valid branch, tag or commit name");
  hub::Config cfg = hub::Config::from_env();
  if (cfg.offline) return hub::offline_snapshot(cfg, h->repo_id, rev, opts.weights);
  return hub::online_snapshot(cfg, h->repo_id, rev, opts);
}

ModelSource resolve_model(const std::string& model, const HubOptions& opts) {
  std::error_code ec;
  if (!model.empty() && std::filesystem::exists(model, ec)) {
    if (!opts.revision.empty())
      throw Error("[source] --revision applies to hub ids, and " + quote_name(model) + " is a local path");
    return ModelSource{model, "", "", ""};
  }
  if (!parse_hub_spec(model))
    throw Error("[source] " + quote_name(model) +
                " does not exist, and is not a hub id (org/name or org/name@revision)");
  return fetch_from_hub(model, opts);
}

}  // namespace mobius
