// test_speech.cpp - the wav2vec2 plugin's CTC speech encoders (Wav2Vec2, HuBERT, WavLM,
// Data2VecAudio) beyond their golden parity (tests/parity, tests/golden-speech): a full-size
// config builds without weights; configs, preprocessor configs and checkpoints that cannot be
// built are refused naming the file and the key (or the tensor) and writing nothing; the older
// names of the weight-normed positional convolution build the same model; GenAI refuses a CTC
// encoder with the reason.
#include <doctest/doctest.h>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path speech_case(const std::string& c) { return golden_case("golden-speech", c); }

// facebook/wav2vec2-base-960h's config.json as published.
const char* const kWav2Vec2Base960h = R"({
  "_name_or_path": "facebook/wav2vec2-base-960h",
  "activation_dropout": 0.1,
  "apply_spec_augment": true,
  "architectures": ["Wav2Vec2ForCTC"],
  "attention_dropout": 0.1,
  "bos_token_id": 1,
  "codevector_dim": 256,
  "contrastive_logits_temperature": 0.1,
  "conv_bias": false,
  "conv_dim": [512, 512, 512, 512, 512, 512, 512],
  "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
  "conv_stride": [5, 2, 2, 2, 2, 2, 2],
  "ctc_loss_reduction": "sum",
  "ctc_zero_infinity": false,
  "diversity_loss_weight": 0.1,
  "do_stable_layer_norm": false,
  "eos_token_id": 2,
  "feat_extract_activation": "gelu",
  "feat_extract_dropout": 0.0,
  "feat_extract_norm": "group",
  "feat_proj_dropout": 0.1,
  "feat_quantizer_dropout": 0.0,
  "final_dropout": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout": 0.1,
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-05,
  "layerdrop": 0.1,
  "mask_feature_length": 10,
  "mask_feature_prob": 0.0,
  "mask_time_length": 10,
  "mask_time_prob": 0.05,
  "model_type": "wav2vec2",
  "num_attention_heads": 12,
  "num_codevector_groups": 2,
  "num_codevectors_per_group": 320,
  "num_conv_pos_embedding_groups": 16,
  "num_conv_pos_embeddings": 128,
  "num_feat_extract_layers": 7,
  "num_hidden_layers": 12,
  "num_negatives": 100,
  "pad_token_id": 0,
  "proj_codevector_dim": 256,
  "transformers_version": "4.7.0.dev0",
  "vocab_size": 32
})";

// A copy of speech case `c` (its config edited, its tensors kept or renamed by `keep`, `extra`
// files written beside it) must be refused with each of `reasons`, naming `file`.
void expect_refused(const std::string& c, const std::function<void(nlohmann::json&)>& edit,
                    const std::vector<std::string>& reasons, const std::string& file = "config.json",
                    const std::map<std::string, std::string>& extra = {},
                    const std::function<bool(StTensor&)>& keep = {}) {
  test::expect_refused(speech_case(c), {edit, keep, extra, ""}, reasons, file);
}

}  // namespace

TEST_CASE("speech: facebook/wav2vec2-base-960h's config builds without weights") {
  TempDir t;
  const onnx::ModelProto m = build_config_only(t, kWav2Vec2Base960h, "--runtime onnxruntime");
  REQUIRE(m.graph().input_size() == 1);
  CHECK(m.graph().input(0).name() == "input_values");
  CHECK(m.graph().input(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT);
  REQUIRE(m.graph().output_size() == 1);
  CHECK(m.graph().output(0).name() == "logits");
  // The default layout is transformers.js's.
  TempDir d;
  fs::create_directories(d / "ckpt");
  write_text(d / "ckpt" / "config.json", kWav2Vec2Base960h);
  RunResult r = build_cli(d / "ckpt", d / "out", "--no-weights --dtype f16");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(d / "out" / "onnx" / "model_fp16.onnx"));
}

TEST_CASE("speech: configs that cannot be built are refused naming config.json and the key; nothing is written") {
  struct Bad {
    const char* what;
    const char* model_case;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> reasons;
  };
  const std::vector<Bad> cases = {
      {"conv_kernel shorter than the layers", "wav2vec2-ctc", [](auto& c) { c["conv_kernel"] = {10, 3}; },
       {"'conv_kernel' has 2 entries, but 'num_feat_extract_layers' is 3"}},
      {"conv_stride longer than the layers", "hubert-ctc", [](auto& c) { c["conv_stride"] = {5, 2, 2, 2}; },
       {"'conv_stride' has 4 entries, but 'num_feat_extract_layers' is 3"}},
      {"conv_dim against num_feat_extract_layers", "wavlm-ctc", [](auto& c) { c["num_feat_extract_layers"] = 4; },
       {"'conv_dim' has 3 entries, but 'num_feat_extract_layers' is 4"}},
      {"lists disagreeing without num_feat_extract_layers", "data2vec-audio-ctc",
       [](auto& c) {
         c.erase("num_feat_extract_layers");
         c["conv_kernel"] = {10, 3, 3, 3};
       },
       {"'conv_kernel' has 4 entries, but 'conv_dim' has 3"}},
      {"no convolution", "wav2vec2-ctc",
       [](auto& c) {
         c.erase("num_feat_extract_layers");
         c["conv_dim"] = c["conv_kernel"] = c["conv_stride"] = nlohmann::json::array();
       },
       {"'conv_dim' has 0 entries; the feature encoder has from 1 to 64 convolutions"}},
      {"zero hidden_size", "wav2vec2-ctc", [](auto& c) { c["hidden_size"] = 0; }, {"'hidden_size' must be positive"}},
      {"negative hidden_size", "hubert-ctc", [](auto& c) { c["hidden_size"] = -64; }, {"'hidden_size' must be positive"}},
      {"zero stride", "wav2vec2-ctc", [](auto& c) { c["conv_stride"] = {5, 0, 2}; },
       {"'conv_stride' entry 1 is 0; it must be from 1 to 4096"}},
      {"negative kernel", "wavlm-ctc", [](auto& c) { c["conv_kernel"] = {10, 3, -3}; },
       {"'conv_kernel' entry 2 is -3; it must be from 1 to 4096"}},
      {"zero channels", "data2vec-audio-ctc", [](auto& c) { c["conv_dim"] = {32, 0, 32}; },
       {"'conv_dim' entry 1 is 0"}},
      {"zero positional kernel", "wav2vec2-ctc", [](auto& c) { c["num_conv_pos_embeddings"] = 0; },
       {"'num_conv_pos_embeddings' is 0"}},
      {"zero data2vec-audio positional kernel", "data2vec-audio-ctc", [](auto& c) { c["conv_pos_kernel_size"] = 0; },
       {"'conv_pos_kernel_size' is 0"}},
      {"positional groups not dividing hidden_size", "wav2vec2-ctc", [](auto& c) { c["num_conv_pos_embedding_groups"] = 5; },
       {"'num_conv_pos_embedding_groups' (5) must divide 'hidden_size' (64)"}},
      {"positional groups not dividing hidden_size (data2vec-audio)", "data2vec-audio-ctc",
       [](auto& c) { c["num_conv_pos_embedding_groups"] = 3; },
       {"'num_conv_pos_embedding_groups' (3) must divide 'hidden_size' (64)"}},
      {"heads not dividing hidden_size", "hubert-ctc", [](auto& c) { c["num_attention_heads"] = 5; },
       {"'num_attention_heads' (5) must divide 'hidden_size' (64)"}},
      {"unknown feat_extract_norm", "wav2vec2-ctc", [](auto& c) { c["feat_extract_norm"] = "batch"; },
       {"'feat_extract_norm' is 'batch'", "'group'", "'layer'"}},
      {"unknown feat_extract_activation", "wavlm-ctc", [](auto& c) { c["feat_extract_activation"] = "swoosh"; },
       {"'feat_extract_activation' has unknown activation 'swoosh'"}},
      {"WavLM's buckets", "wavlm-ctc", [](auto& c) { c["max_bucket_distance"] = 40; },
       {"'max_bucket_distance' is 40; it must be from 81"}},
      {"an adapter", "wav2vec2-ctc", [](auto& c) { c["add_adapter"] = true; }, {"'add_adapter' is true"}},
      {"attention adapters", "wav2vec2-ctc", [](auto& c) { c["adapter_attn_dim"] = 16; }, {"'adapter_attn_dim' is set"}},
      {"a head other than CTC", "wav2vec2-ctc",
       [](auto& c) { c["architectures"] = {"Wav2Vec2ForSequenceClassification"}; },
       {"'architectures' names 'Wav2Vec2ForSequenceClassification'", "(it builds ctc)"}},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    expect_refused(b.model_case, b.edit, b.reasons);
  }
}

TEST_CASE("speech: a preprocessor_config.json of other inputs is refused naming the file and the key") {
  const std::string good = R"({"do_normalize": true, "feature_extractor_type": "Wav2Vec2FeatureExtractor",
                               "feature_size": 1, "padding_side": "right", "padding_value": 0.0,
                               "return_attention_mask": false, "sampling_rate": 16000})";
  {
    // As facebook/wav2vec2-base-960h publishes it: builds.
    TempDir t;
    copy_checkpoint(speech_case("wav2vec2-ctc"), t / "ckpt");
    write_text(t / "ckpt" / "preprocessor_config.json", good);
    RunResult r = build_cli(t / "ckpt", t / "out");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(fs::exists(t / "out" / "preprocessor_config.json"));
  }
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(good);
    edit(j);
    return std::map<std::string, std::string>{{"preprocessor_config.json", j.dump()}};
  };
  expect_refused("wav2vec2-ctc", {}, {"'feature_size' is 80", "raw audio, one value per sample"},
                 "preprocessor_config.json", edited([](auto& j) { j["feature_size"] = 80; }));
  expect_refused("hubert-ctc", {}, {"'sampling_rate' must be positive, got 0"}, "preprocessor_config.json",
                 edited([](auto& j) { j["sampling_rate"] = 0; }));
  expect_refused("wavlm-ctc", {}, {"'sampling_rate' must be positive, got -16000"}, "preprocessor_config.json",
                 edited([](auto& j) { j["sampling_rate"] = -16000; }));
  expect_refused("data2vec-audio-ctc", {}, {"preprocessor_config.json"}, "preprocessor_config.json",
                 {{"preprocessor_config.json", "{\"feature_size\": "}});
}

TEST_CASE("speech: a checkpoint whose convolutions disagree with the config is refused naming the tensor") {
  // The feature encoder's first layer: 48 channels in config.json, 32 in the checkpoint (the
  // host's preflight, from the tensors' headers).
  expect_refused("wav2vec2-ctc", [](auto& c) { c["conv_dim"] = {48, 32, 32}; },
                 {"wav2vec2.feature_extractor.conv_layers.0.conv.weight' has shape [32, 1, 10]"}, "[preflight]");
  expect_refused("data2vec-audio-ctc", [](auto& c) { c["conv_pos_kernel_size"] = 5; },
                 {"data2vec_audio.encoder.pos_conv_embed.layers.0.conv.weight' has shape [64, 16, 6]"},
                 "[preflight]");
  // The weight-normed positional convolution, whose weight is made from its parametrization.
  expect_refused("hubert-ctc", [](auto& c) { c["num_conv_pos_embeddings"] = 12; },
                 {"tensor 'hubert.encoder.pos_conv_embed.conv.parametrizations.weight.original0' has shape [1, 1, 16], "
                  "the graph expects [1, 1, 12]",
                  "'num_conv_pos_embeddings' 12"});
  expect_refused("wavlm-ctc", [](auto& c) { c["num_conv_pos_embedding_groups"] = 8; },
                 {"tensor 'wavlm.encoder.pos_conv_embed.conv.parametrizations.weight.original1' has shape [64, 16, 16], "
                  "the graph expects [64, 8, 16]"},
                 "config.json");
}

TEST_CASE("speech: the weight norm's older tensor names (weight_g, weight_v) build the same model") {
  TempDir t;
  copy_checkpoint(speech_case("wav2vec2-ctc"), t / "ckpt", {}, [](StTensor& s) {
    const std::string p = "parametrizations.weight.original";
    if (const size_t at = s.name.find(p); at != std::string::npos)
      s.name = s.name.substr(0, at) + (s.name.back() == '0' ? "weight_g" : "weight_v");
    return true;
  });
  RunResult a = build_cli(speech_case("wav2vec2-ctc"), t / "new", "--runtime onnxruntime");
  RunResult b = build_cli(t / "ckpt", t / "old", "--runtime onnxruntime");
  INFO(a.output);
  INFO(b.output);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(read_text(t / "new" / "model.onnx.data") == read_text(t / "old" / "model.onnx.data"));
}

TEST_CASE("speech: GenAI refuses a CTC encoder with the reason; list shows the task") {
  TempDir t;
  RunResult g = build_cli(speech_case("wavlm-ctc"), t / "genai", "--runtime ort-genai");
  INFO(g.output);
  CHECK(g.status != 0);
  CHECK(g.output.find("wavlm is a speech recognizer (CTC) (task ctc), which ONNX Runtime GenAI does not run") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(t / "genai"));
  expect_listed({"wav2vec2", "hubert", "wavlm", "data2vec-audio"}, {"ctc"}, "transformers.js");
}
