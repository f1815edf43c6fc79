// test_qwen35.cpp - the qwen35 pack beyond parity: the composite config builds the text model's
// graph, the hybrid cache I/O, configs that do not fit, and the delta rule agreeing with itself
// whether a prompt arrives whole, in pieces or token by token.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "onnx/onnx_pb.h"
#include "golden_util.hpp"

using namespace mobius::test;

namespace {


std::vector<std::string> io_names(
    const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& v) {
  std::vector<std::string> out;
  for (const auto& i : v) out.push_back(i.name());
  return out;
}

std::string type_str(const onnx::ValueInfoProto& v) {
  const auto& t = v.type().tensor_type();
  std::string s = std::to_string(t.elem_type()) + "[";
  for (int i = 0; i < t.shape().dim_size(); ++i) {
    const auto& d = t.shape().dim(i);
    s += (i ? "," : "") + (d.has_dim_param() ? d.dim_param() : std::to_string(d.dim_value()));
  }
  return s + "]";
}

// Feeds the same tokens to a built model whole and in pieces (each piece continuing the cache
// the previous one returned) and prints the largest logit difference at real positions.
const char* kConsistencyScript = R"JS(
import { createRequire } from 'module';
import path from 'path';
const require = createRequire(path.join(process.cwd(), 'noop.js'));
let ort;
for (const base of [process.cwd(), ...(process.env.NODE_PATH || '').split(':').filter(Boolean)]) {
  try {
    const dir = base.endsWith('node_modules') ? base : path.join(base, 'node_modules');
    ort = require(path.join(dir, 'onnxruntime-node'));
    break;
  } catch (e) { /* next */ }
}
const [model, lenArg, padArg, piecesArg] = process.argv.slice(2);
const L = Number(lenArg), pad = Number(padArg), B = 2;
const pieces = piecesArg.split(',').map(Number);
const s = await ort.InferenceSession.create(model, { logSeverityLevel: 3 });
let seed = 12345;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const ids = Array.from({ length: B * L }, () => Math.floor(rnd() * 190));
// Row 1 is left-padded by `pad` tokens.
const mask = Array.from({ length: B * L }, (_, i) => (i >= L && i % L < pad ? 0 : 1));
function emptyCache() {
  const f = {};
  s.inputNames.forEach((name, i) => {
    if (!name.startsWith('past_key_values.')) return;
    const meta = s.inputMetadata[i];
    const dims = meta.shape.map((d) =>
      (d === 'batch_size' ? B : d === 'past_sequence_length' ? 0 : d));
    const n = dims.reduce((a, b) => a * b, 1);
    const zeros = meta.type === 'float16' ? new Uint16Array(n) : new Float32Array(n);
    f[name] = new ort.Tensor(meta.type, zeros, dims);
  });
  return f;
}
async function step(start, len, past) {
  const total = start + len;
  const cols = (arr, a, b) => {
    const o = [];
    for (let r = 0; r < B; ++r) for (let j = a; j < b; ++j) o.push(arr[r * L + j]);
    return o;
  };
  const m = cols(mask, 0, total);
  const pos = [];
  for (let r = 0; r < B; ++r) {
    let c = 0;
    for (let j = 0; j < total; ++j) {
      c += m[r * total + j];
      if (j >= start) pos.push(m[r * total + j] ? c - 1 : 1);
    }
  }
  const t = (data, dims) => new ort.Tensor('int64', BigInt64Array.from(data.map(BigInt)), dims);
  const out = await s.run({ ...past, input_ids: t(cols(ids, start, total), [B, len]),
                            attention_mask: t(m, [B, total]), position_ids: t(pos, [B, len]) });
  const next = {};
  for (const [k, v] of Object.entries(out))
    if (k.startsWith('present.')) next['past_key_values.' + k.slice(8)] = v;
  return { logits: out.logits, past: next };
}
const whole = await step(0, L, emptyCache());
const V = whole.logits.dims[2];
let past = emptyCache(), start = 0, worst = 0;
for (const len of pieces) {
  const r = await step(start, len, past);
  for (let b = 0; b < B; ++b)
    for (let t = 0; t < len; ++t) {
      if (!mask[b * L + start + t]) continue;
      for (let v = 0; v < V; ++v)
        worst = Math.max(worst, Math.abs(r.logits.data[(b * len + t) * V + v] -
                                         whole.logits.data[(b * L + start + t) * V + v]));
    }
  past = r.past;
  start += len;
}
console.log(JSON.stringify({ max_abs_diff: worst }));
)JS";

}  // namespace

TEST_CASE("qwen35: the composite qwen3_5 config builds the text model's graph") {
  TempDir t;
  RunResult a = build_cli(golden("qwen35-tiny"), t / "text");
  INFO(a.output);
  REQUIRE(a.status == 0);
  RunResult b = build_cli(golden("qwen35-composite"), t / "composite");
  INFO(b.output);
  REQUIRE(b.status == 0);
  onnx::ModelProto mt = load_model(t / "text" / "model.onnx");
  onnx::ModelProto mc = load_model(t / "composite" / "model.onnx");

  // The same nodes, subgraphs included, once the composite's text prefix is read as "model.";
  // the same I/O; initializers differ only by that prefix.
  auto unprefixed = [](std::string s) {
    const std::string from = "model.language_model.";
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p))
      s.replace(p, from.size(), "model.");
    return s;
  };
  REQUIRE(mt.graph().node_size() == mc.graph().node_size());
  for (int i = 0; i < mt.graph().node_size(); ++i) {
    CAPTURE(mt.graph().node(i).name());
    CHECK(mt.graph().node(i).DebugString() == unprefixed(mc.graph().node(i).DebugString()));
  }
  CHECK(io_names(mt.graph().input()) == io_names(mc.graph().input()));
  CHECK(io_names(mt.graph().output()) == io_names(mc.graph().output()));
  std::set<std::string> text_inits, composite_inits;
  for (const auto& i : mt.graph().initializer()) {
    std::string n = i.name();
    if (n.rfind("model.", 0) == 0) n = "model.language_model." + n.substr(6);
    text_inits.insert(n);
  }
  for (const auto& i : mc.graph().initializer()) composite_inits.insert(i.name());
  CHECK(text_inits == composite_inits);
  CHECK(composite_inits.count("model.language_model.layers.0.linear_attn.in_proj_qkv.weight"));
  CHECK(composite_inits.count("lm_head.weight"));
  for (const auto& n : composite_inits) {
    CHECK(n.rfind("model.visual.", 0) == std::string::npos);
    CHECK(n.rfind("mtp.", 0) == std::string::npos);
  }
}

TEST_CASE("qwen35: cache I/O per layer type, static but for batch_size in linear layers") {
  TempDir t;
  RunResult r = build_cli(golden("qwen35-tiny"), t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::vector<std::string> inputs{"input_ids", "attention_mask", "position_ids"};
  std::vector<std::string> outputs{"logits"};
  for (int i = 0; i < 3; ++i)
    for (const char* n : {"conv_state", "recurrent_state"}) {
      inputs.push_back("past_key_values." + std::to_string(i) + "." + n);
      outputs.push_back("present." + std::to_string(i) + "." + n);
    }
  for (const char* n : {"key", "value"}) {
    inputs.push_back(std::string("past_key_values.3.") + n);
    outputs.push_back(std::string("present.3.") + n);
  }
  CHECK(io_names(m.graph().input()) == inputs);
  CHECK(io_names(m.graph().output()) == outputs);
  std::map<std::string, std::string> types;
  for (const auto& v : m.graph().input()) types[v.name()] = type_str(v);
  for (const auto& v : m.graph().output()) types[v.name()] = type_str(v);
  // conv_dim = 2 * 2 * 16 + 4 * 16 = 128 channels, K = 4; state [hv=4, dk=16, dv=16], float32.
  CHECK(types["past_key_values.0.conv_state"] == "1[batch_size,128,4]");
  CHECK(types["past_key_values.2.recurrent_state"] == "1[batch_size,4,16,16]");
  CHECK(types["present.1.conv_state"] == "1[batch_size,128,4]");
  CHECK(types["present.1.recurrent_state"] == "1[batch_size,4,16,16]");
  CHECK(types["past_key_values.3.key"] == "1[batch_size,2,past_sequence_length,32]");
  // The delta rule is one If (recurrence | chunked Scan) per linear layer; masks and rope once.
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  CHECK(ops["If"] == 3);
  CHECK(ops["Conv"] == 3);
  // The full-attention layer is ONNX Runtime's GroupQueryAttention (rope tables as caches).
  CHECK(ops["GroupQueryAttention"] == 1);
  CHECK(ops["Cos"] == 0);
  CHECK(ops["Softmax"] == 0);
  // GenAI shares past and present buffers only when every cache is GroupQueryAttention's.
  auto genai = nlohmann::json::parse(read_text(t / "out" / "genai_config.json"));
  CHECK(genai["search"]["past_present_share_buffer"] == false);
}

TEST_CASE(
    "qwen35: a float16 build of a float32 checkpoint keeps the linear-attention inputs float32") {
  TempDir t;
  RunResult r = build_cli(golden("qwen35-tiny"), t / "out", "--dtype f16");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, int> dtype;
  for (const auto& i : m.graph().initializer()) dtype[i.name()] = i.data_type();
  const int f32 = onnx::TensorProto::FLOAT, f16 = onnx::TensorProto::FLOAT16;
  for (const char* n : {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_a.weight",
                        "in_proj_b.weight", "conv1d.weight", "A_log", "dt_bias"})
    CHECK(dtype[std::string("model.layers.0.linear_attn.") + n] == f32);
  CHECK(dtype["model.layers.0.linear_attn.out_proj.weight"] == f16);
  // The gated norm computes in float32: its weight is stored so, without a Cast node.
  CHECK(dtype["model.layers.0.linear_attn.norm.weight"] == f32);
  CHECK(dtype["model.layers.0.mlp.gate_proj.weight"] == f16);
  CHECK(dtype["model.layers.3.self_attn.qkv_packed.weight"] == f16);
  for (const auto& v : m.graph().input()) {
    if (v.name() == "past_key_values.0.conv_state" ||
        v.name() == "past_key_values.0.recurrent_state")
      CHECK(v.type().tensor_type().elem_type() == f32);
    if (v.name() == "past_key_values.3.key") CHECK(v.type().tensor_type().elem_type() == f16);
  }
}

TEST_CASE("qwen35: configs and checkpoints that do not fit fail before anything is written") {
  REQUIRE(fs::exists(golden("qwen35-tiny") / "config.json"));
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::function<bool(StTensor&)> keep;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"unknown layer type",
       [](auto& c) { c["layer_types"][1] = "mamba2"; },
       {},
       "'layer_types' has unknown layer type 'mamba2' (known: linear_attention, full_attention)"},
      {"layer_types too short",
       [](auto& c) { c["layer_types"].erase(0); },
       {},
       "'layer_types' has 3 entries for 4 layers"},
      {"value heads not a multiple of key heads",
       [](auto& c) { c["linear_num_value_heads"] = 3; },
       {},
       "'linear_num_value_heads' (3) must be a multiple of 'linear_num_key_heads' (2)"},
      {"non-positive conv kernel",
       [](auto& c) { c["linear_conv_kernel_dim"] = 0; },
       {},
       "'linear_conv_kernel_dim' must be positive"},
      {"unknown activation",
       [](auto& c) { c["hidden_act"] = "swoosh"; },
       {},
       "'hidden_act' has unknown activation 'swoosh'"},
      {"composite without text_config",
       [](auto& c) {
         c = {{"model_type", "qwen3_5"}, {"vision_config", nlohmann::json::object()}};
       },
       {},
       "'text_config' is required for qwen3_5"},
      {"wrong conv kernel for the weights",
       [](auto& c) { c["linear_conv_kernel_dim"] = 3; },
       {},
       "'model.layers.0.linear_attn.conv1d.weight' has shape [128, 1, 4], the graph expects [128, "
       "1, 3]"},
      {"missing tensor",
       {},
       [](StTensor& t) { return t.name != "model.layers.1.linear_attn.A_log"; },
       "checkpoint has no tensor 'model.layers.1.linear_attn.A_log'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    expect_rejected("qwen35-tiny", c.edit, c.keep, c.reason);
  }
  // In a composite config the error says where the key is.
  TempDir t;
  fs::create_directories(t / "ckpt");
  auto cfg = nlohmann::json::parse(read_text(golden("qwen35-composite") / "config.json"));
  cfg["text_config"]["layer_types"][0] = "sliding_attention";
  write_text(t / "ckpt" / "config.json", cfg.dump());
  for (const auto& e : fs::directory_iterator(golden("qwen35-composite")))
    if (e.path().filename() != "config.json") fs::copy(e.path(), t / "ckpt" / e.path().filename());
  RunResult r = build_cli(t / "ckpt", t / "out");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("config.json text_config: 'layer_types' has unknown layer type "
                      "'sliding_attention'") != std::string::npos);
}

TEST_CASE("qwen35: a prompt fed whole, in pieces or token by token gives the same logits") {
  TempDir t;
  // Standard operators: the pieces continue a batch of two with several tokens at once, which
  // ONNX Runtime's GroupQueryAttention (the full-attention layer of --ops ort) does not take.
  RunResult r = build_cli(golden("qwen35-tiny"), t / "out", "--ops standard");
  INFO(r.output);
  REQUIRE(r.status == 0);
  write_text(t / "consistency.mjs", kConsistencyScript);
  auto max_diff = [&](int len, int pad, const std::string& pieces) {
    RunResult o = run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node " +
                          quote((t / "consistency.mjs").string()) + " " +
                          quote((t / "out" / "model.onnx").string()) + " " + std::to_string(len) +
                          " " + std::to_string(pad) + " " + pieces,
                      false);
    INFO(o.output);
    REQUIRE(o.status == 0);
    return nlohmann::json::parse(o.output)["max_abs_diff"].get<double>();
  };
  // 150 tokens with 5 left-padded in one row: the whole prompt runs three chunks of 64; the pieces
  // are a chunked prefill, single-token steps (the recurrence), and chunked continuations that
  // start from a state and do not align with the chunks of the whole run.
  CHECK(max_diff(150, 5, "70,1,1,64,1,13") < 1e-4);
  // Left padding longer than the first piece: padded inputs of a multi-token continuation are
  // zeroed as in the whole prompt.
  CHECK(max_diff(100, 40, "20,80") < 1e-4);
  // Token by token: the recurrence against the chunked form over 80 tokens.
  std::string ones = "1";
  for (int i = 1; i < 80; ++i) ones += ",1";
  CHECK(max_diff(80, 0, ones) < 1e-4);
}
