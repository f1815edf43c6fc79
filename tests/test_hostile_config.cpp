// test_hostile_config.cpp - hostile config.json files through the whole CLI: nested a million
// levels deep, sized like no real model, or quoting terminal escapes. Each is refused with the
// key or limit it broke, exit status 1, nothing written, no crash; messages stay printable and
// short. Plus the host's graph budget, which stops whatever gets past the config checks.
#include <doctest/doctest.h>

#include "plugins/context.hpp"
#include "golden_util.hpp"
#include "sdk_util.hpp"
#include "mobius/build.hpp"
#include "mobius/sdk/module_build.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The golden config's text without its closing brace, to append keys to.
std::string open_config(const std::string& c) {
  std::string text = nlohmann::json::parse(read_text(golden(c) / "config.json")).dump();
  text.pop_back();
  return text;
}

// Builds golden case `c` with config.json replaced by `config` (and `extra` CLI arguments).
RunResult build_with_config(const TempDir& t, const std::string& c, const std::string& config,
                            const std::string& extra = "") {
  copy_case(c, t / "ckpt");
  write_text(t / "ckpt" / "config.json", config);
  return build_cli(t / "ckpt", t / "out", extra);
}

// The build failed for `reason`, said so once on a short printable message, and wrote nothing.
void expect_refused(const TempDir& t, const RunResult& r, const std::string& reason) {
  INFO(r.output.substr(0, 2000));
  CHECK(r.status == 1);
  CHECK(r.output.find(reason) != std::string::npos);
  CHECK(r.output.size() < 4096);
  CHECK_FALSE(fs::exists(t / "out"));
}

bool has_terminal_control(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u == '\n') continue;
    if (u < 0x20 || u == 0x7F) return true;
    if (u == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F)
      return true;
  }
  return false;
}

}  // namespace

TEST_CASE("hostile config: deep, huge and crowded config.json files are refused while parsed") {
  struct Case {
    std::string what;
    std::function<std::string()> config;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"a million levels at the top", [] { return nested_arrays(1000000); },
       "config.json: values nest deeper than 64 levels"},
      {"a million levels inside text_config",
       [] {
         return R"({"model_type": "llama", "text_config": )" + open_config("llama-tiny") +
                R"(, "bos_token_id": )" + nested_arrays(1000000) + "}}";
       },
       "config.json: values nest deeper than 64 levels"},
      {"a million levels in a key no plugin reads",
       [] { return open_config("llama-tiny") + R"(, "notes": {"a": )" + nested_arrays(1000000) + "}}"; },
       "config.json: values nest deeper than 64 levels"},
      {"20 MB", [] { return open_config("llama-tiny") + R"(, "pad": ")" + std::string(20u << 20, 'x') + "\"}"; },
       "config.json: larger than 16 MiB"},
      {"two million keys",
       [] {
         std::string s = open_config("llama-tiny");
         for (int i = 0; i < (2 << 20); ++i) s += ",\"\":0";
         return s + "}";
       },
       "config.json: more than 1048576 values"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    RunResult r = build_with_config(t, "llama-tiny", c.config());
    expect_refused(t, r, c.reason);
    CHECK(r.output.find("[config] ") != std::string::npos);
  }
}

TEST_CASE("hostile config: sizes no real model has are refused naming the key, at once") {
  struct Case {
    std::string what;
    std::string golden_case;
    std::string key;
    std::string value;  // JSON text
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"a trillion layers", "llama-tiny", "num_hidden_layers", "1e12",
       "'num_hidden_layers' is 1000000000000, larger than 1024"},
      {"100000 layers", "llama-tiny", "num_hidden_layers", "100000",
       "'num_hidden_layers' is 100000, larger than 1024"},
      {"layers past 2^53", "llama-tiny", "num_hidden_layers", "1e300",
       "'num_hidden_layers' is 1e+300, larger than 1024"},
      {"layers past int64", "llama-tiny", "num_hidden_layers", "18446744073709551615",
       "'num_hidden_layers' is 18446744073709551615, larger than any integer"},
      {"hidden 1e9", "llama-tiny", "hidden_size", "1e9", "'hidden_size' is 1000000000, larger than 131072"},
      {"vocab 1e10", "llama-tiny", "vocab_size", "1e10", "'vocab_size' is 10000000000, larger than 4194304"},
      {"intermediate 1e15", "llama-tiny", "intermediate_size", "1000000000000000",
       "'intermediate_size' is 1000000000000000, larger than 1048576"},
      {"heads", "llama-tiny", "num_attention_heads", "1e7", "'num_attention_heads' is 10000000, larger than 1024"},
      {"head_dim", "llama-tiny", "head_dim", "65536", "'head_dim' is 65536, larger than 1024"},
      {"positions", "llama-tiny", "max_position_embeddings", "1e15",
       "'max_position_embeddings' is 1000000000000000, larger than 134217728"},
      {"negative layers", "llama-tiny", "num_hidden_layers", "-3", "'num_hidden_layers' must be positive, got -3"},
      {"negative intermediate", "llama-tiny", "intermediate_size", "-1",
       "'intermediate_size' must not be negative, got -1"},
      {"fractional layers", "llama-tiny", "num_hidden_layers", "2.5", "'num_hidden_layers' must be an integer, got 2.5"},
      {"layers as a list", "llama-tiny", "num_hidden_layers", "[1, [2]]",
       "'num_hidden_layers' must be an integer, got a list of 2 values"},
      {"experts", "deepseek-v3-tiny", "n_routed_experts", "1000000", "'n_routed_experts' is 1000000, larger than 4096"},
      {"experts per token", "deepseek-v3-tiny", "num_experts_per_tok", "1e9",
       "'num_experts_per_tok' is 1000000000, larger than 4096"},
      {"latent rank", "deepseek-v3-tiny", "kv_lora_rank", "1e8", "'kv_lora_rank' is 100000000, larger than 65536"},
      {"prediction layers", "deepseek-v3-tiny", "num_nextn_predict_layers", "1e12",
       "'num_nextn_predict_layers' is 1000000000000, larger than 64"},
      {"gemma2 layers", "gemma2-softcap-sliding", "num_hidden_layers", "1e12",
       "'num_hidden_layers' is 1000000000000, larger than 1024"},
      {"qwen35 linear heads", "qwen35-tiny", "linear_num_value_heads", "1e6",
       "'linear_num_value_heads' is 1000000, larger than 1024"},
      {"rope's original positions", "llama-tiny", "rope_scaling",
       R"({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 1e15})",
       "'original_max_position_embeddings' is 1000000000000000, larger than 134217728"},
  };
  for (const auto& c : cases) {
    for (const std::string extra : {"", "--no-weights"}) {
      CAPTURE(c.what);
      CAPTURE(extra);
      TempDir t;
      RunResult r = build_with_config(t, c.golden_case,
                                      open_config(c.golden_case) + ", \"" + c.key + "\": " + c.value + "}", extra);
      expect_refused(t, r, c.reason);
    }
  }
}

TEST_CASE("hostile config: a model larger than any real one in total is refused by the config check") {
  TempDir t;
  // Every key within its bound, the whole about 140 trillion parameters.
  RunResult r = build_with_config(
      t, "llama-tiny",
      open_config("llama-tiny") +
          R"(, "num_hidden_layers": 1024, "hidden_size": 131072, "intermediate_size": 1048576,
               "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 128})",
      "--no-weights");
  expect_refused(t, r, "the config describes a model of about 492.");
  CHECK(r.output.find("'num_hidden_layers', 'hidden_size', 'intermediate_size'") != std::string::npos);
  TempDir t2;
  RunResult e = build_with_config(
      t2, "llama-tiny", open_config("llama-tiny") + R"(, "vocab_size": 4194304, "hidden_size": 131072})",
      "--no-weights");
  expect_refused(t2, e, "'vocab_size' times 'hidden_size'");
}

TEST_CASE("hostile config: the layer count and embedding are checked against the checkpoint") {
  struct Case {
    std::string what;
    std::string golden_case;
    std::string keys;  // JSON members appended to the config
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"1000 layers, 2 in the checkpoint", "llama-tiny", R"("num_hidden_layers": 1000)",
       "'num_hidden_layers' is 1000, but the checkpoint has no tensor "
       "'model.layers.999.input_layernorm.weight': it holds 2 layers (model.layers.0 to model.layers.1)"},
      {"fewer layers than the checkpoint", "llama-tiny", R"("num_hidden_layers": 1)",
       "'num_hidden_layers' is 1, but the checkpoint has more layers: it holds "
       "'model.layers.1.input_layernorm.weight'"},
      {"vocabulary", "llama-tiny", R"("vocab_size": 4000000)",
       "'vocab_size' is 4000000, but the checkpoint's 'model.embed_tokens.weight' has 160 rows (shape [160, 64])"},
      {"hidden size", "llama-tiny", R"("hidden_size": 65536, "head_dim": 16)",
       "'hidden_size' is 65536, but the checkpoint's 'model.embed_tokens.weight' has 64 columns"},
      {"olmo2 has no input norm", "olmo2-postnorm", R"("num_hidden_layers": 4)",
       "the checkpoint has no tensor 'model.layers.3.mlp.down_proj.weight': it holds 2 layers"},
      {"deepseek: dense and MoE layers", "deepseek-v3-tiny", R"("num_hidden_layers": 600)",
       "the checkpoint has no tensor 'model.layers.599.input_layernorm.weight': it holds 3 layers"},
      {"qwen35: linear and full attention", "qwen35-tiny",
       R"("num_hidden_layers": 8, "layer_types": ["linear_attention", "linear_attention", "linear_attention",
          "full_attention", "linear_attention", "linear_attention", "linear_attention", "full_attention"])",
       "the checkpoint has no tensor 'model.layers.7.input_layernorm.weight': it holds 4 layers"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    RunResult r = build_with_config(t, c.golden_case, open_config(c.golden_case) + ", " + c.keys + "}");
    expect_refused(t, r, c.reason);
  }
  // Without weights there is nothing to compare with: 40 tiny layers build.
  TempDir t;
  RunResult r = build_with_config(t, "llama-tiny", open_config("llama-tiny") + R"(, "num_hidden_layers": 40})",
                                  "--no-weights");
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("hostile config: multi-token-prediction layers after the decoder's are not extra layers") {
  auto mtp_layer = [] {
    std::vector<StTensor> t;
    t.push_back(f32_tensor("model.layers.3.input_layernorm.weight", {64}, std::vector<float>(64, 1.0f)));
    t.push_back(f32_tensor("model.layers.3.eh_proj.weight", {2, 2}, {1, 2, 3, 4}));
    return t;
  };
  {
    TempDir t;
    copy_case("deepseek-v3-tiny", t / "ckpt", [](nlohmann::json& c) { c["num_nextn_predict_layers"] = 1; }, {},
              mtp_layer());
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(r.output);
    CHECK(r.status == 0);
  }
  expect_rejected("deepseek-v3-tiny", {}, {},
                  "'num_hidden_layers' is 3, but the checkpoint has more layers: it holds "
                  "'model.layers.3.input_layernorm.weight'",
                  mtp_layer());
}

TEST_CASE("hostile config: the host's budget stops a graph that outgrows the checkpoint or any model") {
  {
    // Within every bound, but the MLP alone is 800 MiB a layer for a checkpoint of 300 KiB.
    TempDir t;
    RunResult r = build_with_config(t, "llama-tiny",
                                    open_config("llama-tiny") + R"(, "intermediate_size": 1048576})");
    expect_refused(t, r, "the graph exceeds the build's budget: initializer ");
    CHECK(r.output.find("times the checkpoint's tensors") != std::string::npos);
    CHECK(r.output.find("intermediate_size") != std::string::npos);
  }
  {
    // 4.4 trillion parameters: under the config check's bound, twice the budget of a build
    // without weights.
    TempDir t;
    RunResult r = build_with_config(
        t, "llama-tiny",
        open_config("llama-tiny") +
            R"(, "num_hidden_layers": 1024, "hidden_size": 16384, "intermediate_size": 65536,
                 "num_attention_heads": 128, "num_key_value_heads": 128, "head_dim": 128, "vocab_size": 32000})",
        "--no-weights");
    expect_refused(t, r, "the graph exceeds the build's budget: initializer ");
    CHECK(r.output.find("past the budget of 8.0 TiB for a build without weights") != std::string::npos);
    CHECK(r.output.find("num_hidden_layers") != std::string::npos);
  }
}

TEST_CASE("hostile config: the node budget stops a builder that never ends") {
  BuildOptions opts;
  opts.no_weights = true;
  std::string error;
  CHECK_THROWS_WITH_AS(
      build_with("toy",
                 [&](mobius_context* ctx) {
                   ctx->budget.max_nodes = 1000;
                   const mobius_host_api* api = host_api();
                   mobius_graph* g = api->main_graph(ctx);
                   mobius_tensor_type t{};
                   t.struct_size = sizeof(t);
                   t.dtype = MOBIUS_DTYPE_FLOAT;
                   t.rank = -1;
                   REQUIRE(api->add_input(g, "x", &t) == MOBIUS_OK);
                   std::string prev = "x";
                   for (int i = 0;; ++i) {
                     std::string out = "y" + std::to_string(i);
                     const char* in[] = {prev.c_str()};
                     const char* outs[] = {out.c_str()};
                     mobius_node n{};
                     n.struct_size = sizeof(n);
                     n.op_type = "Relu";
                     n.inputs = in;
                     n.n_inputs = 1;
                     n.outputs = outs;
                     n.n_outputs = 1;
                     if (api->add_node(g, &n) != MOBIUS_OK) {
                       error = api->last_error(ctx);
                       CHECK(i == 1000);
                       throw mobius::Error(ErrorKind::Config, error);
                     }
                     prev = out;
                   }
                 },
                 opts),
      "[config] the graph exceeds the build's budget: more than 1000 nodes, at node 'Relu_1000'; no real "
      "model needs that many (check num_hidden_layers, hidden_size, intermediate_size, vocab_size, the "
      "head counts and the expert counts in config.json)",
      mobius::Error);
}

TEST_CASE("hostile config: values quoted from config.json reach the terminal escaped and short") {
  struct Case {
    std::string what;
    std::string config;
    std::string reason;
  };
  const std::string fake = "\x1b[2K\rbuilt llama -> out (1 nodes)\x07";
  const std::vector<Case> cases = {
      {"escapes in model_type", nlohmann::json{{"model_type", fake}}.dump(), "unknown model type '\\x1b[2K\\x0dbuilt llama"},
      {"a 15 MB model_type", nlohmann::json{{"model_type", std::string(15u << 20, 'l')}}.dump(),
       "unknown model type 'llllllll"},
      {"C1 controls in model_type", nlohmann::json{{"model_type", "\xc2\x9b" "2K\xc2\x9d" "0;pwned\xc2\x9c" "llama"}}.dump(),
       "unknown model type '\\xc2\\x9b2K\\xc2\\x9d0;pwned\\xc2\\x9cllama'"},
      {"escapes in text_config's model_type",
       nlohmann::json{{"model_type", "outer"}, {"text_config", {{"model_type", fake}}}}.dump(),
       "unknown model type 'outer'"},
      {"a long rope type", open_config("llama-tiny") + R"(, "rope_scaling": {"rope_type": ")" +
                               std::string(1u << 20, 'r') + "\\u001b[31m\"}}",
       "'rope_scaling' has unknown rope type 'rrrr"},
      {"a long string where a number belongs",
       open_config("llama-tiny") + R"(, "hidden_size": ")" + std::string(1u << 20, '9') + "\\u001b]0;x\\u0007\"}",
       "'hidden_size' must be an integer, got '9999"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    RunResult r = build_with_config(t, "llama-tiny", c.config);
    expect_refused(t, r, c.reason);
    CHECK_FALSE(has_terminal_control(r.output));
  }
  // A plugin's own message quoting a value (the activation) is escaped by the CLI all the same.
  TempDir t;
  RunResult r = build_with_config(t, "llama-tiny", open_config("llama-tiny") + R"(, "hidden_act": "\u001b[2Kswoosh\r"})");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("unknown activation '\\x1b[2Kswoosh\\x0d'") != std::string::npos);
  CHECK_FALSE(has_terminal_control(r.output));
}

TEST_CASE("hostile config: the SDK holds the limits and bounds without the host") {
  CHECK_THROWS_WITH_AS(parse_config_text(nested_arrays(1000000), "config.json"),
                       "[config] config.json: values nest deeper than 64 levels", mobius::sdk::Error);
  CHECK(parse_config_text(nested_arrays(64), "config.json").is_array());
  std::string keys = "{";
  for (int i = 0; i < (2 << 20); ++i) keys += i ? ",\"\":0" : "\"\":0";
  CHECK_THROWS_WITH_AS(parse_config_text(keys + "}", "config.json"),
                       "[config] config.json: more than 1048576 values", mobius::sdk::Error);
  CHECK_THROWS_WITH_AS(parse_config_text(nested_arrays(100), "normalized config", MOBIUS_ERROR_KIND_PLUGIN),
                       "[plugin] normalized config: values nest deeper than 64 levels", mobius::sdk::Error);
  // Values in messages: contents of lists and objects never shown, strings escaped and cut.
  CHECK(describe_value(parse_config_text(nested_arrays(60), "c")) == "a list of 1 values");
  CHECK(describe_value(nlohmann::json{{"a", 1}, {"b", 2}}) == "an object of 2 keys");
  CHECK(describe_value(2.5) == "2.5");
  CHECK(describe_value(std::string("\x1b[2K\xc2\x9b") + std::string(500, 'z')) ==
        "'\\x1b[2K\\xc2\\x9b" + std::string(105, 'z') + "...'");
  CHECK(quote_value("swoosh") == "'swoosh'");
  // A config assembled in code is bounded as one read from a file.
  ArchitectureConfig cfg = llama_tiny_config();
  CHECK_NOTHROW(cfg.validate());
  cfg.num_hidden_layers = 5000;
  CHECK_THROWS_WITH_AS(cfg.validate(),
                       "[config] 'num_hidden_layers' is 5000, larger than 1024, the most mobius accepts "
                       "(released models have at most about 126)",
                       mobius::sdk::Error);
  cfg = llama_tiny_config();
  cfg.vocab_size = 1 << 22;
  cfg.hidden_size = 1 << 17;
  CHECK_THROWS_WITH_AS(cfg.validate(),
                       "[config] 'vocab_size' times 'hidden_size' (4194304 x 131072) is more than the "
                       "68719476736 embedding elements mobius accepts (released models have at most about "
                       "5 billion)",
                       mobius::sdk::Error);
  // get_int reads every size key against its bound, nested readers (rope_scaling) included.
  const nlohmann::json j = {{"num_experts", 5000}, {"sliding_window", -2}, {"other", 1e12}};
  ConfigReader r(j, "config.json");
  CHECK_THROWS_WITH_AS(r.get_int("num_experts"),
                       "[config] config.json: 'num_experts' is 5000, larger than 4096, the most mobius "
                       "accepts (released models have at most about 128)",
                       mobius::sdk::Error);
  CHECK_THROWS_WITH_AS(r.get_int("sliding_window"),
                       "[config] config.json: 'sliding_window' must not be negative, got -2", mobius::sdk::Error);
  CHECK(r.get_int("other") == 1000000000000);  // not a size key
  CHECK(size_bound("num_hidden_layers")->max == 1024);
  CHECK(size_bound("bos_token_id") == nullptr);
}

TEST_CASE("hostile config: a deep config.json beside an in-process build never reaches the runtime files") {
  // build_with reads config.json for the runtime files itself, without the CLI's checks.
  TempDir t;
  copy_case("llama-tiny", t / "ckpt");
  write_text(t / "ckpt" / "config.json",
             R"({"model_type": "llama", "text_config": {"bos_token_id": )" + nested_arrays(1000000) + "}}");
  ArchitectureConfig cfg = llama_tiny_config();
  nn::CausalLMModel model(cfg);
  ModelPackage pkg = build_from_module(model, cfg, "text-generation", {}, t / "ckpt");
  pkg.save(t / "out");
  auto genai = nlohmann::json::parse(read_text(t / "out" / "genai_config.json"));
  CHECK(genai["model"]["bos_token_id"] == 1);  // the default: the config was not read
}
