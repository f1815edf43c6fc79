// test_runtime_layout.cpp - `mobius build --runtime`: each runtime's files and names, the
// runtime files made from the checkpoint's (tokenizer_config.json, config.json), refusals, and
// the provenance's checkpoint hashes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <functional>
#include <map>

#include "golden_util.hpp"
#include "save/layout.hpp"
#include "util/digest.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_text(p)); }

onnx::ModelProto load_graph(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream f(p, std::ios::binary);
  REQUIRE(m.ParseFromIstream(&f));
  return m;
}

std::set<std::string> external_locations(const onnx::ModelProto& m) {
  std::set<std::string> out;
  for (const auto& t : m.graph().initializer())
    for (const auto& e : t.external_data())
      if (e.key() == "location") out.insert(e.value());
  return out;
}

std::string sha256_of(const fs::path& p) {
  Sha256 h;
  h.update(read_text(p));
  return h.hex_digest();
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out.insert(e.path().lexically_relative(dir).generic_string());
  return out;
}

}  // namespace

TEST_CASE("layout: each runtime's files") {
  TempDir t;
  SUBCASE("ort-genai (the default)") {
    RunResult r = build_cli(golden("llama-tiny"), t / "out");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(listing(t / "out") == std::set<std::string>{"config.json", "genai_config.json",
                                                      "mobius_provenance.json", "model.onnx",
                                                      "model.onnx.data"});
    CHECK(external_locations(load_graph(t / "out" / "model.onnx")) ==
          std::set<std::string>{"model.onnx.data"});
    CHECK(read_json(t / "out" / "genai_config.json")["model"]["decoder"]["filename"] == "model.onnx");
    CHECK(read_json(t / "out" / "mobius_provenance.json")["runtime"] == "ort-genai");
  }
  SUBCASE("onnxruntime: the graph and its weights, no runtime config") {
    RunResult r = build_cli(golden("llama-tiny"), t / "out", "--runtime onnxruntime");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(listing(t / "out") == std::set<std::string>{"config.json", "mobius_provenance.json",
                                                      "model.onnx", "model.onnx.data"});
    // The checkpoint's files are copied byte for byte.
    CHECK(read_text(t / "out" / "config.json") == read_text(golden("llama-tiny") / "config.json"));
  }
  SUBCASE("transformers.js f32 and f16: onnx/model<suffix>.onnx with <file>_data beside it") {
    for (const char* dtype : {"f32", "f16"}) {
      const std::string suffix = std::string(dtype) == "f16" ? "_fp16" : "";
      const fs::path out = t / dtype;
      RunResult r = build_cli(golden("llama-tiny"), out,
                              std::string("--runtime transformers.js --dtype ") + dtype);
      INFO(r.output);
      REQUIRE(r.status == 0);
      const std::string graph = "onnx/model" + suffix + ".onnx";
      CHECK(listing(out) == std::set<std::string>{"config.json", "mobius_provenance.json", "onnx",
                                                  graph, graph + "_data"});
      // The name recorded in the graph is the one transformers.js fetches beside it.
      CHECK(external_locations(load_graph(out / graph)) ==
            std::set<std::string>{"model" + suffix + ".onnx_data"});
      nlohmann::json cfg = read_json(out / "config.json");
      nlohmann::json src = read_json(golden("llama-tiny") / "config.json");
      CHECK(cfg["transformers.js_config"]["dtype"] == (suffix.empty() ? "fp32" : "fp16"));
      CHECK(cfg["transformers.js_config"]["use_external_data_format"] ==
            nlohmann::json{{"model" + suffix + ".onnx", 1}});
      cfg.erase("transformers.js_config");
      CHECK(cfg == src);  // nothing else of config.json changes
      nlohmann::json prov = read_json(out / "mobius_provenance.json");
      CHECK(prov["runtime"] == "transformers.js");
      CHECK(prov["graphs"] == nlohmann::json::array({graph}));
    }
  }
}

TEST_CASE("layout: a runtime that cannot run the model is refused before anything is written") {
  TempDir t;
  RunResult r = build_cli(golden("llama-tiny"), t / "out", "--runtime transformers.js --dtype bf16");
  CHECK(r.status == 1);
  CHECK(r.output.find("transformers.js has no bf16 model files") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));

  r = build_cli(golden("deepseek-v3-tiny"), t / "out", "--runtime ort-genai");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("cannot run in onnxruntime-genai") != std::string::npos);
  CHECK(r.output.find("latent") != std::string::npos);
  CHECK(r.output.find("--runtime onnxruntime") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));

  r = build_cli(golden("deepseek-v2-lite-tiny"), t / "out", "--runtime transformers.js");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("transformers.js cannot run model type 'deepseek_v2'") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));

  r = build_cli(golden("llama-tiny"), t / "out", "--runtime tensorflow.js");
  CHECK(r.status != 0);
  CHECK(r.output.find("--runtime") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}

TEST_CASE("layout: by default, a model GenAI cannot run is laid out for ONNX Runtime, with the reason") {
  TempDir t;
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build --model " +
                    quote(golden("deepseek-v3-tiny").string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("warning: genai_config.json: model type 'deepseek_v3' cannot run in onnxruntime-genai") !=
        std::string::npos);
  CHECK(r.output.find("laid out for ONNX Runtime alone") != std::string::npos);
  CHECK(r.output.find("built deepseek_v3 for onnxruntime") != std::string::npos);
  CHECK(listing(t / "out") == std::set<std::string>{"config.json", "mobius_provenance.json",
                                                    "model.onnx", "model.onnx.data"});
  CHECK(read_json(t / "out" / "mobius_provenance.json")["runtime"] == "onnxruntime");
  // A model GenAI runs gets its GenAI folder by default.
  r = build_cli(golden("qwen3-qknorm"), t / "out2");
  REQUIRE(r.status == 0);
  CHECK(read_json(t / "out2" / "mobius_provenance.json")["runtime"] == "ort-genai");
  CHECK(fs::exists(t / "out2" / "genai_config.json"));
}

TEST_CASE("layout: an earlier model of another runtime is replaced; other folders are not") {
  TempDir t;
  REQUIRE(build_cli(golden("llama-tiny"), t / "out", "--runtime transformers.js").status == 0);
  RunResult r = build_cli(golden("llama-tiny"), t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(t / "out" / "model.onnx"));
  CHECK_FALSE(fs::exists(t / "out" / "onnx"));
  REQUIRE(build_cli(golden("llama-tiny"), t / "out", "--runtime transformers.js").status == 0);
  CHECK(fs::exists(t / "out" / "onnx" / "model.onnx"));

  fs::create_directories(t / "mine");
  write_text(t / "mine" / "notes.txt", "keep");
  r = build_cli(golden("llama-tiny"), t / "mine", "--runtime transformers.js");
  CHECK(r.status == 1);
  CHECK(r.output.find("refusing to replace it") != std::string::npos);
  CHECK(read_text(t / "mine" / "notes.txt") == "keep");
}

TEST_CASE("layout: tokenizer_config.json as each runtime reads it") {
  TempDir t;
  copy_case("llama-tiny", t / "ckpt");
  const std::string tc_text =
      R"({"add_bos_token": true, "model_max_length": 1000000000000000019884624838656,)"
      R"( "bos_token": "<s>", "tokenizer_class": "LlamaTokenizer"})";
  write_text(t / "ckpt" / "tokenizer_config.json", tc_text);
  write_text(t / "ckpt" / "chat_template.jinja", "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  write_text(t / "ckpt" / "tokenizer.json", R"({"version": "1.0"})");
  const int64_t context = read_json(t / "ckpt" / "config.json")["max_position_embeddings"];

  SUBCASE("ort-genai: the chat template merged in, model_max_length usable, key order kept") {
    RunResult r = build_cli(t / "ckpt", t / "out");
    INFO(r.output);
    REQUIRE(r.status == 0);
    nlohmann::ordered_json tc = nlohmann::ordered_json::parse(read_text(t / "out" / "tokenizer_config.json"));
    CHECK(tc["chat_template"] == read_text(t / "ckpt" / "chat_template.jinja"));
    CHECK(tc["model_max_length"] == context);
    CHECK(tc.begin().key() == "add_bos_token");
    CHECK(tc["tokenizer_class"] == "LlamaTokenizer");
    // The template file and the tokenizer are still copied as they are.
    CHECK(read_text(t / "out" / "chat_template.jinja") == read_text(t / "ckpt" / "chat_template.jinja"));
    CHECK(read_text(t / "out" / "tokenizer.json") == read_text(t / "ckpt" / "tokenizer.json"));
  }
  SUBCASE("transformers.js reads chat_template.jinja itself: only model_max_length changes") {
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime transformers.js");
    INFO(r.output);
    REQUIRE(r.status == 0);
    nlohmann::json tc = read_json(t / "out" / "tokenizer_config.json");
    CHECK_FALSE(tc.contains("chat_template"));
    CHECK(tc["model_max_length"] == context);
  }
  SUBCASE("onnxruntime: copied unchanged") {
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(read_text(t / "out" / "tokenizer_config.json") == tc_text);
  }
  SUBCASE("a usable tokenizer_config.json with its template is copied unchanged") {
    const std::string fine = R"({"chat_template": "x", "model_max_length": 4096})";
    write_text(t / "ckpt" / "tokenizer_config.json", fine);
    REQUIRE(build_cli(t / "ckpt", t / "out").status == 0);
    CHECK(read_text(t / "out" / "tokenizer_config.json") == fine);
  }
  // The checkpoint is never changed.
  CHECK(read_text(t / "ckpt" / "chat_template.jinja").find("messages") != std::string::npos);
}

TEST_CASE("layout: a checkpoint without a tokenizer builds with a warning") {
  TempDir t;
  // Without -q (build_cli's), which keeps warnings off.
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build --model " + quote(golden("llama-tiny").string()) +
          " " + quote((t / "out2").string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("has no tokenizer") != std::string::npos);
}

TEST_CASE("layout: the provenance hashes every checkpoint file the build read or copied") {
  TempDir t;
  RunResult r = build_cli(golden("qwen35-tiny-sharded"), t / "out", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  nlohmann::json prov = read_json(t / "out" / "mobius_provenance.json");
  std::set<std::string> names;
  for (const auto& f : prov["files"]) {
    const std::string n = f["name"];
    names.insert(n);
    CHECK(f["sha256"] == sha256_of(golden("qwen35-tiny-sharded") / n));
    CHECK(f["sha256_source"] == "computed");  // a local folder's files are hashed
    CHECK(f["size"] == fs::file_size(golden("qwen35-tiny-sharded") / n));
  }
  CHECK(names == std::set<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                       "model-00002-of-00002.safetensors",
                                       "model.safetensors.index.json"});
  CHECK_FALSE(prov.contains("source"));  // a local folder
}

// Builds `ckpt` into `out` and checks that the provenance lists the four files of the sharded
// golden case `src` with their true size and sha256, each from the source `source_of` names.
void check_digests(const fs::path& ckpt, const fs::path& out, const fs::path& src,
                   const std::function<const char*(const std::string&)>& source_of) {
  RunResult r = build_cli(ckpt, out, "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  nlohmann::json prov = read_json(out / "mobius_provenance.json");
  REQUIRE(prov["files"].size() == 4);
  for (const auto& f : prov["files"]) {
    const std::string n = f["name"];
    CAPTURE(n);
    CHECK(f["sha256"] == sha256_of(src / n));
    CHECK(f["size"] == fs::file_size(src / n));
    CHECK(f["sha256_source"] == source_of(n));
  }
}

TEST_CASE("layout: names nobody verified are never taken for digests: cache blob names, local-dir metadata") {
  // A huggingface_hub cache whose blobs are named by digests that are not theirs (a cache
  // another tool filled, or a hostile hub's names): the provenance hashes the bytes.
  TempDir t;
  const fs::path src = golden("qwen35-tiny-sharded");
  const fs::path repo = t / "hub" / "models--org--tiny";
  const fs::path snapshot = repo / "snapshots" / std::string(40, 'c');
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  const std::map<std::string, std::string> blob = {
      {"model-00001-of-00002.safetensors", std::string(64, 'a')},
      {"model-00002-of-00002.safetensors", sha256_of(src / "model-00001-of-00002.safetensors")},
      {"config.json", "a9993e364706816aba3e25717850c26c9cd0d89d"}};
  for (const auto& [name, b] : blob) {
    fs::copy_file(src / name, repo / "blobs" / b);
    fs::create_symlink("../../blobs/" + b, snapshot / name);
  }
  fs::copy_file(src / "model.safetensors.index.json", snapshot / "model.safetensors.index.json");
  auto computed = [](const std::string&) { return "computed"; };
  check_digests(snapshot, t / "out", src, computed);

  // huggingface_hub's download to a local directory records each file's etag in
  // .cache/huggingface/download/<name>.metadata (commit, etag, time written): what the hub
  // announced, never checked, so not taken either.
  const fs::path dir = t / "local";
  fs::create_directories(dir / ".cache" / "huggingface" / "download");
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir / e.path().filename());
  const double now = static_cast<double>(std::time(nullptr)) + 5;
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    std::ofstream(dir / ".cache" / "huggingface" / "download" / (std::string(shard) + ".metadata"))
        << std::string(40, 'c') << "\n" << std::string(64, 'b') << "\n" << std::to_string(now) << "\n";
  check_digests(dir, t / "out2", src, computed);
}

TEST_CASE("layout: a plain folder's digests are remembered for the same, unchanged files") {
  TempDir t;
  const fs::path src = golden("qwen35-tiny-sharded");
  const fs::path dir = t / "local";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir / e.path().filename());
  const fs::path cache = t / "cache";
  struct CacheEnv {
    explicit CacheEnv(const fs::path& p) { ::setenv("MOBIUS_CACHE_DIR", p.c_str(), 1); }
    ~CacheEnv() { ::setenv("MOBIUS_CACHE_DIR", "none", 1); }
  } env(cache);
  auto all = [](const char* source) { return [source](const std::string&) { return source; }; };
  check_digests(dir, t / "out1", src, all("computed"));
  size_t records = 0;
  for (const auto& e : fs::directory_iterator(cache / "digests")) records += e.is_regular_file();
  CHECK(records == 4);  // one per file, nothing in the checkpoint folder
  CHECK_FALSE(fs::exists(dir / ".cache"));
  check_digests(dir, t / "out2", src, all("digest-cache"));
  // config.json rewritten with the same bytes (a new change time), a record made unreadable:
  // both files are hashed again.
  const std::string config = read_text(dir / "config.json");
  std::ofstream(dir / "config.json", std::ios::trunc) << config;
  struct stat st {};
  REQUIRE(::stat((dir / "model-00002-of-00002.safetensors").c_str(), &st) == 0);
  std::ofstream(cache / "digests" / (std::to_string(st.st_dev) + "-" + std::to_string(st.st_ino)),
                std::ios::trunc) << "{not json";
  check_digests(dir, t / "out3", src, [](const std::string& n) {
    return n == "config.json" || n == "model-00002-of-00002.safetensors" ? "computed" : "digest-cache";
  });
  // MOBIUS_CACHE_DIR=none: no cache read.
  ::setenv("MOBIUS_CACHE_DIR", "none", 1);
  check_digests(dir, t / "out4", src, all("computed"));
}

TEST_CASE("layout: external data chunks") {
  // transformers.js data files stay below 2 GB each; a tensor larger than a chunk gets its own.
  DataPlacement p = place_tensors({10, 10, 100, 5, 3}, 8, 32);
  CHECK(p.chunk == std::vector<size_t>{0, 0, 1, 2, 2});
  CHECK(p.offset == std::vector<uint64_t>{0, 16, 0, 0, 8});
  CHECK(p.chunk_size == std::vector<uint64_t>{26, 100, 11});
  DataPlacement one = place_tensors({10, 10, 100}, 64, 0);
  CHECK(one.chunk == std::vector<size_t>{0, 0, 0});
  CHECK(one.offset == std::vector<uint64_t>{0, 64, 128});
  CHECK(place_tensors({}, 64, 32).chunk_size == std::vector<uint64_t>{0});
  OutputLayout l = output_layout("transformers.js", "f16");
  CHECK(l.graph == "onnx/model_fp16.onnx");
  CHECK(l.data_file(0) == "onnx/model_fp16.onnx_data");
  CHECK(l.data_file(2) == "onnx/model_fp16.onnx_data_2");
  CHECK(l.chunk_bytes < (1ull << 31));
  CHECK_THROWS_AS(output_layout("transformers.js", "bf16"), Error);
  CHECK_THROWS_AS(output_layout("webnn", "f32"), Error);
}
