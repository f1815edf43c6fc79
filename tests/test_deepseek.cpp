// test_deepseek.cpp - the deepseek pack beyond parity: the real DeepSeek-V3 graph builds in
// seconds, the graph's shape (latent cache, expert banks, one Loop per MoE layer), layouts and
// routings that must equal the golden logits, and configs or checkpoints that must fail early.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"
#include "onnx/onnx_pb.h"
#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {


std::vector<int64_t> dims_of(const onnx::TensorProto& t) {
  return {t.dims().begin(), t.dims().end()};
}

// Reorders the rope rows of a [.., dr]-per-head weight from DeepSeek's interleaved pairs
// (2i, 2i+1) to rotate_half's halves (i, i + dr/2). `block` rows repeat; the rope rows of each
// block start at `offset`.
void deinterleave_rows(StTensor& t, int64_t block, int64_t offset, int64_t dr) {
  const int64_t cols = t.shape[1];
  auto* f = reinterpret_cast<float*>(t.bytes.data());
  std::vector<float> tmp(static_cast<size_t>(dr * cols));
  for (int64_t b = 0; b < t.shape[0] / block; ++b) {
    float* rope = f + (b * block + offset) * cols;
    for (int64_t j = 0; j < dr / 2; ++j) {
      std::memcpy(&tmp[static_cast<size_t>(j * cols)], rope + 2 * j * cols, cols * sizeof(float));
      std::memcpy(&tmp[static_cast<size_t>((dr / 2 + j) * cols)], rope + (2 * j + 1) * cols,
                  cols * sizeof(float));
    }
    std::memcpy(rope, tmp.data(), tmp.size() * sizeof(float));
  }
}

// The public DeepSeek-V3 config.json (deepseek-ai/DeepSeek-V3), quantization_config left out:
// a graph-only build never reads weights.
const char* kDeepSeekV3Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
  "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "pretraining_tp": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280})";

}  // namespace

TEST_CASE("deepseek: the real DeepSeek-V3 config builds graph-only in seconds, checker-clean") {
  TempDir t;
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "config.json", kDeepSeekV3Config);
  auto start = std::chrono::steady_clock::now();
  RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime --no-weights");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  REQUIRE(r.status == 0);  // the save ran onnx's checker on the model
  MESSAGE("DeepSeek-V3 (61 layers, 256 experts, hidden 7168) graph-only build: " << secs << " s");
  CHECK(secs < 60);

  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  CHECK(ops["Loop"] == 58);  // one per MoE layer (layers 3..60)
  CHECK(ops["Cos"] == 1);    // rope tables computed once for all layers
  CHECK(ops["Softmax"] == 61);

  // The latent cache: 512 + 64 values per token and layer.
  int caches = 0;
  for (const auto& in : m.graph().input()) {
    if (in.name().rfind("past_key_values.", 0) != 0) continue;
    ++caches;
    const auto& s = in.type().tensor_type().shape();
    REQUIRE(s.dim_size() == 4);
    CHECK(s.dim(0).dim_param() == "batch_size");
    CHECK(s.dim(1).dim_value() == 1);
    CHECK(s.dim(2).dim_param() == "past_sequence_length");
    CHECK(s.dim(3).dim_value() == 576);
  }
  CHECK(caches == 61);
  CHECK(m.graph().input(3).name() == "past_key_values.0.latent");

  // Experts live in two banks per layer; no per-expert initializer; the MTP layer is not built.
  std::map<std::string, std::vector<int64_t>> inits;
  uint64_t params = 0;
  for (const auto& i : m.graph().initializer()) {
    inits[i.name()] = dims_of(i);
    uint64_t n = 1;
    for (int64_t d : i.dims()) n *= static_cast<uint64_t>(d);
    params += n;
    CHECK(i.name().find(".experts.0.") == std::string::npos);
    CHECK(i.name().rfind("model.layers.61.", 0) != 0);
  }
  CHECK(inits["model.layers.3.mlp.experts.gate_up_proj"] == std::vector<int64_t>{512, 2048, 7168});
  CHECK(inits["model.layers.60.mlp.experts.down_proj"] == std::vector<int64_t>{256, 7168, 2048});
  CHECK(inits["model.layers.60.mlp.gate.e_score_correction_bias"] == std::vector<int64_t>{256});
  // MatMul weights [in, out]; kv_b_proj split per head into W_uk and W_uv^T while streaming.
  CHECK(inits["model.layers.2.mlp.gate_proj.weight"] == std::vector<int64_t>{7168, 18432});
  CHECK(inits.count("model.layers.2.mlp.experts.down_proj") == 0);
  CHECK(inits["model.layers.0.self_attn.kv_b_proj.weight_uk"] == std::vector<int64_t>{128, 128, 512});
  CHECK(inits["model.layers.0.self_attn.kv_b_proj.weight_uv_t"] == std::vector<int64_t>{128, 512, 128});
  // DeepSeek-V3's 671B parameters (685B with the MTP module, which is not part of the graph).
  const uint64_t H = 7168, V = 129280, heads = 128, E = 256;
  const uint64_t attn = 2 * H + H * 1536 + 1536 + 1536 * heads * 192 + H * 576 + 512 +
                        512 * heads * 256 + heads * 128 * H;
  const uint64_t expected = 2 * V * H + H + 61 * attn + 3 * 3 * H * 18432 +
                            58 * (E * H + E + 3 * E * 2048 * H + 3 * 2048 * H);
  CHECK(params == expected);
  MESSAGE("parameters in the graph: " << params);
}

TEST_CASE("deepseek: the tiny V3 graph has a latent cache, expert banks and a Loop per MoE layer") {
  TempDir t;
  RunResult r = build_cli(golden("deepseek-v3-tiny"), t / "out", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  CHECK(ops["Loop"] == 2);
  CHECK(ops["Unique"] == 2);
  CHECK(ops["Cos"] == 1);
  CHECK(ops["Sin"] == 1);
  CHECK(m.graph().node_size() < 450);
  std::vector<std::string> outputs;
  for (const auto& o : m.graph().output()) outputs.push_back(o.name());
  CHECK(outputs == std::vector<std::string>{"logits", "present.0.latent", "present.1.latent",
                                            "present.2.latent"});
  std::map<std::string, std::vector<int64_t>> inits;
  for (const auto& i : m.graph().initializer()) inits[i.name()] = dims_of(i);
  CHECK(inits["model.layers.1.mlp.experts.gate_up_proj"] == std::vector<int64_t>{32, 32, 64});
  CHECK(inits["model.layers.2.mlp.experts.down_proj"] == std::vector<int64_t>{16, 64, 32});
  CHECK(inits["model.layers.0.self_attn.q_a_layernorm.weight"] == std::vector<int64_t>{48});
  CHECK(inits.count("model.layers.1.mlp.experts.3.up_proj.weight") == 0);
  // The expert loop's body reads the banks from the outer scope.
  bool body_reads_bank = false;
  for (const auto& n : m.graph().node())
    if (n.op_type() == "Loop")
      for (const auto& b : n.attribute(0).g().node())
        for (const auto& in : b.input())
          body_reads_bank |= in == "model.layers.1.mlp.experts.gate_up_proj";
  CHECK(body_reads_bank);
}

TEST_CASE("deepseek: rope_interleave=false on de-interleaved weights gives the same logits") {
  // transformers' V3 with rope_interleave permutes each head's rope dims into halves and then
  // applies rotate_half; doing that permutation to the weights instead must not change a logit.
  TempDir t;
  const int64_t nope = 16, dr = 16, r = 32;
  copy_case(
      "deepseek-v3-tiny", t / "ckpt", [](auto& c) { c["rope_interleave"] = false; },
      [&](StTensor& w) {
        if (w.name.find("q_b_proj.weight") != std::string::npos)
          deinterleave_rows(w, nope + dr, nope, dr);
        if (w.name.find("kv_a_proj_with_mqa.weight") != std::string::npos)
          deinterleave_rows(w, r + dr, r, dr);
        return true;
      });
  RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  RunResult p = parity(t / "out", "deepseek-v3-tiny");
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(p.output.find("parity: 3 passed, 0 failed") != std::string::npos);
}

TEST_CASE("deepseek: V2 group-limited greedy with one expert per group equals greedy") {
  // With n_group = n_routed_experts, the topk_group best groups are the top experts themselves,
  // so the group mask (built here: topk_group < n_group) must keep exactly greedy's choice.
  TempDir t;
  copy_case("deepseek-v2-lite-tiny", t / "ckpt", [](auto& c) {
    c["topk_method"] = "group_limited_greedy";
    c["n_group"] = 8;
    c["topk_group"] = 3;
  });
  RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  int topk = 0;
  for (const auto& n : m.graph().node()) topk += n.op_type() == "TopK";
  CHECK(topk == 4);  // per MoE layer: the groups, then the experts
  RunResult p = parity(t / "out", "deepseek-v2-lite-tiny");
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(p.output.find("parity: 3 passed, 0 failed") != std::string::npos);
}

TEST_CASE("deepseek: attention_bias adds biases to q_a_proj, kv_a_proj_with_mqa and o_proj only") {
  std::vector<StTensor> zeros;
  for (int l = 0; l < 3; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    zeros.push_back(f32_tensor(p + "q_a_proj.bias", {48}, std::vector<float>(48, 0.f)));
    zeros.push_back(f32_tensor(p + "kv_a_proj_with_mqa.bias", {48}, std::vector<float>(48, 0.f)));
    zeros.push_back(f32_tensor(p + "o_proj.bias", {64}, std::vector<float>(64, 0.f)));
  }
  TempDir t;
  copy_case("deepseek-v3-tiny", t / "ckpt", [](auto& c) { c["attention_bias"] = true; }, {}, zeros);
  RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  RunResult p = parity(t / "out", "deepseek-v3-tiny");
  INFO(p.output);
  CHECK(p.output.find("parity: 3 passed, 0 failed") != std::string::npos);
}

TEST_CASE("deepseek: configs and checkpoints that do not fit fail before anything is written") {
  struct Case {
    const char* what;
    const char* golden_case;
    std::function<void(nlohmann::json&)> edit;
    std::function<bool(StTensor&)> keep;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"groups do not divide experts", "deepseek-v3-tiny", [](auto& c) { c["n_group"] = 3; }, {},
       "'n_group' (3) must divide 'n_routed_experts' (16)"},
      {"more experts per token than experts", "deepseek-v3-tiny",
       [](auto& c) { c["num_experts_per_tok"] = 17; }, {},
       "'num_experts_per_tok' (17) must be between 1 and 'n_routed_experts' (16)"},
      {"topk_group above n_group", "deepseek-v3-tiny", [](auto& c) { c["topk_group"] = 5; }, {},
       "'topk_group' (5) must be between 1 and 'n_group' (4)"},
      {"unknown V2 topk_method", "deepseek-v2-lite-tiny",
       [](auto& c) { c["topk_method"] = "noaux_tc"; }, {},
       "'topk_method' has unknown value 'noaux_tc' for deepseek_v2"},
      {"grouped kv heads", "deepseek-v2-lite-tiny",
       [](auto& c) { c["num_key_value_heads"] = 2; }, {},
       "'num_key_value_heads' (2) must equal 'num_attention_heads' (4) for MLA"},
      {"odd rope dim", "deepseek-v2-lite-tiny", [](auto& c) { c["qk_rope_head_dim"] = 7; }, {},
       "'qk_rope_head_dim' must be even"},
      {"V2 without num_experts_per_tok", "deepseek-v2-lite-tiny",
       [](auto& c) { c.erase("num_experts_per_tok"); }, {}, "'num_experts_per_tok' is required"},
      {"q_lora_rank null selects q_proj", "deepseek-v3-tiny",
       [](auto& c) { c["q_lora_rank"] = nullptr; }, {},
       "checkpoint has no tensor 'model.layers.0.self_attn.q_proj.weight'"},
      {"missing expert tensor", "deepseek-v3-tiny", {},
       [](StTensor& w) { return w.name != "model.layers.2.mlp.experts.5.up_proj.weight"; },
       "checkpoint has no tensor 'model.layers.2.mlp.experts.5.up_proj.weight'"},
      {"expert of the wrong shape", "deepseek-v2-lite-tiny", {},
       [](StTensor& w) {
         if (w.name == "model.layers.1.mlp.experts.7.down_proj.weight") {
           w.shape = {32, 64};
         }
         return true;
       },
       "tensor 'model.layers.1.mlp.experts.7.down_proj.weight' has shape [32, 64], expert bank "
       "'model.layers.1.mlp.experts.down_proj' expects [64, 32]"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    expect_rejected(c.golden_case, c.edit, c.keep, c.reason);
  }
}

TEST_CASE("deepseek: multi-token-prediction layers in the checkpoint are ignored, nothing else") {
  std::vector<StTensor> mtp = {f32_tensor("model.layers.3.eh_proj.weight", {2, 2}, {1, 2, 3, 4})};
  {
    TempDir t;
    auto one_mtp_layer = [](nlohmann::json& c) { c["num_nextn_predict_layers"] = 1; };
    copy_case("deepseek-v3-tiny", t / "ckpt", one_mtp_layer, {}, mtp);
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(r.output);
    CHECK(r.status == 0);
  }
  {
    TempDir t;
    copy_case("deepseek-v3-tiny", t / "ckpt", {}, {}, mtp);
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("checkpoint tensor 'model.layers.3.eh_proj.weight' is not used") !=
          std::string::npos);
  }
}
