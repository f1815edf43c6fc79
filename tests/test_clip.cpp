// test_clip.cpp - the clip plugin (transformers' CLIPTextModel, task text-encoding): the published
// SD 1.5 and SD 2.1 text encoder configs build graph-only, checker-clean, with the graph I/O of a
// text encoder and every weight laid out for its operator; CLIPTextConfig's defaults; the pooling
// rule eos_token_id selects; configs, checkpoints and runtimes that do not fit fail before
// anything is written; both golden text encoders (tests/golden-diffusers) match transformers in
// f32 and f16 with either operator set, judged by tests/parity/component_parity.mjs, whose own
// failure modes, input conversions and output aliases are checked last.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "golden_util.hpp"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

using namespace mobius;
using namespace mobius::test;

namespace {

// runwayml/stable-diffusion-v1-5 text_encoder/config.json (openai/clip-vit-large-patch14's text
// model) and stabilityai/stable-diffusion-2-1 text_encoder/config.json (OpenCLIP ViT-H/14's text
// model, its last layer dropped: 23 layers), as published.
const char* kSd15TextEncoder = R"({
  "_name_or_path": "openai/clip-vit-large-patch14", "architectures": ["CLIPTextModel"],
  "attention_dropout": 0.0, "bos_token_id": 0, "dropout": 0.0, "eos_token_id": 2,
  "hidden_act": "quick_gelu", "hidden_size": 768, "initializer_factor": 1.0,
  "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
  "max_position_embeddings": 77, "model_type": "clip_text_model", "num_attention_heads": 12,
  "num_hidden_layers": 12, "pad_token_id": 1, "projection_dim": 768, "torch_dtype": "float32",
  "transformers_version": "4.22.0.dev0", "vocab_size": 49408})";

const char* kSd21TextEncoder = R"({
  "_name_or_path": "hf-models/stable-diffusion-v2-768x768/text_encoder",
  "architectures": ["CLIPTextModel"], "attention_dropout": 0.0, "bos_token_id": 0, "dropout": 0.0,
  "eos_token_id": 2, "hidden_act": "gelu", "hidden_size": 1024, "initializer_factor": 1.0,
  "initializer_range": 0.02, "intermediate_size": 4096, "layer_norm_eps": 1e-05,
  "max_position_embeddings": 77, "model_type": "clip_text_model", "num_attention_heads": 16,
  "num_hidden_layers": 23, "pad_token_id": 1, "projection_dim": 512, "torch_dtype": "float32",
  "transformers_version": "4.25.0.dev0", "vocab_size": 49408})";

const std::vector<std::string> kCases = {"sd15-tiny", "sd2-tiny-linear-proj"};

fs::path source_root() { return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")); }
fs::path diffusers_case(const std::string& c) { return source_root() / "tests" / "golden-diffusers" / c; }

// The harness on one graph of a built model: node tests/parity/component_parity.mjs.
RunResult component_parity(const fs::path& model, const fs::path& case_dir, const std::string& graph,
                           const std::string& extra = "") {
  return run("cd " + quote(source_root().string()) + " && node " +
             quote((source_root() / "tests" / "parity" / "component_parity.mjs").string()) +
             " --model " + quote(model.string()) + " --case " + quote(case_dir.string()) +
             " --graph " + quote(graph) + (extra.empty() ? "" : " " + extra));
}

// A copy of a golden case's text_encoder folder in `dir`, its config edited and its tensors
// renamed, dropped (keep returns false) or added.
void copy_text_encoder(const std::string& c, const fs::path& dir,
                       const std::function<void(nlohmann::json&)>& edit = {},
                       const std::function<bool(StTensor&)>& keep = {},
                       const std::vector<StTensor>& extra = {}) {
  copy_checkpoint(diffusers_case(c) / "text_encoder", dir, edit, keep, extra);
}

StTensor st(const std::string& name, const RefTensor& t) { return {name, t.dtype, t.shape, t.bytes}; }

std::vector<int64_t> dims_of(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

// A value_info's element type and dims ("batch_size" for a symbolic dim, the number otherwise).
std::pair<int, std::vector<std::string>> io_type(const onnx::ValueInfoProto& v) {
  std::vector<std::string> dims;
  for (const auto& d : v.type().tensor_type().shape().dim())
    dims.push_back(d.has_dim_param() ? d.dim_param() : std::to_string(d.dim_value()));
  return {v.type().tensor_type().elem_type(), dims};
}

// The int64 values of a Constant node's output `name` (empty when no Constant makes it).
std::vector<int64_t> constant_ints(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& n : g.node()) {
    if (n.op_type() != "Constant" || n.output(0) != name) continue;
    for (const auto& a : n.attribute()) {
      if (a.name() != "value") continue;
      const auto& t = a.t();
      if (t.int64_data_size()) return {t.int64_data().begin(), t.int64_data().end()};
      std::vector<int64_t> v(t.raw_data().size() / 8);
      std::memcpy(v.data(), t.raw_data().data(), v.size() * 8);
      return v;
    }
  }
  return {};
}

const onnx::NodeProto* producer(const onnx::GraphProto& g, const std::string& value) {
  for (const auto& n : g.node())
    for (const auto& o : n.output())
      if (o == value) return &n;
  return nullptr;
}

float attr_float(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.f();
  return -1;
}

std::map<std::string, int> op_counts(const onnx::ModelProto& m) {
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  return ops;
}

// No Transpose reads a weight: every initializer is stored in the layout its operator reads.
void check_no_weight_transpose(const onnx::ModelProto& m) {
  std::set<std::string> weights;
  for (const auto& i : m.graph().initializer()) weights.insert(i.name());
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "Transpose") continue;
    CAPTURE(n.name());
    CHECK(weights.count(n.input(0)) == 0);
    const onnx::NodeProto* p = producer(m.graph(), n.input(0));
    CHECK((p == nullptr || p->op_type() != "Constant"));
  }
}

// The pooler's reading of input_ids: "argmax" (ArgMax over the ids cast to int32) or the eos id
// compared with (Equal), and -1 when the graph has neither.
std::pair<std::string, int64_t> pooling_of(const onnx::ModelProto& m) {
  const auto& g = m.graph();
  for (const auto& n : g.node()) {
    if (n.op_type() != "ArgMax") continue;
    const onnx::NodeProto* cast = producer(g, n.input(0));
    REQUIRE(cast != nullptr);
    REQUIRE(cast->op_type() == "Cast");
    if (cast->input(0) == "input_ids") return {"argmax", -1};
    const onnx::NodeProto* eq = producer(g, cast->input(0));
    REQUIRE(eq != nullptr);
    REQUIRE(eq->op_type() == "Equal");
    CHECK(eq->input(0) == "input_ids");
    auto v = constant_ints(g, eq->input(1));
    REQUIRE(v.size() == 1);
    return {"first_eos", v[0]};
  }
  return {"", -1};
}

}  // namespace

TEST_CASE("clip: the published SD 1.5 and SD 2.1 text encoder configs build graph-only, checker-clean") {
  struct Published {
    std::string name;
    const char* config;
    int64_t hidden, layers, heads, intermediate;
    bool quick_gelu;
    uint64_t parameters;
  };
  // CLIP ViT-L/14's text model has 123,060,480 parameters; SD 2.1's 23-layer ViT-H/14 text model
  // 340,387,840 (with its 24th layer and text_projection, OpenCLIP's 354,032,640).
  const std::vector<Published> models = {
      {"SD 1.5 text encoder (CLIP ViT-L/14)", kSd15TextEncoder, 768, 12, 12, 3072, true, 123060480ull},
      {"SD 2.1 text encoder (OpenCLIP ViT-H/14)", kSd21TextEncoder, 1024, 23, 16, 4096, false, 340387840ull},
  };
  for (const auto& p : models) {
    for (const std::string ops : {"ort", "standard"}) {
      CAPTURE(p.name);
      CAPTURE(ops);
      TempDir t;
      double secs = 0;
      // The default runtime: a text encoder's folder is laid out for ONNX Runtime.
      onnx::ModelProto m = build_config_only(t, p.config, "--ops " + ops, &secs);
      MESSAGE(p.name << " --ops " << ops << " graph-only build: " << secs << " s");
      CHECK(secs < 20);
      CHECK_FALSE(fs::exists(t / "out" / "genai_config.json"));
      auto prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
      CHECK(prov["runtime"] == "onnxruntime");
      CHECK(prov["model_type"] == "clip_text_model");
      CHECK(prov["plugin"] == "clip");
      CHECK_NOTHROW(onnx::checker::check_model((t / "out" / "model.onnx").string()));

      const auto& g = m.graph();
      // Graph I/O: input_ids alone in, the two hidden-state outputs out (float32 for f32 weights).
      REQUIRE(g.input_size() == 1);
      CHECK(g.input(0).name() == "input_ids");
      CHECK(io_type(g.input(0)) == std::pair<int, std::vector<std::string>>{
                                       onnx::TensorProto::INT64, {"batch_size", "sequence_length"}});
      REQUIRE(g.output_size() == 2);
      CHECK(g.output(0).name() == "last_hidden_state");
      CHECK(io_type(g.output(0)) ==
            std::pair<int, std::vector<std::string>>{
                onnx::TensorProto::FLOAT, {"batch_size", "sequence_length", std::to_string(p.hidden)}});
      CHECK(g.output(1).name() == "pooler_output");
      CHECK(io_type(g.output(1)) == std::pair<int, std::vector<std::string>>{
                                        onnx::TensorProto::FLOAT, {"batch_size", std::to_string(p.hidden)}});
      // Standard ONNX either way: the encoder needs no contrib operator.
      REQUIRE(m.opset_import_size() == 1);
      CHECK(m.opset_import(0).domain().empty());
      CHECK(m.opset_import(0).version() == 17);

      auto ops_seen = op_counts(m);
      const int L = static_cast<int>(p.layers);
      CHECK(ops_seen["LayerNormalization"] == 2 * L + 1);
      CHECK(ops_seen["Softmax"] == L);
      // Per layer: the packed q/k/v projection, q k^T, probs v, out_proj, fc1, fc2.
      CHECK(ops_seen["MatMul"] == 6 * L);
      CHECK(ops_seen["Sigmoid"] == (p.quick_gelu ? L : 0));
      CHECK(ops_seen["Erf"] == (p.quick_gelu ? 0 : L));
      CHECK(ops_seen["ArgMax"] == 1);
      CHECK(ops_seen["GatherND"] == 1);
      // eos_token_id 2: the legacy rule, argmax of the ids.
      CHECK(pooling_of(m) == std::pair<std::string, int64_t>{"argmax", -1});
      check_no_weight_transpose(m);

      std::map<std::string, std::vector<int64_t>> inits;
      uint64_t params = 0;
      for (const auto& i : g.initializer()) {
        inits[i.name()] = dims_of(i);
        CHECK(i.data_type() == onnx::TensorProto::FLOAT);
        uint64_t n = 1;
        for (int64_t d : i.dims()) n *= static_cast<uint64_t>(d);
        params += n;
      }
      const int64_t H = p.hidden, I = p.intermediate;
      const std::string last = "text_model.encoder.layers." + std::to_string(L - 1);
      CHECK(inits["text_model.embeddings.token_embedding.weight"] == std::vector<int64_t>{49408, H});
      CHECK(inits["text_model.embeddings.position_embedding.weight"] == std::vector<int64_t>{77, H});
      // The Linear weights as MatMul reads them, [in, out]; q, k and v in one.
      CHECK(inits[last + ".self_attn.qkv_proj.weight"] == std::vector<int64_t>{H, 3 * H});
      CHECK(inits[last + ".self_attn.qkv_proj.bias"] == std::vector<int64_t>{3 * H});
      CHECK(inits[last + ".self_attn.out_proj.weight"] == std::vector<int64_t>{H, H});
      CHECK(inits[last + ".mlp.fc1.weight"] == std::vector<int64_t>{H, I});
      CHECK(inits[last + ".mlp.fc2.weight"] == std::vector<int64_t>{I, H});
      CHECK(inits["text_model.final_layer_norm.bias"] == std::vector<int64_t>{H});
      CHECK(inits.count("text_model.encoder.layers." + std::to_string(L) + ".mlp.fc1.weight") == 0);
      // Every parameter of the checkpoint, once.
      const uint64_t h = static_cast<uint64_t>(H), i = static_cast<uint64_t>(I);
      const uint64_t layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h;
      CHECK(params == (49408 + 77) * h + static_cast<uint64_t>(L) * layer + 2 * h);
      CHECK(params == p.parameters);
    }
  }
}

TEST_CASE("clip: CLIPTextConfig's defaults fill a config.json that names only the model type") {
  TempDir t;
  onnx::ModelProto m = build_config_only(t, R"({"model_type": "clip_text_model"})", "--runtime onnxruntime");
  std::map<std::string, std::vector<int64_t>> inits;
  for (const auto& i : m.graph().initializer()) inits[i.name()] = dims_of(i);
  // vocab 49408, hidden 512, intermediate 2048, 12 layers, 77 positions.
  CHECK(inits["text_model.embeddings.token_embedding.weight"] == std::vector<int64_t>{49408, 512});
  CHECK(inits["text_model.embeddings.position_embedding.weight"] == std::vector<int64_t>{77, 512});
  CHECK(inits["text_model.encoder.layers.11.mlp.fc1.weight"] == std::vector<int64_t>{512, 2048});
  CHECK(inits.count("text_model.encoder.layers.12.mlp.fc1.weight") == 0);
  auto ops = op_counts(m);
  CHECK(ops["Sigmoid"] == 12);  // quick_gelu
  CHECK(ops["Erf"] == 0);
  // eos_token_id 49407: the first position holding it.
  CHECK(pooling_of(m) == std::pair<std::string, int64_t>{"first_eos", 49407});
  // 8 heads of 64, layer_norm_eps 1e-5.
  bool heads_seen = false;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "LayerNormalization") CHECK(attr_float(n, "epsilon") == doctest::Approx(1e-5));
    if (n.op_type() == "Reshape" && n.name().find("self_attn") != std::string::npos &&
        constant_ints(m.graph(), n.input(1)) == std::vector<int64_t>{0, 0, 8, 64})
      heads_seen = true;
  }
  CHECK(heads_seen);

  // Keys that are given win over the defaults.
  TempDir t2;
  m = build_config_only(t2,
                        R"({"model_type": "clip_text_model", "hidden_size": 64, "num_attention_heads": 2,
                            "num_hidden_layers": 1, "layer_norm_eps": 1e-6, "hidden_act": "gelu_new",
                            "eos_token_id": 7})",
                        "--runtime onnxruntime");
  ops = op_counts(m);
  CHECK(ops["Tanh"] == 1);  // the tanh approximation
  CHECK(ops["LayerNormalization"] == 3);
  CHECK(pooling_of(m) == std::pair<std::string, int64_t>{"first_eos", 7});
  for (const auto& n : m.graph().node())
    if (n.op_type() == "LayerNormalization") CHECK(attr_float(n, "epsilon") == doctest::Approx(1e-6));
}

TEST_CASE("clip: the pooling rule follows eos_token_id") {
  // The golden configs: eos 2 (argmax of the ids) and eos 997 (its first position).
  for (const auto& [c, rule, eos] : std::vector<std::tuple<std::string, std::string, int64_t>>{
           {"sd15-tiny", "argmax", -1}, {"sd2-tiny-linear-proj", "first_eos", 997}}) {
    CAPTURE(c);
    TempDir t;
    RunResult r = build_cli(diffusers_case(c) / "text_encoder", t / "out", "--runtime onnxruntime");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(pooling_of(load_model(t / "out" / "model.onnx")) == std::pair<std::string, int64_t>{rule, eos});
  }

  // sd2's row 1 holds an added token (999) before its eos (997): argmax, the rule eos_token_id 2
  // would select, reads another position there, and only pooler_output may differ.
  {
    TempDir t;
    copy_text_encoder("sd2-tiny-linear-proj", t / "ckpt", [](auto& cfg) { cfg["eos_token_id"] = 2; });
    RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(b.output);
    REQUIRE(b.status == 0);
    RunResult p = component_parity(t / "out", diffusers_case("sd2-tiny-linear-proj"), "text_encoder");
    INFO(p.output);
    CHECK(p.status == 1);
    CHECK(p.output.find("text_encoder.last_hidden_state: PASS") != std::string::npos);
    CHECK(p.output.find("text_encoder.pooler_output: FAIL") != std::string::npos);
    CHECK(p.output.find("component parity: 1 passed, 1 failed") != std::string::npos);
  }

  // An eos id no row holds: transformers' argmax of an all-zero row is 0, so pooler_output is
  // each row's first hidden state.
  {
    TempDir t;
    copy_text_encoder("sd15-tiny", t / "ckpt", [](auto& cfg) { cfg["eos_token_id"] = 49407; });
    RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(b.output);
    REQUIRE(b.status == 0);
    auto ref = read_safetensors_file(diffusers_case("sd15-tiny") / "reference.safetensors");
    const RefTensor& lhs = ref.at("text_encoder.last_hidden_state");
    REQUIRE(lhs.shape == std::vector<int64_t>{2, 77, 32});
    RefTensor first{"F32", {2, 32}, {}};
    for (int64_t row = 0; row < 2; ++row) {
      const auto* p = lhs.bytes.data() + row * 77 * 32 * 4;  // position 0 of the row
      first.bytes.insert(first.bytes.end(), p, p + 32 * 4);
    }
    fs::create_directories(t / "case");
    write_safetensors(t / "case" / "reference.safetensors",
                      {st("text_encoder.input_ids", ref.at("text_encoder.input_ids")),
                       st("text_encoder.last_hidden_state", lhs), st("text_encoder.pooler_output", first)});
    write_text(t / "case" / "case.json", R"({"atol": 0.0001, "rtol": 0.001})");
    RunResult p = component_parity(t / "out", t / "case", "text_encoder");
    INFO(p.output);
    CHECK(p.status == 0);
    CHECK(p.output.find("component parity: 2 passed, 0 failed") != std::string::npos);
  }
}

TEST_CASE("clip: configs, checkpoints and runtimes that do not fit fail before anything is written") {
  REQUIRE(fs::exists(diffusers_case("sd15-tiny") / "text_encoder" / "config.json"));
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::function<bool(StTensor&)> keep;
    const char* reason;
    std::string extra_args = "";
    std::vector<StTensor> extra_tensors = {};
  };
  const std::vector<Case> cases = {
      {"unknown activation", [](auto& c) { c["hidden_act"] = "gelu_quick"; }, {},
       "'hidden_act' has unknown activation 'gelu_quick' (known: silu, swish, relu, gelu, "},
      {"activation not a string", [](auto& c) { c["hidden_act"] = 5; }, {}, "'hidden_act' must be a string"},
      {"heads do not divide hidden", [](auto& c) { c["num_attention_heads"] = 5; }, {},
       "'num_attention_heads' (5) must divide 'hidden_size' (32)"},
      {"null eos", [](auto& c) { c["eos_token_id"] = nullptr; }, {}, "'eos_token_id' is null"},
      {"eos list", [](auto& c) { c["eos_token_id"] = {2, 3}; }, {}, "'eos_token_id' must be an integer"},
      {"no feed-forward", [](auto& c) { c["intermediate_size"] = 0; }, {}, "'intermediate_size' must be positive"},
      {"zero eps", [](auto& c) { c["layer_norm_eps"] = 0; }, {}, "'layer_norm_eps' must be positive"},
      {"absurd size", [](auto& c) { c["num_hidden_layers"] = 1000000; }, {}, "'num_hidden_layers'"},
      {"a layer more than the checkpoint", [](auto& c) { c["num_hidden_layers"] = 6; }, {},
       "'num_hidden_layers' is 6, but the checkpoint has no tensor "
       "'text_model.encoder.layers.5.layer_norm1.weight': it holds 5 layers"},
      {"a layer less than the checkpoint", [](auto& c) { c["num_hidden_layers"] = 4; }, {},
       "'num_hidden_layers' is 4, but the checkpoint has more layers"},
      {"vocabulary of another size", [](auto& c) { c["vocab_size"] = 999; }, {},
       "'vocab_size' is 999, but the checkpoint's 'text_model.embeddings.token_embedding.weight' has 1000 rows"},
      {"fewer positions", [](auto& c) { c["max_position_embeddings"] = 64; }, {},
       "'max_position_embeddings' is 64, but the checkpoint's "
       "'text_model.embeddings.position_embedding.weight' has 77 rows"},
      {"wrong feed-forward width", [](auto& c) { c["intermediate_size"] = 40; }, {},
       "tensor 'text_model.encoder.layers.0.mlp.fc1.weight' has shape [37, 32], the graph expects [40, 32]"},
      {"missing tensor", {}, [](StTensor& t) { return t.name != "text_model.encoder.layers.3.mlp.fc2.bias"; },
       "checkpoint has no tensor 'text_model.encoder.layers.3.mlp.fc2.bias'"},
      {"unknown tensor", {}, {}, "checkpoint tensor 'text_model.extra.weight' is not used by clip_text_model",
       "", {f32_tensor("text_model.extra.weight", {2}, {1.0f, 2.0f})}},
      {"GenAI asked for", {}, {}, "clip_text_model is a text encoder (task text-encoding), which ONNX Runtime GenAI does not run",
       "--runtime ort-genai"},
      {"transformers.js asked for", {}, {}, "clip_text_model is a text encoder (task text-encoding), which transformers.js does not run",
       "--runtime transformers.js"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    copy_text_encoder("sd15-tiny", t / "ckpt", c.edit, c.keep, c.extra_tensors);
    RunResult r = build_cli(t / "ckpt", t / "out", c.extra_args.empty() ? "--runtime onnxruntime" : c.extra_args);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(c.reason) != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }

  // What a checkpoint may carry or leave out: SD 1.5's position_ids buffer (sd2 has none), and
  // CLIPTextModelWithProjection's text_projection, which CLIPTextModel does not read either.
  {
    TempDir t;
    copy_text_encoder("sd15-tiny", t / "ckpt", {}, [](StTensor& s) { return s.name != "text_model.embeddings.position_ids"; },
                      {f32_tensor("text_projection.weight", {2, 32}, std::vector<float>(64, 0.5f))});
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("text_projection.weight (CLIPTextModelWithProjection) is not part of the graph") != std::string::npos);
    RunResult p = component_parity(t / "out", diffusers_case("sd15-tiny"), "text_encoder");
    INFO(p.output);
    CHECK(p.status == 0);
  }
}

TEST_CASE("clip: both golden text encoders match transformers in f32 and f16, ops ort and standard") {
  for (const auto& c : kCases) {
    for (const std::string ops : {"ort", "standard"}) {
      for (const std::string dtype : {"f32", "f16"}) {
        CAPTURE(c);
        CAPTURE(ops);
        CAPTURE(dtype);
        TempDir t;
        RunResult b = build_cli(diffusers_case(c) / "text_encoder", t / "out",
                                "--runtime onnxruntime --ops " + ops + " --dtype " + dtype);
        INFO(b.output);
        REQUIRE(b.status == 0);
        onnx::ModelProto m = load_model(t / "out" / "model.onnx");
        const int act = dtype == "f16" ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
        CHECK(io_type(m.graph().output(0)).first == act);
        check_no_weight_transpose(m);
        // The case's own tolerance for f32; case.json's f16 tolerance for f16.
        RunResult p = component_parity(t / "out", diffusers_case(c), "text_encoder",
                                       dtype == "f16" ? "--atol 2e-2 --rtol 1e-2" : "");
        INFO(p.output);
        MESSAGE(c << " --ops " << ops << " --dtype " << dtype << ":\n" << p.output);
        CHECK(p.status == 0);
        CHECK(p.output.find("component parity: 2 passed, 0 failed") != std::string::npos);
      }
    }
  }
}

namespace {

// A graph for the harness' own checks: inputs timestep (float32 [2]) and sample (float16 [2, 3]);
// outputs t_out = timestep, s_out = sample (float16) and other = timestep.
void write_identity_model(const fs::path& p) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("test_clip");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("identity");
  auto value = [](onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value(g->add_input(), "timestep", onnx::TensorProto::FLOAT, {2});
  value(g->add_input(), "sample", onnx::TensorProto::FLOAT16, {2, 3});
  value(g->add_output(), "t_out", onnx::TensorProto::FLOAT, {2});
  value(g->add_output(), "s_out", onnx::TensorProto::FLOAT16, {2, 3});
  value(g->add_output(), "other", onnx::TensorProto::FLOAT, {2});
  for (const auto& [in, out] : std::vector<std::pair<std::string, std::string>>{
           {"timestep", "t_out"}, {"sample", "s_out"}, {"timestep", "other"}}) {
    auto* n = g->add_node();
    n->set_op_type("Identity");
    n->set_name(out);
    n->add_input(in);
    n->add_output(out);
  }
  std::ofstream f(p, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&f));
}

StTensor i64_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  StTensor t{name, "I64", std::move(shape), std::vector<uint8_t>(v.size() * 8)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

}  // namespace

TEST_CASE("clip: component_parity.mjs fails a wrong model, converts inputs and reads aliases") {
  TempDir t;
  RunResult b = build_cli(diffusers_case("sd15-tiny") / "text_encoder", t / "sd15", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  // Another case's weights, the same shapes: every output is out of tolerance.
  RunResult p = component_parity(t / "sd15", diffusers_case("sd2-tiny-linear-proj"), "text_encoder");
  CHECK(p.status == 1);
  CHECK(p.output.find("text_encoder.last_hidden_state: FAIL") != std::string::npos);
  CHECK(p.output.find("component parity: 0 passed, 2 failed") != std::string::npos);
  // A model input without a reference tensor is a usage error.
  p = component_parity(t / "sd15", diffusers_case("sd15-tiny"), "unet");
  CHECK(p.status == 2);
  CHECK(p.output.find("model input 'input_ids' has no reference tensor 'unet.input_ids'") != std::string::npos);
  p = component_parity(t / "absent", diffusers_case("sd15-tiny"), "text_encoder");
  CHECK(p.status == 2);
  CHECK(p.output.find("component_parity: error: no model") != std::string::npos);

  // An int64 reference into a float input (a timestep), float32 into float16, a float16 output,
  // an output compared through case.json's aliases, and one without a reference.
  write_identity_model(t / "identity.onnx");
  fs::create_directories(t / "case");
  const std::vector<float> sample = {0.5f, -1.25f, 3.0f, 0.0999755859375f /* a float16 value */, -7.5f, 1024.0f};
  auto write_case = [&](float t1) {
    write_safetensors(t / "case" / "reference.safetensors",
                      {i64_tensor("g.timestep", {2}, {7, 981}), f32_tensor("g.sample", {2, 3}, sample),
                       f32_tensor("g.t_out", {2}, {7.0f, t1}), f32_tensor("g.noise", {2, 3}, sample)});
  };
  write_case(981.0f);
  write_text(t / "case" / "case.json",
             R"({"atol": 0.0001, "rtol": 0.001,
                 "graphs": {"g": {"outputs": {"noise": {"aliases": ["pred", "s_out"]}}}}})");
  p = component_parity(t / "identity.onnx", t / "case", "g");
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(p.output.find("g.t_out: PASS: max |diff| 0.000e+0") != std::string::npos);
  CHECK(p.output.find("g.s_out (reference noise): PASS: max |diff| 0.000e+0") != std::string::npos);
  CHECK(p.output.find("g.other: no reference, not compared") != std::string::npos);
  CHECK(p.output.find("component parity: 2 passed, 0 failed") != std::string::npos);
  // One value 1 away (1000x atol at rtol 1e-3 of 982): the worst element is named.
  write_case(982.0f);
  p = component_parity(t / "identity.onnx", t / "case", "g");
  INFO(p.output);
  CHECK(p.status == 1);
  CHECK(p.output.find("g.t_out: FAIL: max |diff| 1.000e+0; worst at [1]: onnx 981 expected 982") != std::string::npos);
  CHECK(p.output.find("component parity: 1 passed, 1 failed") != std::string::npos);
  // A larger tolerance given on the command line wins over the case's.
  p = component_parity(t / "identity.onnx", t / "case", "g", "--atol 2");
  CHECK(p.status == 0);
  // --json: the report on stdout, the summary on stderr.
  p = component_parity(t / "identity.onnx", t / "case", "g", "--json --atol 2");
  CHECK(p.status == 0);
  CHECK(p.output.find("\"uncompared\"") != std::string::npos);
}
