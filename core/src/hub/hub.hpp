// hub.hpp - the download protocol of huggingface_hub, natively: which files a build needs, HEAD
// for each file's metadata, GET of what the cache lacks (resumed, retried, verified), published
// into the cache layout of hub_cache.hpp. The public entry points are in mobius/hub.hpp.
//
// A repository is a model when it has config.json at its root, else a diffusers pipeline when it
// has model_index.json: then each component model_index.json lists is a folder of its own, a
// model (C/config.json and its weights) or a folder of small files (tokenizer/, scheduler/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_files.hpp"
#include "hub/hub_cache.hpp"
#include "util/untrusted.hpp"
#include "hub/http.hpp"
#include "mobius/hub.hpp"

namespace mobius::hub {

// The files a build takes besides the weights and config.json, each fetched when the repository
// has it: what a runtime needs beside the model (runtime_file_names).
inline const std::vector<std::string>& optional_files() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> names;
    for (const std::string& n : runtime_file_names())
      if (n != "config.json") names.push_back(n);
    return names;
  }();
  return v;
}

// A sentence-transformers folder's list of modules (at most 1 MiB of JSON).
inline constexpr const char* kSentenceModules = "modules.json";
inline constexpr uint64_t kSentenceModulesMax = 1u << 20;
// The config of each module modules.json lists with a folder ("1_Pooling/config.json"), the
// Transformer (path "") left out. Throws mobius::Error "[hub] <display>: ..." for a file that is
// not a list of modules, a module without a 'path' string, or a path is_component_name refuses.
std::vector<std::string> sentence_module_configs(const std::filesystem::path& modules_file,
                                                 const std::string& display);

// Weights, in the order they are looked for: the first one the repository has is taken.
struct WeightFormat {
  const char* index;
  const char* single;
};
inline constexpr WeightFormat kWeightFormats[] = {
    {"model.safetensors.index.json", "model.safetensors"},
    {"pytorch_model.bin.index.json", "pytorch_model.bin"},
};

// A diffusers pipeline's index, at the repository's root when config.json is not.
inline constexpr const char* kModelIndex = "model_index.json";
// At most this many components in a model_index.json (diffusers pipelines have a dozen at most).
inline constexpr size_t kMaxComponents = 64;

// The files taken from a pipeline component without config.json, each when it is there (there
// is no listing: a component none of these names matches stays empty): the small files of
// schedulers, feature extractors and tokenizers.
inline const std::vector<std::string>& component_files() {
  static const std::vector<std::string> v = {
      "scheduler_config.json", "preprocessor_config.json", "tokenizer.json",
      "tokenizer_config.json", "special_tokens_map.json",  "vocab.json",
      "merges.txt",            "added_tokens.json",        "vocab.txt",
      "spiece.model",          "tokenizer.model"};
  return v;
}

// The folder-name rule of util/untrusted.hpp, by which a pipeline's components are read.
using ::mobius::is_component_name;

// The components model_index.json lists as present, sorted: every key not starting with '_'
// whose value is an array, [library, class] as two strings ([null, null]: absent, left out).
// At most 1 MiB of JSON. Throws mobius::Error "[hub] <display>: ..." for a component that is not
// [library, class], a name that is_component_name refuses, or more than kMaxComponents.
std::vector<std::string> pipeline_components(const std::filesystem::path& index_file,
                                             const std::string& display);

// The weight files looked for in a model repository (component empty: model.safetensors and
// pytorch_model.bin, kWeightFormats below) or in a pipeline component's folder (every name of
// checkpoint_files.hpp's kWeightFormats, under "<component>/"), in order, each an index and the
// single file it shards.
struct WeightNames {
  std::string index;
  std::string single;
};
std::vector<WeightNames> weight_names(const std::string& component);

// What a HEAD of a file's resolve URL says about it.
struct FileMeta {
  std::string commit;                 // X-Repo-Commit
  std::string etag;                   // X-Linked-Etag or ETag, normalized: the blob's name
  bool lfs = false;                   // X-Linked-Etag was sent: etag is the content's sha256
  std::optional<uint64_t> size;       // X-Linked-Size, else Content-Length of a 2xx
  uint64_t limit = 0;                 // the most bytes taken: small_file_limit, else the size
  std::string url;                    // where to GET it: the redirect target, or the resolve URL
};

// Parses a HEAD response (2xx, or the 3xx to another host) of `file`. Throws mobius::Error
// naming the file and the header that is missing or unusable: an ETag that is not a digest
// (is_blob_name; a sha256 for X-Linked-Etag), a size over the file's limit (small_file_limit),
// no size for a file without a limit of its own (weights).
// `answered_by`: the URL that answered, when it is not `url` (a redirect to a CDN).
FileMeta file_meta(const http::Response& r, const std::string& url, const std::string& file,
                   const std::string& answered_by = "");

// The shard names an index's weight_map lists (sorted, each once), each checked with
// is_safe_repo_path before it is used, so a name stays inside the folder the index is in (a
// pipeline component's shards are relative to the component; `scope` names that folder in the
// message: "the repository", "the component folder 'unet/'"). Throws mobius::Error naming
// `display`.
std::vector<std::string> index_shards(const std::filesystem::path& index_file,
                                      const std::string& display,
                                      const std::string& scope = "the repository");

// "{endpoint}/{repo}/resolve/{revision}/{file}", revision and path segments percent-encoded.
std::string resolve_url(const std::string& endpoint, const std::string& repo,
                        const std::string& revision, const std::string& file);

// Retries: at most kMaxAttempts tries of one request, waiting 1, 2, 4, 8 s between them (or
// what Retry-After asks, at most kMaxRetryAfter s); the other bounds are in hub_session.hpp.
inline constexpr int kMaxAttempts = 5;
inline constexpr double kMaxRetryAfter = 60;
// Files downloaded at once.
inline constexpr size_t kWorkers = 8;

// The snapshot of repo at revision from the cache alone (HF_HUB_OFFLINE): the commit from
// refs/<revision> (or the revision itself when it is a commit hash), every needed file checked:
// config.json and the weights of a model; of a pipeline, model_index.json and the config.json
// and weights of each model component.
ModelSource offline_snapshot(const Config& cfg, const std::string& repo, const std::string& revision,
                             bool weights);

// Fetches what the cache lacks and returns the snapshot.
ModelSource online_snapshot(const Config& cfg, const std::string& repo, const std::string& revision,
                            const HubOptions& opts);

}  // namespace mobius::hub
