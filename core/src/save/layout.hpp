// layout.hpp - where a runtime expects the files of a built model: the graph's and its weights'
// names, the data file chunks, and the runtime's name for the weight dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mobius {

// The runtimes an output folder can be laid out for (mobius build --runtime).
inline constexpr const char* kRuntimeGenai = "ort-genai";
inline constexpr const char* kRuntimeOrt = "onnxruntime";
inline constexpr const char* kRuntimeTransformersJs = "transformers.js";

struct OutputLayout {
  std::string runtime = kRuntimeGenai;
  // The graph file, relative to the output folder ("onnx/model_fp16.onnx").
  std::string graph = "model.onnx";
  // The external data files: `data` then data + "_1", data + "_2", ... when chunked.
  std::string data = "model.onnx.data";
  // Largest data file in bytes; 0: one file whatever the size. A tensor larger than a chunk
  // gets a chunk of its own.
  uint64_t chunk_bytes = 0;
  // transformers.js only: its dtype name for the weights ("fp32", "fp16").
  std::string tjs_dtype;

  // The name of data chunk i (0-based), relative to the output folder.
  std::string data_file(size_t i) const;
  // A name in the output folder the host writes itself (graph, data, provenance).
  bool host_file(const std::string& name) const;
};

// The layout for a runtime and a weight dtype (f32 | f16 | bf16). `stem` names the graph file
// ("model"; a graph of several in one folder: its own name, "encoder_model"). Throws
// mobius::Error ([options]) for an unknown runtime, or a dtype the runtime has no files for.
OutputLayout output_layout(const std::string& runtime, const std::string& dtype,
                           const std::string& stem = "model");

// Where each tensor's bytes go in the external data: tensors in order, each at an offset aligned
// to `align` in the current chunk, a new chunk started when a tensor would end past
// `chunk_bytes` (0: never) in a chunk that already holds one. Deterministic: the same sizes give
// the same placement.
struct DataPlacement {
  std::vector<size_t> chunk;         // per tensor
  std::vector<uint64_t> offset;      // per tensor, within its chunk
  std::vector<uint64_t> chunk_size;  // per chunk (at least one chunk, maybe empty)
};
DataPlacement place_tensors(const std::vector<uint64_t>& sizes, uint64_t align,
                            uint64_t chunk_bytes);

// The runtimes, for --help and messages.
std::vector<std::string> runtimes();

}  // namespace mobius
