// convert.cpp - `mobius build` as one call (mobius/convert.hpp): the model resolved, its plugins
// loaded, the build of one graph, a type's graphs or a pipeline, ready to save.
#include "mobius/convert.hpp"

#include <algorithm>

namespace mobius {

namespace fs = std::filesystem;

std::vector<std::string> PluginSet::failures() const {
  std::vector<std::string> out;
  for (const auto& r : records)
    if (!r.loaded && !r.deferred)
      out.push_back("plugin " + (r.library.empty() ? r.manifest : r.library).string() + " not loaded: " + r.error);
  return out;
}

std::shared_ptr<PluginSet> load_plugins(const std::vector<PluginSearchDir>& dirs,
                                        const std::vector<std::string>& model_types) {
  auto set = std::make_shared<PluginSet>();
  set->searched = dirs;
  set->records = set->host.load(dirs, set->registry, model_types);
  return set;
}

namespace {

// The model types the checkpoint's config.json names; empty when it cannot be read (the build
// then reports why, with every plugin loaded).
std::vector<std::string> wanted_types(const fs::path& model) {
  try {
    return config_model_types(model / "config.json");
  } catch (const std::exception&) {
    return {};
  }
}

// An unknown model type, said better: a plugin that declares the type but did not load has the
// answer; otherwise the folders searched.
[[noreturn]] void explain_unknown(const Error& e, const PluginSet& plugins, const std::vector<std::string>& types) {
  for (const auto& r : plugins.records)
    if (!r.loaded && !r.deferred && !r.error.empty() &&
        std::any_of(types.begin(), types.end(), [&](const std::string& t) {
          return std::find(r.model_types.begin(), r.model_types.end(), t) != r.model_types.end();
        }))
      throw Error(ErrorKind::Plugin, "[plugin] " + (r.name.empty() ? std::string("a plugin") : "plugin '" + r.name + "'") + " (" +
                  (r.library.empty() ? r.manifest : r.library).string() +
                  ") declares this model type but did not load: " +
                  (r.error.rfind("[plugin] ", 0) == 0 ? r.error.substr(9) : r.error));
  std::string m = e.what();
  m += "; plugin folders searched:";
  for (const auto& d : plugins.searched) m += " " + d.path.string();
  throw Error(e.kind(), m + " (see `mobius plugins`)");
}

}  // namespace

ConvertedModel convert(const std::string& model_arg, const ConvertOptions& opts,
                       std::shared_ptr<const PluginSet> plugins) {
  // A local folder, or a hub id fetched into (or, offline, found in) huggingface_hub's cache.
  HubOptions ho;
  ho.revision = opts.revision;
  ho.weights = !opts.build.no_weights;
  ho.quiet = opts.build.quiet;
  ho.progress = opts.download_progress;
  ho.on_progress = opts.on_progress;
  ho.cancelled = opts.cancelled;
  ModelSource src = resolve_model(model_arg, ho);
  const fs::path model = src.dir;
  // OUT must be neither the checkpoint folder nor one holding it: refused before any work.
  if (!opts.out.empty()) check_output_folder(opts.out, model);
  BuildOptions bo = opts.build;
  bo.source_repo = src.repo_id;
  bo.source_revision = src.revision;
  bo.source_commit = src.commit;
  // A diffusers pipeline (model_index.json): each component is a model type of its own.
  const bool pipeline = is_pipeline_folder(model);
  if (!opts.components.empty() && !pipeline)
    throw Error("[options] --component builds one component of a diffusers pipeline (a folder with "
                "model_index.json); " + model.string() + " is not one");
  const std::vector<std::string> types = pipeline ? pipeline_model_types(model) : wanted_types(model);
  if (!plugins) {
    // Only the plugins whose manifest claims the config's model type run; when none does, every
    // plugin is loaded so the error can suggest near matches.
    const auto dirs = plugin_search_path(opts.plugin_paths, opts.default_plugin_dirs);
    std::shared_ptr<PluginSet> set = load_plugins(dirs, types);
    if (!types.empty() && std::none_of(types.begin(), types.end(),
                                       [&](const std::string& t) { return set->registry.contains(t); }))
      set = load_plugins(dirs);
    plugins = std::move(set);
  }
  if (opts.warn && !opts.build.quiet)
    for (const auto& f : plugins->failures()) opts.warn(f);
  ConvertedModel out(std::move(src), plugins);
  const ModelRegistry& registry = plugins->registry;
  if (pipeline || !folder_graphs(model, registry).empty()) {
    // Several graphs: files of one folder, or each its own model folder inside OUT.
    out.many_.emplace(pipeline ? build_pipeline(model, bo, registry, opts.components)
                               : build_graphs(model, bo, registry));
    if (opts.warn && !opts.build.quiet)
      for (const auto& s : out.many_->skipped()) opts.warn("skipped " + s.component + ": " + s.reason);
    return out;
  }
  try {
    out.one_.emplace(build(model.string(), bo, registry));
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("[registry] unknown model type", 0) != 0) throw;
    explain_unknown(e, *plugins, types);
  }
  return out;
}

std::vector<ConvertedModel::Part> ConvertedModel::parts() const {
  std::vector<Part> out;
  if (one_) out.push_back({"", "", "", &*one_});
  if (many_)
    for (const auto& p : many_->parts()) out.push_back({p.folder, p.component, p.graph, &p.package});
  return out;
}

const std::vector<MultiGraphPackage::Skipped>& ConvertedModel::skipped() const {
  static const std::vector<MultiGraphPackage::Skipped> kNone;
  return many_ ? many_->skipped() : kNone;
}

const std::vector<std::string>& ConvertedModel::copied() const {
  static const std::vector<std::string> kNone;
  return many_ ? many_->copied() : kNone;
}

std::string ConvertedModel::runtime() const {
  if (one_) return one_->runtime();
  return many_->parts().empty() ? std::string("onnxruntime") : many_->parts().front().package.runtime();
}

void ConvertedModel::save(const fs::path& out, const SaveOptions& opts) const {
  if (one_)
    one_->save(out, opts);
  else
    many_->save(out, opts);
}

}  // namespace mobius
