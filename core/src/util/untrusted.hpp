// untrusted.hpp - the one place where text from files is made safe: quoting values into
// messages, and parsing JSON and YAML with size and depth limits enforced while parsing.
//
// Every value that comes from a checkpoint, a config or a manifest is attacker-controlled: it can
// hold terminal escape sequences, be megabytes long, or nest a million levels deep.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace YAML {
class Node;
}

namespace mobius {

// Printable rendering of an untrusted string: control bytes (C0, DEL, and the C1 range as
// UTF-8) escaped as \xNN, long strings cut on a UTF-8 character boundary and marked "...".
std::string printable(std::string_view s, size_t max_bytes = 200);
std::string quote_name(std::string_view s);  // printable(s) in single quotes
// A message of several lines made safe for a terminal: printable() of each line, the '\n'
// between lines kept, the whole cut at `max_bytes` and marked with how much was left out.
std::string printable_lines(std::string_view s, size_t max_bytes = 16u << 10);

// Limits of a structured text file: its size, how deep values nest, and how many values it holds.
struct TextLimits {
  size_t max_bytes;
  int max_depth;
  size_t max_values;
};
// config.json (with a composite model's text_config), generation and tokenizer configs.
inline constexpr TextLimits kConfigLimits{16u << 20, 64, 1u << 20};
// plugin.yaml manifests: a few dozen keys and a list of model types.
inline constexpr TextLimits kManifestLimits{64u << 10, 16, 1u << 14};

// The most bytes a small file of a checkpoint may have, by its name (the last path component):
// the limit its reader applies, and the hub client's while the file streams in.
inline constexpr uint64_t kWeightIndexMax = uint64_t{100} << 20;  // model.safetensors.index.json, ...
inline constexpr uint64_t kPipelineIndexMax = uint64_t{1} << 20;  // model_index.json
inline constexpr uint64_t kTokenizerFileMax = uint64_t{64} << 20; // tokenizer.json (33 MB for Gemma 3), vocab, merges, sentencepiece models
// kWeightIndexMax for *.index.json, kPipelineIndexMax for model_index.json, kTokenizerFileMax
// for tokenizer and vocabulary files, 0 for weights (*.safetensors, *.bin, *.pt, ...: bounded
// by their announced size instead), kConfigLimits.max_bytes for any other (configs, templates).
uint64_t small_file_limit(std::string_view name);

// Parses `text` as JSON within `limits`; throws mobius::Error "[<tag>] <what>: <reason>" naming
// the limit that was exceeded, or the parse error. The depth is checked as values open, so a
// deeply nested document is refused before it is built.
nlohmann::json parse_json_limited(std::string_view text, const std::string& what,
                                  const TextLimits& limits, const char* tag = "config");

// Parses `text` as YAML within `limits`. yaml-cpp's parser recurses once per nesting level, so
// nesting (flow brackets and block indentation) is measured on the text before it is parsed.
YAML::Node parse_yaml_limited(std::string_view text, const std::string& what,
                              const TextLimits& limits, const char* tag = "plugin");

// A name of one folder inside a model folder or snapshot (a pipeline's component, a
// sentence-transformers module): one path component of letters, digits,
// '_', '-' and '.', not starting with '.', at most 128 bytes (the rule the pipeline build reads
// model_index.json with).
bool is_component_name(std::string_view name);

}  // namespace mobius
