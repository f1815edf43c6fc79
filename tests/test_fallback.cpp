// test_fallback.cpp - a model type no plugin registers: built as llama (the llama pack's
// `fallback`) when its config states a decoder's sizes and its checkpoint holds exactly the
// tensors llama reads, saying so in one line; otherwise the unknown-type error, naming the
// tensors that did not match, and nothing written.
#include <doctest/doctest.h>

#include "golden_util.hpp"

using namespace mobius::test;

namespace {

void rename_type(nlohmann::json& c, const std::string& type, const std::string& cls) {
  c["model_type"] = type;
  c["architectures"] = {cls};
}

}  // namespace

TEST_CASE("fallback: a llama checkpoint under another model type builds as llama") {
  TempDir t;
  copy_case("llama-tiny", t / "ckpt", [](nlohmann::json& c) { rename_type(c, "acme_lm", "AcmeForCausalLM"); });
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build --runtime onnxruntime --model " +
                    quote((t / "ckpt").string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("model type 'acme_lm' is not one mobius knows") != std::string::npos);
  CHECK(r.output.find("building it as llama") != std::string::npos);
  // Transformers' logits: the reference does not depend on the name.
  RunResult p = parity(t / "out", "llama-tiny");
  INFO(p.output);
  CHECK(p.status == 0);
  // Quiet builds stay quiet; the graph alone is checked against the checkpoint's headers too.
  RunResult q = build_cli(t / "ckpt", t / "graph", "--no-weights");
  CHECK(q.status == 0);
  CHECK(q.output.empty());
  // transformers.js picks its class by model_type: the folder's config.json says llama.
  RunResult j = build_cli(t / "ckpt", t / "tjs", "--runtime transformers.js");
  INFO(j.output);
  REQUIRE(j.status == 0);
  auto cfg = nlohmann::json::parse(read_text(t / "tjs" / "config.json"));
  CHECK(cfg["model_type"] == "llama");
  CHECK(cfg.contains("transformers.js_config"));
}

TEST_CASE("fallback: other tensors, a config without a decoder's sizes or another class are refused") {
  // Phi's tensors under llama's config keys: the names that did not match, both ways.
  TempDir t;
  copy_case("phi-tiny", t / "phi", [](nlohmann::json& c) { rename_type(c, "my_phi", "MyPhiForCausalLM"); });
  RunResult r = build_cli(t / "phi", t / "out");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("unknown model type 'my_phi'") != std::string::npos);
  CHECK(r.output.find("not built as llama: its checkpoint's tensors are not llama's") != std::string::npos);
  CHECK(r.output.find("it holds 'lm_head.bias'") != std::string::npos);
  CHECK(r.output.find("it lacks 'model.layers.0.self_attn.o_proj.weight'") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
  // One tensor short of llama's.
  copy_case("llama-tiny", t / "short", [](nlohmann::json& c) { rename_type(c, "acme_lm", "AcmeForCausalLM"); },
            [](StTensor& s) { return s.name != "model.layers.1.mlp.down_proj.weight"; });
  r = build_cli(t / "short", t / "out");
  CHECK(r.status == 1);
  CHECK(r.output.find("it lacks 'model.layers.1.mlp.down_proj.weight'") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
  // GPT-2's spellings are not llama's fields.
  copy_case("gpt2-tiny", t / "gpt", [](nlohmann::json& c) { rename_type(c, "my_gpt", "MyGPTForCausalLM"); });
  r = build_cli(t / "gpt", t / "out");
  CHECK(r.status == 1);
  CHECK(r.output.find("when config.json states a decoder's sizes; it lacks 'hidden_size'") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
  // Llama's tensors, but the config names a classifier.
  copy_case("llama-tiny", t / "cls", [](nlohmann::json& c) { rename_type(c, "acme_lm", "AcmeForSequenceClassification"); });
  r = build_cli(t / "cls", t / "out");
  CHECK(r.status == 1);
  CHECK(r.output.find("'architectures' names no *ForCausalLM class") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}
