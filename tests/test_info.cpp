// test_info.cpp - `mobius info OUT`: a built folder described (text and --json), the three
// layouts recognised, hostile folders reported without following what they name, and the folder
// never changed.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "golden_util.hpp"

using namespace mobius::test;

namespace {

RunResult info(const fs::path& out, const std::string& extra = "", bool merge_stderr = true) {
  // A bounded run: if info ever opened a FIFO it was shown, the test fails instead of hanging.
  return run("timeout 60 " + quote(env_or_empty("MOBIUS_CLI")) + " info " + extra + " " + quote(out.string()),
             merge_stderr);
}

// Every entry below `dir` (and `dir` itself): type, size and modification time, links not followed.
using Snapshot = std::map<std::string, std::tuple<unsigned, long long, long long, long long>>;
Snapshot snapshot(const fs::path& dir) {
  Snapshot s;
  auto add = [&](const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    s[p.string()] = {st.st_mode, static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                     static_cast<long long>(st.st_mtim.tv_nsec)};
  };
  add(dir);
  for (const auto& e : fs::recursive_directory_iterator(dir)) add(e.path());
  return s;
}

// The shape as the text output prints it: named dims by name, static by size, unknown as '?'.
std::string shape_text(const onnx::ValueInfoProto& v) {
  std::string s = "[";
  const auto& dims = v.type().tensor_type().shape().dim();
  for (int i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    if (dims[i].has_dim_value())
      s += std::to_string(dims[i].dim_value());
    else if (!dims[i].dim_param().empty())
      s += dims[i].dim_param();
    else
      s += "?";
  }
  return s + "]";
}

std::string dtype_text(int32_t t) {
  return t == onnx::TensorProto::FLOAT ? "float32" : t == onnx::TensorProto::FLOAT16 ? "float16"
         : t == onnx::TensorProto::INT64 ? "int64" : "dtype " + std::to_string(t);
}

// The line of the text output that lists value `name` (indented, then the name and padding).
std::string line_of(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("    " + name + " ", 0) == 0) return line;
  return "";
}

void save_model(const onnx::ModelProto& m, const fs::path& p) {
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  write_text(p, bytes);
}

void build_llama(const fs::path& out, const std::string& extra = "") {
  RunResult r = build_cli(golden("llama-tiny"), out, extra);
  INFO(r.output);
  REQUIRE(r.status == 0);
}

// Rewrites the built folder's provenance (the fields a layout test needs, whatever the build wrote).
void edit_provenance(const fs::path& out, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json p = nlohmann::json::parse(read_text(out / "mobius_provenance.json"));
  edit(p);
  write_text(out / "mobius_provenance.json", p.dump(2));
}

// Lays a built ort-genai folder out as transformers.js does: onnx/model_fp16.onnx with its
// external data in onnx/model_fp16.onnx_data, config.json holding transformers.js_config.
void to_transformers_js(const fs::path& out) {
  fs::create_directories(out / "onnx");
  onnx::ModelProto m = load_model(out / "model.onnx");
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    for (auto& e : *t.mutable_external_data())
      if (e.key() == "location") e.set_value("model_fp16.onnx_data");
  save_model(m, out / "onnx" / "model_fp16.onnx");
  fs::remove(out / "model.onnx");
  fs::rename(out / "model.onnx.data", out / "onnx" / "model_fp16.onnx_data");
  fs::remove(out / "genai_config.json");
  nlohmann::json cfg = nlohmann::json::parse(read_text(out / "config.json"));
  cfg["transformers.js_config"] = {{"dtype", "fp16"}, {"use_external_data_format", {{"model_fp16.onnx", 1}}}};
  write_text(out / "config.json", cfg.dump(2));
}

}  // namespace

TEST_CASE("info: llama-tiny f32 in text names every input and output with dtype and shape") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out);
  const onnx::ModelProto m = load_model(out / "model.onnx");
  const Snapshot before = snapshot(out);
  RunResult r = info(out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(snapshot(out) == before);
  CHECK(r.output.find("laid out for ort-genai") != std::string::npos);
  CHECK(r.output.find("model.onnx  ") != std::string::npos);
  CHECK(r.output.find("ai.onnx:17") != std::string::npos);
  CHECK(r.output.find("weights        float32 (") != std::string::npos);
  CHECK(r.output.find("external data  'model.onnx.data'  ") != std::string::npos);
  CHECK(r.output.find("nodes          " + std::to_string(m.graph().node_size())) != std::string::npos);
  CHECK(r.output.find("genai_config.json") != std::string::npos);
  CHECK(r.output.find("model type     llama") != std::string::npos);
  CHECK(r.output.find("problems") == std::string::npos);
  REQUIRE(m.graph().input_size() > 3);
  for (const auto* vs : {&m.graph().input(), &m.graph().output()})
    for (const auto& v : *vs) {
      CAPTURE(v.name());
      const std::string line = line_of(r.output, v.name());
      REQUIRE_FALSE(line.empty());
      CHECK(line.find(" " + dtype_text(v.type().tensor_type().elem_type()) + " ") != std::string::npos);
      CHECK(line.find(shape_text(v)) != std::string::npos);
    }
  // Named dims are printed by name (the batch and sequence axes are named in every mobius graph).
  CHECK(line_of(r.output, "input_ids").find("[batch") != std::string::npos);
}

TEST_CASE("info: --json holds the same facts") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out);
  const onnx::ModelProto m = load_model(out / "model.onnx");
  const Snapshot before = snapshot(out);
  RunResult r = info(out, "--json", false);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(snapshot(out) == before);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["runtime"] == "ort-genai");
  CHECK(j["problems"].empty());
  REQUIRE(j["graphs"].size() == 1);
  const nlohmann::json& g = j["graphs"][0];
  CHECK(g["file"] == "model.onnx");
  CHECK(g["size"] == fs::file_size(out / "model.onnx"));
  CHECK(g["ir_version"] == m.ir_version());
  CHECK(g["node_count"] == m.graph().node_size());
  CHECK(g["initializer_count"] == m.graph().initializer_size());
  CHECK(g["opset_imports"].dump().find(R"({"domain":"ai.onnx","version":17})") != std::string::npos);
  REQUIRE(g["weight_dtypes"].size() >= 1);
  bool f32 = false;
  for (const auto& d : g["weight_dtypes"]) f32 = f32 || d["dtype"] == "float32";
  CHECK(f32);
  REQUIRE(g["external_data"].size() == 1);
  CHECK(g["external_data"][0]["location"] == "model.onnx.data");
  CHECK(g["external_data"][0]["size"] == fs::file_size(out / "model.onnx.data"));
  CHECK(g["weight_bytes"].get<uint64_t>() > 0);
  CHECK(g["weight_bytes"].get<uint64_t>() <= fs::file_size(out / "model.onnx.data"));
  REQUIRE(g["inputs"].size() == static_cast<size_t>(m.graph().input_size()));
  for (int i = 0; i < m.graph().input_size(); ++i) {
    const auto& v = m.graph().input(i);
    const nlohmann::json& e = g["inputs"][static_cast<size_t>(i)];
    CHECK(e["name"] == v.name());
    CHECK(e["dtype"] == dtype_text(v.type().tensor_type().elem_type()));
    const auto& dims = v.type().tensor_type().shape().dim();
    REQUIRE(e["shape"].size() == static_cast<size_t>(dims.size()));
    for (int k = 0; k < dims.size(); ++k) {
      const nlohmann::json& d = e["shape"][static_cast<size_t>(k)];
      if (dims[k].has_dim_value())
        CHECK(d == dims[k].dim_value());
      else
        CHECK(d == dims[k].dim_param());
    }
  }
  CHECK(g["outputs"].size() == static_cast<size_t>(m.graph().output_size()));
  CHECK(g["outputs"][0]["name"] == "logits");
  CHECK(j["genai_config"]["model_type"] == "llama");
  CHECK(j["genai_config"]["decoder_filename"] == "model.onnx");
  CHECK(j["provenance"]["model_type"] == "llama");
  CHECK(j["provenance"]["producer"] == "mobius");
}

TEST_CASE("info: f16 weights are reported as float16") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out, "--dtype f16");
  RunResult r = info(out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("weights        float16 (") != std::string::npos);
  CHECK(r.output.find("weight dtype   f16") != std::string::npos);
  RunResult rj = info(out, "--json", false);
  REQUIRE(rj.status == 0);
  const auto j = nlohmann::json::parse(rj.output);
  uint64_t f16 = 0, other = 0;
  for (const auto& d : j["graphs"][0]["weight_dtypes"])
    (d["dtype"] == "float16" ? f16 : other) += d["tensors"].get<uint64_t>();
  CHECK(f16 > other);
}

TEST_CASE("info: the transformers.js layout, recorded or detected") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out, "--dtype f16");
  to_transformers_js(out);

  SUBCASE("recorded in the provenance") {
    edit_provenance(out, [](nlohmann::json& p) {
      p["runtime"] = "transformers.js";
      p["graphs"] = {"onnx/model_fp16.onnx"};
      p["source"] = {{"repo", "org/name"}, {"revision", "main"}, {"commit", std::string(40, 'a')}};
      p["files"] = {{{"name", "model.safetensors"}, {"size", 123}, {"sha256", std::string(64, 'b')}}};
    });
  }
  SUBCASE("an older provenance: detected from the files") {
    edit_provenance(out, [](nlohmann::json& p) {
      p.erase("runtime");
      p.erase("graphs");
    });
  }
  const Snapshot before = snapshot(out);
  RunResult r = info(out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("laid out for transformers.js") != std::string::npos);
  CHECK(r.output.find("onnx/model_fp16.onnx  ") != std::string::npos);
  CHECK(r.output.find("dtype          fp16 (transformers.js") != std::string::npos);
  CHECK(r.output.find("'model_fp16.onnx_data'  ") != std::string::npos);
  CHECK(r.output.find("use_external_data_format") != std::string::npos);
  CHECK(r.output.find("problems") == std::string::npos);
  RunResult rj = info(out, "--json", false);
  REQUIRE(rj.status == 0);
  const auto j = nlohmann::json::parse(rj.output);
  CHECK(j["runtime"] == "transformers.js");
  CHECK(j["graphs"][0]["file"] == "onnx/model_fp16.onnx");
  CHECK(j["graphs"][0]["external_data"][0]["size"] == fs::file_size(out / "onnx" / "model_fp16.onnx_data"));
  CHECK(j["transformers.js_config"]["dtype"] == "fp16");
  if (j["runtime_source"] == "provenance") {
    CHECK(j["provenance"]["source"]["repo"] == "org/name");
    CHECK(r.output.find("org/name @ main (commit " + std::string(40, 'a') + ")") != std::string::npos);
    CHECK(r.output.find("model.safetensors  123 B") != std::string::npos);
    CHECK(r.output.find("sha256 " + std::string(64, 'b')) != std::string::npos);
  }
  CHECK(snapshot(out) == before);
}

TEST_CASE("info: a transformers.js build") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out, "--dtype f16 --runtime transformers.js");
  RunResult r = info(out, "--json", false);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j["runtime"] == "transformers.js");
  CHECK(j["runtime_source"] == "provenance");
  CHECK(j["problems"].empty());
  REQUIRE(j["graphs"].size() >= 1);
  CHECK(j["graphs"][0]["file"].get<std::string>().rfind("onnx/", 0) == 0);
}

TEST_CASE("info: a folder that is not a mobius output, and corrupt graphs, fail naming the file") {
  TempDir t;
  fs::create_directories(t / "empty");
  write_text(t / "empty" / "notes.txt", "hello");
  RunResult r = info(t / "empty");
  CHECK(r.status == 1);
  CHECK(r.output.find((t / "empty").string()) != std::string::npos);
  CHECK(r.output.find("not a mobius output folder") != std::string::npos);
  CHECK(r.output.find("model.onnx") != std::string::npos);

  r = info(t / "missing");
  CHECK(r.status == 1);
  CHECK(r.output.find("no such folder") != std::string::npos);

  const fs::path out = t / "out";
  build_llama(out);
  write_text(out / "model.onnx", "not a model");
  const Snapshot before = snapshot(out);
  r = info(out);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find((out / "model.onnx").string() + ": is not a valid ONNX model") != std::string::npos);
  CHECK(snapshot(out) == before);
  write_text(out / "model.onnx", "");
  r = info(out, "--json");
  CHECK(r.status == 1);
  CHECK(r.output.find((out / "model.onnx").string() + ": is not an ONNX model") != std::string::npos);
  // Larger than any graph with external data: refused before it is read (a sparse file).
  fs::resize_file(out / "model.onnx", (uint64_t{1} << 31) + 1);
  r = info(out);
  CHECK(r.status == 1);
  CHECK(r.output.find((out / "model.onnx").string() + ": is 2.0 GiB, more than the 2.0 GiB read") != std::string::npos);
  fs::remove(out / "model.onnx");
  fs::create_symlink(t / "empty" / "notes.txt", out / "model.onnx");
  r = info(out);
  CHECK(r.status == 1);
  CHECK(r.output.find("symbolic link") != std::string::npos);
}

TEST_CASE("info: external data locations that are paths are reported, never followed") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out);
  // Beside OUT, a FIFO where a followed "../secret" would lead: opening it would block.
  REQUIRE(::mkfifo((t / "secret").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((out / "pipe").c_str(), 0600) == 0);
  fs::create_symlink("model.onnx.data", out / "link.data");
  onnx::ModelProto m = load_model(out / "model.onnx");
  auto* inits = m.mutable_graph()->mutable_initializer();
  REQUIRE(inits->size() >= 5);
  const char* const locations[] = {"../secret", "/etc/passwd", "sub\\x.data", "pipe", "link.data"};
  for (int i = 0; i < 5; ++i)
    for (auto& e : *(*inits)[i].mutable_external_data())
      if (e.key() == "location") e.set_value(locations[i]);
  save_model(m, out / "model.onnx");
  const Snapshot before = snapshot(out);
  RunResult r = info(out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(snapshot(out) == before);
  CHECK(r.output.find("problems") != std::string::npos);
  for (const char* loc : {"'../secret'", "'/etc/passwd'", "'sub\\x.data'"})
    CHECK(r.output.find(std::string("external data location ") + loc +
                        " (1 tensors) is a path, not a file name beside the graph (not followed)") !=
          std::string::npos);
  CHECK(r.output.find("'pipe' not a regular file") != std::string::npos);
  CHECK(r.output.find("'link.data' a symbolic link (not followed)") != std::string::npos);
  RunResult rj = info(out, "--json", false);
  REQUIRE(rj.status == 0);
  const auto j = nlohmann::json::parse(rj.output);
  size_t reported = 0;
  for (const auto& d : j["graphs"][0]["external_data"])
    if (d["location"] != "model.onnx.data") {
      CHECK(d["size"].is_null());
      CHECK(d.contains("problem"));
      ++reported;
    }
  CHECK(reported == 5);
  CHECK(j["problems"].size() == 5);
}

TEST_CASE("info: names and provenance from a hostile folder are printed safely") {
  TempDir t;
  const fs::path out = t / "out";
  build_llama(out);
  onnx::ModelProto m = load_model(out / "model.onnx");
  m.mutable_graph()->mutable_output(0)->set_name("logits\x1b]0;owned\x07\n\xc2\x9b");
  save_model(m, out / "model.onnx");
  edit_provenance(out, [](nlohmann::json& p) {
    p["runtime"] = 7;
    p["graphs"] = {"../../etc/passwd.onnx", "/abs.onnx", 3};
    p["files"] = "model.safetensors";
    p["source"] = {{"repo", {1, 2}}, {"commit", "\x1b[2J"}};
    p["checkpoint"] = std::string(100000, 'x');
  });
  RunResult r = info(out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find('\x1b') == std::string::npos);
  CHECK(r.output.find('\x07') == std::string::npos);
  CHECK(r.output.find("\xc2\x9b") == std::string::npos);
  CHECK(r.output.find("logits\\x1b]0;owned\\x07\\x0a\\xc2\\x9b") != std::string::npos);
  CHECK(r.output.find("'runtime' is not a string") != std::string::npos);
  CHECK(r.output.find("graph '../../etc/passwd.onnx' is not a .onnx file name") != std::string::npos);
  CHECK(r.output.find("'files' is not a list") != std::string::npos);
  CHECK(r.output.find("'source.repo' is not a string") != std::string::npos);
  CHECK(r.output.find("laid out for ort-genai (detected from its files)") != std::string::npos);
  CHECK(r.output.find(std::string(1000, 'x')) == std::string::npos);
  RunResult rj = info(out, "--json", false);
  REQUIRE(rj.status == 0);
  CHECK(std::all_of(rj.output.begin(), rj.output.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  const auto j = nlohmann::json::parse(rj.output);
  CHECK(j["graphs"][0]["outputs"][0]["name"] == "logits\x1b]0;owned\x07\n\xc2\x9b");
  CHECK(j["provenance"]["source"]["commit"] == "\x1b[2J");
  CHECK_FALSE(j["provenance"]["source"].contains("repo"));
  CHECK_FALSE(j["provenance"].contains("runtime"));
}
