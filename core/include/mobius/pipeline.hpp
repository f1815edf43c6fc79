// mobius/pipeline.hpp - builds of several graphs: a diffusers pipeline folder (model_index.json),
// each of whose components is a model type like any other, and a checkpoint whose model type
// becomes more than one graph (an AutoencoderKL's encoder and decoder).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "mobius/build.hpp"
#include "mobius/registry.hpp"

namespace mobius {

// Graphs built together, each into its own model folder inside OUT, with files copied beside
// them and a mobius_provenance.json at OUT's root that lists them.
class MultiGraphPackage {
 public:
  struct Part {
    std::string folder;     // OUT/<folder>: "unet", "vae_encoder", or for one checkpoint "encoder"
    std::string component;  // the pipeline component it comes from ("vae"); "" for one checkpoint
    std::string graph;      // the model type's graph name ("encoder"); "" for a one-graph type
    ModelPackage package;
  };
  struct Skipped {
    std::string component;
    std::string reason;
  };

  const std::vector<Part>& parts() const { return parts_; }
  // Components of the pipeline that were not built, each with the reason.
  const std::vector<Skipped>& skipped() const { return skipped_; }
  // Folders and files copied unchanged (tokenizer/, scheduler/, model_index.json).
  const std::vector<std::string>& copied() const { return copied_; }

  // Writes every part into OUT/<folder>/ (as ModelPackage::save lays a model folder out), the
  // copies and OUT/mobius_provenance.json, transactionally: OUT is replaced as a whole, or left
  // as it was.
  void save(const std::filesystem::path& out, const SaveOptions& opts = {}) const;

 private:
  friend MultiGraphPackage build_pipeline(const std::filesystem::path&, const BuildOptions&,
                                          const ModelRegistry&, const std::vector<std::string>&);
  friend MultiGraphPackage build_graphs(const std::filesystem::path&, const BuildOptions&,
                                        const ModelRegistry&);
  std::filesystem::path source_;
  std::string pipeline_class_;
  std::vector<Part> parts_;
  std::vector<Skipped> skipped_;
  std::vector<std::string> copied_;
  BuildOptions options_;
};

// A diffusers pipeline: a folder with model_index.json and no config.json.
bool is_pipeline_folder(const std::filesystem::path& dir);

// The model types of a pipeline's components (their config.json model_type or _class_name), for
// choosing which plugins to load; empty when model_index.json cannot be read.
std::vector<std::string> pipeline_model_types(const std::filesystem::path& dir);

// Builds a pipeline: model_index.json lists components as [library, class] ([null, null] for
// an absent optional one). A component folder with a config.json is a model, built by the
// registration of its model type into OUT/<component> (OUT/<component>_<graph> for each graph of
// a type with several); one whose type nobody registers is skipped with the reason. A component
// folder without config.json (tokenizer, scheduler) is copied, as is model_index.json.
// `components` (empty: all) names the parts to build, by folder ("vae_decoder") or component
// ("vae"). Throws mobius::Error naming the file and the reason, before anything is written.
MultiGraphPackage build_pipeline(const std::filesystem::path& dir, const BuildOptions& opts,
                                 const ModelRegistry& registry,
                                 const std::vector<std::string>& components = {});

// One checkpoint folder whose model type registers several graphs: each into OUT/<graph>.
MultiGraphPackage build_graphs(const std::filesystem::path& dir, const BuildOptions& opts,
                               const ModelRegistry& registry);

// The graphs a checkpoint folder's model type registers (empty for one graph, an unknown type,
// or a folder without a readable config.json).
std::vector<std::string> folder_graphs(const std::filesystem::path& dir,
                                       const ModelRegistry& registry);

}  // namespace mobius
