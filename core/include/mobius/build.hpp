// mobius/build.hpp - the library API: build a checkpoint into an ONNX model package and save it.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mobius/error.hpp"
#include "mobius/plugin.h"
#include "mobius/registry.hpp"

namespace mobius {

// The graph uses standard ONNX ops only (the ABI's execution_provider is always "cpu").
struct BuildOptions {
  // Weight dtype: f32 | f16 | bf16, or int4 | int8 (MatMul weights block-quantized for
  // MatMulNBits; activations float32 on the CPU, float16 on CUDA).
  std::string dtype = "f32";
  std::string ep = "cpu";   // execution provider the graph is tuned for: cpu | cuda
  std::string ops = "ort";  // operator set: ort (ONNX Runtime contrib operators) | standard
  int block_size = 32;      // int4/int8: quantization block along the input dimension
  bool symmetric = true;    // int4/int8: symmetric RTN (no zero points); false: asymmetric
  int accuracy_level = -1;  // int4/int8: MatMulNBits accuracy_level; -1: 4 on cpu, 0 on cuda
  // Mixture-of-experts layers as a loop over the experts hit even where ONNX Runtime's fused
  // QMoE could run them (mobius_build_options::expert_loop).
  bool expert_loop = false;
  bool no_weights = false;    // build the graph only (no checkpoint needed)
  // For a model type that becomes several graphs (Registration::graphs, e.g. a VAE's "encoder"
  // and "decoder"): the one to build. Must be empty for a type of one graph.
  std::string graph;
  // For a model type that builds several tasks (Registration::tasks): the one to build. Empty:
  // the plugin builds the one the checkpoint's config.json names (its `architectures`).
  std::string task;
  // Where a decoder's rotary positions come from: "input" (a position_ids input, honoured as
  // given: packed or gapped sequences) or "slots" (rotary at cache slots inside
  // GroupQueryAttention; no position_ids input). Empty: the runtime's default, slots for
  // ort-genai, input for the others (mobius_build_options::positions).
  std::string positions;
  bool quiet = false;
  // The runtime the output folder is laid out for: "ort-genai" (ONNX Runtime GenAI: model.onnx,
  // genai_config.json), "onnxruntime" (the graph and its weights only) or "transformers.js"
  // (onnx/model<suffix>.onnx, config.json with transformers.js_config). Empty: ort-genai, or,
  // for a model GenAI cannot run, onnxruntime with a warning saying why.
  std::string runtime;
  // Provenance of a checkpoint fetched from the Hugging Face Hub (mobius/hub.hpp's
  // ModelSource): "org/name" and the commit; empty for a local folder.
  std::string source_repo;
  std::string source_revision;
  std::string source_commit;
};

struct SaveOptions {
  bool progress = false;            // a progress bar on stderr (bytes, throughput, ETA)
  int threads = 1;                  // tensors written at once; the output bytes do not depend on it
  std::function<bool()> cancelled;  // polled between chunks; true aborts the save
  // Called about every 100 ms while the weights stream (stage "weights", bytes written of the
  // graph's total), from the thread that called save, instead of the bar.
  std::function<void(const char* stage, uint64_t done, uint64_t total)> on_progress;
};

// A built model: its graph and weight plan, bound to its checkpoint. Weights are read only
// when saved.
class ModelPackage {
 public:
  struct Impl;
  explicit ModelPackage(std::unique_ptr<Impl> impl);
  ModelPackage(ModelPackage&&) noexcept;
  ModelPackage& operator=(ModelPackage&&) noexcept;
  ~ModelPackage();

  // Writes the graph, its external data and the runtime files, laid out for the build's runtime
  // (OUT/model.onnx + model.onnx.data, or OUT/onnx/model.onnx + model.onnx_data), and
  // mobius_provenance.json, transactionally: into a temporary folder beside OUT, checked, then
  // renamed into place. On failure OUT is as it was.
  // An OUT that is the checkpoint folder or contains it is refused first (check_output_folder).
  void save(const std::filesystem::path& out, const SaveOptions& opts = {}) const;
  // Saves the graphs of one checkpoint built as files of one folder (an encoder-decoder's
  // encoder_model and decoder_model_merged; Registration::graphs_in_one_folder) as save() saves
  // one: each graph and its data, the runtime files once, one mobius_provenance.json.
  static void save_together(const std::vector<const ModelPackage*>& parts, const std::filesystem::path& out,
                            const SaveOptions& opts = {});
  // The graph file, relative to the output folder ("model.onnx", "onnx/encoder_model_fp16.onnx").
  const std::string& graph_file() const;

  // The graph as `mobius info --json` describes a saved one (mobius/info.hpp), before it is saved:
  // its file, inputs and outputs with dtype and shape, opset imports, node and initializer
  // counts, weight dtypes and bytes. JSON text.
  std::string describe_json() const;
  // mobius_provenance.json as save() writes it, without "files" (the checkpoint's files are
  // hashed while saving). JSON text.
  std::string provenance_json() const;

  const std::string& model_type() const;
  // The runtime the folder is laid out for (BuildOptions::runtime, or what the default became).
  const std::string& runtime() const;
  const std::string& normalized_config() const;
  size_t node_count() const;
  size_t initializer_count() const;
  uint64_t weight_bytes() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Throws mobius::Error when OUT is the checkpoint folder `source` or contains it, however either
// is spelled (relative, "..", links, bind mounts): OUT is compared by device and inode, and by
// canonical path, with the checkpoint folder and each of its ancestors. Nothing is written.
void check_output_folder(const std::filesystem::path& out, const std::filesystem::path& source);

// Builds `source` (a local checkpoint folder) with the architecture the registry has for its
// config.json model_type. Header-only preflight runs here: a checkpoint that does not fit
// throws before anything is written. The error's kind says whose fault a failure is: a config
// error names config.json; a failure inside the plugin's code (ErrorKind::Plugin or Internal)
// names the plugin.
ModelPackage build(const std::string& source, const BuildOptions& opts,
                   const ModelRegistry& registry);

// Builds a graph that `build_fn` constructs through the C ABI (the host function table is
// host_api()), binding its weights to the checkpoint in `checkpoint_dir` (empty: no checkpoint;
// then only generated weights or --no-weights builds can be saved). Preflight runs as in build().
ModelPackage build_with(const std::string& model_type,
                        const std::function<void(mobius_context* ctx)>& build_fn,
                        const BuildOptions& opts, const std::filesystem::path& checkpoint_dir = {},
                        const std::string& normalized_config = "{}");

// The same with a build callback in C terms, as a plugin's build is called: it builds through
// `host` and reports a failure with host->set_error_kind before returning non-zero. This is
// how SDK code compiled into a program hands its graph to the host (the SDK's module_build.hpp).
using BuildCallback = mobius_status (*)(void* user, const mobius_host_api* host,
                                        mobius_context* ctx);
ModelPackage build_with(const std::string& model_type, BuildCallback fn, void* user,
                        const BuildOptions& opts, const std::filesystem::path& checkpoint_dir = {},
                        const std::string& normalized_config = "{}");

// The runtimes a folder can be laid out for (BuildOptions::runtime): ort-genai, onnxruntime,
// transformers.js.
std::vector<std::string> runtimes();

// The host's C function table, for code that builds graphs in-process.
const mobius_host_api* host_api();

// The model_type a config.json declares (a composite config's text_config when the top level
// is not registered). Throws mobius::Error naming the file and key.
std::string config_model_type(const std::filesystem::path& config_file,
                              const ModelRegistry* registry = nullptr);
// Every model type a config.json names: its model_type, then its text_config's (when either is
// present), for choosing which plugins to load. Throws mobius::Error naming the file.
std::vector<std::string> config_model_types(const std::filesystem::path& config_file);

}  // namespace mobius
