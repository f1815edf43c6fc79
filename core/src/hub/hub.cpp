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
#include "hub/hub.hpp"

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

#include "checkpoint/checkpoint_files.hpp"
#include "util/digest.hpp"
#include "hub/hub_session.hpp"
#include "util/untrusted.hpp"

namespace mobius {
namespace hub {

Session::Session(const Config& cfg, std::string repo, std::string revision, const HubOptions& opts)
    : cfg_(cfg), repo_(std::move(repo)), rev_(std::move(revision)), opts_(opts), rc_(cfg.cache, repo_) {
  // The endpoint's own space (a name that does not resolve here is taken as public, the
  // strictest): a hub on a public address sends nothing to the private network or loopback.
  context_ = net::resolve_space(http::host_of(cfg_.endpoint)).value_or(net::AddressSpace::Public);
  check_sockets_ = !net::proxy_configured();
}

// The file's metadata at rev, or nullopt when the repository has no such file (then *absent_at
// is the commit the hub named in its answer, when it named one).
std::optional<FileMeta> Session::head(http::Client& c, const std::string& file, const std::string& rev,
                                      std::string* absent_at) {
  std::string url = resolve_url(cfg_.endpoint, repo_, rev, file);
  for (int hops = 0;; ++hops) {
    http::Response r = request(c, /*head=*/true, url, file);
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
      check_hop(url, *next, file);
      return file_meta(r, *next, file, url);  // to a CDN: the metadata is in this response
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

// A sentence-transformers repository: modules.json (fetched now, to be read), the config of each
// module it lists, and the module's weights where it has them (model.safetensors or
// pytorch_model.bin: a Dense layer's).
void Session::fetch_sentence_modules(http::Client& c) {
  Item it;
  const Probe p = probe(c, kSentenceModules, &it);
  if (p == Probe::Missing) return;
  if (p == Probe::Found) fetch_now(c, it);
  // Each module's config, and its weights where it has them (a Dense layer's).
  std::vector<std::string> files;
  for (const std::string& config : sentence_module_configs(rc_.pointer(commit_, kSentenceModules), in_commit(kSentenceModules))) {
    const std::string folder = config.substr(0, config.size() - std::string("config.json").size());
    files.push_back(config);
    if (opts_.weights)
      for (const WeightFormat& f : kWeightFormats) files.push_back(folder + f.single);
  }
  probe_all(files, /*required=*/false);
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

ModelSource Session::run() {
  http::Client c;
  resolve_root(c);
  if (pipeline_) {
    fetch_pipeline();
  } else {
    probe_all(optional_files(), /*required=*/false);
    fetch_sentence_modules(c);
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
                             const std::string& file, bool head) const {
  using K = http::TransportError::Kind;
  if (opts_.cancelled && opts_.cancelled())
    throw Error(ErrorKind::Io, "[hub] " + file + " of " + at() +
                                   ": interrupted (a partial file stays in the cache and resumes on the next run)");
  const bool endpoint = http::same_origin(url, cfg_.endpoint);
  const std::string origin = printable(http::origin_of(url));
  const std::string of = file + " of " + at();
  std::string msg;
  if (e.kind() == K::Refused) {
    throw Error(ErrorKind::Io, "[hub] " + of + ": " + printable(e.what()) + " at " + origin + ": the hub at " +
                                   http::origin_of(cfg_.endpoint) + " is on a " + net::space_name(context_) +
                                   " address, and a download never goes from there to a more private one; "
                                   "nothing was stored");
  } else if (e.kind() == K::Timeout) {
    msg = "[hub] " + origin + " was too slow for " + of + ": " + printable(e.what()) + timeout_note(head);
  } else if (e.kind() == K::Transfer) {
    msg = "[hub] " + of + " could not be " + (head ? "asked for at " : "downloaded from ") + origin +
          ", the connection failed every time: " + printable(e.what());
  } else {
    msg = "[hub] cannot " + std::string(endpoint ? "reach the hub at " : "download from ") + origin + " (" + of +
          "): " + printable(e.what());
  }
  if (endpoint && std::getenv("HF_ENDPOINT")) msg += "; HF_ENDPOINT is " + quote_name(cfg_.endpoint);
  std::optional<std::string> cached = is_commit_hash(rev_) ? std::optional(rev_) : rc_.read_ref(rev_);
  if (cached && (rc_.has_file(*cached, "config.json") || rc_.has_file(*cached, kModelIndex)))
    msg += "; the cache has " + at() + " (commit " + *cached + "): set HF_HUB_OFFLINE=1 to build from it";
  else
    msg += "; check the network and any proxy (HTTPS_PROXY)";
  throw Error(ErrorKind::Io, msg);
}

namespace {

[[noreturn]] void fail_offline(const Config& cfg, const std::string& repo, const std::string& what) {
  (void)cfg;
  throw Error("[hub] " + what + " and HF_HUB_OFFLINE is set: run once without HF_HUB_OFFLINE "
              "(`mobius download " + repo + "`) to fetch it");
}

}  // namespace

FileMeta file_meta(const http::Response& r, const std::string& url, const std::string& file,
                   const std::string& answered_by) {
  // Messages name the server that answered (the hub, for a redirect to a CDN).
  const std::string& where = answered_by.empty() ? url : answered_by;
  FileMeta m;
  const std::string* commit = r.header("x-repo-commit");
  if (!commit || !is_commit_hash(*commit))
    throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(where)) + " sent " +
                                   (commit ? "an invalid X-Repo-Commit " + quote_name(*commit) : "no X-Repo-Commit") +
                                   " for " + file + ": it does not look like a Hugging Face hub (check HF_ENDPOINT and any proxy)");
  m.commit = *commit;
  const std::string* linked = r.header("x-linked-etag");
  const std::string* etag = linked ? linked : r.header("etag");
  if (!etag)
    throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(where)) + " sent no ETag for " + file);
  m.etag = normalize_etag(*etag);
  m.lfs = linked != nullptr;
  // The ETag names the blob the bytes are stored as: only the digest they are checked against
  // can be one (the sha256 of an LFS file, the git blob sha1 of any other), never a name another
  // file's blob or download could take.
  if (m.lfs ? !is_sha256_hex(m.etag) : !is_sha1_hex(m.etag))
    throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(where)) + " sent " +
                                   (m.lfs ? "an X-Linked-Etag" : "an ETag") + " for " + file + " that is not " +
                                   (m.lfs ? "a sha256 (64 lowercase hex digits): "
                                          : "a git blob sha1 (40 lowercase hex digits; an LFS file's sha256 comes as X-Linked-Etag): ") +
                                   quote_name(*etag) + "; nothing was requested for it");
  const std::string* ls = r.header("x-linked-size");
  const std::string* cl = r.status >= 200 && r.status < 300 ? r.header("content-length") : nullptr;
  if (ls || cl) {
    m.size = parse_u64(ls ? ls : cl);
    if (!m.size)
      throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(where)) + " sent an unusable " +
                                     (ls ? "X-Linked-Size " : "Content-Length ") + quote_name(ls ? *ls : *cl) +
                                     " for " + file);
  }
  // A small file is bounded by what its reader accepts; anything else (weights) by its size.
  m.limit = small_file_limit(file);
  if (m.limit == 0) {
    if (!m.size)
      throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(where)) + " sent no size for " + file +
                                     " (X-Linked-Size or Content-Length): a download of unknown length is not taken");
    m.limit = *m.size;
  } else if (m.size && *m.size > m.limit) {
    throw Error(ErrorKind::Io, "[hub] " + printable(http::origin_of(where)) + " announced " + file + " at " +
                                   std::to_string(*m.size) + " bytes, over the " + human_bytes(static_cast<double>(m.limit)) +
                                   " a " + fs::path(file).filename().string() +
                                   " may have; nothing was requested for it");
  }
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

std::vector<std::string> pipeline_components(const fs::path& index_file, const std::string& display) {
  constexpr TextLimits kIndexLimits{kPipelineIndexMax, 64, 1u << 16};
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

std::vector<std::string> sentence_module_configs(const fs::path& modules_file, const std::string& display) {
  constexpr TextLimits kModulesLimits{kSentenceModulesMax, 16, 1u << 12};
  const std::string text = read_limited(modules_file, display, kModulesLimits.max_bytes);
  const nlohmann::json j = parse_json_limited(text, display, kModulesLimits, "hub");
  if (!j.is_array() || j.size() > kMaxComponents)
    throw Error("[hub] " + display + ": not a list of at most " + std::to_string(kMaxComponents) +
                " modules; nothing was requested for it");
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto path = j[i].is_object() ? j[i].find("path") : j[i].end();
    if (!j[i].is_object() || path == j[i].end() || !path->is_string())
      throw Error("[hub] " + display + ": module " + std::to_string(i) +
                  " has no 'path' string; nothing was requested for it");
    const std::string p = path->get<std::string>();
    if (p.empty()) continue;  // the Transformer: the repository's root
    if (!is_component_name(p))
      throw Error("[hub] " + display + ": module " + std::to_string(i) + "'s path " + quote_name(p) +
                  " is not a folder name (letters, digits, '_', '-' and '.', not starting with '.'); nothing "
                  "was requested for it");
    out.push_back(p + "/config.json");
  }
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
  constexpr TextLimits kIndexLimits{kWeightIndexMax, 64, 1u << 24};
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