// test_zero_shot.cpp - CLIPModel and SiglipModel (the clip plugin's zero-shot image
// classification) beyond their golden parity (tests/parity, tests/golden-vision): the published
// configs of openai/clip-vit-base-patch32 and google/siglip-base-patch16-224 build without
// weights into the three graphs of one folder; configs, preprocessor configs and checkpoints that
// cannot be built are refused naming the file and the key (or the tensor) and writing nothing.
#include <doctest/doctest.h>

#include <chrono>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path vision_case(const std::string& c) { return golden_case("golden-vision", c); }

// openai/clip-vit-base-patch32's config.json, its sizes as published (the dropout and
// initializer keys left out).
const char* const kClipBase32 = R"({
  "architectures": ["CLIPModel"],
  "initializer_factor": 1.0,
  "logit_scale_init_value": 2.6592,
  "model_type": "clip",
  "projection_dim": 512,
  "text_config": {"bos_token_id": 0, "eos_token_id": 2, "hidden_act": "quick_gelu", "hidden_size": 512,
                  "intermediate_size": 2048, "layer_norm_eps": 1e-05, "max_position_embeddings": 77,
                  "model_type": "clip_text_model", "num_attention_heads": 8, "num_hidden_layers": 12,
                  "pad_token_id": 1, "projection_dim": 512, "vocab_size": 49408},
  "vision_config": {"hidden_act": "quick_gelu", "hidden_size": 768, "image_size": 224, "intermediate_size": 3072,
                    "layer_norm_eps": 1e-05, "model_type": "clip_vision_model", "num_attention_heads": 12,
                    "num_channels": 3, "num_hidden_layers": 12, "patch_size": 32, "projection_dim": 512}
})";

// google/siglip-base-patch16-224's config.json as published.
const char* const kSiglipBase16 = R"({
  "architectures": ["SiglipModel"],
  "initializer_factor": 1.0,
  "model_type": "siglip",
  "text_config": {"hidden_size": 768, "intermediate_size": 3072, "model_type": "siglip_text_model",
                  "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 32000},
  "vision_config": {"hidden_size": 768, "image_size": 224, "intermediate_size": 3072,
                    "model_type": "siglip_vision_model", "num_attention_heads": 12, "num_hidden_layers": 12,
                    "patch_size": 16}
})";

std::vector<std::string> names(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(v.name());
  return out;
}

// A copy of case `c` (its config edited, its tensors kept by `keep`, `extra` files beside it,
// built with `flags`) must be refused with each of `reasons`, naming `file`.
void expect_refused(const std::string& c, const std::function<void(nlohmann::json&)>& edit,
                    const std::vector<std::string>& reasons, const std::string& file = "config.json",
                    const std::map<std::string, std::string>& extra = {},
                    const std::function<bool(StTensor&)>& keep = {}, const std::string& flags = "") {
  test::expect_refused(vision_case(c), {edit, keep, extra, flags}, reasons, file);
}

}  // namespace

TEST_CASE("zero-shot: the published CLIP and SigLIP configs build without weights into three graphs") {
  struct Published {
    const char* config;
    bool mask;  // CLIP's text tower takes an attention_mask; SigLIP's does not
  };
  for (const Published& p : {Published{kClipBase32, true}, Published{kSiglipBase16, false}}) {
    TempDir t;
    fs::create_directories(t / "ckpt");
    write_text(t / "ckpt" / "config.json", p.config);
    const auto start = std::chrono::steady_clock::now();
    RunResult r = build_cli(t / "ckpt", t / "out", "--no-weights");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(secs < 1.0);
    const fs::path onnx_dir = t / "out" / "onnx";
    const onnx::ModelProto model = load_model(onnx_dir / "model.onnx");
    const std::vector<std::string> text_in =
        p.mask ? std::vector<std::string>{"input_ids", "attention_mask"} : std::vector<std::string>{"input_ids"};
    std::vector<std::string> all_in = text_in;
    all_in.push_back("pixel_values");
    CHECK(names(model.graph().input()) == all_in);
    CHECK(names(model.graph().output()) ==
          std::vector<std::string>{"logits_per_image", "logits_per_text", "text_embeds", "image_embeds"});
    const onnx::ModelProto text = load_model(onnx_dir / "text_model.onnx");
    CHECK(names(text.graph().input()) == text_in);
    CHECK(names(text.graph().output()) ==
          std::vector<std::string>{"last_hidden_state", p.mask ? "text_embeds" : "pooler_output"});
    const onnx::ModelProto vision = load_model(onnx_dir / "vision_model.onnx");
    CHECK(names(vision.graph().input()) == std::vector<std::string>{"pixel_values"});
    CHECK(names(vision.graph().output()) ==
          std::vector<std::string>{"last_hidden_state", p.mask ? "image_embeds" : "pooler_output"});
    // transformers.js reads the folder's config.json.
    CHECK(fs::exists(t / "out" / "config.json"));
  }
}

TEST_CASE("zero-shot: configs that cannot be built are refused naming config.json and the key; nothing is written") {
  struct Bad {
    const char* what;
    const char* model_case;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> reasons;
  };
  const std::vector<Bad> cases = {
      {"text_config not an object", "clip-zeroshot", [](auto& c) { c["text_config"] = 5; },
       {"'text_config' must be a JSON object"}},
      {"vision_config not an object", "siglip-zeroshot", [](auto& c) { c["vision_config"] = "big"; },
       {"'vision_config' must be a JSON object"}},
      {"zero projection_dim", "clip-zeroshot", [](auto& c) { c["projection_dim"] = 0; },
       {"'projection_dim' is 0"}},
      {"text heads not dividing hidden_size", "clip-zeroshot", [](auto& c) { c["text_config"]["num_attention_heads"] = 5; },
       {"config.json text_config", "'num_attention_heads' (5) must divide"}},
      {"zero vision hidden_size", "siglip-zeroshot", [](auto& c) { c["vision_config"]["hidden_size"] = 0; },
       {"config.json vision_config", "'hidden_size'"}},
      {"patch larger than the image", "clip-zeroshot", [](auto& c) { c["vision_config"]["patch_size"] = 64; },
       {"config.json vision_config", "'patch_size'"}},
      {"null eos", "clip-zeroshot", [](auto& c) { c["text_config"]["eos_token_id"] = nullptr; },
       {"'eos_token_id' is null"}},
      {"text layers against the checkpoint", "clip-zeroshot", [](auto& c) { c["text_config"]["num_hidden_layers"] = 5; },
       {"config.json text_config: 'num_hidden_layers' is 5, but the checkpoint has no tensor"}},
      {"text vocabulary against the checkpoint", "siglip-zeroshot", [](auto& c) { c["text_config"]["vocab_size"] = 77; },
       {"config.json text_config: 'vocab_size' is 77, but the checkpoint's 'text_model.embeddings.token_embedding.weight'"}},
      {"vision image size against the position table", "clip-zeroshot", [](auto& c) { c["vision_config"]["image_size"] = 64; },
       {"'image_size'", "vision_model.embeddings.position_embedding.weight"}},
      {"projection against the checkpoint", "clip-zeroshot", [](auto& c) { c["projection_dim"] = 16; },
       {"text_projection.weight"}},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    expect_refused(b.model_case, b.edit, b.reasons, b.what == std::string("projection against the checkpoint") ? "text_projection" : "config.json");
  }
}

TEST_CASE("zero-shot: a preprocessor_config.json of other images is refused; GenAI is refused with the reason") {
  const std::string good = R"({"crop_size": {"height": 32, "width": 32}, "do_center_crop": true,
                               "do_normalize": true, "do_resize": true, "image_mean": [0.48, 0.45, 0.40],
                               "image_std": [0.26, 0.26, 0.27], "resample": 3, "rescale_factor": 0.00392156862745098,
                               "size": {"shortest_edge": 32}})";
  {
    TempDir t;
    copy_checkpoint(vision_case("clip-zeroshot"), t / "ckpt");
    write_text(t / "ckpt" / "preprocessor_config.json", good);
    RunResult r = build_cli(t / "ckpt", t / "out");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(fs::exists(t / "out" / "preprocessor_config.json"));
  }
  nlohmann::json bad = nlohmann::json::parse(good);
  bad["image_mean"] = {0.5, 0.5};
  expect_refused("clip-zeroshot", {}, {"'image_mean'"}, "preprocessor_config.json",
                 {{"preprocessor_config.json", bad.dump()}});
  bad = nlohmann::json::parse(good);
  bad["size"] = {{"shortest_edge", 0}};
  expect_refused("siglip-zeroshot", {}, {"'size'"}, "preprocessor_config.json", {{"preprocessor_config.json", bad.dump()}});
  expect_refused("siglip-zeroshot", {}, {"which ONNX Runtime GenAI does not run", "--runtime transformers.js"},
                 "siglip", {}, {}, "--runtime ort-genai");
  expect_listed({"clip", "siglip"}, {"zero-shot-image-classification"}, "transformers.js");
  expect_listed({"clip_vision_model", "siglip_vision_model"}, {"image-feature-extraction"}, "transformers.js");
}
