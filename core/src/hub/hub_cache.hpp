// hub_cache.hpp - huggingface_hub's cache, shared with Python's `huggingface_hub` both ways: its
// configuration (HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE) and its layout:
//
//   <cache>/models--<org>--<name>/blobs/<etag>             file contents, named by ETag
//   <cache>/models--<org>--<name>/blobs/<etag>.incomplete  while it downloads
//
// An ETag names a blob only when it is a digest of the contents (is_blob_name), and a blob is
// committed only once its bytes hash to that name: no blob name can be another's download
// (<etag>.incomplete), and every blob the cache holds is the file its name says.
//   <cache>/models--<org>--<name>/snapshots/<commit>/<path> relative links to ../../blobs/<etag>
//   <cache>/models--<org>--<name>/refs/<revision>          the commit a branch or tag was at
//   <cache>/models--<org>--<name>/.no_exist/<commit>/<path> files known to be absent
//   <cache>/.locks/models--<org>--<name>/<etag>.lock       flock()ed while a blob downloads
//
// Names that end up in paths (repo id, revision, commit, ETag, file path) are validated here
// before any path is formed from them.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace mobius::hub {

namespace fs = std::filesystem;

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

struct Config {
  fs::path cache;            // HF_HUB_CACHE
  fs::path home;             // HF_HOME
  std::string endpoint;      // HF_ENDPOINT, no trailing '/'
  std::string token;         // HF_TOKEN, else the token file; empty: none
  std::string token_source;  // "HF_TOKEN", or the token file's path
  bool offline = false;      // HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE)
  double etag_timeout_s = 10;      // HF_HUB_ETAG_TIMEOUT: a metadata request's whole answer
  double download_timeout_s = 10;  // HF_HUB_DOWNLOAD_TIMEOUT: a download's headers, then each
                                   // window of its body (at its minimum rate)
  // Read the way huggingface_hub reads it. Throws mobius::Error for a token with control bytes,
  // or a timeout that is not a positive number of seconds (at most a day).
  static Config from_env();
};

// huggingface_hub's truthy values: 1, ON, YES, TRUE in any case.
bool env_true(const char* value);

// "org/name" (or a bare "name"): each part 1 to 96 of [A-Za-z0-9._-], starting and ending with
// a letter, digit or '_', without "--" or "..", not ending in ".git".
bool is_valid_repo_id(std::string_view id, bool require_namespace = true);
// 40 lowercase hex digits.
bool is_commit_hash(std::string_view s);
// A branch or tag name usable as refs/<revision>: git's ref rules, so no "..", no component
// starting with '.', no control bytes, spaces or any of ~^:?*[\ .
bool is_valid_revision(std::string_view rev);
// A file path inside a repository: relative, '/'-separated, no empty, "." or ".." component,
// no backslash or control byte.
bool is_safe_repo_path(std::string_view path);
// ETag as huggingface_hub stores it: the weak prefix W/ and the quotes removed.
std::string normalize_etag(std::string_view etag);
// An ETag usable as a blob name: a digest, 64 (sha256) or 40 (git blob sha1) lowercase hex
// digits.
bool is_blob_name(std::string_view etag);
// "models--org--name".
std::string repo_folder_name(std::string_view repo_id);

// One model repository in the cache.
class RepoCache {
 public:
  RepoCache(fs::path cache, std::string repo_id);

  const fs::path& dir() const { return dir_; }
  const std::string& repo_id() const { return repo_id_; }
  fs::path blob(const std::string& etag) const { return dir_ / "blobs" / etag; }
  fs::path incomplete(const std::string& etag) const { return dir_ / "blobs" / (etag + ".incomplete"); }
  fs::path snapshot(const std::string& commit) const { return dir_ / "snapshots" / commit; }
  fs::path pointer(const std::string& commit, const std::string& file) const {
    return snapshot(commit) / file;
  }
  fs::path lock_file(const std::string& etag) const;

  // The commit refs/<revision> holds, or nullopt (absent, unreadable or not a commit hash).
  std::optional<std::string> read_ref(const std::string& revision) const;
  // Writes refs/<revision> (atomically: a temp file renamed over it), unless it holds `commit`.
  void write_ref(const std::string& revision, const std::string& commit) const;

  // The file is in the snapshot (its link resolves).
  bool has_file(const std::string& commit, const std::string& file) const;
  // The snapshot's entry is a link to blobs/<etag> and that blob exists.
  bool links_to(const std::string& commit, const std::string& file, const std::string& etag) const;
  bool has_blob(const std::string& etag) const;
  // snapshots/<commit>/<file> -> ../../blobs/<etag> (one more ../ per subfolder), created
  // under a temporary name and renamed over the entry, so it is never half made.
  void link(const std::string& commit, const std::string& file, const std::string& etag) const;

  // huggingface_hub's record that a file does not exist at a commit.
  bool known_missing(const std::string& commit, const std::string& file) const;
  void mark_missing(const std::string& commit, const std::string& file) const;

 private:
  fs::path cache_;
  std::string repo_id_;
  fs::path dir_;
};

// An exclusive flock() on a lock file (created with its folder), as huggingface_hub's FileLock
// takes it, so Python and mobius downloading the same blob wait for each other. `on_wait` runs
// once when the lock is still held by another process after 10 s.
class BlobLock {
 public:
  BlobLock(const fs::path& path, const std::function<void()>& on_wait = {});
  ~BlobLock();
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

// A unique sibling name for a temporary file next to `p` (hidden, with pid and a counter).
fs::path temp_sibling(const fs::path& p);

// fsync of a folder (after a rename into it); errors are ignored.
void sync_dir(const fs::path& dir);

}  // namespace mobius::hub
