// test_moe_families.cpp - the mixtral, qwen3_moe and gpt_oss plugins beyond parity: the published
// configs build graph-only in seconds and pass ONNX's checker with the parameter counts of the
// real models, the graphs have the shape the design promises (one expert Loop per sparse layer,
// expert banks, attention sinks as GroupQueryAttention's head_sink), and configs that cannot
// work are refused before anything is written, naming their key.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

// The public config.json files, as the hub repositories hold them (quantization_config left
// out: a graph-only build never reads weights).
const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})";

const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// Gated DeltaNet and gated attention (every fourth layer), every layer sparse with a gated
// shared expert.
const char* kQwen3Next80B = R"({
  "architectures": ["Qwen3NextForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
  "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
  "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": true,
  "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
  "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": false,
  "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// Qwen2-MoE: 60 experts top-4, one shared expert behind a sigmoid gate.
const char* kQwen15MoE = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "decoder_sparse_step": 1, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 8192,
  "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// OLMoE: 64 experts top-8, q/k norms over the whole projections.
const char* kOlmoe1B7B = R"({
  "architectures": ["OlmoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "clip_qkv": null, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 1024, "max_position_embeddings": 4096,
  "model_type": "olmoe", "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 64,
  "num_experts_per_tok": 8, "num_hidden_layers": 16, "num_key_value_heads": 16,
  "output_router_logits": false, "pad_token_id": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 10000.0, "router_aux_loss_coef": 0.01, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0", "vocab_size": 50304})";

uint64_t qwen15_moe_parameters() {
  const uint64_t V = 151936, H = 2048, I = 1408, E = 60, S = 5632, L = 24;
  const uint64_t attn = 4 * H * H + 3 * H;                       // q/k/v biases
  const uint64_t moe = E * H + E * 3 * I * H + 3 * S * H + H;    // router, experts, shared + gate
  return 2 * V * H + H + L * (attn + moe + 2 * H);  // 14.3B
}

uint64_t olmoe_parameters() {
  const uint64_t V = 50304, H = 2048, I = 1024, E = 64, L = 16;
  const uint64_t attn = 4 * H * H + 2 * H;  // q/k norms over the projections
  const uint64_t moe = E * H + E * 3 * I * H;
  return 2 * V * H + H + L * (attn + moe + 2 * H);  // 6.9B
}

// gpt-oss-20b and gpt-oss-120b differ in their layer and expert counts only.
std::string gpt_oss_config(int layers, int experts) {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < layers; ++i) types.push_back(i % 2 ? "full_attention" : "sliding_attention");
  nlohmann::json c = nlohmann::json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "max_position_embeddings": 131072, "model_type": "gpt_oss",
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_key_value_heads": 8,
    "output_router_logits": false, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": false},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0",
    "use_cache": true, "vocab_size": 201088})");
  c["num_hidden_layers"] = layers;
  c["num_local_experts"] = experts;
  c["layer_types"] = types;
  return c.dump();
}

struct Published {
  std::string name;
  std::string config;
  int layers;
  int moe_layers;
  uint64_t parameters;
};

uint64_t mixtral_parameters() {
  const uint64_t V = 32000, H = 4096, I = 14336, E = 8, L = 32, q = 32 * 128, kv = 8 * 128;
  const uint64_t attn = H * q + 2 * H * kv + q * H;
  const uint64_t moe = E * H + E * 3 * I * H;
  return 2 * V * H + H + L * (attn + moe + 2 * H);  // 46.7B
}

uint64_t qwen3_30b_parameters() {
  const uint64_t V = 151936, H = 2048, I = 768, E = 128, L = 48, q = 32 * 128, kv = 4 * 128;
  const uint64_t attn = H * q + 2 * H * kv + q * H + 2 * 128;  // + q/k norms per head
  const uint64_t moe = E * H + E * 3 * I * H;
  return 2 * V * H + H + L * (attn + moe + 2 * H);  // 30.5B
}

uint64_t qwen3_next_parameters() {
  const uint64_t V = 151936, H = 2048, I = 512, E = 512, L = 48, d = 256, q = 16 * d, kv = 2 * d;
  const uint64_t attn = H * 2 * q + 2 * H * kv + q * H + 2 * d;  // q_proj [query | gate]
  const uint64_t dk = 128, key = 16 * dk, value = 32 * dk;  // linear attention
  const uint64_t linear = H * (2 * key + 2 * value) + H * 2 * 32 + (2 * key + value) * 4 +
                          2 * 32 + dk + value * H;
  const uint64_t moe = E * H + E * 3 * I * H + 3 * I * H + H;  // router, experts, shared + gate
  return 2 * V * H + H + 12 * attn + 36 * linear + L * (moe + 2 * H);  // 79.7B
}

uint64_t gpt_oss_parameters(uint64_t L, uint64_t E) {
  const uint64_t V = 201088, H = 2880, I = 2880, q = 64 * 64, kv = 8 * 64;
  const uint64_t attn = (H * q + q) + 2 * (H * kv + kv) + (q * H + H) + 64;  // biases, sinks
  const uint64_t moe = (E * H + E) + E * (H * 2 * I + 2 * I) + E * (I * H + H);
  return 2 * V * H + H + L * (attn + moe + 2 * H);  // 20.9B, 116.8B
}

std::vector<int64_t> dims_of(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

}  // namespace

TEST_CASE("moe families: the published configs build graph-only in seconds, checker-clean") {
  const std::vector<Published> models = {
      {"Mixtral-8x7B-v0.1", kMixtral8x7B, 32, 32, mixtral_parameters()},
      {"Qwen3-30B-A3B", kQwen3_30B_A3B, 48, 48, qwen3_30b_parameters()},
      {"gpt-oss-20b", gpt_oss_config(24, 32), 24, 24, gpt_oss_parameters(24, 32)},
      {"gpt-oss-120b", gpt_oss_config(36, 128), 36, 36, gpt_oss_parameters(36, 128)},
      // GroupQueryAttention on its 12 full-attention layers only.
      {"Qwen3-Next-80B-A3B-Instruct", kQwen3Next80B, 12, 48, qwen3_next_parameters()},
      {"Qwen1.5-MoE-A2.7B", kQwen15MoE, 24, 24, qwen15_moe_parameters()},
      {"OLMoE-1B-7B-0924", kOlmoe1B7B, 16, 16, olmoe_parameters()},
  };
  for (const auto& pm : models) {
    CAPTURE(pm.name);
    TempDir t;
    double secs = 0;
    onnx::ModelProto m = build_config_only(t, pm.config, "--runtime onnxruntime", &secs);
    MESSAGE(pm.name << " graph-only build: " << secs << " s");
    CHECK(secs < 60);

    std::map<std::string, int> ops;
    for (const auto& n : m.graph().node()) ops[n.op_type()]++;
    CHECK(ops["Loop"] == pm.moe_layers);  // one expert loop per sparse layer
    CHECK(ops["GroupQueryAttention"] == pm.layers);
    uint64_t params = 0;
    for (const auto& i : m.graph().initializer()) {
      // Per-expert tensors live in banks only.
      CHECK(i.name().find(".experts.0.") == std::string::npos);
      if (i.name().rfind("rope", 0) == 0) continue;  // rotary caches, computed, not weights
      uint64_t n = 1;
      for (int64_t d : i.dims()) n *= static_cast<uint64_t>(d);
      params += n;
    }
    CHECK(params == pm.parameters);
    MESSAGE("parameters in the graph: " << params);
  }
}

TEST_CASE("moe families: expert banks and attention sinks in the published graphs") {
  SUBCASE("mixtral: block_sparse_moe experts stacked from w1/w3/w2") {
    TempDir t;
    onnx::ModelProto m = build_config_only(t, kMixtral8x7B, "--runtime onnxruntime");
    std::map<std::string, std::vector<int64_t>> inits;
    for (const auto& i : m.graph().initializer()) inits[i.name()] = dims_of(i);
    CHECK(inits["model.layers.0.block_sparse_moe.experts.gate_up_proj"] ==
          std::vector<int64_t>{16, 14336, 4096});
    CHECK(inits["model.layers.31.block_sparse_moe.experts.down_proj"] ==
          std::vector<int64_t>{8, 4096, 14336});
    CHECK(inits["model.layers.0.block_sparse_moe.gate.weight"] == std::vector<int64_t>{4096, 8});
  }
  SUBCASE("gpt-oss: sinks feed head_sink, sliding layers get a window, banks are stacked") {
    TempDir t;
    onnx::ModelProto m = build_config_only(t, gpt_oss_config(24, 32), "--runtime onnxruntime");
    std::map<std::string, std::vector<int64_t>> inits;
    for (const auto& i : m.graph().initializer()) inits[i.name()] = dims_of(i);
    CHECK(inits["model.layers.0.mlp.experts.gate_up_proj"] == std::vector<int64_t>{32, 2880, 5760});
    CHECK(inits["model.layers.0.mlp.experts.gate_up_proj_bias"] == std::vector<int64_t>{32, 5760});
    CHECK(inits["model.layers.23.mlp.experts.down_proj"] == std::vector<int64_t>{32, 2880, 2880});
    CHECK(inits["model.layers.0.mlp.router.bias"] == std::vector<int64_t>{32});
    CHECK(inits["model.layers.5.self_attn.sinks"] == std::vector<int64_t>{64});
    int layer = 0;
    for (const auto& n : m.graph().node()) {
      if (n.op_type() != "GroupQueryAttention") continue;
      CAPTURE(layer);
      REQUIRE(n.input_size() == 12);
      CHECK(n.input(11) == "model.layers." + std::to_string(layer) + ".self_attn.sinks");
      int64_t window = -1;
      for (const auto& a : n.attribute())
        if (a.name() == "local_window_size") window = a.i();
      CHECK(window == (layer % 2 == 0 ? 128 : -1));
      ++layer;
    }
    CHECK(layer == 24);
  }
  SUBCASE("gpt-oss with standard operators: the sinks join the softmax, no contrib op") {
    TempDir t;
    onnx::ModelProto m = build_config_only(t, gpt_oss_config(2, 4), "--runtime onnxruntime --ops standard");
    bool reads_sinks = false;
    for (const auto& n : m.graph().node()) {
      CHECK(n.domain().empty());
      for (const auto& in : n.input()) reads_sinks |= in == "model.layers.1.self_attn.sinks";
    }
    CHECK(reads_sinks);
  }
}

TEST_CASE("moe families: the tiny Qwen3-MoE graph keeps mlp_only_layers dense") {
  TempDir t;
  RunResult r = build_cli(golden("qwen3-moe-tiny"), t / "out", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  CHECK(ops["Loop"] == 2);  // layers 0 and 2
  std::map<std::string, std::vector<int64_t>> inits;
  for (const auto& i : m.graph().initializer()) inits[i.name()] = dims_of(i);
  CHECK(inits.count("model.layers.1.mlp.experts.gate_up_proj") == 0);
  CHECK(inits["model.layers.0.mlp.experts.gate_up_proj"] == std::vector<int64_t>{16, 32, 64});
  CHECK(inits["model.layers.2.mlp.experts.down_proj"] == std::vector<int64_t>{8, 64, 32});
}

TEST_CASE("moe families: num_local_experts spells qwen3_moe's num_experts as well") {
  // transformers' attribute_map makes the two keys one field; newer saves write the second.
  TempDir t;
  copy_case("qwen3-moe-tiny", t / "ckpt", [](auto& c) {
    c["num_local_experts"] = c["num_experts"];
    c.erase("num_experts");
  });
  RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  RunResult p = parity(t / "out", "qwen3-moe-tiny");
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(p.output.find("parity: 3 passed, 0 failed") != std::string::npos);
}

TEST_CASE("moe families: configs and checkpoints that do not fit fail before anything is written") {
  // Published configs, edited: refused while parsing, so no weights are needed.
  struct Refused {
    std::string what;
    std::string config;
    std::function<void(nlohmann::json&)> edit;
    const char* reason;
  };
  const std::vector<Refused> refused = {
      {"more experts per token than experts", kMixtral8x7B,
       [](auto& c) { c["num_experts_per_tok"] = 9; },
       "config.json: 'num_experts_per_tok' (9) must be between 1 and "
       "'num_local_experts' (8)"},
      {"no experts per token", kQwen3_30B_A3B, [](auto& c) { c["num_experts_per_tok"] = 0; },
       "config.json: 'num_experts_per_tok' (0) must be between 1 and 'num_experts' (128)"},
      {"sparse step 0", kQwen3_30B_A3B, [](auto& c) { c["decoder_sparse_step"] = 0; },
       "config.json: 'decoder_sparse_step' must be positive, got 0"},
      {"mlp_only_layers not indices", kQwen3_30B_A3B,
       [](auto& c) { c["mlp_only_layers"] = {1, "two"}; },
       "config.json: 'mlp_only_layers' must be an integer, got 'two'"},
      {"unknown layer type", gpt_oss_config(24, 32),
       [](auto& c) { c["layer_types"][3] = "chunked_attention"; },
       "config.json: 'layer_types' has unknown layer type 'chunked_attention' (known: "
       "sliding_attention, full_attention)"},
      {"layer types of another depth", gpt_oss_config(24, 32),
       [](auto& c) { c["num_hidden_layers"] = 23; },
       "config.json: 'layer_types' has 24 entries for 23 layers ('num_hidden_layers')"},
      {"non-positive swiglu limit", gpt_oss_config(24, 32), [](auto& c) { c["swiglu_limit"] = 0; },
       "config.json: 'swiglu_limit' must be a positive number"},
      {"top-k above the experts", gpt_oss_config(24, 32),
       [](auto& c) { c["num_experts_per_tok"] = 33; },
       "config.json: 'num_experts_per_tok' (33) must be between 1 and "
       "'num_local_experts' (32)"},
  };
  for (const auto& c : refused) {
    CAPTURE(c.what);
    TempDir t;
    fs::create_directories(t / "ckpt");
    nlohmann::json cfg = nlohmann::json::parse(c.config);
    c.edit(cfg);
    write_text(t / "ckpt" / "config.json", cfg.dump());
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime --no-weights");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("error: [config] ") != std::string::npos);  // the user's to fix
    CHECK(r.output.find(c.reason) != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }

  // Checkpoints that do not hold what the config says: the weight plan names the tensor.
  expect_rejected("mixtral-tiny", {},
                  [](StTensor& w) { return w.name != "model.layers.1.block_sparse_moe.experts.5.w3.weight"; },
                  "checkpoint has no tensor 'model.layers.1.block_sparse_moe.experts.5.w3.weight'");
  expect_rejected("gpt-oss-tiny", {},
                  [](StTensor& w) { return w.name != "model.layers.0.self_attn.sinks"; },
                  "checkpoint has no tensor 'model.layers.0.self_attn.sinks'");
  expect_rejected("gpt-oss-tiny", [](auto& c) { c["num_local_experts"] = 4; }, {},
                  "'model.layers.0.mlp.experts.gate_up_proj'");
}

TEST_CASE("moe families: int8/int4 builds store expert banks block-quantized, within a step") {
  // Every expert's rows are MatMulNBits' symmetric blocks, seen as [matrices, rows, packed row]
  // for GatherBlockQuantized: dequantized, each weight is within a step of the checkpoint's
  // (half a step rounding; the code range is one short on the side opposite a block's largest
  // magnitude, which maps to -2^(bits-1), so a weight there may be clipped by up to one step).
  // A misplaced byte, nibble or scale would be off by many steps.
  for (int bits : {8, 4}) {
    CAPTURE(bits);
    TempDir t;
    RunResult r = build_cli(golden("qwen3-moe-tiny"), t / "out",
                            "--runtime onnxruntime --dtype int" + std::to_string(bits));
    INFO(r.output);
    REQUIRE(r.status == 0);
    onnx::ModelProto m = load_model(t / "out" / "model.onnx");
    std::map<std::string, int> ops;
    for (const auto& n : m.graph().node()) ops[n.op_type()]++;
    int gbq = 0;
    for (const auto& n : m.graph().node())
      if (n.op_type() == "Loop")
        for (const auto& a : n.attribute())
          for (const auto& b : a.g().node()) gbq += b.op_type() == "GatherBlockQuantized";
    int qmoe = 0;
    for (const auto& n : m.graph().node()) qmoe += n.op_type() == "QMoE";
    // 8 bits: the loop dequantizes gate/up and down in each of the two sparse layers; 4 bits
    // (symmetric): one QMoE per sparse layer instead.
    CHECK(gbq == (bits == 8 ? 4 : 0));
    CHECK(qmoe == (bits == 8 ? 0 : 2));
    const std::string data = read_text(t / "out" / "model.onnx.data");
    std::map<std::string, std::string> bytes;
    std::map<std::string, std::vector<int64_t>> dims;
    for (const auto& i : m.graph().initializer()) {
      uint64_t off = 0, len = 0;
      for (const auto& e : i.external_data()) {
        if (e.key() == "offset") off = std::stoull(e.value());
        if (e.key() == "length") len = std::stoull(e.value());
      }
      bytes[i.name()] = data.substr(off, len);
      dims[i.name()] = dims_of(i);
    }
    const std::string bank = "model.layers.0.mlp.experts.down_proj";
    CHECK(bytes.count(bank) == 0);  // no float bank beside the quantized one
    const std::string q = bytes.at(bank + "_Q" + std::to_string(bits));
    const std::string s = bytes.at(bank + "_scales");
    REQUIRE(dims[bank + "_Q" + std::to_string(bits)] == std::vector<int64_t>{8, 64, 32 * bits / 8});
    REQUIRE(dims[bank + "_scales"] == std::vector<int64_t>{8, 64, 1});
    auto reader = open_safetensors_checkpoint(golden("qwen3-moe-tiny"));
    double worst = 0;  // largest error in steps
    for (int e = 0; e < 8; ++e) {
      const TensorMeta* meta = reader->find("model.layers.0.mlp.experts." + std::to_string(e) + ".down_proj.weight");
      REQUIRE(meta);
      std::vector<float> w(64 * 32);
      REQUIRE(meta->nbytes == w.size() * 4);
      reader->read(*meta, w.data());
      for (int row = 0; row < 64; ++row) {
        float scale;
        std::memcpy(&scale, s.data() + (e * 64 + row) * 4, 4);
        for (int k = 0; k < 32; ++k) {
          const size_t at = (static_cast<size_t>(e) * 64 + row) * (32 * bits / 8);
          int code;
          if (bits == 8) {
            code = static_cast<uint8_t>(q[at + k]) - 128;
          } else {
            const auto b = static_cast<uint8_t>(q[at + k / 2]);
            code = (k % 2 ? b >> 4 : b & 15) - 8;
          }
          worst = std::max(worst, static_cast<double>(std::abs(code * scale - w[row * 32 + k]) / std::abs(scale)));
        }
      }
    }
    CHECK(worst <= 1.0001);
    CHECK(worst > 0.1);  // the weights are not on the grid: this measures something
    if (bits != 4) continue;
    // QMoE's fc1: each expert's gate and up rows alternating, [E, 2I, H / 2].
    const std::string fc1 = "model.layers.0.mlp.experts.gate_up_proj_swiglu";
    REQUIRE(dims[fc1 + "_Q4"] == std::vector<int64_t>{8, 64, 32});
    REQUIRE(dims[fc1 + "_scales"] == std::vector<int64_t>{8, 64, 2});
    const std::string q1 = bytes.at(fc1 + "_Q4"), s1 = bytes.at(fc1 + "_scales");
    double worst1 = 0;
    for (int e = 0; e < 8; ++e)
      for (int half = 0; half < 2; ++half) {
        const std::string proj = half ? "up_proj" : "gate_proj";
        const TensorMeta* meta = reader->find("model.layers.0.mlp.experts." + std::to_string(e) + "." + proj + ".weight");
        REQUIRE(meta);
        std::vector<float> w(32 * 64);
        reader->read(*meta, w.data());
        for (int row = 0; row < 32; ++row) {
          const size_t r = static_cast<size_t>(e) * 64 + 2 * row + half;  // interleaved
          for (int k = 0; k < 64; ++k) {
            float scale;
            std::memcpy(&scale, s1.data() + (r * 2 + k / 32) * 4, 4);
            const auto b = static_cast<uint8_t>(q1[r * 32 + k / 2]);
            const int code = (k % 2 ? b >> 4 : b & 15) - 8;
            worst1 = std::max(worst1, static_cast<double>(std::abs(code * scale - w[row * 64 + k]) / std::abs(scale)));
          }
        }
      }
    CHECK(worst1 <= 1.0001);
    CHECK(worst1 > 0.1);
  }
}

// Llama 4 Scout's text model: the text_config of meta-llama/Llama-4-Scout-17B-16E-Instruct's
// config.json, as a llama4_text config.json and inside the composite llama4 config (its text
// weights under language_model). Every layer sparse (16 experts, top 1, a shared expert), a NoPE
// layer every fourth, chunked attention (8192) on the others, a llama3 rope whose two band
// factors are equal, and attn_temperature_tuning written as 4.
TEST_CASE("moe families: Llama 4 Scout's published text config builds graph-only in seconds") {
  const char* kScout = R"({
    "architectures": ["Llama4ForCausalLM"], "attention_bias": false, "attention_chunk_size": 8192,
    "attention_dropout": 0.0, "attn_scale": 0.1, "attn_temperature_tuning": 4,
    "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008], "floor_scale": 8192,
    "for_llm_compressor": false, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760, "model_type": "llama4_text",
    "moe_layers": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47],
    "no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0],
    "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
    "num_key_value_heads": 8, "num_local_experts": 16, "output_router_logits": false,
    "pad_token_id": 200018, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
    "torch_dtype": "bfloat16", "use_cache": true, "use_qk_norm": true, "vocab_size": 202048})";
  nlohmann::json composite = {{"architectures", {"Llama4ForConditionalGeneration"}},
                              {"model_type", "llama4"},
                              {"tie_word_embeddings", false},
                              {"text_config", nlohmann::json::parse(kScout)}};
  composite["text_config"].erase("architectures");
  for (const std::string prefix : {"", "language_model."}) {
    CAPTURE(prefix);
    TempDir t;
    double secs = 0;
    onnx::ModelProto m = build_config_only(t, prefix.empty() ? std::string(kScout) : composite.dump(),
                                           "--runtime onnxruntime", &secs);
    MESSAGE("Llama-4-Scout-17B-16E-Instruct graph-only build: " << secs << " s");
    CHECK(secs < 60);
    std::map<std::string, int> ops;
    for (const auto& n : m.graph().node()) ops[n.op_type()]++;
    CHECK(ops["Loop"] == 48);                 // one expert loop per sparse layer
    CHECK(ops["GroupQueryAttention"] == 48);  // chunked layers too: their chunks are its attention_bias
    CHECK(ops["RotaryEmbedding"] == 2 * 36);  // q and k of the 36 rope layers, before their q/k norms
    std::map<std::string, std::vector<int64_t>> inits;
    uint64_t params = 0;
    for (const auto& i : m.graph().initializer()) {
      inits[i.name()] = dims_of(i);
      if (i.name().rfind("rope", 0) == 0) continue;  // rotary caches, computed, not weights
      uint64_t n = 1;
      for (int64_t d : i.dims()) n *= static_cast<uint64_t>(d);
      params += n;
    }
    // transformers' Llama4ForCausalLM of this config: 107,769,861,120 parameters.
    const uint64_t V = 202048, H = 5120, I = 8192, E = 16, L = 48, q = 40 * 128, kv = 8 * 128;
    const uint64_t attn = 2 * H * q + 2 * H * kv;                       // no q/k norm weights
    const uint64_t moe = E * H + E * 2 * I * H + E * I * H + 3 * I * H;  // router, banks, shared
    CHECK(params == 2 * V * H + H + L * (attn + moe + 2 * H));
    CHECK(inits[prefix + "model.layers.0.feed_forward.experts.gate_up_proj"] == std::vector<int64_t>{16, 5120, 16384});
    CHECK(inits[prefix + "model.layers.47.feed_forward.experts.down_proj"] == std::vector<int64_t>{16, 8192, 5120});
    CHECK(inits.count(prefix + "lm_head.weight") == 1);
  }
}
