// test_llama.cpp - the llama pack beyond parity: configs and checkpoints that do not fit fail
// before anything is written, naming the key or tensor; the graph stays small; the library API
// builds a module a C++ program assembled itself.
#include <doctest/doctest.h>

#include <fstream>

#include "checkpoint.hpp"
#include "mobius/sdk/module_build.hpp"
#include "mobius/plugins.hpp"
#include "onnx/onnx_pb.h"
#include "golden_util.hpp"
#include "sdk_util.hpp"

using namespace mobius;
using namespace mobius::test;

TEST_CASE("llama: configs and checkpoints that do not fit fail before anything is written") {
  REQUIRE(fs::exists(golden("llama-tiny") / "config.json"));
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::function<bool(StTensor&)> keep;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"unknown rope type", [](auto& c) { c["rope_scaling"] = {{"rope_type", "warp"}, {"factor", 2.0}}; }, {},
       "'rope_scaling' has unknown rope type 'warp'"},
      {"llama3 rope without its keys", [](auto& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 0}}; }, {},
       "llama3 rope needs original_max_position_embeddings"},
      {"unknown activation", [](auto& c) { c["hidden_act"] = "swoosh"; }, {}, "'hidden_act' has unknown activation 'swoosh'"},
      {"kv heads do not divide heads", [](auto& c) { c["num_key_value_heads"] = 3; }, {},
       "'num_key_value_heads' (3) must divide 'num_attention_heads' (4)"},
      {"wrong type", [](auto& c) { c["hidden_size"] = "64"; }, {}, "'hidden_size' must be an integer"},
      {"negative layers", [](auto& c) { c["num_hidden_layers"] = -1; }, {}, "'num_hidden_layers' must be positive"},
      {"wrong shape", [](auto& c) { c["intermediate_size"] = 96; }, {},
       "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], the graph expects [96, 64]"},
      {"missing tensor", {}, [](StTensor& t) { return t.name != "model.layers.1.self_attn.k_proj.weight"; },
       "checkpoint has no tensor 'model.layers.1.self_attn.k_proj.weight'"},
      {"extra tensor", {}, [](StTensor& t) {
         if (t.name == "model.norm.weight") t.name = "model.norm.weight_extra";
         return true;
       },
       "checkpoint tensor 'model.norm.weight_extra' is not used by llama"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    expect_rejected("llama-tiny", c.edit, c.keep, c.reason);
  }
}

TEST_CASE("llama: a 2-layer graph is small and computes masks and rope tables once") {
  TempDir t;
  RunResult r = build_cli(golden("llama-tiny"), t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m;
  std::ifstream in(t / "out" / "model.onnx", std::ios::binary);
  REQUIRE(m.ParseFromIstream(&in));
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  CHECK(ops["Cos"] == 1);
  CHECK(ops["Sin"] == 1);
  CHECK(ops["Range"] == 2);
  CHECK(ops["Where"] == 1);
  CHECK(ops["Softmax"] == 2);
  CHECK(m.graph().node_size() < 220);
  // Inputs and outputs of the I/O contract.
  std::vector<std::string> inputs, outputs;
  for (const auto& i : m.graph().input()) inputs.push_back(i.name());
  for (const auto& o : m.graph().output()) outputs.push_back(o.name());
  CHECK(inputs == std::vector<std::string>{"input_ids", "attention_mask", "position_ids",
                                           "past_key_values.0.key", "past_key_values.0.value",
                                           "past_key_values.1.key", "past_key_values.1.value"});
  CHECK(outputs == std::vector<std::string>{"logits", "present.0.key", "present.0.value",
                                            "present.1.key", "present.1.value"});
  const auto& pk = m.graph().input(3).type().tensor_type().shape();
  CHECK(pk.dim(0).dim_param() == "batch_size");
  CHECK(pk.dim(1).dim_value() == 2);
  CHECK(pk.dim(2).dim_param() == "past_sequence_length");
  CHECK(pk.dim(3).dim_value() == 16);
  // Runtime files: genai_config.json describes the cache, provenance says who built it.
  auto genai = nlohmann::json::parse(read_text(t / "out" / "genai_config.json"));
  CHECK(genai["model"]["decoder"]["head_size"] == 16);
  CHECK(genai["model"]["decoder"]["num_key_value_heads"] == 2);
  CHECK(genai["model"]["decoder"]["inputs"]["past_key_names"] == "past_key_values.%d.key");
  auto prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
  CHECK(prov["plugin"] == "llama");
  CHECK(fs::exists(t / "out" / "config.json"));
  // Initializer names are the checkpoint's tensor names.
  std::set<std::string> inits;
  for (const auto& i : m.graph().initializer()) inits.insert(i.name());
  CHECK(inits.count("model.layers.0.self_attn.q_proj.weight"));
  CHECK(inits.count("lm_head.weight"));
}

TEST_CASE("llama: tied embeddings share one initializer") {
  TempDir t;
  RunResult r = build_cli(golden("llama3-rope-tied"), t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m;
  std::ifstream in(t / "out" / "model.onnx", std::ios::binary);
  REQUIRE(m.ParseFromIstream(&in));
  int embeds = 0;
  for (const auto& i : m.graph().initializer()) {
    CHECK(i.name() != "lm_head.weight");
    embeds += i.name() == "model.embed_tokens.weight";
  }
  CHECK(embeds == 1);
}

TEST_CASE("llama: build_from_module builds a module assembled in C++ that matches transformers") {
  ArchitectureConfig cfg = llama_tiny_config();
  cfg.validate();
  nn::CausalLMModel model(cfg);
  ModelPackage pkg = build_from_module(model, cfg, "text-generation", {}, golden("llama-tiny"));
  TempDir t;
  pkg.save(t / "out");
  // The SDK's text-generation task hands genai_config.json to the host, as a plugin's does.
  auto genai = nlohmann::json::parse(read_text(t / "out" / "genai_config.json"));
  CHECK(genai["model"]["type"] == "llama");
  CHECK(genai["model"]["decoder"]["num_key_value_heads"] == 2);
  RunResult r = parity(t / "out", "llama-tiny");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("parity: 3 passed, 0 failed") != std::string::npos);
  CHECK_THROWS_WITH_AS(build_from_module(model, cfg, "image-classification"),
                       doctest::Contains("task 'image-classification' is not supported"),
                       mobius::sdk::Error);
}
