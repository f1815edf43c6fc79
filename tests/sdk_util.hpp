// sdk_util.hpp - test helpers for graphs assembled in C++ with the SDK (kept apart from
// golden_util.hpp: the SDK's headers bring its own mobius::Error into scope).
#pragma once

#include "mobius/sdk/config.hpp"

namespace mobius::test {

// The ArchitectureConfig of tests/golden/llama-tiny, for graphs assembled in C++.
inline ArchitectureConfig llama_tiny_config() {
  ArchitectureConfig cfg;
  cfg.model_type = "llama";
  cfg.vocab_size = 160;
  cfg.hidden_size = 64;
  cfg.intermediate_size = 128;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 16;
  cfg.rms_norm_eps = 1e-6;
  cfg.max_position_embeddings = 128;
  cfg.rope.theta = 10000.0;
  return cfg;
}

}  // namespace mobius::test
