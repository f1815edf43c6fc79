// golden_util.hpp - test helpers around the golden cases: paths, edited copies of a checkpoint,
// CLI builds, parity runs and loading a built model.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <fstream>
#include <functional>

#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"
#include "onnx/onnx_pb.h"
#include "test_util.hpp"

namespace mobius::test {

// The project's golden cases (tests/golden/<case>, see its README).
inline fs::path golden(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden" / c;
}

// Copies the checkpoint in folder `src` (single or sharded safetensors) into `dir` as one file,
// letting the caller edit the config and rename, drop (keep returns false) or add tensors.
inline void copy_checkpoint(const fs::path& src, const fs::path& dir,
                            const std::function<void(nlohmann::json&)>& edit_config = {},
                            const std::function<bool(StTensor&)>& keep = {},
                            const std::vector<StTensor>& extra = {}) {
  fs::create_directories(dir);
  nlohmann::json cfg = nlohmann::json::parse(read_text(src / "config.json"));
  if (edit_config) edit_config(cfg);
  write_text(dir / "config.json", cfg.dump());
  auto reader = open_safetensors_checkpoint(src);
  std::vector<StTensor> ts;
  for (const auto& m : reader->tensors()) {
    static const std::map<int32_t, const char*> names = {
        {MOBIUS_DTYPE_FLOAT, "F32"}, {MOBIUS_DTYPE_FLOAT16, "F16"}, {MOBIUS_DTYPE_BFLOAT16, "BF16"},
        {MOBIUS_DTYPE_INT64, "I64"}, {MOBIUS_DTYPE_INT32, "I32"}};
    REQUIRE(names.count(m.dtype));
    StTensor t{m.name, names.at(m.dtype), m.shape, std::vector<uint8_t>(m.nbytes)};
    reader->read(m, t.bytes.data());
    if (!keep || keep(t)) ts.push_back(std::move(t));
  }
  ts.insert(ts.end(), extra.begin(), extra.end());
  write_safetensors(dir / "model.safetensors", ts);
}

// copy_checkpoint of golden case `c`.
inline void copy_case(const std::string& c, const fs::path& dir,
                      const std::function<void(nlohmann::json&)>& edit_config = {},
                      const std::function<bool(StTensor&)>& keep = {},
                      const std::vector<StTensor>& extra = {}) {
  copy_checkpoint(golden(c), dir, edit_config, keep, extra);
}

// `mobius build -q [extra] --model ckpt out` with the build tree's CLI.
inline RunResult build_cli(const fs::path& ckpt, const fs::path& out, const std::string& extra = "") {
  return run(quote(env_or_empty("MOBIUS_CLI")) + " build -q " + extra + " --model " +
             quote(ckpt.string()) + " " + quote(out.string()));
}

// A case of one of the project's golden folders: tests/<folder>/<c> ("golden-vision", "vit-imgcls").
inline fs::path golden_case(const std::string& folder, const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / folder / c;
}

// `mobius list --json` shows each of `types` with exactly `tasks` and the default runtime `runtime`.
inline void expect_listed(const std::vector<std::string>& types, const nlohmann::json& tasks, const std::string& runtime) {
  RunResult list = run(quote(env_or_empty("MOBIUS_CLI")) + " list --json");
  REQUIRE(list.status == 0);
  size_t found = 0;
  for (const auto& e : nlohmann::json::parse(list.output))
    for (const std::string& type : types)
      if (e["model_type"] == type) {
        ++found;
        CAPTURE(type);
        CHECK(e["tasks"] == tasks);
        CHECK(e["default_runtime"] == runtime);
      }
  CHECK(found == types.size());
}

// What a refusal test builds: a copy of a checkpoint folder, its config.json edited, its tensors
// kept, renamed or dropped by `keep`, `extra` files written beside it; built with `flags`.
struct RefusedBuild {
  std::function<void(nlohmann::json&)> edit;
  std::function<bool(StTensor&)> keep;
  std::map<std::string, std::string> extra;
  std::string flags;
};
// Builds `b` from the checkpoint `src`: the build must fail with each of `reasons` in its
// message, naming `file`, and write nothing.
inline void expect_refused(const fs::path& src, const RefusedBuild& b, const std::vector<std::string>& reasons,
                           const std::string& file = "config.json") {
  TempDir t;
  copy_checkpoint(src, t / "ckpt", b.edit, b.keep);
  for (const auto& [name, text] : b.extra) write_text(t / "ckpt" / name, text);
  RunResult r = build_cli(t / "ckpt", t / "out", b.flags);
  INFO(r.output);
  CHECK(r.status != 0);
  for (const std::string& reason : reasons) CHECK(r.output.find(reason) != std::string::npos);
  CHECK(r.output.find(file) != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}

// The parity harness (tests/parity/parity.mjs) on a built model against golden case `c`.
inline RunResult parity(const fs::path& model, const std::string& c, const std::string& extra = "") {
  return run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node " +
             quote((fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "parity" / "parity.mjs").string()) +
             " --model " + quote(model.string()) + " --case " + quote(golden(c).string()) +
             (extra.empty() ? "" : " " + extra));
}

// Builds an edited copy of golden case `c` and checks that it fails with `reason` in the
// message, exit status 1, and nothing written.
inline void expect_rejected(const std::string& c, const std::function<void(nlohmann::json&)>& edit,
                            const std::function<bool(StTensor&)>& keep, const std::string& reason,
                            const std::vector<StTensor>& extra = {}) {
  TempDir t;
  copy_case(c, t / "ckpt", edit, keep, extra);
  // The graph alone: what is checked is the checkpoint and config, for any runtime.
  RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find(reason) != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}

inline onnx::ModelProto load_model(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream in(p, std::ios::binary);
  REQUIRE(m.ParseFromIstream(&in));
  return m;
}

// A graph-only build (--no-weights and `flags`) of a checkpoint that is only `config_json`:
// writes t/ckpt/config.json and builds it into t/out, which must succeed (the save runs onnx's
// checker on the model). Returns the model; *secs, when given, is how long the build took.
inline onnx::ModelProto build_config_only(const TempDir& t, const std::string& config_json,
                                          const std::string& flags = "", double* secs = nullptr) {
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "config.json", config_json);
  const auto start = std::chrono::steady_clock::now();
  RunResult r = build_cli(t / "ckpt", t / "out", "--no-weights " + flags);
  if (secs) *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  REQUIRE(r.status == 0);
  return load_model(t / "out" / "model.onnx");
}

// Every tensor of a safetensors file (a case's reference.safetensors), by name.
struct RefTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
inline std::map<std::string, RefTensor> read_safetensors_file(const fs::path& p) {
  const std::string s = read_text(p);
  REQUIRE(s.size() >= 8);
  uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  auto h = nlohmann::json::parse(s.substr(8, n));
  std::map<std::string, RefTensor> out;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    const auto b = v["data_offsets"][0].get<size_t>(), e = v["data_offsets"][1].get<size_t>();
    out[name] = {v["dtype"], v["shape"].get<std::vector<int64_t>>(),
                 std::vector<uint8_t>(s.begin() + static_cast<std::ptrdiff_t>(8 + n + b),
                                      s.begin() + static_cast<std::ptrdiff_t>(8 + n + e))};
  }
  return out;
}

// A node's integer attribute; -1 when it has none.
inline int64_t attr_int(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return -1;
}

}  // namespace mobius::test
