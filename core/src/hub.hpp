// hub.hpp - the download protocol of huggingface_hub, natively: which files a build needs, HEAD
// for each file's metadata, GET of what the cache lacks (resumed, retried, verified), published
// into the cache layout of hub_cache.hpp. The public entry points are in mobius/hub.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hub_cache.hpp"
#include "http.hpp"
#include "mobius/hub.hpp"

namespace mobius::hub {

// The files a build takes besides the weights, each fetched when the repository has it.
inline const std::vector<std::string>& optional_files() {
  static const std::vector<std::string> v = {
      "generation_config.json", "tokenizer.json",     "tokenizer_config.json",
      "special_tokens_map.json", "tokenizer.model",   "vocab.json",
      "merges.txt",             "added_tokens.json",  "chat_template.jinja",
      "chat_template.json"};
  return v;
}

// Weights, in the order they are looked for: the first one the repository has is taken.
struct WeightFormat {
  const char* index;
  const char* single;
};
inline constexpr WeightFormat kWeightFormats[] = {
    {"model.safetensors.index.json", "model.safetensors"},
    {"pytorch_model.bin.index.json", "pytorch_model.bin"},
};

// What a HEAD of a file's resolve URL says about it.
struct FileMeta {
  std::string commit;                 // X-Repo-Commit
  std::string etag;                   // X-Linked-Etag or ETag, normalized: the blob's name
  bool lfs = false;                   // X-Linked-Etag was sent: etag is the content's sha256
  std::optional<uint64_t> size;       // X-Linked-Size, else Content-Length of a 2xx
  std::string url;                    // where to GET it: the redirect target, or the resolve URL
};

// Parses a HEAD response (2xx, or the 3xx to another host) of `file`. Throws mobius::Error
// naming the file and the header that is missing or unusable.
FileMeta file_meta(const http::Response& r, const std::string& url, const std::string& file);

// The shard names an index's weight_map lists (sorted, each once), each checked with
// is_safe_repo_path before it is used. Throws mobius::Error naming `display`.
std::vector<std::string> index_shards(const std::filesystem::path& index_file,
                                      const std::string& display);

// "{endpoint}/{repo}/resolve/{revision}/{file}", revision and path segments percent-encoded.
std::string resolve_url(const std::string& endpoint, const std::string& repo,
                        const std::string& revision, const std::string& file);

// Retries: at most kMaxAttempts tries of one request, waiting 1, 2, 4, 8 s between them (or
// what Retry-After asks, at most kMaxRetryAfter s). A failed connection is tried twice only.
inline constexpr int kMaxAttempts = 5;
inline constexpr double kMaxRetryAfter = 60;
// Files downloaded at once.
inline constexpr size_t kWorkers = 8;

// The snapshot of repo at revision from the cache alone (HF_HUB_OFFLINE): the commit from
// refs/<revision> (or the revision itself when it is a commit hash), every needed file checked.
ModelSource offline_snapshot(const Config& cfg, const std::string& repo, const std::string& revision,
                             bool weights);

// Fetches what the cache lacks and returns the snapshot.
ModelSource online_snapshot(const Config& cfg, const std::string& repo, const std::string& revision,
                            const HubOptions& opts);

}  // namespace mobius::hub
