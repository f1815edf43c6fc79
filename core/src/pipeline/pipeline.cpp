// pipeline.cpp - builds of several graphs: diffusers pipeline folders and multi-graph model types.
#include "mobius/pipeline.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.hpp"
#include "save/package.hpp"
#include "util/digest.hpp"
#include "util/untrusted.hpp"

namespace mobius {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxIndexBytes = kPipelineIndexMax;
constexpr size_t kMaxCopiedFiles = 256;
const char* const kIndex = "model_index.json";

// A component as model_index.json lists it: ["diffusers", "UNet2DConditionModel"], or absent
// ([null, null]).
struct Component {
  std::string name, library, cls;
};

struct PipelineIndex {
  std::string text;
  std::string class_name;
  std::vector<Component> components;  // present ones, in the file's key order
};

// A component name is a folder of the pipeline: one path component, no leading dot.
bool folder_name(const std::string& s) {
  return !s.empty() && s.size() <= 128 && s[0] != '.' &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
         });
}

PipelineIndex read_index(const ModelFolder& folder, const fs::path& dir) {
  const fs::path file = dir / kIndex;
  PipelineIndex idx;
  idx.text = folder.read_text(kIndex, file.string(), "config", kMaxIndexBytes);
  // Key order matters only for messages; nlohmann's ordered_json keeps the file's.
  const nlohmann::json j = parse_json_limited(idx.text, file.string(), kConfigLimits);
  if (!j.is_object()) throw Error("[config] " + file.string() + ": not a JSON object");
  const auto ordered = nlohmann::ordered_json::parse(idx.text);
  auto cls = j.find("_class_name");
  if (cls == j.end() || !cls->is_string())
    throw Error("[config] " + file.string() + ": no '_class_name' string (the pipeline's class)");
  idx.class_name = cls->get<std::string>();
  for (const auto& [key, value] : ordered.items()) {
    if (key.empty() || key[0] == '_') continue;       // _class_name, _diffusers_version, ...
    if (!value.is_array()) continue;                   // settings such as requires_safety_checker
    const std::string where = file.string() + ": component " + quote_name(key);
    if (value.size() != 2)
      throw Error("[config] " + where + ": expected [library, class], got " +
                  std::to_string(value.size()) + " entries");
    if (value[0].is_null() && value[1].is_null()) continue;  // an optional component left out
    if (!value[0].is_string() || !value[1].is_string())
      throw Error("[config] " + where + ": expected [library, class] as two strings or two nulls");
    if (!folder_name(key))
      throw Error("[config] " + where + ": not a folder name (letters, digits, '_', '-', '.')");
    idx.components.push_back({key, value[0].get<std::string>(), value[1].get<std::string>()});
  }
  return idx;
}

// The component's folder, when it is a real folder of the pipeline (not a link elsewhere).
bool component_folder(const ModelFolder& root, const std::string& name) {
  struct stat st {};
  const fs::path p = root.path() / name;
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The files of a component folder that is copied (tokenizer/, scheduler/): regular files (or a
// cache snapshot's links to its blobs), read under the folder's rule; subfolders are not copied.
std::vector<std::pair<std::string, std::string>> read_copied(const fs::path& dir,
                                                             const std::string& name) {
  const ModelFolder folder(dir);
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder.path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n[0] == '.') continue;
    std::error_code ec2;
    if (e.is_directory(ec2)) continue;
    names.push_back(n);
  }
  if (ec) throw Error("[source] " + (dir / "").string() + ": cannot list: " + ec.message());
  if (names.size() > kMaxCopiedFiles)
    throw Error("[source] " + dir.string() + ": more than " + std::to_string(kMaxCopiedFiles) +
                " files in component " + quote_name(name));
  std::sort(names.begin(), names.end());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : names)
    out.emplace_back(n, folder.read_text(n, (dir / n).string(), "source", kTokenizerFileMax));
  return out;
}

BuildOptions component_options(BuildOptions opts) {
  if (!opts.runtime.empty() && opts.runtime != "onnxruntime")
    throw Error("[options] a diffusers pipeline is laid out for ONNX Runtime: its graphs are not "
                "models that --runtime " + opts.runtime + " runs; use --runtime onnxruntime (the "
                "default for pipelines)");
  opts.runtime = "onnxruntime";
  return opts;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

bool is_pipeline_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  try {
    const ModelFolder folder(dir);
    return folder.has(kIndex) && !folder.has("config.json");
  } catch (const Error&) {
    return false;
  }
}

std::vector<std::string> pipeline_model_types(const fs::path& dir) {
  std::vector<std::string> out;
  try {
    const ModelFolder root(dir);
    for (const auto& c : read_index(root, dir).components) {
      if (!component_folder(root, c.name)) continue;
      const fs::path sub = root.path() / c.name;
      if (!ModelFolder(sub).has("config.json")) continue;
      for (const auto& t : config_model_types(sub / "config.json")) out.push_back(t);
    }
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

std::vector<std::string> folder_graphs(const fs::path& dir, const ModelRegistry& registry) {
  try {
    const FolderConfig c = read_folder_config(dir, &registry);
    if (!registry.contains(c.model_type)) return {};
    return registry.get(c.model_type).graphs;
  } catch (const std::exception&) {
    return {};
  }
}

MultiGraphPackage build_graphs(const fs::path& dir, const BuildOptions& opts,
                               const ModelRegistry& registry) {
  const FolderConfig c = read_folder_config(dir, &registry);
  const Registration& reg = registry.get(c.model_type);
  MultiGraphPackage out;
  out.source_ = c.dir;
  out.options_ = opts;
  for (const auto& g : reg.graphs) {
    BuildOptions o = opts;
    o.graph = g;
    // Graphs of one folder are files of OUT itself.
    out.parts_.push_back({reg.graphs_in_one_folder ? "" : g, "", g, build_folder(c, reg, o)});
  }
  return out;
}

MultiGraphPackage build_pipeline(const fs::path& dir, const BuildOptions& opts,
                                 const ModelRegistry& registry,
                                 const std::vector<std::string>& components) {
  const ModelFolder root(dir);
  const PipelineIndex idx = read_index(root, dir);
  const BuildOptions base = component_options(opts);
  MultiGraphPackage out;
  out.source_ = root.path();
  out.pipeline_class_ = idx.class_name;
  out.options_ = base;

  // What each model component becomes, before anything is built: its folders and registration.
  struct Planned {
    const Component* c;
    FolderConfig config;
    const Registration* reg;
    std::vector<std::string> folders, graphs;
  };
  std::vector<Planned> models;
  std::vector<std::string> available;
  for (const auto& c : idx.components) {
    const std::string what = c.library + " " + c.cls;
    if (!component_folder(root, c.name)) {
      std::error_code ec;
      const bool link = fs::is_symlink(root.path() / c.name, ec);
      out.skipped_.push_back(
          {c.name, "model_index.json lists it (" + what + ") but " + quote_name(c.name) +
                       (link ? " is a symbolic link: components are read only from folders "
                               "inside the pipeline"
                             : " is not a folder of the pipeline")});
      continue;
    }
    const fs::path sub = root.path() / c.name;
    if (!ModelFolder(sub).has("config.json")) continue;  // copied below
    Planned p{&c, read_folder_config(dir / c.name, &registry), nullptr, {}, {}};
    if (!registry.contains(p.config.model_type)) {
      out.skipped_.push_back({c.name, "no plugin provides its model type " +
                                          quote_name(p.config.model_type) + " (" + what + ")"});
      continue;
    }
    p.reg = &registry.get(p.config.model_type);
    if (p.reg->graphs.empty()) {
      p.folders = {c.name};
      p.graphs = {""};
    } else {
      for (const auto& g : p.reg->graphs) {
        p.folders.push_back(p.reg->graphs_in_one_folder ? c.name : c.name + "_" + g);
        p.graphs.push_back(g);
      }
    }
    available.push_back(c.name);
    for (const auto& f : p.folders)
      if (f != c.name && std::find(available.begin(), available.end(), f) == available.end()) available.push_back(f);
    models.push_back(std::move(p));
  }
  for (const auto& want : components)
    if (std::find(available.begin(), available.end(), want) == available.end()) {
      std::string why;
      for (const auto& s : out.skipped_)
        if (s.component == want) why = " (" + s.reason + ")";
      throw Error("[options] --component " + want + ": not a component this pipeline builds" +
                  why + "; it builds " + (available.empty() ? "none" : join(available)));
    }
  auto selected = [&](const std::string& component, const std::string& folder) {
    if (components.empty()) return true;
    return std::find(components.begin(), components.end(), component) != components.end() ||
           std::find(components.begin(), components.end(), folder) != components.end();
  };
  for (const auto& p : models)
    for (size_t i = 0; i < p.folders.size(); ++i) {
      if (!selected(p.c->name, p.folders[i])) continue;
      BuildOptions o = base;
      o.graph = p.graphs[i];
      out.parts_.push_back({p.folders[i], p.c->name, p.graphs[i], build_folder(p.config, *p.reg, o)});
    }
  if (out.parts_.empty())
    throw Error("[source] " + (dir / kIndex).string() + ": no component of this " +
                idx.class_name + " can be built" +
                (out.skipped_.empty() ? std::string() : ": " + out.skipped_.front().component +
                                                            ": " + out.skipped_.front().reason));
  out.copied_.push_back(kIndex);
  for (const auto& c : idx.components)
    if (component_folder(root, c.name) && !ModelFolder(root.path() / c.name).has("config.json"))
      out.copied_.push_back(c.name);
  return out;
}

// The parts saved into one folder: consecutive parts of the same folder (the graphs of one
// checkpoint laid out side by side) together, each other part alone.
static std::vector<std::vector<const ModelPackage*>> folder_groups(const std::vector<MultiGraphPackage::Part>& parts) {
  std::vector<std::vector<const ModelPackage*>> groups;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i == 0 || parts[i].folder != parts[i - 1].folder) groups.emplace_back();
    groups.back().push_back(&parts[i].package);
  }
  return groups;
}

void MultiGraphPackage::save(const fs::path& out, const SaveOptions& opts) const {
  // One checkpoint whose graphs are files of one folder: OUT is that folder.
  if (pipeline_class_.empty() && !parts_.empty() &&
      std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.folder.empty(); })) {
    std::vector<const ModelPackage*> all;
    for (const auto& p : parts_) all.push_back(&p.package);
    ModelPackage::save_together(all, out, opts);
    return;
  }
  // Everything copied is read before anything is written.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> copies;
  std::string index_text;
  if (!pipeline_class_.empty()) {
    const ModelFolder root(source_);
    index_text = root.read_text(kIndex, (source_ / kIndex).string(), "config", kMaxIndexBytes);
    for (const auto& name : copied_)
      if (name != kIndex) copies.emplace_back(name, read_copied(source_ / name, name));
  }
  std::vector<fs::path> sources{source_};
  save_folder(out, sources, [&](const fs::path& tmp) {
    nlohmann::json graphs = nlohmann::json::array();
    size_t at = 0;
    for (const auto& group : folder_groups(parts_)) {
      ModelPackage::save_together(group, tmp / parts_[at].folder, opts);
      at += group.size();
    }
    for (const auto& p : parts_) {
      nlohmann::json g = {{"folder", p.folder}, {"model_type", p.package.model_type()}};
      if (!p.component.empty()) g["component"] = p.component;
      if (!p.graph.empty()) g["graph"] = p.graph;
      graphs.push_back(g);
    }
    nlohmann::json files = nlohmann::json::array();
    if (!index_text.empty()) {
      write_synced_file(tmp / kIndex, index_text);
      Sha256 h;
      h.update(index_text);
      files.push_back({{"name", kIndex}, {"size", index_text.size()}, {"sha256", h.hex_digest()}});
    }
    for (const auto& [dir, contents] : copies) {
      fs::create_directory(tmp / dir);
      for (const auto& [name, bytes] : contents) {
        write_synced_file(tmp / dir / name, bytes);
        Sha256 h;
        h.update(bytes);
        files.push_back(
            {{"name", dir + "/" + name}, {"size", bytes.size()}, {"sha256", h.hex_digest()}});
      }
    }
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& s : skipped_) skipped.push_back({{"component", s.component}, {"reason", s.reason}});
    nlohmann::json p = {{"tool", "mobius"}, {"graphs", graphs}};
    if (!pipeline_class_.empty()) {
      p["pipeline"] = pipeline_class_;
      p["skipped"] = skipped;
      p["copied_files"] = files;
    }
    if (!options_.source_repo.empty())
      p["source"] = {{"repo", options_.source_repo},
                     {"revision", options_.source_revision},
                     {"commit", options_.source_commit}};
    write_synced_file(tmp / "mobius_provenance.json", p.dump(2) + "\n");
  });
}

}  // namespace mobius
