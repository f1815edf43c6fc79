// test_vision.cpp - the vision towers (mobius/sdk/vision.hpp) and the vit plugin's families (ViT,
// DeiT, DINOv2, DINOv2 with registers) beyond their golden parity (tests/parity,
// tests/golden-vision):
// - the published configs of google/vit-base-patch16-224 and facebook/dinov2-small (with their
//   preprocessor_config.json) build without weights in under a second, laid out for
//   transformers.js, the task their architectures names;
// - configs, preprocessor configs and checkpoints that cannot be built are refused naming the
//   file and the key (and the tensor), writing nothing;
// - a classifier's checkpoint builds its tower for feature extraction; GenAI refuses the tasks
//   with the reason; `mobius list` shows them;
// - CLIP's and SigLIP's vision towers, built in-process from the SDK's rows (no plugin registers
//   them), give what transformers' CLIPVisionModel and SiglipVisionModel compute, with their
//   tensors under vision_model. as published or at the root as transformers 5 saves them.
#include <doctest/doctest.h>

#include "golden_util.hpp"
#include "mobius/build.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/vision.hpp"

using mobius::test::build_cli;
using mobius::test::build_config_only;
using mobius::test::copy_checkpoint;
using mobius::test::env_or_empty;
using mobius::test::load_model;
using mobius::test::quote;
using mobius::test::read_text;
using mobius::test::run;
using mobius::test::RunResult;
using mobius::test::StTensor;
using mobius::test::TempDir;
using mobius::test::write_text;
namespace fs = std::filesystem;

namespace {

fs::path vision_case(const std::string& c) { return mobius::test::golden_case("golden-vision", c); }

// google/vit-base-patch16-224's config.json as published, but for its 1000 ImageNet label names
// (id2label and label2id are made below, one name per label).
const char* const kVitBase = R"({
  "architectures": ["ViTForImageClassification"],
  "attention_probs_dropout_prob": 0.0,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.0,
  "hidden_size": 768,
  "image_size": 224,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-12,
  "model_type": "vit",
  "num_attention_heads": 12,
  "num_channels": 3,
  "num_hidden_layers": 12,
  "patch_size": 16,
  "qkv_bias": true,
  "transformers_version": "4.13.0.dev0"
})";
const char* const kVitBasePreprocessor = R"({
  "do_normalize": true,
  "do_resize": true,
  "feature_extractor_type": "ViTFeatureExtractor",
  "image_mean": [0.5, 0.5, 0.5],
  "image_std": [0.5, 0.5, 0.5],
  "resample": 2,
  "size": 224
})";

std::string vit_base_config() {
  nlohmann::json c = nlohmann::json::parse(kVitBase);
  for (int i = 0; i < 1000; ++i) {
    c["id2label"][std::to_string(i)] = "class " + std::to_string(i);
    c["label2id"]["class " + std::to_string(i)] = i;
  }
  return c.dump(2);
}

// facebook/dinov2-small's config.json and preprocessor_config.json as published.
const char* const kDinov2Small = R"({
  "architectures": ["Dinov2Model"],
  "attention_probs_dropout_prob": 0.0,
  "drop_path_rate": 0.0,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.0,
  "hidden_size": 384,
  "image_size": 518,
  "initializer_range": 0.02,
  "layer_norm_eps": 1e-06,
  "layerscale_value": 1.0,
  "mlp_ratio": 4,
  "model_type": "dinov2",
  "num_attention_heads": 6,
  "num_channels": 3,
  "num_hidden_layers": 12,
  "patch_size": 14,
  "qkv_bias": true,
  "torch_dtype": "float32",
  "transformers_version": "4.31.0.dev0",
  "use_swiglu_ffn": false
})";
const char* const kDinov2Preprocessor = R"({
  "crop_size": {"height": 224, "width": 224},
  "do_center_crop": true,
  "do_convert_rgb": true,
  "do_normalize": true,
  "do_rescale": true,
  "do_resize": true,
  "image_mean": [0.485, 0.456, 0.406],
  "image_processor_type": "BitImageProcessor",
  "image_std": [0.229, 0.224, 0.225],
  "resample": 3,
  "rescale_factor": 0.00392156862745098,
  "size": {"shortest_edge": 256}
})";

std::vector<std::string> dims_of(const onnx::ValueInfoProto& v) {
  std::vector<std::string> d;
  for (const auto& x : v.type().tensor_type().shape().dim())
    d.push_back(x.has_dim_param() ? x.dim_param() : std::to_string(x.dim_value()));
  return d;
}

size_t count_ops(const onnx::ModelProto& m, const std::string& op) {
  size_t n = 0;
  for (const auto& node : m.graph().node()) n += node.op_type() == op;
  return n;
}

// A copy of vision case `c` with its config.json edited and `extra` files beside it.
void copy_case(const std::string& c, const fs::path& dir, const std::function<void(nlohmann::json&)>& edit = {},
               const std::map<std::string, std::string>& extra = {},
               const std::function<bool(StTensor&)>& keep = {}) {
  copy_checkpoint(vision_case(c), dir, edit, keep);
  for (const auto& [name, text] : extra) write_text(dir / name, text);
}

// Builds an edited copy of case `c`; it must fail with each of `reasons` in the message, naming
// `file`, and write nothing.
void expect_refused(const std::string& c, const std::function<void(nlohmann::json&)>& edit,
                    const std::vector<std::string>& reasons, const std::string& file = "config.json",
                    const std::map<std::string, std::string>& extra = {}, const std::string& flags = "") {
  mobius::test::expect_refused(vision_case(c), {edit, {}, extra, flags}, reasons, file);
}

}  // namespace

TEST_CASE("vision: google/vit-base-patch16-224 builds without weights in under a second, an image classifier") {
  TempDir t;
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "preprocessor_config.json", kVitBasePreprocessor);
  double secs = 0;
  const onnx::ModelProto m = build_config_only(t, vit_base_config(), "--runtime onnxruntime", &secs);
  CHECK(secs < 1.0);
  REQUIRE(m.graph().input_size() == 1);
  CHECK(m.graph().input(0).name() == "pixel_values");
  CHECK(m.graph().input(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT);
  CHECK(dims_of(m.graph().input(0)) == std::vector<std::string>{"batch_size", "3", "height", "width"});
  REQUIRE(m.graph().output_size() == 1);
  CHECK(m.graph().output(0).name() == "logits");
  CHECK(dims_of(m.graph().output(0)).back() == "1000");
  // ONNX Runtime's fused operators: one Attention per layer, the MLP's Gelu, the residual norms.
  CHECK(count_ops(m, "Attention") == 12);
  CHECK(count_ops(m, "Gelu") == 12);
  CHECK(count_ops(m, "SkipLayerNormalization") == 24);
  CHECK(fs::exists(t / "out" / "preprocessor_config.json"));
  // With standard operators only: no com.microsoft node.
  TempDir s;
  const onnx::ModelProto std_m = build_config_only(s, vit_base_config(), "--runtime onnxruntime --ops standard");
  for (const auto& node : std_m.graph().node()) CHECK(node.domain().empty());
  // The default layout is transformers.js's, with the preprocessor beside the graph.
  TempDir d;
  fs::create_directories(d / "ckpt");
  write_text(d / "ckpt" / "config.json", vit_base_config());
  write_text(d / "ckpt" / "preprocessor_config.json", kVitBasePreprocessor);
  RunResult r = build_cli(d / "ckpt", d / "out", "--no-weights --dtype f16");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(d / "out" / "onnx" / "model_fp16.onnx"));
  CHECK(read_text(d / "out" / "preprocessor_config.json") == kVitBasePreprocessor);
  const onnx::ModelProto f16 = load_model(d / "out" / "onnx" / "model_fp16.onnx");
  CHECK(f16.graph().input(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT);
  CHECK(f16.graph().output(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT16);
}

TEST_CASE("vision: facebook/dinov2-small builds without weights in under a second, an image encoder") {
  TempDir t;
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "preprocessor_config.json", kDinov2Preprocessor);
  double secs = 0;
  const onnx::ModelProto m = build_config_only(t, kDinov2Small, "--runtime onnxruntime", &secs);
  CHECK(secs < 1.0);
  REQUIRE(m.graph().input_size() == 1);
  CHECK(dims_of(m.graph().input(0)) == std::vector<std::string>{"batch_size", "3", "height", "width"});
  REQUIRE(m.graph().output_size() == 2);
  CHECK(m.graph().output(0).name() == "last_hidden_state");
  CHECK(m.graph().output(1).name() == "pooler_output");
  CHECK(dims_of(m.graph().output(0)).back() == "384");
  CHECK(count_ops(m, "Attention") == 12);
  // The 37x37 table of a 518-pixel image, 1370 positions with the class token, is resampled to
  // the 16x16 grid of the processor's 224-pixel crop in the graph.
  bool table = false;
  for (const auto& i : m.graph().initializer())
    if (i.name() == "embeddings.position_embeddings")
      table = std::vector<int64_t>(i.dims().begin(), i.dims().end()) == std::vector<int64_t>{1, 1370, 384};
  CHECK(table);
  // --task image-classification builds Dinov2ForImageClassification's head (768 inputs).
  TempDir c;
  nlohmann::json cls = nlohmann::json::parse(kDinov2Small);
  cls["architectures"] = {"Dinov2ForImageClassification"};
  cls["num_labels"] = 10;
  const onnx::ModelProto mc = build_config_only(c, cls.dump(), "--runtime onnxruntime");
  REQUIRE(mc.graph().output_size() == 1);
  CHECK(mc.graph().output(0).name() == "logits");
  CHECK(dims_of(mc.graph().output(0)).back() == "10");
}

TEST_CASE("vision: configs that cannot be built are refused naming config.json and the key; nothing is written") {
  struct Bad {
    const char* what;
    const char* model_case;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> reasons;
  };
  const std::vector<Bad> cases = {
      {"zero hidden_size", "vit-imgcls", [](auto& c) { c["hidden_size"] = 0; }, {"'hidden_size' must be positive"}},
      {"negative layers", "deit-imgcls", [](auto& c) { c["num_hidden_layers"] = -1; },
       {"'num_hidden_layers' must be positive"}},
      {"heads not dividing hidden_size", "dinov2-imgfe", [](auto& c) { c["num_attention_heads"] = 5; },
       {"'num_attention_heads' (5) must divide 'hidden_size' (64)"}},
      {"zero intermediate_size", "vit-imgfe", [](auto& c) { c["intermediate_size"] = 0; },
       {"'intermediate_size' must be positive"}},
      {"zero image_size", "vit-imgcls", [](auto& c) { c["image_size"] = 0; },
       {"'image_size' is 0; it must be from 1 to 65536"}},
      {"negative image height", "vit-rect-imgfe", [](auto& c) { c["image_size"] = {-32, 48}; },
       {"'image_size' height is -32"}},
      {"image_size of three sides", "vit-imgcls", [](auto& c) { c["image_size"] = {32, 32, 32}; },
       {"'image_size' has 3 entries; it is one number or [height, width]"}},
      {"zero patch_size", "deit-imgcls", [](auto& c) { c["patch_size"] = 0; }, {"'patch_size' is 0"}},
      {"a patch larger than the image", "dinov2-imgfe", [](auto& c) { c["patch_size"] = 64; },
       {"'patch_size' (64x64) is larger than 'image_size' (32x32): the image holds no patch"}},
      {"zero channels", "vit-imgcls", [](auto& c) { c["num_channels"] = 0; },
       {"'num_channels' is 0; it must be from 1 to 1024"}},
      {"zero mlp_ratio", "dinov2-imgfe", [](auto& c) { c["mlp_ratio"] = 0; }, {"'mlp_ratio' is 0"}},
      {"negative registers", "dinov2-registers-imgfe", [](auto& c) { c["num_register_tokens"] = -1; },
       {"'num_register_tokens' is -1"}},
      {"zero pooler width", "vit-imgfe", [](auto& c) { c["pooler_output_size"] = 0; },
       {"'pooler_output_size' is 0"}},
      {"unknown pooler activation", "deit-imgfe", [](auto& c) { c["pooler_act"] = "swoosh"; },
       {"'pooler_act' has unknown activation 'swoosh'"}},
      {"unknown hidden activation", "vit-imgcls", [](auto& c) { c["hidden_act"] = "swoosh"; },
       {"'hidden_act' has unknown activation 'swoosh'"}},
      {"zero layer_norm_eps", "dinov2-imgcls", [](auto& c) { c["layer_norm_eps"] = 0; },
       {"'layer_norm_eps' must be positive"}},
      {"labels disagreeing", "vit-imgcls",
       [](auto& c) {
         c["id2label"] = {{"0", "a"}, {"1", "b"}};
         c["num_labels"] = 3;
       },
       {"'num_labels' (3) disagrees with the 2 labels of 'id2label'"}},
      {"a head no task builds", "vit-imgcls", [](auto& c) { c["architectures"] = {"ViTForMaskedImageModeling"}; },
       {"'architectures' names 'ViTForMaskedImageModeling'", "(it builds image-feature-extraction, image-classification)"}},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    expect_refused(b.model_case, b.edit, b.reasons);
  }
}

TEST_CASE("vision: a config disagreeing with the checkpoint is refused naming the keys and the tensor") {
  // The position table: 4x4 patches and the class token in the checkpoint.
  expect_refused("vit-imgcls", [](auto& c) { c["image_size"] = 48; },
                 {"'image_size' 48x48 over 'patch_size' 8x8 is a 6x6 grid of patches, 37 positions with the class "
                  "token ('hidden_size' 64 wide), but the checkpoint's 'vit.embeddings.position_embeddings' has shape "
                  "[1, 17, 64]"});
  expect_refused("deit-imgfe", [](auto& c) { c["image_size"] = {32, 40}; },
                 {"is a 4x5 grid of patches, 22 positions with the class and distillation tokens",
                  "'embeddings.position_embeddings' has shape [1, 18, 64]"});
  // The patch convolution.
  expect_refused("dinov2-imgcls", [](auto& c) { c["num_channels"] = 1; },
                 {"'hidden_size' 64, 'num_channels' 1 and 'patch_size' 8x8 make the patch convolution [64, 1, 8, 8], "
                  "but the checkpoint's 'dinov2.embeddings.patch_embeddings.projection.weight' has shape [64, 3, 8, 8]"});
  expect_refused("vit-48-imgcls", [](auto& c) { c["patch_size"] = 12; }, {"make the patch convolution [64, 3, 12, 12]"});
  // The layers, more or fewer than the checkpoint holds.
  expect_refused("vit-imgcls", [](auto& c) { c["num_hidden_layers"] = 3; },
                 {"'num_hidden_layers' is 3, but the checkpoint holds 2 (vit.encoder.layer.0 to vit.encoder.layer.1)"});
  expect_refused("dinov2-registers-imgfe", [](auto& c) { c["num_hidden_layers"] = 1; },
                 {"'num_hidden_layers' is 1, but the checkpoint holds more layers ('encoder.layer.1.*')"});
  // The registers.
  expect_refused("dinov2-registers-imgcls", [](auto& c) { c["num_register_tokens"] = 4; },
                 {"'num_register_tokens' is 4, but the checkpoint's 'dinov2_with_registers.embeddings.register_tokens' "
                  "has shape [1, 2, 64]"});
  // A classifier of other labels than config.json counts.
  auto labels = [](int n) {
    return [n](nlohmann::json& c) {
      c["id2label"] = nlohmann::json::object();
      for (int i = 0; i < n; ++i) c["id2label"][std::to_string(i)] = "label " + std::to_string(i);
      c.erase("label2id");
      c["num_labels"] = n;
    };
  };
  expect_refused("dinov2-imgcls", labels(3),
                 {"3 labels ('id2label' or 'num_labels'), but the checkpoint's classifier.weight has 5 rows"});
  expect_refused("deit-teacher-imgcls", labels(2),
                 {"the checkpoint's cls_classifier.weight has 4 rows"});
}

TEST_CASE("vision: a preprocessor_config.json of impossible images is refused naming the file and the key") {
  const std::string good = kDinov2Preprocessor;
  {
    // As published: builds, and the layout keeps it.
    TempDir t;
    copy_case("dinov2-imgfe", t / "ckpt", {}, {{"preprocessor_config.json", good}});
    RunResult r = build_cli(t / "ckpt", t / "out");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(read_text(t / "out" / "preprocessor_config.json") == good);
  }
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(good);
    edit(j);
    return std::map<std::string, std::string>{{"preprocessor_config.json", j.dump()}};
  };
  const std::string file = "preprocessor_config.json";
  expect_refused("dinov2-imgfe", {}, {"'size' must be a positive number of pixels, got 0"}, file,
                 edited([](auto& j) { j["size"] = 0; }));
  expect_refused("vit-imgcls", {}, {"'size' 'shortest_edge' must be a positive number of pixels, got -256"}, file,
                 edited([](auto& j) { j["size"] = {{"shortest_edge", -256}}; }));
  expect_refused("deit-imgcls", {}, {"'crop_size' 'height' must be a positive number of pixels, got 0"}, file,
                 edited([](auto& j) { j["crop_size"] = {{"height", 0}, {"width", 224}}; }));
  expect_refused("vit-imgfe", {}, {"'crop_size' 'width' must be a positive number of pixels, got 'wide'"}, file,
                 edited([](auto& j) { j["crop_size"] = {{"height", 224}, {"width", "wide"}}; }));
  expect_refused("dinov2-registers-imgfe", {},
                 {"'image_mean' has 2 entries, but the image has 3 channels (config.json: 'num_channels')"}, file,
                 edited([](auto& j) { j["image_mean"] = {0.5, 0.5}; }));
  expect_refused("dinov2-imgcls", {}, {"'image_std' has 4 entries, but the image has 3 channels"}, file,
                 edited([](auto& j) { j["image_std"] = {0.5, 0.5, 0.5, 0.5}; }));
  expect_refused("vit-imgcls", {}, {"'image_std' must be positive (each channel is divided by it), got 0"}, file,
                 edited([](auto& j) { j["image_std"] = {0.229, 0, 0.225}; }));
  expect_refused("vit-imgcls", {}, {"'image_std' must be positive", "got -0.5"}, file,
                 edited([](auto& j) { j["image_std"] = -0.5; }));
  expect_refused("dinov2-imgfe", {}, {"'size' width must be a positive number of pixels, got -224"}, file,
                 edited([](auto& j) { j["size"] = {224, -224}; }));
  expect_refused("deit-imgfe", {}, {"'rescale_factor' must be positive, got 0"}, file,
                 edited([](auto& j) { j["rescale_factor"] = 0; }));
  expect_refused("vit-imgfe", {}, {"preprocessor_config.json"}, file, {{"preprocessor_config.json", "{\"size\": "}});
}

TEST_CASE("vision: the task follows architectures; a classifier's checkpoint builds its tower alone; GenAI refuses") {
  // ViTForImageClassification's checkpoint for feature extraction: the tower under "vit.", no
  // pooler (the classifier's ViTModel has none), the classifier ignored.
  TempDir t;
  RunResult r = build_cli(vision_case("vit-imgcls"), t / "fe", "--task image-feature-extraction --runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "fe" / "model.onnx");
  REQUIRE(m.graph().output_size() == 1);
  CHECK(m.graph().output(0).name() == "last_hidden_state");
  // A base model's checkpoint has no classifier to build.
  RunResult c = build_cli(vision_case("dinov2-imgfe"), t / "cls", "--task image-classification");
  CHECK(c.status != 0);
  CHECK(c.output.find("classifier.weight") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "cls"));
  // ONNX Runtime GenAI runs decoders only.
  for (const char* v : {"vit-imgcls", "dinov2-imgfe"}) {
    RunResult g = build_cli(vision_case(v), t / "genai", "--runtime ort-genai");
    INFO(g.output);
    CHECK(g.status != 0);
    CHECK(g.output.find("which ONNX Runtime GenAI does not run: it runs text-generation decoders only") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(t / "genai"));
  }
  mobius::test::expect_listed({"vit", "deit", "dinov2", "dinov2_with_registers"},
                              {"image-feature-extraction", "image-classification"}, "transformers.js");
}

namespace {

// ---------------------------------------------------------------------------------------------
// CLIP's and SigLIP's towers, built in-process from the SDK's rows.

struct TowerBuild {
  const mobius::nn::VisionSpec* spec;
  nlohmann::json config;
};

mobius_status tower_callback(void* user, const mobius_host_api* host, mobius_context* ctx) {
  const auto* b = static_cast<const TowerBuild*>(user);
  return mobius::detail::run_guarded(host, ctx, MOBIUS_ERROR_KIND_PLUGIN, [&] {
    mobius::BuildContext bc(host, ctx);
    mobius::nn::build_vision(bc, *b->spec, mobius::nn::read_vision_config(*b->spec, b->config),
                             "image-feature-extraction");
  });
}

// Builds the tower of `spec` over the checkpoint folder `ckpt` into `out` and compares it with
// case `c` (tests/parity/component_parity.mjs); the harness's output.
RunResult tower_parity(const mobius::nn::VisionSpec& spec, const fs::path& ckpt, const std::string& c,
                       const fs::path& out, const std::string& dtype, const std::string& ops) {
  TowerBuild b{&spec, nlohmann::json::parse(read_text(ckpt / "config.json"))};
  mobius::BuildOptions opts;
  opts.dtype = dtype;
  opts.ops = ops;
  opts.runtime = "onnxruntime";
  opts.quiet = true;
  {
    mobius::ModelPackage pkg = mobius::build_with(spec.model_type, &tower_callback, &b, opts, ckpt);
    pkg.save(out);
  }
  const std::string tol = dtype == "f16" ? " --atol 2e-2 --rtol 1e-2" : "";
  return run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node tests/parity/component_parity.mjs --model " +
             quote(out.string()) + " --case " + quote(vision_case(c).string()) + " --graph encode" + tol);
}

}  // namespace

TEST_CASE("vision: CLIP's and SigLIP's towers match CLIPVisionModel and SiglipVisionModel (f32, f16; both op sets)") {
  using mobius::nn::clip_vision;
  using mobius::nn::siglip_vision;
  const std::vector<std::pair<const mobius::nn::VisionSpec*, std::string>> towers = {
      {&clip_vision(), "tower-clip-vision"}, {&siglip_vision(), "tower-siglip-vision"},
      {&siglip_vision(), "tower-siglip-vision-interp"}};
  for (const auto& [spec, c] : towers)
    for (const char* dtype : {"f32", "f16"})
      for (const char* ops : {"ort", "standard"}) {
        CAPTURE(c);
        CAPTURE(dtype);
        CAPTURE(ops);
        TempDir t;
        RunResult r = tower_parity(*spec, vision_case(c), c, t / "out", dtype, ops);
        INFO(r.output);
        CHECK(r.status == 0);
        CHECK(r.output.find("pooler_output: PASS") != std::string::npos);
      }
  // transformers 5 saves CLIPVisionModel's tensors at the root: the same tower.
  TempDir t;
  copy_checkpoint(vision_case("tower-clip-vision"), t / "ckpt", {}, [](StTensor& s) {
    s.name = s.name.substr(std::string("vision_model.").size());
    return true;
  });
  RunResult r = tower_parity(clip_vision(), t / "ckpt", "tower-clip-vision", t / "out", "f32", "ort");
  INFO(r.output);
  CHECK(r.status == 0);
  // SigLIP's vision_use_head false: no pooler_output, the head's tensors not read.
  TempDir n;
  copy_checkpoint(vision_case("tower-siglip-vision"), n / "ckpt", [](auto& c) { c["vision_use_head"] = false; },
                  [](StTensor& s) { return s.name.find(".head.") == std::string::npos; });
  RunResult h = tower_parity(siglip_vision(), n / "ckpt", "tower-siglip-vision", n / "out", "f32", "ort");
  INFO(h.output);
  CHECK(h.status == 0);
  CHECK(h.output.find("last_hidden_state: PASS") != std::string::npos);
  CHECK(h.output.find("pooler_output") == std::string::npos);
}
