// mobius/hub.hpp - checkpoints from the Hugging Face Hub: a model given as "org/name[@revision]"
// is fetched into huggingface_hub's own cache (HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN,
// HF_HUB_OFFLINE, read as huggingface_hub reads them) and built from its snapshot folder. A model
// Python's `hf download` fetched builds from the cache, and one mobius fetched loads in Python.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "mobius/error.hpp"

namespace mobius {

struct HubOptions {
  std::string revision;   // branch, tag or commit hash; empty: the id's @REV, else "main"
  bool weights = true;    // false: config, generation config and tokenizer files only (a pipeline: every component but its weights)
  bool progress = false;  // one progress bar for all files on stderr
  bool quiet = false;     // no notes on stderr
  // Called about every 100 ms while files download (stage "download"), instead of the bar.
  std::function<void(const char* stage, uint64_t done, uint64_t total)> on_progress;
  // Polled while files download: true stops them (mobius::Error "[hub] ... interrupted").
  std::function<bool()> cancelled;
};

// Where a model comes from: a local folder, or a snapshot of a hub repository.
struct ModelSource {
  std::filesystem::path dir;  // the folder to build from
  std::string repo_id;        // "org/name"; empty for a local folder
  std::string revision;       // the revision asked for ("main" by default)
  std::string commit;         // the commit the snapshot is (40 hex digits)
  bool from_hub() const { return !repo_id.empty(); }
};

// "org/name" or "org/name@revision" with a valid repo id (huggingface_hub's rules) and, when
// given, a valid revision; nullopt otherwise.
struct HubSpec {
  std::string repo_id;
  std::string revision;  // empty when the spec has no @REV
};
std::optional<HubSpec> parse_hub_spec(std::string_view spec);

// An existing path is a local folder (opts.revision must then be empty). Anything else that
// parses as a hub id is fetched (or, with HF_HUB_OFFLINE, looked up in the cache). Anything else
// is an error saying the path does not exist and is not a hub id. Throws mobius::Error.
ModelSource resolve_model(const std::string& model, const HubOptions& opts);

// Fetches (or looks up offline) the files a build needs from "org/name[@REV]" and returns the
// snapshot. Throws mobius::Error with what the user can do about it.
ModelSource fetch_from_hub(const std::string& spec, const HubOptions& opts);

}  // namespace mobius
