// mobius/sdk/context.hpp - one build as a plugin sees it: options, the main graph, the weight plan.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mobius/plugin.h"
#include "mobius/sdk/graph.hpp"

namespace mobius {

// A float32 tensor handed to a C++ weight transform.
struct HostTensor {
  std::vector<int64_t> dims;
  const float* data = nullptr;
  size_t numel = 0;
};
// Fills `out` (float32, `out_numel` elements, the initializer's shape) from the sources.
using WeightTransform =
    std::function<void(const std::vector<HostTensor>& inputs, float* out, size_t out_numel)>;

class BuildContext {
 public:
  BuildContext(const mobius_host_api* host, mobius_context* ctx);
  BuildContext(const BuildContext&) = delete;
  BuildContext& operator=(const BuildContext&) = delete;

  const mobius_host_api* host() const { return host_; }
  mobius_context* handle() const { return ctx_; }

  // The model's weight dtype chosen by the user (Float, Float16 or BFloat16).
  DType weight_dtype() const;
  // The execution provider the graph is tuned for: "cpu" (the default) or "cuda".
  std::string execution_provider() const;
  bool no_weights() const;
  // The runtime the output folder is laid out for ("ort-genai", "onnxruntime",
  // "transformers.js"); "ort-genai" from a host that predates the option.
  std::string runtime() const;
  // True when the user did not choose the runtime (see mobius_build_options::runtime_is_default).
  bool runtime_is_default() const;
  // The graph file the host writes, relative to the output folder ("model.onnx",
  // "onnx/model_fp16.onnx").
  std::string model_file() const;
  // The operator set the graph may use: "ort" (ONNX Runtime's contrib operators) or "standard";
  // "standard" from a host that predates the option.
  std::string ops() const;
  // Where a decoder's rotary positions come from (mobius_build_options::positions): "input" (a
  // position_ids input, honoured as given) or "slots" (GroupQueryAttention rotates at cache
  // slots; no position_ids input). The user's choice, else the runtime's default: "slots" for
  // ort-genai, "input" for the others.
  std::string positions() const;
  // Weight-only quantization of the MatMul weights (mobius_build_options): 0 (none), 4 or 8
  // bits, its block size, symmetry and MatMulNBits accuracy_level; from a host that predates
  // them 0, 32, false and 4.
  int weight_bits() const;
  int block_size() const;
  bool symmetric() const;
  int accuracy_level() const;
  // Whether the user asked for mixture-of-experts layers as a loop over the experts hit (mobius
  // build --expert-loop) rather than a fused operator; false from a host that predates it.
  bool expert_loop() const;
  // The graph being built for an architecture registered with several (PluginRegistrar::add's
  // `graphs`, e.g. "encoder" or "decoder"); empty for an architecture of one graph.
  std::string graph_name() const;

  Graph& graph() { return *main_; }

  // Weight plan: every initializer gets exactly one source.
  void plan_tensor(const std::string& initializer, const std::string& checkpoint_tensor);
  void plan_expert_bank(const std::string& initializer, const std::vector<std::string>& tensors);
  void plan_transformed(const std::string& initializer, const std::vector<std::string>& tensors,
                        WeightTransform fn);
  // Lays `tensors` (rank 2, equal column counts, concatenated along their first dimension) out
  // as `layout` says (see plan_layout in mobius/plugin.h). Throws mobius::Error when the host is
  // too old to do it.
  void plan_layout(const std::string& initializer, const std::vector<std::string>& tensors,
                   const mobius_weight_layout& layout);
  // Whether the host reads mobius_weight_layout's `interleave` (a host that predates it would
  // ignore it): only then may a plan set it.
  bool interleaved_layouts() const;
  void ignore_tensors(const std::string& glob);
  // Header-only metadata of a checkpoint tensor; nullopt when absent. Throws when the tensor
  // has more dims than the ABI's mobius_tensor_info holds (8).
  struct TensorInfo {
    DType dtype;
    std::vector<int64_t> dims;
  };
  std::optional<TensorInfo> query_tensor(const std::string& name) const;

  // Files the runtime needs beside the model (e.g. "genai_config.json"), written unchanged when
  // the model is saved. Throws mobius::Error when the host is too old to take them.
  void add_runtime_file(const std::string& name, const std::string& bytes);
  bool host_has_runtime_files() const;
  // The config.json text this build started from; nullopt when there is none or the host is
  // too old to say.
  std::optional<std::string> source_config() const;
  // The text of a small runtime file of the checkpoint folder (generation_config.json,
  // tokenizer_config.json, special_tokens_map.json, chat_template.jinja, modules.json); nullopt
  // when absent,
  // refused by the host's limits, or the host is too old to say.
  std::optional<std::string> source_file(const std::string& name) const;
  // The same files and a sentence-transformers module's config ("1_Pooling/config.json"):
  // nullopt when the folder has none; throws mobius::Error (config kind) naming the file and why
  // when it cannot be read (a link leaving the folder, too large, JSON beyond the limits). From a
  // host too old to say why: source_file.
  std::optional<std::string> read_source_file(const std::string& name) const;

  void log(int level, const std::string& msg) const;
  // Throws mobius::Error with the host's message when st != MOBIUS_OK.
  void check(mobius_status st, const std::string& what) const;
  // Throws mobius::Error naming `slot` when `present` is false: the host's function table
  // predates that slot (see MOBIUS_HAS_FIELD in mobius/plugin.h).
  void require_slot(bool present, const char* slot) const;

 private:
  const mobius_host_api* host_;
  mobius_context* ctx_;
  std::unique_ptr<Graph> main_;
};

}  // namespace mobius
