// test_swin.cpp - the swin plugin beyond its golden parity (tests/parity, tests/golden-vision
// swin-*): the published microsoft/swin-tiny-patch4-window7-224 config builds without weights,
// quickly, for both tasks and both operator sets; configs and checkpoints that disagree are
// refused naming config.json and the key, writing nothing; the graph takes the config's image
// size only; the checkpoints' other spellings (transformers 5's renamed tensors, the index buffers
// older versions saved, a classifier's checkpoint built as the base model) build.
#include <doctest/doctest.h>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path vision_case(const std::string& c) { return golden_case("golden-vision", c); }

// microsoft/swin-tiny-patch4-window7-224's config.json as published, but for its 1000 ImageNet-1k
// label names (id2label, label2id), written here as LABEL_i: the names do not change the graph.
nlohmann::json swin_tiny_config() {
  nlohmann::json c = nlohmann::json::parse(R"({
    "architectures": ["SwinForImageClassification"],
    "attention_probs_dropout_prob": 0.0,
    "depths": [2, 2, 6, 2],
    "drop_path_rate": 0.1,
    "embed_dim": 96,
    "encoder_stride": 32,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "hidden_size": 768,
    "image_size": 224,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-05,
    "mlp_ratio": 4.0,
    "model_type": "swin",
    "num_channels": 3,
    "num_heads": [3, 6, 12, 24],
    "num_layers": 4,
    "patch_size": 4,
    "path_norm": true,
    "qkv_bias": true,
    "torch_dtype": "float32",
    "transformers_version": "4.18.0.dev0",
    "use_absolute_embeddings": false,
    "window_size": 7
  })");
  for (int i = 0; i < 1000; ++i) {
    c["id2label"][std::to_string(i)] = "LABEL_" + std::to_string(i);
    c["label2id"]["LABEL_" + std::to_string(i)] = i;
  }
  return c;
}

std::vector<int64_t> dims_of(const onnx::ValueInfoProto& v) {
  std::vector<int64_t> d;
  for (const auto& x : v.type().tensor_type().shape().dim()) d.push_back(x.has_dim_value() ? x.dim_value() : -1);
  return d;
}

size_t count_ops(const onnx::ModelProto& m, const std::string& op, const std::string& domain = "") {
  size_t n = 0;
  for (const auto& node : m.graph().node()) n += node.op_type() == op && node.domain() == domain;
  return n;
}

// A copy of vision case `c` (its config edited, its tensors kept, renamed or added) must be
// refused with each of `reasons`, naming config.json.
void expect_refused(const std::string& c, const std::function<void(nlohmann::json&)>& edit,
                    const std::vector<std::string>& reasons, const std::function<bool(StTensor&)>& keep = {}) {
  test::expect_refused(vision_case(c), {edit, keep, {}, "--runtime onnxruntime"}, reasons);
}

}  // namespace

TEST_CASE("swin: microsoft/swin-tiny-patch4-window7-224's config builds without weights in under a second") {
  const std::string config = swin_tiny_config().dump();
  for (const std::string ops : {"ort", "standard"}) {
    CAPTURE(ops);
    TempDir t;
    double secs = 0;
    const onnx::ModelProto m = build_config_only(t, config, "--runtime onnxruntime --ops " + ops, &secs);
    MESSAGE("swin-tiny --ops " << ops << " graph-only build: " << secs << " s");
    CHECK(secs < 1.0);
    REQUIRE(m.graph().input_size() == 1);
    CHECK(m.graph().input(0).name() == "pixel_values");
    CHECK(m.graph().input(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT);
    // The windows partition a fixed grid: the image is the config's 224 x 224.
    CHECK(dims_of(m.graph().input(0)) == std::vector<int64_t>{-1, 3, 224, 224});
    REQUIRE(m.graph().output_size() == 1);
    CHECK(m.graph().output(0).name() == "logits");
    CHECK(dims_of(m.graph().output(0)) == std::vector<int64_t>{-1, 1000});
    // 12 layers; in every stage but the last (7 x 7, one window) every second layer is shifted.
    if (ops == "ort") {
      CHECK(count_ops(m, "MultiHeadAttention", "com.microsoft") == 12);
      CHECK(count_ops(m, "Gelu", "com.microsoft") == 12);
      CHECK(count_ops(m, "SkipLayerNormalization", "com.microsoft") == 12);
    } else {
      for (const auto& node : m.graph().node()) CHECK(node.domain().empty());
      CHECK(count_ops(m, "Softmax") == 12);
    }
    CHECK(count_ops(m, "Expand") == 5);  // the shifted layers' masks, per image
  }
  // The base model: last_hidden_state of the 7 x 7 positions of the last stage, and its mean.
  TempDir t;
  nlohmann::json base = swin_tiny_config();
  base["architectures"] = {"SwinModel"};
  const onnx::ModelProto m = build_config_only(t, base.dump(), "--runtime onnxruntime");
  REQUIRE(m.graph().output_size() == 2);
  CHECK(m.graph().output(0).name() == "last_hidden_state");
  CHECK(dims_of(m.graph().output(0)) == std::vector<int64_t>{-1, 49, 768});
  CHECK(m.graph().output(1).name() == "pooler_output");
  CHECK(dims_of(m.graph().output(1)) == std::vector<int64_t>{-1, 768});
  // The default layout is transformers.js's.
  TempDir d;
  fs::create_directories(d / "ckpt");
  write_text(d / "ckpt" / "config.json", config);
  RunResult r = build_cli(d / "ckpt", d / "out", "--no-weights --dtype f16");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(d / "out" / "onnx" / "model_fp16.onnx"));
}

TEST_CASE("swin: configs that cannot be built are refused naming config.json and the key; nothing is written") {
  struct Bad {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> reasons;
  };
  const std::vector<Bad> cases = {
      {"zero image_size", [](auto& c) { c["image_size"] = 0; }, {"'image_size' must be positive, got 0"}},
      {"negative image height", [](auto& c) { c["image_size"] = {-32, 32}; }, {"'image_size' the height is -32"}},
      {"image_size of three entries", [](auto& c) { c["image_size"] = {32, 32, 3}; }, {"'image_size' has 3 entries"}},
      {"zero patch_size", [](auto& c) { c["patch_size"] = 0; }, {"'patch_size' must be positive, got 0"}},
      {"negative num_channels", [](auto& c) { c["num_channels"] = -3; }, {"'num_channels' must be positive, got -3"}},
      {"zero embed_dim", [](auto& c) { c["embed_dim"] = 0; }, {"'embed_dim' must be positive, got 0"}},
      {"no stages", [](auto& c) { c["depths"] = nlohmann::json::array(); c["num_heads"] = nlohmann::json::array(); },
       {"'depths' has 0 entries"}},
      {"a stage of no layers", [](auto& c) { c["depths"] = {2, 0}; }, {"'depths' entry 1 is 0; it must be positive"}},
      {"a stage of negative layers", [](auto& c) { c["depths"] = {-2, 2}; }, {"'depths' entry 0 is -2"}},
      {"zero heads", [](auto& c) { c["num_heads"] = {0, 4}; }, {"'num_heads' must be positive, got 0"}},
      {"num_heads shorter than depths", [](auto& c) { c["num_heads"] = {2}; },
       {"'num_heads' has 1 entries, but 'depths' has 2: one per stage"}},
      {"num_heads longer than depths", [](auto& c) { c["num_heads"] = {2, 4, 8}; },
       {"'num_heads' has 3 entries, but 'depths' has 2"}},
      {"heads not dividing a stage's width", [](auto& c) { c["num_heads"] = {2, 3}; },
       {"'num_heads' entry 1 (3) must divide stage 1's width 32 ('embed_dim' 16 * 2^1)"}},
      {"heads not dividing the first stage's width", [](auto& c) { c["num_heads"] = {5, 4}; },
       {"'num_heads' entry 0 (5) must divide stage 0's width 16"}},
      {"zero window_size", [](auto& c) { c["window_size"] = 0; }, {"'window_size' must be at least 1, got 0"}},
      {"negative window_size", [](auto& c) { c["window_size"] = -4; }, {"'window_size' must not be negative, got -4"}},
      {"huge window_size", [](auto& c) { c["window_size"] = 1000; }, {"'window_size' is 1000, larger than 64"}},
      {"zero mlp_ratio", [](auto& c) { c["mlp_ratio"] = 0; }, {"'mlp_ratio' must be positive"}},
      {"zero layer_norm_eps", [](auto& c) { c["layer_norm_eps"] = 0; }, {"'layer_norm_eps' must be positive"}},
      {"unknown hidden_act", [](auto& c) { c["hidden_act"] = "swoosh"; }, {"'hidden_act' has unknown activation 'swoosh'"}},
      {"absolute positions of a padded image", [](auto& c) { c["use_absolute_embeddings"] = true; c["image_size"] = 33; },
       {"'use_absolute_embeddings' is true, but 'image_size' (33 x 33) is not a whole number of 'patch_size' (2 x 2)"}},
      {"too many stages for the width",
       [](auto& c) {
         c["depths"] = std::vector<int>(15, 1);
         c["num_heads"] = std::vector<int>(15, 1);
       },
       {"'embed_dim' (16) doubled at each of the 14 patch mergings"}},
      {"no labels", [](auto& c) { c["num_labels"] = 0; }, {"'num_labels' must be positive, got 0"}},
      {"a head not built", [](auto& c) { c["architectures"] = {"SwinForMaskedImageModeling"}; },
       {"'architectures' names 'SwinForMaskedImageModeling'"}},
  };
  for (const Bad& b : cases) {
    const std::string what = b.what;
    CAPTURE(what);
    expect_refused("swin-imgcls", b.edit, b.reasons);
  }
}

TEST_CASE("swin: a checkpoint that disagrees with config.json is refused naming the key; nothing is written") {
  // swin-imgcls: 32 x 32 images in 2 x 2 patches, embed_dim 16, depths [2, 2], num_heads [2, 4],
  // window 4 (16 x 16, then 8 x 8 positions), 2 labels.
  expect_refused("swin-imgcls", [](auto& c) { c["depths"] = {2, 2, 2}; c["num_heads"] = {2, 4, 8}; },
                 {"'depths' has 3 entries, one per stage, but the checkpoint's swin.encoder.layers holds 2"});
  expect_refused("swin-imgcls", [](auto& c) { c["depths"] = {2}; c["num_heads"] = {2}; },
                 {"'depths' has 1 entries, one per stage, but the checkpoint's swin.encoder.layers holds more stages"});
  expect_refused("swin-imgcls", [](auto& c) { c["depths"] = {2, 3}; },
                 {"'depths' entry 1 is 3, but the checkpoint's swin.encoder.layers.1 holds 2 layers"});
  expect_refused("swin-imgcls", [](auto& c) { c["depths"] = {1, 2}; },
                 {"'depths' entry 0 is 1, but the checkpoint's swin.encoder.layers.0 holds more layers"});
  expect_refused("swin-imgcls", [](auto& c) { c["window_size"] = 3; },
                 {"'window_size' is 3, but the checkpoint's swin.encoder.layers.0.blocks.0.attention.self."
                  "relative_position_bias_table has 49 rows, not (2 * window_size - 1)^2 = 25"});
  expect_refused("swin-imgcls", [](auto& c) { c["num_heads"] = {4, 4}; },
                 {"'num_heads' entry 0 is 4, but the checkpoint's swin.encoder.layers.0.blocks.0.attention.self."
                  "relative_position_bias_table has 2 columns, one per head"});
  expect_refused("swin-imgcls", [](auto& c) { c["embed_dim"] = 8; c["num_heads"] = {2, 2}; },
                 {"'embed_dim' disagrees with the checkpoint's "
                  "swin.embeddings.patch_embeddings.projection.weight [16, 3, 2, 2]"});
  expect_refused("swin-imgcls", [](auto& c) { c["patch_size"] = 4; },
                 {"'patch_size' disagrees with the checkpoint's swin.embeddings.patch_embeddings.projection.weight"});
  expect_refused("swin-imgcls",
                 [](auto& c) {
                   c["id2label"] = {{"0", "a"}, {"1", "b"}, {"2", "c"}};
                   c.erase("label2id");
                 },
                 {"3 labels ('id2label' or 'num_labels'), but the checkpoint's classifier.weight has 2 rows"});
  // 12 x 12 images: stage 1's 3 x 3 map is smaller than the window, which transformers clamps
  // to 3 x 3 there; the checkpoint's table is for 4 x 4 windows, which transformers cannot apply.
  expect_refused("swin-imgcls", [](auto& c) { c["image_size"] = 12; },
                 {"'window_size' is 4, but the checkpoint's swin.encoder.layers.1.blocks.0.attention.self."
                  "relative_position_bias_table has 49 rows; stage 1's 3 x 3 map is smaller than the window, which "
                  "transformers clamps to 3 x 3 there, so the table must hold (2 * 3 - 1)^2 = 25 rows"});
}

TEST_CASE("swin: a table made for the clamped window (older transformers' checkpoints) builds") {
  // transformers 4 sized each layer's table for its clamped window: 12 x 12 images make stage 1's
  // map 3 x 3, and its tables 5 x 5 = 25 rows (the first 25 of these, for the test).
  TempDir t;
  copy_checkpoint(vision_case("swin-imgcls"), t / "ckpt", [](auto& c) { c["image_size"] = 12; }, [](StTensor& s) {
    if (s.name.rfind("swin.encoder.layers.1.", 0) == 0 && s.name.find("relative_position_bias_table") != std::string::npos) {
      s.shape = {25, 4};
      s.bytes.resize(25 * 4 * 4);
    }
    return true;
  });
  RunResult r = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("swin: the graph takes the config's image size only") {
  TempDir t;
  RunResult b = build_cli(vision_case("swin-imgcls"), t / "out", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  auto pixels = [](int side) {
    nlohmann::json in;
    in["pixel_values"] = {{"type", "float32"}, {"dims", {1, 3, side, side}},
                          {"data", std::vector<float>(static_cast<size_t>(3 * side * side), 0.5f)}};
    return in.dump();
  };
  const std::string ort = quote((fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "ort_run.mjs").string());
  const std::string node = "cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node " + ort + " " +
                           quote((t / "out" / "model.onnx").string()) + " ";
  write_text(t / "good.json", pixels(32));
  RunResult good = run(node + quote((t / "good.json").string()));
  INFO(good.output);
  if (good.output.find("onnxruntime-node not found") != std::string::npos) return;  // no runtime here
  CHECK(good.status == 0);
  CHECK(good.output.find("\"logits\":{\"dims\":[1,2]") != std::string::npos);
  write_text(t / "other.json", pixels(48));
  RunResult other = run(node + quote((t / "other.json").string()));
  INFO(other.output);
  CHECK(other.status != 0);
}

TEST_CASE("swin: transformers 5's tensor names, saved index buffers and a classifier's base model build") {
  TempDir t;
  RunResult a = build_cli(vision_case("swin-imgcls"), t / "stored", "--runtime onnxruntime");
  INFO(a.output);
  REQUIRE(a.status == 0);
  // The names transformers 5 uses in memory (conversion_mapping.py), which it saves back as the
  // older ones; a checkpoint holding them builds the same model.
  copy_checkpoint(vision_case("swin-imgcls"), t / "renamed", {}, [](StTensor& s) {
    static const std::pair<const char*, const char*> kRenames[] = {
        {".attention.self.query.", ".attention.q_proj."},
        {".attention.self.key.", ".attention.k_proj."},
        {".attention.self.value.", ".attention.v_proj."},
        {".attention.self.relative_position_bias_table", ".attention.relative_position_bias.relative_position_bias_table"},
        {".attention.output.dense.", ".attention.o_proj."},
        {".intermediate.dense.", ".mlp.fc1."},
        {".output.dense.", ".mlp.fc2."}};
    for (const auto& [from, to] : kRenames)
      if (const size_t at = s.name.find(from); at != std::string::npos) {
        s.name.replace(at, std::string(from).size(), to);
        break;
      }
    return true;
  });
  RunResult b = build_cli(t / "renamed", t / "renamed-out", "--runtime onnxruntime");
  INFO(b.output);
  REQUIRE(b.status == 0);
  CHECK(read_text(t / "stored" / "model.onnx.data") == read_text(t / "renamed-out" / "model.onnx.data"));
  // The relative_position_index buffers older transformers saved (recomputed here).
  std::vector<StTensor> index;
  for (int stage = 0; stage < 2; ++stage)
    for (int block = 0; block < 2; ++block) {
      StTensor s{"swin.encoder.layers." + std::to_string(stage) + ".blocks." + std::to_string(block) +
                     ".attention.self.relative_position_index",
                 "I64", {256}, std::vector<uint8_t>(256 * 8)};
      index.push_back(s);
    }
  copy_checkpoint(vision_case("swin-imgcls"), t / "buffers", {}, {}, index);
  RunResult c = build_cli(t / "buffers", t / "buffers-out", "--runtime onnxruntime");
  INFO(c.output);
  REQUIRE(c.status == 0);
  CHECK(read_text(t / "stored" / "model.onnx.data") == read_text(t / "buffers-out" / "model.onnx.data"));
  // The base model of a classifier's checkpoint: its classifier left out.
  RunResult d = build_cli(vision_case("swin-imgcls"), t / "base", "--runtime onnxruntime --task image-feature-extraction");
  INFO(d.output);
  REQUIRE(d.status == 0);
  const onnx::ModelProto m = load_model(t / "base" / "model.onnx");
  REQUIRE(m.graph().output_size() == 2);
  CHECK(m.graph().output(0).name() == "last_hidden_state");
  CHECK(dims_of(m.graph().output(0)) == std::vector<int64_t>{-1, 64, 32});
}
