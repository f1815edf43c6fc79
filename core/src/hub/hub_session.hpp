// hub_session.hpp - one online fetch of a repository, shared by hub.cpp (which files, at which
// commit: the protocol) and hub_download.cpp (each request, with its timeouts, retries and
// redirect policy; each blob's download, check and commit into the cache). Internal to the hub.
//
// Bounds of one file (huggingface_hub's variables, read by Config::from_env):
//   - a metadata request (HEAD) must be answered within HF_HUB_ETAG_TIMEOUT seconds (10);
//   - a download's headers must be in within HF_HUB_DOWNLOAD_TIMEOUT seconds (10), then its body
//     must bring at least kMinRate bytes/s over every HF_HUB_DOWNLOAD_TIMEOUT seconds;
//   - at most kMaxAttempts attempts (429, 5xx, a dropped connection), of which at most
//     kMaxTimeouts may time out and kMaxConnectFailures may fail to connect; the waits between
//     attempts (1, 2, 4, 8 s, or what Retry-After asks, at most kMaxRetryAfter s each) total
//     at most kMaxTotalWait seconds.
//   So a hub that never answers, or trickles, fails one file after 2 x timeout + 1 s (21 s with
//   the defaults); a file that makes no progress ends within 5 x timeout + 60 s.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hub/hub.hpp"
#include "hub/net_policy.hpp"
#include "util/progress.hpp"
#include "util/untrusted.hpp"

namespace mobius::hub {

inline constexpr int kMaxTimeouts = 2;
inline constexpr int kMaxConnectFailures = 2;
inline constexpr double kMaxTotalWait = 60;
inline constexpr uint64_t kMinRate = 1024;

// One progress line on stderr for all files: bar, bytes, throughput, ETA, files done.
class Progress {
 public:
  // `report`, when set, is called instead of drawing the bar.
  Progress(bool enabled, uint64_t total, size_t files,
           std::function<void(const char*, uint64_t, uint64_t)> report = {})
      : enabled_(enabled || report), total_(total), files_(files), t0_(std::chrono::steady_clock::now()),
        report_(std::move(report)) {
    if (enabled_) thread_ = std::thread([this] { loop(); });
  }
  ~Progress() { finish(); }
  void add(int64_t n) { done_ += n; }
  void file_done() { ++files_done_; }
  void finish();

 private:
  void loop();
  void draw(bool final);

  bool enabled_;
  uint64_t total_;
  size_t files_;
  std::chrono::steady_clock::time_point t0_;
  std::function<void(const char*, uint64_t, uint64_t)> report_;
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

inline bool retryable_status(long s) { return s == 429 || (s >= 500 && s <= 599); }

// A decimal header value of at most 19 digits.
std::optional<uint64_t> parse_u64(const std::string* s);

// The retry rules of one request or one file's download (see the bounds above).
class RetryBudget {
 public:
  // Whether another attempt may follow one that failed this way; sleeps the wait first.
  // `asked` is a Retry-After value.
  bool again_after_status(std::optional<double> asked);
  bool again_after(http::TransportError::Kind kind);
  int attempts() const { return attempts_; }

 private:
  bool wait(double seconds);
  int attempts_ = 1;
  int timeouts_ = 0;
  int connect_failures_ = 0;
  double waited_ = 0;
};

class Session {
 public:
  Session(const Config& cfg, std::string repo, std::string revision, const HubOptions& opts);

  ModelSource run();

 private:
  struct Item {
    std::string file;
    FileMeta meta;
  };
  enum class Probe { Cached, Found, Missing };

  // hub_download.cpp: requests.
  http::Request make_request(bool head, const std::string& url) const;
  http::Response request(http::Client& c, bool head, const std::string& url, const std::string& file);
  void check_hop(const std::string& from, const std::string& to, const std::string& file) const;
  std::string timeout_note(bool head) const;
  // hub_download.cpp: blobs.
  void download_all();
  void fetch(http::Client& c, const Item& item, Progress& pg);
  void publish(const Item& item);

  // hub.cpp: the protocol.
  std::optional<FileMeta> head(http::Client& c, const std::string& file, const std::string& rev,
                               std::string* absent_at = nullptr);
  Probe probe(http::Client& c, const std::string& file, Item* out);
  void probe_all(const std::vector<std::string>& files, bool required);
  void add_item(Item it);
  void resolve_root(http::Client& c);
  void fetch_now(http::Client& c, const Item& item);
  void choose_weights(http::Client& c, const std::string& component);
  void fetch_pipeline();
  void fetch_sentence_modules(http::Client& c);

  [[noreturn]] void fail_status(const http::Response& r, const std::string& url,
                                const std::string& file, const std::string& rev) const;
  [[noreturn]] void fail_transport(const http::TransportError& e, const std::string& url,
                                   const std::string& file, bool head) const;
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
  // The space of the endpoint's address: no redirect leads to a more private one.
  net::AddressSpace context_ = net::AddressSpace::Public;
  bool check_sockets_ = true;  // no proxy: the address connected to is checked too
  std::string commit_;
  bool pipeline_ = false;  // model_index.json at the root, no config.json
  std::mutex items_mu_;
  std::vector<Item> items_;  // files to link or download
  std::atomic<bool> stop_{false};
  uint64_t fetched_bytes_ = 0;
  size_t fetched_files_ = 0;
};

}  // namespace mobius::hub
