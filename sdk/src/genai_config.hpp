// genai_config.hpp - genai_config.json for ONNX Runtime GenAI, from facts about the built text
// model: pure functions (no host calls), so every rule is unit-tested (tests/test_genai_config.cpp).
//
// The rules follow onnxruntime-genai's own parser (src/config.cpp), its model factory
// (src/models/model.cpp, model_type.h), its caches (kv_cache.cpp, recurrent_state.cpp) and what
// its model builder writes (builders/base.py make_genai_config); genai_config.cpp says which.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mobius::detail {

// The cache tensors the SDK's components give a layer (nn::CacheEntry::name): a caller probes
// `past_key_values.N.<kind>` for each to fill GenaiFacts::cache_kinds.
inline const std::vector<std::string>& genai_known_cache_kinds() {
  static const std::vector<std::string> k{"key", "value", "conv_state", "recurrent_state", "latent"};
  return k;
}

struct GenaiFacts {
  std::string model_type;                  // HF model_type of the built model ("qwen3_5", "olmo2", ...)
  std::vector<std::string> architectures;  // config.json "architectures" (may be empty)
  std::string filename = "model.onnx";     // the graph, relative to the output folder

  // Sizes, as the graph and the normalized config have them.
  int64_t head_size = 0;            // dim 3 of an attention layer's past key [batch, kv_heads, past, head]
  int64_t hidden_size = 0;          // normalized config
  int64_t num_attention_heads = 0;  // normalized config
  int64_t num_key_value_heads = 0;  // dim 1 of that past key
  int64_t num_hidden_layers = 0;    // every decoder layer, attention or not (cache names index them)
  int64_t vocab_size = 0;           // normalized config (the logits' last dim)
  int64_t context_length = 0;       // normalized config's max_position_embeddings

  // Graph inputs and outputs: the name the graph has, empty when it has none.
  std::string input_ids = "input_ids";
  std::string inputs_embeds;
  std::string attention_mask = "attention_mask";
  std::string position_ids = "position_ids";
  std::string logits = "logits";

  // Cache names. Layer N's past tensor of kind K is printf(past_names, N) + K, e.g.
  // "past_key_values.%d." + "key"; its output is printf(present_names, N) + K.
  std::string past_names = "past_key_values.%d.";
  std::string present_names = "present.%d.";
  // Per decoder layer (num_hidden_layers entries, layer order): the kinds K of the cache inputs
  // the graph has for it: {"key","value"} (attention), {"conv_state","recurrent_state"} (Gated
  // DeltaNet), {"latent"} (MLA), {} (none). Every cache input must be listed.
  std::vector<std::vector<std::string>> cache_kinds;
  // False when a conv_state or recurrent_state input has a symbolic dim other than batch (dim 0):
  // GenAI allocates those states from the graph's shapes.
  bool state_dims_static = true;
  // True when every cache is a key/value pair that GroupQueryAttention reads and writes in one
  // buffer of max_length (past_present_share_buffer).
  bool share_buffer = false;
  std::string provider = "cpu";  // the execution provider the graph was built for ("cpu", "cuda")

  nlohmann::json config;             // the checkpoint's config.json (top level), or null
  nlohmann::json generation_config;  // generation_config.json, or null when absent
};

// The GenAI model type for a HF model type, or nullopt when GenAI has no runner for it.
std::optional<std::string> genai_model_type(const std::string& hf_model_type,
                                            const std::vector<std::string>& architectures);

// genai_config.json's content. Throws mobius::Error: MOBIUS_ERROR_KIND_CONFIG with a message
// saying why GenAI cannot run the model when it cannot; MOBIUS_ERROR_KIND_PLUGIN when the facts
// contradict themselves (a bad name template, a size that is not positive).
nlohmann::json make_genai_config(const GenaiFacts& facts);

}  // namespace mobius::detail
