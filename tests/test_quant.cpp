// test_quant.cpp - int4/int8 builds (MatMulNBits) end to end: on weights that lie exactly on a
// block's quantization grid, the quantized model must compute what the float32 model computes,
// which checks the packing, scales and zero points as ONNX Runtime reads them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

// Moves every MatMul weight of a float32 checkpoint onto an exact 4-bit grid per block of 32
// along its input dimension: symmetric, every value s * q with q in [-7, 7] and one value -8s
// (the block's largest magnitude, so RTN recovers s); asymmetric, s * (q - 7) with q in [0, 15]
// and both ends present. s is a power of two, so every step is exact in float32.
void snap_to_grid(StTensor& t, bool symmetric) {
  const bool matmul = t.name.size() > 12 && (t.name.find("_proj.weight") != std::string::npos ||
                                             t.name == "lm_head.weight");
  if (!matmul || t.dtype != "F32" || t.shape.size() != 2) return;
  const int64_t n = t.shape[0], k = t.shape[1];
  auto* w = reinterpret_cast<float*>(t.bytes.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k; b += 32) {
      const float s = std::ldexp(1.0f, -5 - static_cast<int>((r + b / 32) % 3));
      for (int64_t j = b; j < std::min(b + 32, k); ++j) {
        float& x = w[r * k + j];
        if (symmetric) {
          const float q = std::clamp(std::nearbyint(x / s), -7.0f, 7.0f);
          x = j == b ? -8 * s : q * s;
        } else {
          const float q = std::clamp(std::nearbyint(x / s) + 7, 0.0f, 15.0f);
          x = j == b ? -7 * s : j == b + 1 ? 8 * s : (q - 7) * s;
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
async function run(file) {
  const s = await ort.InferenceSession.create(file, { logSeverityLevel: 3 });
  const feeds = { input_ids: t64(ids, [B, S]), attention_mask: t64(mask, [B, S]), position_ids: t64(pos, [B, S]) };
  s.inputMetadata.forEach((m) => {
    if (!m.name.startsWith('past_key_values.')) return;
    const dims = m.shape.map((d) => (d === 'batch_size' ? B : d === 'past_sequence_length' ? 0 : d));
    feeds[m.name] = new ort.Tensor(m.type, new Float32Array(dims.reduce((x, y) => x * y, 1)), dims);
  });
  const o1 = await s.run(feeds);
  const next = { input_ids: t64([5, 9], [B, 1]), attention_mask: t64(Array.from({ length: B * (S + 1) }, (_, i) => (i % (S + 1) === S ? 1 : mask[Math.floor(i / (S + 1)) * S + (i % (S + 1))])), [B, S + 1]),
                 position_ids: t64([S, S - 2], [B, 1]) };
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

TEST_CASE("quant: int4 on weights that lie on the grid computes what float32 computes") {
  for (bool symmetric : {true, false}) {
    CAPTURE(symmetric);
    TempDir t;
    copy_case("llama-tiny", t / "ckpt", {}, [&](StTensor& s) {
      snap_to_grid(s, symmetric);
      return true;
    });
    RunResult f = build_cli(t / "ckpt", t / "f32", "--runtime onnxruntime");
    INFO(f.output);
    REQUIRE(f.status == 0);
    // accuracy_level 0: the kernel dequantizes and multiplies in float32, so exact weights give
    // float32's result up to summation order.
    RunResult q = build_cli(t / "ckpt", t / "int4", std::string("--runtime onnxruntime --dtype int4 --accuracy-level 0") +
                                                        (symmetric ? "" : " --asymmetric"));
    INFO(q.output);
    REQUIRE(q.status == 0);
    onnx::ModelProto m = load_model(t / "int4" / "model.onnx");
    int nbits = 0, zero_points = 0;
    for (const auto& n : m.graph().node()) nbits += n.op_type() == "MatMulNBits";
    for (const auto& i : m.graph().initializer())
      zero_points += i.name().find("_zero_points") != std::string::npos;
    CHECK(nbits == 11);  // per layer packed q/k/v, o, gate, up, down; and lm_head
    CHECK(zero_points == (symmetric ? 0 : 11));
    CHECK(compare(t.path(), t / "f32" / "model.onnx", t / "int4" / "model.onnx") < 1e-4);
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
