// info_folder.cpp - `mobius info`: the folder's files, its provenance, layout and runtime config
// (info_model.hpp). Everything read is untrusted: the JSON files within kConfigLimits, every
// field type-checked, no link followed.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "info/info_model.hpp"
#include "mobius/error.hpp"
#include "save/layout.hpp"
#include "util/untrusted.hpp"  // printable, quote_name, parse_json_limited

namespace mobius::info {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, const std::string& reason) {
  throw Error(ErrorKind::Io, "[info] " + printable(what, 4096) + ": " + reason);
}

std::string errno_message(int err) { return std::strerror(err); }

FileStat stat_at(int dirfd, const std::string& name) {
  FileStat s;
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return s;
  s.exists = true;
  s.regular = S_ISREG(st.st_mode);
  s.symlink = S_ISLNK(st.st_mode);
  s.directory = S_ISDIR(st.st_mode);
  s.size = static_cast<uint64_t>(st.st_size);
  return s;
}

// A sub-folder (one plain name) of dirfd, not followed when a link; an invalid Fd when absent.
Fd open_subdir(int dirfd, const std::string& name) {
  return Fd(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

std::optional<std::string> read_file(int dirfd, const std::string& name, uint64_t max,
                                     const std::string& shown) {
  Fd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.ok()) {
    const int err = errno;
    if (err == ENOENT) return std::nullopt;
    if (err == ELOOP) fail(shown, "is a symbolic link (not followed)");
    fail(shown, "cannot open: " + errno_message(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(shown, "cannot stat: " + errno_message(errno));
  if (!S_ISREG(st.st_mode)) fail(shown, "is not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max)
    fail(shown, "is " + human(size) + ", more than the " + human(max) +
                    " read of it (a graph keeps its weights in external data; a config is small)");
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(shown, "cannot read: " + errno_message(errno));
    if (n == 0) break;  // shrank while read
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

std::string location_problem(const std::string& loc) {
  if (loc.empty()) return "is empty";
  if (loc == "." || loc == "..") return "is not a file name";
  if (loc.find('/') != std::string::npos || loc.find('\\') != std::string::npos)
    return "is a path, not a file name beside the graph (not followed)";
  for (unsigned char c : loc)
    if (c < 0x20 || c == 0x7F) return "holds control bytes";
  return "";
}

// --- provenance: every field type-checked; what is kept is re-emitted, nothing else.

namespace {

bool plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && location_problem(s).empty();
}

// "model.onnx" or "onnx/model_fp16.onnx": at most one folder, plain names, ending in .onnx.
bool valid_graph_path(const std::string& p) {
  if (p.size() < 6 || p.compare(p.size() - 5, 5, ".onnx") != 0) return false;
  const size_t slash = p.find('/');
  if (slash == std::string::npos) return plain_name(p);
  return plain_name(p.substr(0, slash)) && plain_name(p.substr(slash + 1));
}


}  // namespace

Provenance read_provenance(int dirfd, Problems& problems) {
  Provenance p;
  json j;
  try {
    auto text = read_file(dirfd, kProvenance, kConfigLimits.max_bytes, kProvenance);
    if (!text) return p;
    p.present = true;
    j = json(parse_json_limited(*text, kProvenance, kConfigLimits, "info"));
  } catch (const Error& e) {
    problems.add(e.what());
    return p;
  }
  if (!j.is_object()) {
    problems.add(std::string(kProvenance) + " is not a JSON object");
    return p;
  }
  auto wrong = [&](const std::string& key, const char* want) {
    problems.add(std::string(kProvenance) + ": " + quote_name(key) + " is not " + want + " (ignored)");
  };
  for (const char* key : {"producer", "producer_version", "model_type", "plugin", "plugin_version",
                          "weight_dtype", "runtime", "checkpoint", "execution_provider", "ops"}) {
    if (!j.contains(key)) continue;
    if (j[key].is_string())
      p.fields[key] = j[key];
    else
      wrong(key, "a string");
  }
  if (j.contains("quantization")) {
    const json& q = j["quantization"];
    const bool ok = q.is_object() && q.value("operator", json()).is_string() &&
                    q.value("bits", json()).is_number_integer() &&
                    q.value("block_size", json()).is_number_integer() &&
                    q.value("accuracy_level", json()).is_number_integer() &&
                    q.value("symmetric", json()).is_boolean();
    if (ok)
      p.fields["quantization"] = {{"operator", q["operator"]}, {"bits", q["bits"]},
                                  {"block_size", q["block_size"]},
                                  {"accuracy_level", q["accuracy_level"]},
                                  {"symmetric", q["symmetric"]}};
    else
      wrong("quantization", "an object of operator, bits, block_size, accuracy_level, symmetric");
  }
  for (const char* key : {"onnx_ir_version", "onnx_opset"}) {
    if (!j.contains(key)) continue;
    if (j[key].is_number_integer())
      p.fields[key] = j[key];
    else
      wrong(key, "an integer");
  }
  if (j.contains("graphs")) {
    const json& g = j["graphs"];
    if (!g.is_array()) {
      wrong("graphs", "a list of file names");
    } else {
      json kept = json::array();
      for (const auto& e : g) {
        if (e.is_string() && valid_graph_path(e.get<std::string>())) {
          if (p.graphs.size() >= kMaxGraphFiles) break;
          p.graphs.push_back(e.get<std::string>());
          kept.push_back(e);
        } else {
          problems.add(std::string(kProvenance) + ": graph " +
                       (e.is_string() ? quote_name(e.get<std::string>()) : std::string("entry")) +
                       " is not a .onnx file name in the folder or its onnx/ folder (ignored)");
        }
      }
      p.fields["graphs"] = kept;
    }
  }
  if (j.contains("source")) {
    const json& s = j["source"];
    if (!s.is_object()) {
      wrong("source", "an object");
    } else {
      json kept = json::object();
      for (const char* key : {"repo", "revision", "commit"}) {
        if (!s.contains(key)) continue;
        if (s[key].is_string())
          kept[key] = s[key];
        else
          wrong(std::string("source.") + key, "a string");
      }
      p.fields["source"] = kept;
    }
  }
  if (j.contains("files")) {
    const json& f = j["files"];
    if (!f.is_array()) {
      wrong("files", "a list");
    } else {
      json kept = json::array();
      size_t bad = 0;
      for (const auto& e : f) {
        if (e.is_object() && e.contains("name") && e["name"].is_string() &&
            (!e.contains("size") || e["size"].is_number_unsigned()) &&
            (!e.contains("sha256") || e["sha256"].is_string())) {
          json k = {{"name", e["name"]}};
          if (e.contains("size")) k["size"] = e["size"];
          if (e.contains("sha256")) k["sha256"] = e["sha256"];
          // How the digest was had: "computed" from the file's bytes, or "hub-blob", the name of
          // the hub cache's blob holding the file. Provenances without it computed it.
          if (e.contains("sha256_source") && e["sha256_source"].is_string())
            k["sha256_source"] = e["sha256_source"];
          kept.push_back(std::move(k));
        } else {
          ++bad;
        }
      }
      if (bad)
        problems.add(std::string(kProvenance) + ": " + std::to_string(bad) +
                     " entries of 'files' are not {name, size, sha256} (ignored)");
      p.fields["files"] = kept;
    }
  }
  return p;
}

// --- layout

namespace {

// The layout the files alone show.
Layout detect(int dirfd, Problems& problems) {
  Layout l;
  l.runtime_source = l.graphs_source = "files";
  const FileStat model = stat_at(dirfd, "model.onnx");
  if (model.exists) {
    l.runtime = stat_at(dirfd, kGenaiConfig).exists ? kRuntimeGenai : kRuntimeOrt;
    l.graphs = {"model.onnx"};
    return l;
  }
  Fd sub = open_subdir(dirfd, "onnx");
  if (!sub.ok()) return l;
  DIR* d = ::fdopendir(::dup(sub.get()));
  if (!d) return l;
  std::vector<std::string> names;
  size_t skipped = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() < 6 || n.compare(n.size() - 5, 5, ".onnx") != 0 || !plain_name(n)) continue;
    if (!stat_at(sub.get(), n).regular) continue;
    if (names.size() < kMaxGraphFiles)
      names.push_back(n);
    else
      ++skipped;
  }
  ::closedir(d);
  if (skipped) problems.add("onnx/ holds more than " + std::to_string(kMaxGraphFiles) + " .onnx files; " +
                            std::to_string(skipped) + " not shown");
  std::sort(names.begin(), names.end());
  for (const auto& n : names) l.graphs.push_back("onnx/" + n);
  if (!l.graphs.empty()) l.runtime = kRuntimeTransformersJs;
  return l;
}

}  // namespace

Layout layout(int dirfd, const Provenance& prov, Problems& problems) {
  Layout files = detect(dirfd, problems);
  Layout l = files;
  if (prov.fields.contains("runtime")) {
    const std::string r = prov.fields["runtime"].get<std::string>();
    if (const auto known = runtimes(); std::find(known.begin(), known.end(), r) != known.end()) {
      l.runtime = r;
      l.runtime_source = kProvenance;
      // ort-genai and onnxruntime share a layout (genai_config.json is checked on its own).
      const auto tjs = [](const std::string& x) { return x == kRuntimeTransformersJs; };
      if (!files.runtime.empty() && tjs(files.runtime) != tjs(r))
        problems.add(std::string(kProvenance) + " records runtime " + r + ", but the files are laid out for " +
                     files.runtime);
    } else {
      problems.add(std::string(kProvenance) + ": unknown runtime " + quote_name(r) + " (the files decide)");
    }
  }
  if (!prov.graphs.empty()) {
    l.graphs = prov.graphs;
    l.graphs_source = kProvenance;
  }
  return l;
}

// --- runtime config

json genai_config(int dirfd, const std::vector<Graph>& graphs, Problems& problems) {
  json out = json::object();
  json j;
  try {
    auto text = read_file(dirfd, kGenaiConfig, kConfigLimits.max_bytes, kGenaiConfig);
    if (!text) {
      problems.add(std::string(kGenaiConfig) + " is missing (onnxruntime-genai needs it)");
      return nullptr;
    }
    out["size"] = text->size();
    j = json(parse_json_limited(*text, kGenaiConfig, kConfigLimits, "info"));
  } catch (const Error& e) {
    problems.add(e.what());
    return out;
  }
  const json* model = j.is_object() && j.contains("model") && j["model"].is_object() ? &j["model"] : nullptr;
  if (!model) {
    problems.add(std::string(kGenaiConfig) + " has no 'model' object");
    return out;
  }
  if (model->contains("type") && (*model)["type"].is_string()) out["model_type"] = (*model)["type"];
  if (model->contains("context_length") && (*model)["context_length"].is_number_integer())
    out["context_length"] = (*model)["context_length"];
  if (j.contains("search") && j["search"].is_object() && j["search"].contains("max_length") &&
      j["search"]["max_length"].is_number_integer())
    out["max_length"] = j["search"]["max_length"];
  const json* dec = model->contains("decoder") && (*model)["decoder"].is_object() ? &(*model)["decoder"] : nullptr;
  if (dec && dec->contains("filename") && (*dec)["filename"].is_string()) {
    const std::string f = (*dec)["filename"].get<std::string>();
    out["decoder_filename"] = f;
    if (std::none_of(graphs.begin(), graphs.end(), [&](const Graph& g) { return g.file == f; }))
      problems.add(std::string(kGenaiConfig) + ": model.decoder.filename " + quote_name(f) +
                   " is not a graph of this folder");
  } else {
    problems.add(std::string(kGenaiConfig) + " names no model.decoder.filename");
  }
  return out;
}

json tjs_config(int dirfd, Problems& problems) {
  json j;
  try {
    auto text = read_file(dirfd, kConfig, kConfigLimits.max_bytes, kConfig);
    if (!text) {
      problems.add(std::string(kConfig) + " is missing (transformers.js needs it)");
      return nullptr;
    }
    j = json(parse_json_limited(*text, kConfig, kConfigLimits, "info"));
  } catch (const Error& e) {
    problems.add(e.what());
    return nullptr;
  }
  if (!j.is_object() || !j.contains("transformers.js_config") || !j["transformers.js_config"].is_object()) {
    problems.add(std::string(kConfig) + " has no \"transformers.js_config\" object");
    return nullptr;
  }
  return j["transformers.js_config"];
}

}  // namespace mobius::info
