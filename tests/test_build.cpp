// test_build.cpp - `mobius build` end to end through a real plugin: checkpoint in, ONNX out, run in
// ONNX Runtime; and checkpoints that do not fit fail before anything is written.
#include <doctest/doctest.h>

#include "test_util.hpp"

using namespace mobius::test;

namespace {

const std::vector<float> kW = {1, 0, -1, 2, 0.5f, 0.5f, 0.5f, 0.5f, -2, 1, 0, 3};  // [3, 4]
const std::vector<float> kB = {0.1f, -0.2f, 0.3f};

void toy_checkpoint(const fs::path& dir, std::vector<StTensor> extra = {},
                    const std::string& config = R"({"model_type": "toy", "hidden_size": 4, "out_size": 3})") {
  fs::create_directories(dir);
  write_text(dir / "config.json", config);
  std::vector<StTensor> ts{f32_tensor("proj.weight", {3, 4}, kW), f32_tensor("proj.bias", {3}, kB)};
  for (auto& e : extra) ts.push_back(e);
  write_safetensors(dir / "model.safetensors", ts);
}

RunResult cli(const std::string& args) {
  return run(quote(env_or_empty("MOBIUS_CLI")) + " " + args + " --plugin-path " +
             quote(env_or_empty("MOBIUS_TEST_PLUGIN_DIR")));
}

}  // namespace

TEST_CASE("build: toy checkpoint -> ONNX that ONNX Runtime runs with the right values") {
  TempDir t;
  toy_checkpoint(t / "ckpt");
  RunResult r = cli("build --model " + quote((t / "ckpt").string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("built toy") != std::string::npos);
  CHECK(fs::exists(t / "out" / "model.onnx"));
  CHECK(fs::exists(t / "out" / "config.json"));
  CHECK(fs::file_size(t / "out" / "model.onnx.data") >= 15 * 4);

  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 0};
  nlohmann::json in = {{"x", {{"type", "float32"}, {"dims", {2, 4}}, {"data", x}}}};
  write_text(t / "in.json", in.dump());
  RunResult o = run("node " + quote(env_or_empty("MOBIUS_SOURCE_ROOT") + "/tests/ort_run.mjs") + " " +
                    quote((t / "out" / "model.onnx").string()) + " " + quote((t / "in.json").string()), false);
  INFO(o.output);
  REQUIRE(o.status == 0);
  auto y = nlohmann::json::parse(o.output)["y"]["data"].get<std::vector<float>>();
  REQUIRE(y.size() == 6);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 3; ++j) {
      float e = kB[static_cast<size_t>(j)];
      for (int k = 0; k < 4; ++k) e += x[static_cast<size_t>(b * 4 + k)] * kW[static_cast<size_t>(j * 4 + k)];
      CHECK(y[static_cast<size_t>(b * 3 + j)] == doctest::Approx(std::max(0.0f, e)));
    }
}

TEST_CASE("build: f16 weights are cast at save time") {
  TempDir t;
  toy_checkpoint(t / "ckpt");
  RunResult r = cli("build --dtype f16 -q --model " + quote((t / "ckpt").string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.empty());  // --quiet
  // 15 values of 2 bytes, the bias 64-byte aligned after the weight.
  CHECK(fs::file_size(t / "out" / "model.onnx.data") == 64 + 3 * 2);
}

TEST_CASE("build: checkpoints that do not fit fail before anything is written") {
  struct Case {
    const char* what;
    std::vector<StTensor> extra;
    std::string config;
    bool drop_bias;
    const char* reason;
  };
  const std::string good_cfg = R"({"model_type": "toy", "hidden_size": 4, "out_size": 3})";
  std::vector<Case> cases = {
      {"unknown model type", {}, R"({"model_type": "toyy"})", false, "unknown model type 'toyy'; did you mean 'toy'?"},
      {"no model_type", {}, R"({"hidden_size": 4})", false, "no 'model_type' key"},
      {"config not JSON", {}, "{not json", false, "not valid JSON"},
      {"bad config value", {}, R"({"model_type": "toy", "hidden_size": -4})", false, "'hidden_size' must be positive"},
      {"unused tensor", {f32_tensor("extra.weight", {2}, {1, 2})}, good_cfg, false,
       "checkpoint tensor 'extra.weight' is not used by toy"},
      {"shape mismatch", {}, R"({"model_type": "toy", "hidden_size": 5, "out_size": 3})", false,
       "tensor 'proj.weight' has shape [3, 4], the graph expects [3, 5]"},
      {"missing tensor", {}, good_cfg, true, "checkpoint has no tensor 'proj.bias'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    fs::create_directories(t / "ckpt");
    write_text(t / "ckpt" / "config.json", c.config);
    std::vector<StTensor> ts{f32_tensor("proj.weight", {3, 4}, kW)};
    if (!c.drop_bias) ts.push_back(f32_tensor("proj.bias", {3}, kB));
    for (const auto& e : c.extra) ts.push_back(e);
    write_safetensors(t / "ckpt" / "model.safetensors", ts);
    RunResult r = cli("build --model " + quote((t / "ckpt").string()) + " " + quote((t / "out").string()));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(c.reason) != std::string::npos);
    CHECK(r.output.find("mobius: error: ") != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }
  // The ignore list of the plugin covers tensors it knowingly does not use.
  TempDir t;
  toy_checkpoint(t / "ckpt", {f32_tensor("unused.rotary", {2}, {1, 2})});
  CHECK(cli("build -q --model " + quote((t / "ckpt").string()) + " " + quote((t / "out").string())).status == 0);
}

TEST_CASE("build: usage errors") {
  TempDir t;
  CHECK(cli("build " + quote((t / "out").string())).status != 0);  // no --model
  RunResult r = cli("build --model " + quote((t / "nowhere").string()) + " " + quote((t / "out").string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("does not exist, and is not a hub id") != std::string::npos);
  CHECK(cli("build --dtype f8 --model x y").status != 0);
}
