// test_pipeline.cpp - diffusers pipeline folders through the CLI: the output layout, what is
// copied and skipped, --component, the provenance, and refusals of bad model_index.json files,
// on the golden pipelines of tests/golden-diffusers (built by the clip and diffusers plugins).
#include <doctest/doctest.h>

#include <set>

#include "bin_util.hpp"
#include "golden_util.hpp"

using namespace mobius::test;

namespace {

fs::path sd_case(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-diffusers" / c;
}

// A copy of a golden pipeline with its model_index.json replaced by `index` (when not empty).
fs::path copy_pipeline(const fs::path& dir, const std::string& c, const std::string& index = "") {
  fs::copy(sd_case(c), dir, fs::copy_options::recursive);
  fs::remove(dir / "reference.safetensors");
  fs::remove(dir / "case.json");
  if (!index.empty()) write_text(dir / "model_index.json", index);
  return dir;
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("pipeline: every component into its folder, tokenizer and scheduler copied") {
  TempDir t;
  RunResult r = build_cli(sd_case("sd15-tiny"), t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(entries(t / "out") ==
        std::set<std::string>{"mobius_provenance.json", "model_index.json", "scheduler", "text_encoder",
                              "tokenizer", "unet", "vae_decoder", "vae_encoder"});
  for (const char* g : {"text_encoder", "unet", "vae_encoder", "vae_decoder"}) {
    CAPTURE(g);
    CHECK(fs::exists(t / "out" / g / "model.onnx"));
    CHECK(fs::exists(t / "out" / g / "model.onnx.data"));
    CHECK_FALSE(fs::exists(t / "out" / g / "genai_config.json"));
  }
  CHECK(read_text(t / "out" / "model_index.json") == read_text(sd_case("sd15-tiny") / "model_index.json"));
  for (const char* f : {"tokenizer/vocab.json", "tokenizer/merges.txt", "scheduler/scheduler_config.json"})
    CHECK(read_text(t / "out" / f) == read_text(sd_case("sd15-tiny") / f));
  nlohmann::json prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
  CHECK(prov["pipeline"] == "StableDiffusionPipeline");
  std::set<std::string> folders;
  for (const auto& g : prov["graphs"]) folders.insert(g["folder"].get<std::string>());
  CHECK(folders == std::set<std::string>{"text_encoder", "unet", "vae_decoder", "vae_encoder"});
  CHECK(prov["skipped"].empty());
  // The source is untouched, and no temporary folder is left beside OUT.
  CHECK(entries(t.path()) == std::set<std::string>{"out"});
}

TEST_CASE("pipeline: --component builds one part; a rebuild replaces the folder") {
  TempDir t;
  RunResult r = build_cli(sd_case("sd15-tiny"), t / "out", "--component vae_decoder");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(t / "out" / "vae_decoder" / "model.onnx"));
  CHECK_FALSE(fs::exists(t / "out" / "vae_encoder"));
  CHECK_FALSE(fs::exists(t / "out" / "unet"));
  // A component's name builds each of its graphs; OUT, an earlier build, is replaced.
  r = build_cli(sd_case("sd15-tiny"), t / "out", "--component vae");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(t / "out" / "vae_encoder" / "model.onnx"));
  CHECK(fs::exists(t / "out" / "vae_decoder" / "model.onnx"));
  r = build_cli(sd_case("sd15-tiny"), t / "out2", "--component safety_checker");
  CHECK(r.status != 0);
  CHECK(r.output.find("--component safety_checker: not a component this pipeline builds") != std::string::npos);
  CHECK(r.output.find("text_encoder, unet, vae, vae_encoder, vae_decoder") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out2"));
  r = build_cli(golden("llama-tiny"), t / "out3", "--component unet");
  CHECK(r.status != 0);
  CHECK(r.output.find("is not one") != std::string::npos);
}

TEST_CASE("pipeline: a component no plugin builds is skipped with the reason") {
  TempDir t;
  const fs::path src = copy_pipeline(t / "sd", "sd15-tiny");
  nlohmann::json idx = nlohmann::json::parse(read_text(src / "model_index.json"));
  idx["safety_checker"] = {"stable_diffusion", "StableDiffusionSafetyChecker"};
  write_text(src / "model_index.json", idx.dump());
  fs::create_directories(src / "safety_checker");
  write_text(src / "safety_checker" / "config.json", R"({"model_type": "clip_vision_safety"})");
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build --model " + quote(src.string()) +
                    " " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("skipped safety_checker: no plugin provides its model type 'clip_vision_safety'") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(t / "out" / "safety_checker"));
  nlohmann::json prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
  REQUIRE(prov["skipped"].size() == 1);
  CHECK(prov["skipped"][0]["component"] == "safety_checker");
}

TEST_CASE("pipeline: bad model_index.json files are refused before anything is written") {
  struct Bad {
    std::string index, reason;
  };
  const std::vector<Bad> cases = {
      {"[1, 2]", "not a JSON object"},
      {R"({"unet": ["diffusers", "UNet2DConditionModel"]})", "no '_class_name' string"},
      {R"({"_class_name": "StableDiffusionPipeline", "unet": ["diffusers"]})",
       "component 'unet': expected [library, class], got 1 entries"},
      {R"({"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", 3]})",
       "expected [library, class] as two strings or two nulls"},
      {R"({"_class_name": "StableDiffusionPipeline", "../unet": ["diffusers", "UNet2DConditionModel"]})",
       "not a folder name"},
      {R"({"_class_name": "StableDiffusionPipeline", "tokenizer": ["transformers", "CLIPTokenizer"]})",
       "no component of this StableDiffusionPipeline can be built"},
      {"{\"_class_name\": \"StableDiffusionPipeline\", \"unet\": ", "model_index.json"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.index);
    TempDir t;
    const fs::path src = copy_pipeline(t / "sd", "sd15-tiny", c.index);
    const std::string before = read_text(src / "model_index.json");
    RunResult r = build_cli(src, t / "out");
    CHECK(r.status != 0);
    CHECK(r.output.find(c.reason) != std::string::npos);
    CHECK(r.output.find("model_index.json") != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
    CHECK(read_text(src / "model_index.json") == before);
  }
}

TEST_CASE("pipeline: a component folder that is a link out of the pipeline is not followed") {
  TempDir t;
  const fs::path src = copy_pipeline(t / "sd", "sd15-tiny");
  fs::rename(src / "tokenizer", t / "elsewhere");
  fs::create_directory_symlink(t / "elsewhere", src / "tokenizer");
  RunResult r = build_cli(src, t / "out", "--component unet");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_FALSE(fs::exists(t / "out" / "tokenizer"));
  nlohmann::json prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
  bool skipped = false;
  for (const auto& s : prov["skipped"]) skipped |= s["component"] == "tokenizer";
  CHECK(skipped);
}

TEST_CASE("pipeline: a pipeline refuses runtimes that do not run its graphs") {
  TempDir t;
  RunResult r = build_cli(sd_case("sd15-tiny"), t / "out", "--runtime ort-genai");
  CHECK(r.status != 0);
  CHECK(r.output.find("a diffusers pipeline is laid out for ONNX Runtime") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}

TEST_CASE("pipeline: a component folder alone builds; a VAE becomes its two graphs") {
  TempDir t;
  RunResult r = build_cli(sd_case("sd15-tiny") / "unet", t / "unet");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(t / "unet" / "model.onnx"));
  r = build_cli(sd_case("sd15-tiny") / "vae", t / "vae");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(t / "vae" / "encoder" / "model.onnx"));
  CHECK(fs::exists(t / "vae" / "decoder" / "model.onnx"));
  CHECK(fs::exists(t / "vae" / "mobius_provenance.json"));
}

TEST_CASE("pipeline: component weights under each name diffusers and transformers use") {
  // The text encoder's model.safetensors renamed to each name in the lookup order.
  for (const char* name : {"diffusion_pytorch_model.safetensors", "pytorch_model.safetensors"}) {
    CAPTURE(name);
    TempDir t;
    const fs::path src = copy_pipeline(t / "sd", "sd15-tiny");
    fs::rename(src / "text_encoder" / "model.safetensors", src / "text_encoder" / name);
    RunResult r = build_cli(src, t / "out", "--component text_encoder");
    INFO(r.output);
    REQUIRE(r.status == 0);
    nlohmann::json prov =
        nlohmann::json::parse(read_text(t / "out" / "text_encoder" / "mobius_provenance.json"));
    bool listed = false;
    for (const auto& f : prov["files"]) listed |= f["name"] == name;
    CHECK(listed);
  }
  // The earlier name wins when a folder has two.
  TempDir t;
  const fs::path src = copy_pipeline(t / "sd", "sd15-tiny");
  fs::copy_file(src / "unet" / "diffusion_pytorch_model.safetensors", src / "unet" / "model.safetensors");
  write_text(src / "unet" / "diffusion_pytorch_model.safetensors", "not safetensors");
  RunResult r = build_cli(src, t / "out", "--component unet");
  CHECK(r.status != 0);
  CHECK(r.output.find("diffusion_pytorch_model.safetensors") != std::string::npos);
}

namespace {

// The float32 tensors of a component's checkpoint, as StTensors.
std::vector<StTensor> component_tensors(const fs::path& dir) {
  auto reader = mobius::open_checkpoint(dir);
  std::vector<StTensor> ts;
  for (const auto& m : reader->tensors()) {
    REQUIRE(m.dtype == MOBIUS_DTYPE_FLOAT);
    StTensor t{m.name, "F32", m.shape, std::vector<uint8_t>(m.nbytes)};
    reader->read(m, t.bytes.data());
    ts.push_back(std::move(t));
  }
  return ts;
}

// The pipeline graph `graph` built from `src` against the golden case's reference outputs.
void check_component_parity(const fs::path& src, const std::string& graph, const fs::path& out) {
  RunResult r = build_cli(src, out, "--component " + graph);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const fs::path root(env_or_empty("MOBIUS_SOURCE_ROOT"));
  r = run("cd " + quote(root.string()) + " && node tests/parity/component_parity.mjs --model " +
          quote((out / graph).string()) + " --case " + quote(sd_case("sd15-tiny").string()) +
          " --graph " + graph);
  INFO(r.output);
  CHECK(r.status == 0);
}

}  // namespace

TEST_CASE("pipeline: a sharded UNet and a legacy .bin VAE build as diffusers loads them") {
  TempDir t;
  const fs::path src = copy_pipeline(t / "sd", "sd15-tiny");
  // The UNet in two shards named by diffusion_pytorch_model.safetensors.index.json.
  {
    std::vector<StTensor> ts = component_tensors(src / "unet");
    fs::remove(src / "unet" / "diffusion_pytorch_model.safetensors");
    const size_t half = ts.size() / 2;
    nlohmann::json map;
    std::vector<StTensor> a(ts.begin(), ts.begin() + half), b(ts.begin() + half, ts.end());
    const std::string s1 = "diffusion_pytorch_model-00001-of-00002.safetensors";
    const std::string s2 = "diffusion_pytorch_model-00002-of-00002.safetensors";
    for (const auto& x : a) map[x.name] = s1;
    for (const auto& x : b) map[x.name] = s2;
    write_safetensors(src / "unet" / s1, a);
    write_safetensors(src / "unet" / s2, b);
    write_text(src / "unet" / "diffusion_pytorch_model.safetensors.index.json",
               nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
  }
  // The VAE as torch.save wrote it (diffusion_pytorch_model.bin), read by the restricted unpickler.
  {
    std::vector<StTensor> ts = component_tensors(src / "vae");
    fs::remove(src / "vae" / "diffusion_pytorch_model.safetensors");
    std::vector<PklTensor> pk;
    std::map<std::string, std::string> storages;
    for (size_t i = 0; i < ts.size(); ++i) {
      int64_t numel = 1;
      for (int64_t d : ts[i].shape) numel *= d;
      std::vector<int64_t> stride(ts[i].shape.size(), 1);
      for (size_t k = stride.size(); k-- > 1;) stride[k - 1] = stride[k] * ts[i].shape[k];
      const std::string key = std::to_string(i);
      pk.push_back({ts[i].name, "FloatStorage", key, numel, 0, ts[i].shape, stride});
      storages[key] = std::string(ts[i].bytes.begin(), ts[i].bytes.end());
    }
    write_text(src / "vae" / "diffusion_pytorch_model.bin", torch_zip(state_dict_pickle(pk), storages));
  }
  check_component_parity(src, "unet", t / "out-unet");
  check_component_parity(src, "vae_decoder", t / "out-vae");
  nlohmann::json prov =
      nlohmann::json::parse(read_text(t / "out-vae" / "vae_decoder" / "mobius_provenance.json"));
  bool bin = false;
  for (const auto& f : prov["files"]) bin |= f["name"] == "diffusion_pytorch_model.bin";
  CHECK(bin);
}
