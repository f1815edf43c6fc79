// runtime_files.hpp - the files a runtime needs beside the graphs: the checkpoint's (config.json,
// tokenizer, generation and preprocessor configs, copied unchanged) and the plugins' own
// (genai_config.json), and the transformers.js block of config.json naming the graph files.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_files.hpp"
#include "save/layout.hpp"

struct mobius_context;

namespace mobius {

// The runtime files the checkpoint folder has, opened under the folder's rule
// (checkpoint_files.hpp: regular files, or a cache snapshot's links into its blobs) before
// anything is written: one that is there but may not be opened fails the save.
std::vector<std::pair<std::string, OpenedFile>> open_runtime_files(const std::filesystem::path& src);

// The runtime files of the output folder, name -> bytes: the checkpoint's (copied unchanged)
// with the plugins' (add_runtime_file) replacing a copy of the same name, a later build's file
// replacing an earlier one's (the graphs of one folder).
struct RuntimeFiles {
  std::vector<std::pair<std::string, const OpenedFile*>> copies;
  std::vector<std::pair<std::string, std::string>> written;
};
RuntimeFiles runtime_files(const std::vector<std::pair<std::string, OpenedFile>>& opened,
                           const std::vector<const mobius_context*>& builds);

// Reads a whole opened file (a copied runtime file), at most `limit` bytes.
std::string read_opened(const OpenedFile& file, const std::string& name, uint64_t limit);

// transformers.js reads which graph files exist from config.json: "transformers.js_config"
// names the dtype that was built (without it a browser asks for model_quantized.onnx, and an
// fp16-only folder does not load) and, per graph file, how many external data chunks it has.
// The block is the host's: it describes the files the host wrote (`graphs`: each graph file's
// path in the folder and its chunk count).
void add_transformers_js_config(RuntimeFiles& files, const std::string& tjs_dtype,
                                const std::vector<std::pair<std::string, size_t>>& graphs);

}  // namespace mobius
