// test_decoder_families.cpp - the decoder packs (gpt, opt, bloom, stablelm and the llama pack's
// newer rows) beyond parity: the published configs of well-known checkpoints build graph-only,
// checker-clean, with exactly the parameter count of the real model, and configs that cannot
// work are refused before anything is written, naming their key.
#include <doctest/doctest.h>

#include <map>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

// config.json of each hub repository (the keys that matter; transformers' bookkeeping left
// out), and the parameter count transformers reports for the model.
struct Published {
  const char* repo;
  const char* config;
  uint64_t parameters;
};

const std::vector<Published>& published() {
  static const std::vector<Published> p = {
      {"openai-community/gpt2",
       R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257})",
       124439808u},
      {"facebook/opt-125m",
       R"({"activation_dropout": 0.0, "activation_function": "relu", "architectures": ["OPTForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": true, "dropout": 0.1, "eos_token_id": 2, "ffn_dim": 3072, "hidden_size": 768, "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048, "model_type": "opt", "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "prefix": "</s>", "use_cache": true, "vocab_size": 50272, "word_embed_proj_dim": 768})",
       125239296u},
      {"bigscience/bloom-560m",
       R"({"apply_residual_connection_post_layernorm": false, "architectures": ["BloomForCausalLM"], "attention_dropout": 0.0, "attention_softmax_in_fp32": true, "bias_dropout_fusion": true, "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 1024, "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": true, "model_type": "bloom", "n_head": 16, "n_inner": null, "n_layer": 24, "offset_alibi": 100, "pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": true, "skip_bias_add_qkv": false, "slow_but_exact": false, "unk_token_id": 0, "use_cache": true, "vocab_size": 250880})",
       559214592u},
      {"tiiuae/falcon-7b",
       R"({"alibi": false, "apply_residual_connection_post_layernorm": false, "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0, "bias": false, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0, "hidden_size": 4544, "layer_norm_epsilon": 1e-05, "model_type": "falcon", "multi_query": true, "new_decoder_architecture": false, "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": true, "use_cache": true, "vocab_size": 65024})",
       6921720704u},
      {"EleutherAI/pythia-160m",
       R"({"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 12, "num_hidden_layers": 12, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false, "use_cache": true, "use_parallel_residual": true, "vocab_size": 50304})",
       162322944u},
      {"microsoft/phi-2",
       R"({"architectures": ["PhiForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256, "hidden_act": "gelu_new", "hidden_size": 2560, "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "phi", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": false, "resid_pdrop": 0.1, "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false, "use_cache": true, "vocab_size": 51200})",
       2779683840u},
      {"bigcode/starcoder2-3b",
       R"({"architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1, "residual_dropout": 0.1, "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 3072, "intermediate_size": 12288, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 16384, "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05, "norm_type": "layer_norm", "num_attention_heads": 24, "num_hidden_layers": 30, "num_key_value_heads": 2, "rope_theta": 999999.4420358813, "sliding_window": 4096, "use_bias": true, "use_cache": true, "vocab_size": 49152})",
       3030371328u},
      {"stabilityai/stablelm-2-1_6b",
       R"({"architectures": ["StableLmForCausalLM"], "bos_token_id": 100257, "eos_token_id": 100257, "hidden_act": "silu", "hidden_dropout": 0.0, "hidden_size": 2048, "intermediate_size": 5632, "layer_norm_eps": 1e-05, "max_position_embeddings": 4096, "model_type": "stablelm", "num_attention_heads": 32, "num_hidden_layers": 24, "num_key_value_heads": 32, "partial_rotary_factor": 0.25, "qk_layernorm": false, "rope_scaling": null, "rope_theta": 10000, "tie_word_embeddings": false, "use_cache": true, "use_parallel_residual": false, "use_qkv_bias": true, "vocab_size": 100352})",
       1644515328u},
      {"CohereForAI/c4ai-command-r-v01",
       R"({"architectures": ["CohereForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 5, "eos_token_id": 255001, "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 22528, "layer_norm_eps": 1e-05, "logit_scale": 0.0625, "max_position_embeddings": 8192, "model_type": "cohere", "num_attention_heads": 64, "num_hidden_layers": 40, "num_key_value_heads": 64, "pad_token_id": 0, "pretraining_tp": 1, "rope_scaling": null, "rope_theta": 8000000.0, "use_cache": true, "use_qk_norm": false, "vocab_size": 256000})",
       34980831232u},
      {"allenai/OLMo-1B-hf",
       R"({"architectures": ["OlmoForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": null, "clip_qkv": null, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 2048, "model_type": "olmo", "num_attention_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 1, "pretraining_tp": 1, "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": true, "use_cache": true, "vocab_size": 50304})",
       1176764416u},
      {"HuggingFaceTB/SmolLM3-3B",
       R"({"architectures": ["SmolLM3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": null, "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 11008, "max_position_embeddings": 65536, "max_window_layers": 28, "mlp_bias": false, "model_type": "smollm3", "no_rope_layer_interval": 4, "no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0], "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4, "pad_token_id": 128004, "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 5000000.0, "sliding_window": null, "use_cache": false, "use_sliding_window": false, "vocab_size": 128256})",
       3075098624u},
  };
  return p;
}

}  // namespace

TEST_CASE("decoder families: published configs build graph-only with the real models' parameter counts") {
  for (const auto& p : published()) {
    CAPTURE(p.repo);
    TempDir t;
    double secs = 0;
    onnx::ModelProto m = build_config_only(t, p.config, "--runtime onnxruntime", &secs);
    MESSAGE(std::string(p.repo) << " graph-only build: " << secs << " s");
    // Every weight of the model once; a tied lm_head is its own transposed copy of the table.
    const nlohmann::json cfg = nlohmann::json::parse(p.config);
    uint64_t params = 0, head = 0;
    for (const auto& i : m.graph().initializer()) {
      if (i.name().find("cos_cache") != std::string::npos || i.name().find("sin_cache") != std::string::npos) continue;
      uint64_t n = 1;
      for (int64_t d : i.dims()) n *= static_cast<uint64_t>(d);
      if (i.name() == "lm_head.weight" || i.name() == "embed_out.weight") head = n;
      params += n;
    }
    const bool tied = cfg.value("tie_word_embeddings", true);
    CHECK(params - (tied ? head : 0) == p.parameters);
  }
}


TEST_CASE("decoder families: configs that cannot work are refused, naming the key, with nothing written") {
  struct Bad {
    const char* c;
    std::function<void(nlohmann::json&)> edit;
    const char* reason;
  };
  const std::vector<Bad> cases = {
      {"gptj-tiny", [](auto& c) { c["rotary_dim"] = 7; }, "'rotary_dim' must be even and at most the head size 16, got 7"},
      {"gptj-tiny", [](auto& c) { c["rotary_dim"] = 32; }, "'rotary_dim' must be even and at most the head size 16"},
      {"codegen-tiny", [](auto& c) { c["n_head"] = 2; }, "'n_head' (2) must be a multiple of 4"},
      {"gpt-neo-local", [](auto& c) { c["attention_layers"] = {"global", "sparse"}; }, "'attention_layers' has 'sparse' (global or local)"},
      {"gpt-neo-local", [](auto& c) { c["attention_layers"] = {"global"}; }, "'attention_layers' names 1 layers for 2"},
      {"gpt-neo-local", [](auto& c) { c.erase("attention_layers"); c["attention_types"] = {{{"global"}, "two"}}; },
       "'attention_types' must be a list of [types, repeat]"},
      {"falcon-tiny", [](auto& c) { c["num_ln_in_parallel_attn"] = 2; }, "'num_ln_in_parallel_attn' is 2 without new_decoder_architecture"},
      {"falcon-tiny", [](auto& c) { c["num_ln_in_parallel_attn"] = 3; }, "'num_ln_in_parallel_attn' must be 1 or 2"},
      {"mpt-tiny", [](auto& c) { c["attn_config"]["softmax_scale"] = -1.0; }, "'attn_config' softmax_scale must be a positive number"},
      {"olmo-tiny", [](auto& c) { c["clip_qkv"] = -0.5; }, "'clip_qkv' must not be negative"},
      {"smollm3-tiny", [](auto& c) { c["no_rope_layers"] = {1, 1, 0}; }, "'no_rope_layers' has 3 entries for 2 layers"},
      {"cohere-tiny", [](auto& c) { c["logit_scale"] = 0; }, "'logit_scale' must not be 0"},
      {"hunyuan-dense-tiny", [](auto& c) { c.erase("head_dim"); }, "'head_dim' is required"},
      {"exaone4-tiny", [](auto& c) { c.erase("layer_types"); c["sliding_window_pattern"] = 0; }, "'sliding_window_pattern' must be positive"},
      {"opt-tiny", [](auto& c) { c["word_embed_proj_dim"] = 0; }, "'word_embed_proj_dim' must be positive"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.c);
    CAPTURE(b.reason);
    expect_rejected(b.c, b.edit, {}, b.reason);
  }
}
