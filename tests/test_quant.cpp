// test_quant.cpp - int4/int8 builds (MatMulNBits, and GatherBlockQuantized for expert banks) end
// to end: on weights that lie exactly on a block's quantization grid, the quantized model must
// compute what the float32 model computes, for dense and mixture-of-experts families, symmetric
// and asymmetric, which checks the packing, scales, zero points and weight order as ONNX Runtime
// reads them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

// Moves every float32 weight matrix of a checkpoint whose rows are whole blocks onto an exact
// `bits`-bit grid per block along its input (last) dimension: symmetric, every value s * q with
// |q| <= 2^(bits-1) - 1 and one value -2^(bits-1) * s (the block's largest magnitude, so
// round-to-nearest recovers s); asymmetric, s * (q - c) with c = 2^(bits-1) - 1, q in
// [0, 2c + 1] and both ends present. s is a power of two, so every step is exact in float32 (and
// in float16 scales). Matrices that stay float (embeddings, routers) get the same values in both
// builds, so moving them too changes nothing in the comparison.
void snap_to_grid(StTensor& t, int bits, bool symmetric, int64_t block) {
  if (t.dtype != "F32" || t.shape.size() < 2 || t.shape.back() % block != 0) return;
  const int64_t k = t.shape.back();
  const int64_t n = static_cast<int64_t>(t.bytes.size() / sizeof(float)) / k;
  const float c = static_cast<float>((1 << (bits - 1)) - 1);
  const int exp0 = bits == 4 ? -5 : -9;
  auto* w = reinterpret_cast<float*>(t.bytes.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k; b += block) {
      const float s = std::ldexp(1.0f, exp0 - static_cast<int>((r + b / block) % 3));
      for (int64_t j = b; j < b + block; ++j) {
        float& x = w[r * k + j];
        if (symmetric) {
          const float q = std::clamp(std::nearbyint(x / s), -c, c);
          x = j == b ? -(c + 1) * s : q * s;
        } else {
          const float q = std::clamp(std::nearbyint(x / s) + c, 0.0f, 2 * c + 1);
          x = j == b ? -c * s : j == b + 1 ? (c + 1) * s : (q - c) * s;
        }
      }
    }
}

// Runs two models on the same prompt (batch 2, left padding) and one decode step; prints the
// largest |difference| of their logits at real positions.
const char* kCompare = R"JS(
import { createRequire } from 'module';
import path from 'path';
const require = createRequire(path.join(process.cwd(), 'noop.js'));
const ort = require(path.join(process.cwd(), 'node_modules', 'onnxruntime-node'));
const [a, b] = process.argv.slice(2);
const B = 2, S = 7;
const ids = Array.from({ length: B * S }, (_, i) => (i * 37 + 11) % 150);
const mask = Array.from({ length: B * S }, (_, i) => (i >= S && i % S < 2 ? 0 : 1));
const pos = [];
for (let r = 0; r < B; ++r) {
  let c = 0;
  for (let j = 0; j < S; ++j) { const m = mask[r * S + j]; pos.push(m ? c : 1); c += m; }
}
const t64 = (v, d) => new ort.Tensor('int64', BigInt64Array.from(v.map(BigInt)), d);
// position_ids as the model declares them: [B, S], or [3, B, S] (multimodal rope sections).
function positions(s, p, seq) {
  const m = s.inputMetadata.find((x) => x.name === 'position_ids');
  if (!m) return {};
  if (m.shape.length === 3) return { position_ids: t64([...p, ...p, ...p], [3, B, seq]) };
  return { position_ids: t64(p, [B, seq]) };
}
async function run(file) {
  const s = await ort.InferenceSession.create(file, { logSeverityLevel: 3 });
  const feeds = { input_ids: t64(ids, [B, S]), attention_mask: t64(mask, [B, S]), ...positions(s, pos, S) };
  s.inputMetadata.forEach((m) => {
    if (!m.name.startsWith('past_key_values.')) return;
    const dims = m.shape.map((d) => (typeof d === 'number' ? d : /batch/.test(d) ? B : 0));
    const n = dims.reduce((x, y) => x * y, 1);
    feeds[m.name] = new ort.Tensor(m.type, m.type === 'float16' ? new Uint16Array(n) : new Float32Array(n), dims);
  });
  const o1 = await s.run(feeds);
  const next = { input_ids: t64([5, 9], [B, 1]), attention_mask: t64(Array.from({ length: B * (S + 1) }, (_, i) => (i % (S + 1) === S ? 1 : mask[Math.floor(i / (S + 1)) * S + (i % (S + 1))])), [B, S + 1]),
                 ...positions(s, [S, S - 2], 1) };
  for (const n of s.outputNames) if (n.startsWith('present.')) next['past_key_values.' + n.slice(8)] = o1[n];
  const o2 = await s.run(next);
  return [o1.logits, o2.logits];
}
const [x, y] = [await run(a), await run(b)];
let d = 0;
for (let step = 0; step < 2; ++step) {
  const [p, q] = [x[step], y[step]];
  const [, seq, vocab] = p.dims;
  for (let r = 0; r < B; ++r)
    for (let t = 0; t < seq; ++t) {
      if (step === 0 && !mask[r * S + t]) continue;
      for (let v = 0; v < vocab; ++v) {
        const i = (r * seq + t) * vocab + v;
        d = Math.max(d, Math.abs(p.data[i] - q.data[i]));
      }
    }
}
console.log(JSON.stringify({ max_abs_diff: d }));
)JS";

double compare(const fs::path& dir, const fs::path& a, const fs::path& b) {
  write_text(dir / "compare.mjs", kCompare);
  RunResult r = run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node " +
                        quote((dir / "compare.mjs").string()) + " " + quote(a.string()) + " " +
                        quote(b.string()),
                    false);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.output)["max_abs_diff"].get<double>();
}

}  // namespace

// Builds golden case `c` with its weights on the grid, in float32 and quantized (bits,
// symmetric or not, `block`), and requires the two to compute the same logits: with exact
// weights any difference is a wrong packing, scale, zero point or weight order. accuracy_level
// 0: the kernels dequantize and multiply in float32, so the results agree up to summation
// order. Returns the counts of MatMulNBits and GatherBlockQuantized nodes (with zero points).
struct QuantNodes {
  int nbits = 0, gathers = 0, gathers_with_zero_points = 0, qmoe = 0;
};
QuantNodes check_on_grid(const std::string& c, int bits, bool symmetric, int64_t block) {
  CAPTURE(c);
  CAPTURE(bits);
  CAPTURE(symmetric);
  TempDir t;
  copy_case(c, t / "ckpt", {}, [&](StTensor& s) {
    snap_to_grid(s, bits, symmetric, block);
    return true;
  });
  RunResult f = build_cli(t / "ckpt", t / "f32", "--runtime onnxruntime");
  INFO(f.output);
  REQUIRE(f.status == 0);
  const std::string q_args = "--runtime onnxruntime --dtype int" + std::to_string(bits) + " --block-size " +
                             std::to_string(block) + " --accuracy-level 0" + (symmetric ? "" : " --asymmetric");
  RunResult q = build_cli(t / "ckpt", t / "q", q_args);
  INFO(q.output);
  REQUIRE(q.status == 0);
  QuantNodes counts;
  onnx::ModelProto m = load_model(t / "q" / "model.onnx");
  std::function<void(const onnx::GraphProto&)> scan = [&](const onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      counts.nbits += n.op_type() == "MatMulNBits";
      counts.qmoe += n.op_type() == "QMoE";
      if (n.op_type() == "GatherBlockQuantized") {
        ++counts.gathers;
        counts.gathers_with_zero_points += n.input_size() == 4;
      }
      for (const auto& a : n.attribute())
        if (a.has_g()) scan(a.g());
    }
  };
  scan(m.graph());
  CHECK(compare(t.path(), t / "f32" / "model.onnx", t / "q" / "model.onnx") < 1e-4);
  return counts;
}

TEST_CASE("quant: dense families on grid weights compute what float32 computes, int4 and int8, symmetric and not") {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"llama-tiny", 32}, {"qwen3-qknorm", 32}, {"gemma3-text-tiny", 16}, {"qwen35-tiny", 32}, {"phi3-longrope", 32}};
  for (const auto& [c, block] : cases)
    for (int bits : {4, 8})
      for (bool symmetric : {true, false}) {
        QuantNodes n = check_on_grid(c, bits, symmetric, block);
        CHECK(n.nbits > 0);
      }
  // llama-tiny: per layer packed q/k/v, o, gate, up, down; and lm_head.
  CHECK(check_on_grid("llama-tiny", 4, false, 32).nbits == 11);
}

TEST_CASE("quant: mixture-of-experts banks on grid weights compute what float32 computes, int4 and int8, symmetric and not") {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"qwen3-moe-tiny", 32}, {"deepseek-v3-tiny", 16}, {"mixtral-tiny", 16},  // deepseek: 48-wide q_b and o
      {"qwen2-moe-tiny", 16}, {"phimoe-tiny", 16}};  // a gated shared expert; the sparse mixer
  for (const auto& [c, block] : cases)
    for (int bits : {4, 8})
      for (bool symmetric : {true, false}) {
        QuantNodes n = check_on_grid(c, bits, symmetric, block);
        // Symmetric 4-bit banks run as ONNX Runtime's QMoE (their gate and up rows interleaved
        // by the host); the others are dequantized per expert hit (GatherBlockQuantized), with
        // zero points when asymmetric.
        if (bits == 4 && symmetric) {
          CHECK(n.qmoe > 0);
          CHECK(n.gathers == 0);
        } else {
          CHECK(n.qmoe == 0);
          CHECK(n.gathers > 0);
          CHECK(n.gathers_with_zero_points == (symmetric ? 0 : n.gathers));
        }
      }
}

TEST_CASE("quant: QMoE computes what the expert loop computes; --expert-loop keeps the loop") {
  // The same int4 weights both ways: any difference beyond float rounding is a wrong fc1 row
  // order, a scale, or routing weights QMoE reads otherwise than the loop.
  for (const std::string c : {"qwen3-moe-tiny", "qwen2-moe-tiny", "phimoe-tiny"}) {
    CAPTURE(c);
    TempDir t;
    const std::string args = "--runtime onnxruntime --dtype int4 --block-size 16 --accuracy-level 0";
    RunResult fused = build_cli(golden(c), t / "qmoe", args);
    INFO(fused.output);
    REQUIRE(fused.status == 0);
    RunResult loop = build_cli(golden(c), t / "loop", args + " --expert-loop");
    INFO(loop.output);
    REQUIRE(loop.status == 0);
    auto count = [](const fs::path& model, const std::string& op) {
      int n = 0;
      onnx::ModelProto m = load_model(model);
      std::function<void(const onnx::GraphProto&)> scan = [&](const onnx::GraphProto& g) {
        for (const auto& node : g.node()) {
          n += node.op_type() == op;
          for (const auto& a : node.attribute())
            if (a.has_g()) scan(a.g());
        }
      };
      scan(m.graph());
      return n;
    };
    CHECK(count(t / "qmoe" / "model.onnx", "QMoE") > 0);
    CHECK(count(t / "qmoe" / "model.onnx", "GatherBlockQuantized") == 0);
    CHECK(count(t / "loop" / "model.onnx", "QMoE") == 0);
    CHECK(count(t / "loop" / "model.onnx", "GatherBlockQuantized") > 0);
    CHECK(compare(t.path(), t / "loop" / "model.onnx", t / "qmoe" / "model.onnx") < 1e-4);
  }
}

TEST_CASE("quant: int8 and int4 weights are smaller and refused where they cannot run") {
  TempDir t;
  RunResult q = build_cli(golden("llama-tiny"), t / "int8",
                          "--runtime onnxruntime --dtype int8 --block-size 16 --asymmetric");
  INFO(q.output);
  REQUIRE(q.status == 0);
  onnx::ModelProto m = load_model(t / "int8" / "model.onnx");
  for (const auto& n : m.graph().node())
    if (n.op_type() == "MatMulNBits")
      for (const auto& a : n.attribute()) {
        if (a.name() == "bits") CHECK(a.i() == 8);
        if (a.name() == "block_size") CHECK(a.i() == 16);
        if (a.name() == "accuracy_level") CHECK(a.i() == 4);
      }
  // The provenance says how the weights were quantized, and `mobius info` shows it.
  auto prov = nlohmann::json::parse(read_text(t / "int8" / "mobius_provenance.json"));
  CHECK(prov["quantization"]["bits"] == 8);
  CHECK(prov["quantization"]["block_size"] == 16);
  CHECK(prov["quantization"]["symmetric"] == false);
  CHECK(prov["ops"] == "ort");
  RunResult info = run(quote(env_or_empty("MOBIUS_CLI")) + " info " + quote((t / "int8").string()));
  CHECK(info.output.find("MatMulNBits 8-bit, block 16, asymmetric, accuracy_level 4") !=
        std::string::npos);
  RunResult s = build_cli(golden("llama-tiny"), t / "std", "--dtype int4 --ops standard");
  CHECK(s.status != 0);
  CHECK(s.output.find("MatMulNBits") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "std"));
  RunResult j = build_cli(golden("llama-tiny"), t / "tjs", "--dtype int8 --runtime transformers.js");
  CHECK(j.status != 0);
  CHECK_FALSE(fs::exists(t / "tjs"));
  RunResult b = build_cli(golden("llama-tiny"), t / "bs", "--dtype int4 --block-size 24");
  CHECK(b.status != 0);
}
