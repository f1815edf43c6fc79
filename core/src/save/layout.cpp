// layout.cpp - the file names each runtime looks for.
#include "save/layout.hpp"

#include "mobius/error.hpp"

namespace mobius {

std::vector<std::string> runtimes() { return {kRuntimeGenai, kRuntimeOrt, kRuntimeTransformersJs}; }

std::string OutputLayout::data_file(size_t i) const {
  return i == 0 ? data : data + "_" + std::to_string(i);
}

bool OutputLayout::host_file(const std::string& name) const {
  if (name == graph || name == "mobius_provenance.json") return true;
  return name.rfind(data, 0) == 0;  // the data file and its chunks
}

DataPlacement place_tensors(const std::vector<uint64_t>& sizes, uint64_t align,
                            uint64_t chunk_bytes) {
  DataPlacement p;
  p.chunk_size.push_back(0);
  for (uint64_t size : sizes) {
    const uint64_t used = p.chunk_size.back();
    uint64_t at = align > 1 ? used + (align - used % align) % align : used;
    if (chunk_bytes && used > 0 && at + size > chunk_bytes) {
      p.chunk_size.push_back(0);
      at = 0;
    }
    p.chunk.push_back(p.chunk_size.size() - 1);
    p.offset.push_back(at);
    p.chunk_size.back() = at + size;
  }
  return p;
}

OutputLayout output_layout(const std::string& runtime, const std::string& dtype, const std::string& stem) {
  OutputLayout l;
  l.runtime = runtime;
  if (runtime == kRuntimeGenai || runtime == kRuntimeOrt) {
    // ONNX Runtime and GenAI: one graph at the root, its weights beside it in one file, as
    // GenAI's own model builder writes them.
    l.graph = stem + ".onnx";
    l.data = l.graph + ".data";
    return l;
  }
  if (runtime == kRuntimeTransformersJs) {
    // transformers.js loads onnx/<name><suffix>.onnx, the suffix naming the dtype, and its
    // external data as <file>_data, <file>_data_1, ... (utils/model-loader.js); a browser holds
    // each chunk in one ArrayBuffer, so chunks stay below 2 GiB.
    std::string suffix;
    if (dtype == "f32") {
      l.tjs_dtype = "fp32";
    } else if (dtype == "f16") {
      l.tjs_dtype = "fp16";
      suffix = "_fp16";
    } else if (dtype == "int4") {
      // transformers.js's "q4": 4-bit MatMulNBits weights, float32 activations.
      l.tjs_dtype = "q4";
      suffix = "_q4";
    } else {
      throw Error("[options] transformers.js has no " + dtype +
                      " model files it would load as such (it loads fp32, fp16, and q4 for 4-bit "
                      "MatMulNBits weights); use --dtype f32, f16 or int4");
    }
    l.graph = "onnx/" + stem + suffix + ".onnx";
    l.data = l.graph + "_data";
    l.chunk_bytes = 2000000000ull;
    return l;
  }
  std::string known;
  for (const auto& r : runtimes()) known += (known.empty() ? "" : ", ") + r;
  throw Error("[options] unknown runtime '" + runtime + "' (expected " + known + ")");
}

}  // namespace mobius
