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
      // Attention and Mamba-2 side by side in every layer (the mamba2 pack).
      {"tiiuae/Falcon-H1-1.5B-Instruct",
       R"({"architectures": ["FalconH1ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "attention_in_multiplier": 1.0, "attention_out_multiplier": 1.0, "attn_layer_indices": null, "bos_token_id": 1, "embedding_multiplier": 5.656854249492381, "eos_token_id": 11, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 4608, "key_multiplier": 0.390625, "lm_head_multiplier": 0.0390625, "mamba_chunk_size": 128, "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_head": 64, "mamba_d_ssm": 3072, "mamba_d_state": 256, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_norm_before_gate": false, "mamba_proj_bias": false, "mamba_rms_norm": false, "mamba_use_mlp": true, "max_position_embeddings": 131072, "mlp_bias": false, "mlp_expansion_factor": 8, "mlp_multipliers": [0.8838834764831844, 0.5859375], "model_type": "falcon_h1", "num_attention_heads": 8, "num_hidden_layers": 24, "num_key_value_heads": 2, "num_logits_to_keep": 1, "pad_token_id": 0, "projectors_bias": false, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 100000000000.0, "ssm_in_multiplier": 1.25, "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738], "ssm_out_multiplier": 0.23570226039551584, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.52.0.dev0", "use_cache": true, "vocab_size": 65537})",
       1554789760u},
      // Short convolutions and attention by layer_types (the lfm2 pack); its MLP is two thirds of
      // block_ff_dim, rounded up to block_multiple_of (8192).
      {"LiquidAI/LFM2-1.2B",
       R"({"architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": true, "block_dim": 2048, "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0, "block_mlp_init_scale": 1.0, "block_multiple_of": 256, "block_norm_eps": 1e-05, "block_out_init_scale": 1.0, "block_use_swiglu": true, "block_use_xavier_init": true, "bos_token_id": 1, "conv_L_cache": 3, "conv_bias": false, "conv_dim": 2048, "conv_dim_out": 2048, "conv_use_xavier_init": true, "eos_token_id": 7, "full_attn_idxs": [2, 5, 8, 10, 12, 14], "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 12288, "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "full_attention", "conv", "full_attention", "conv", "full_attention", "conv"], "max_position_embeddings": 128000, "model_type": "lfm2", "norm_eps": 1e-05, "num_attention_heads": 32, "num_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pad_token_id": 0, "rope_theta": 1000000.0, "theta": 1000000.0, "tie_embedding": true, "torch_dtype": "bfloat16", "transformers_version": "4.54.0.dev0", "use_cache": true, "use_pos_enc": true, "vocab_size": 65536})",
       1170340608u},
      // Mamba-1 blocks alone, no attention and no MLP (the mamba pack); lm_head tied.
      {"state-spaces/mamba-130m-hf",
       R"({"architectures": ["MambaForCausalLM"], "bos_token_id": 0, "conv_kernel": 4, "d_inner": 1536, "d_model": 768, "eos_token_id": 0, "expand": 2, "fused_add_norm": true, "hidden_act": "silu", "hidden_size": 768, "initializer_range": 0.1, "intermediate_size": 1536, "layer_norm_epsilon": 1e-05, "model_type": "mamba", "n_layer": 24, "num_hidden_layers": 24, "pad_token_id": 0, "pad_vocab_size_multiple": 8, "rescale_prenorm_residual": false, "residual_in_fp32": true, "rms_norm": true, "ssm_cfg": {}, "state_size": 16, "time_step_floor": 0.0001, "time_step_init_scheme": "random", "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 48, "time_step_scale": 1.0, "torch_dtype": "float32", "transformers_version": "4.39.0.dev0", "use_bias": false, "use_cache": true, "use_conv_bias": true, "vocab_size": 50280})",
       129135360u},
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
      // The Mamba-2 pack.
      {"mamba2-tiny", [](auto& c) { c["n_groups"] = 3; }, "'n_groups' (3) must divide 'num_heads' (8)"},
      {"mamba2-tiny", [](auto& c) { c["head_dim"] = 12; }, "'head_dim' (12) times 'num_heads' (8) must be the SSM width 128"},
      {"mamba2-tiny", [](auto& c) { c["time_step_limit"] = {0.0, "x"}; }, "'time_step_limit' must be [min, max] of numbers"},
      {"bamba-tiny", [](auto& c) { c["attn_layer_indices"] = {5}; }, "'attn_layer_indices' has layer 5, not one of the 2 layers"},
      {"falcon-h1-tiny", [](auto& c) { c["ssm_multipliers"] = {1, 2}; }, "'ssm_multipliers' must be a list of 5 numbers"},
      {"falcon-h1-tiny", [](auto& c) { c["key_multiplier"] = 0; }, "'key_multiplier' must be positive"},
      {"granitemoehybrid-tiny", [](auto& c) { c["layer_types"][1] = "sliding_attention"; }, "'layer_types' has unknown layer type 'sliding_attention'"},
      {"nemotron-h-pattern", [](auto& c) { c["hybrid_override_pattern"] = "ME*X"; }, "'hybrid_override_pattern' has 'X'"},
      {"nemotron-h-tiny", [](auto& c) { c["moe_latent_size"] = 32; }, "'moe_latent_size' is not supported"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.c);
    CAPTURE(b.reason);
    expect_rejected(b.c, b.edit, {}, b.reason);
  }
}
