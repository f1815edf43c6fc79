// test_seq2seq.cpp - the encoder-decoder plugins (t5, bart, whisper; mobius/sdk/seq2seq.hpp)
// beyond their golden parity (tests/parity, tests/golden-seq2seq): the published configs of
// full-size models build both graphs without weights; configs, checkpoints and Whisper
// preprocessor configs that cannot be built are refused naming the file and the key, writing
// nothing.
#include <doctest/doctest.h>

#include <set>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path seq2seq_case(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-seq2seq" / c;
}

// The config.json of each model as published.
const char* const kT5Small = R"({
  "architectures": ["T5ForConditionalGeneration"],
  "d_ff": 2048,
  "d_kv": 64,
  "d_model": 512,
  "decoder_start_token_id": 0,
  "dropout_rate": 0.1,
  "eos_token_id": 1,
  "initializer_factor": 1.0,
  "is_encoder_decoder": true,
  "layer_norm_epsilon": 1e-06,
  "model_type": "t5",
  "n_positions": 512,
  "num_heads": 8,
  "num_layers": 6,
  "output_past": true,
  "pad_token_id": 0,
  "relative_attention_num_buckets": 32,
  "task_specific_params": {
    "summarization": {"early_stopping": true, "length_penalty": 2.0, "max_length": 200, "min_length": 30,
                      "no_repeat_ngram_size": 3, "num_beams": 4, "prefix": "summarize: "},
    "translation_en_to_de": {"early_stopping": true, "max_length": 300, "num_beams": 4,
                             "prefix": "translate English to German: "},
    "translation_en_to_fr": {"early_stopping": true, "max_length": 300, "num_beams": 4,
                             "prefix": "translate English to French: "},
    "translation_en_to_ro": {"early_stopping": true, "max_length": 300, "num_beams": 4,
                             "prefix": "translate English to Romanian: "}
  },
  "vocab_size": 32128
})";

const char* const kFlanT5Base = R"({
  "architectures": ["T5ForConditionalGeneration"],
  "d_ff": 2048,
  "d_kv": 64,
  "d_model": 768,
  "decoder_start_token_id": 0,
  "dense_act_fn": "gelu_new",
  "dropout_rate": 0.1,
  "eos_token_id": 1,
  "feed_forward_proj": "gated-gelu",
  "initializer_factor": 1.0,
  "is_encoder_decoder": true,
  "is_gated_act": true,
  "layer_norm_epsilon": 1e-06,
  "model_type": "t5",
  "n_positions": 512,
  "num_decoder_layers": 12,
  "num_heads": 12,
  "num_layers": 12,
  "output_past": true,
  "pad_token_id": 0,
  "relative_attention_max_distance": 128,
  "relative_attention_num_buckets": 32,
  "task_specific_params": {
    "summarization": {"early_stopping": true, "length_penalty": 2.0, "max_length": 200, "min_length": 30,
                      "no_repeat_ngram_size": 3, "num_beams": 4, "prefix": "summarize: "},
    "translation_en_to_de": {"early_stopping": true, "max_length": 300, "num_beams": 4,
                             "prefix": "translate English to German: "},
    "translation_en_to_fr": {"early_stopping": true, "max_length": 300, "num_beams": 4,
                             "prefix": "translate English to French: "},
    "translation_en_to_ro": {"early_stopping": true, "max_length": 300, "num_beams": 4,
                             "prefix": "translate English to Romanian: "}
  },
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.23.1",
  "use_cache": true,
  "vocab_size": 32128
})";

const char* const kBartLargeCnn = R"({
  "_num_labels": 3,
  "activation_dropout": 0.0,
  "activation_function": "gelu",
  "add_final_layer_norm": false,
  "architectures": ["BartForConditionalGeneration"],
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "classif_dropout": 0.0,
  "classifier_dropout": 0.0,
  "d_model": 1024,
  "decoder_attention_heads": 16,
  "decoder_ffn_dim": 4096,
  "decoder_layerdrop": 0.0,
  "decoder_layers": 12,
  "decoder_start_token_id": 2,
  "dropout": 0.1,
  "early_stopping": true,
  "encoder_attention_heads": 16,
  "encoder_ffn_dim": 4096,
  "encoder_layerdrop": 0.0,
  "encoder_layers": 12,
  "eos_token_id": 2,
  "force_bos_token_to_be_generated": true,
  "forced_bos_token_id": 0,
  "forced_eos_token_id": 2,
  "gradient_checkpointing": false,
  "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"},
  "init_std": 0.02,
  "is_encoder_decoder": true,
  "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2},
  "length_penalty": 2.0,
  "max_length": 142,
  "max_position_embeddings": 1024,
  "min_length": 56,
  "model_type": "bart",
  "no_repeat_ngram_size": 3,
  "normalize_before": false,
  "num_beams": 4,
  "num_hidden_layers": 12,
  "output_past": true,
  "pad_token_id": 1,
  "prefix": " ",
  "scale_embedding": false,
  "task_specific_params": {
    "summarization": {"early_stopping": true, "length_penalty": 2.0, "max_length": 142, "min_length": 56,
                      "no_repeat_ngram_size": 3, "num_beams": 4}
  },
  "transformers_version": "4.7.0.dev0",
  "use_cache": true,
  "vocab_size": 50264
})";

const char* const kOpusMtEnDe = R"({
  "_name_or_path": "/tmp/Helsinki-NLP/opus-mt-en-de",
  "activation_dropout": 0.0,
  "activation_function": "swish",
  "add_bias_logits": false,
  "add_final_layer_norm": false,
  "architectures": ["MarianMTModel"],
  "attention_dropout": 0.0,
  "bad_words_ids": [[58100]],
  "bos_token_id": 0,
  "classif_dropout": 0.0,
  "classifier_dropout": 0.0,
  "d_model": 512,
  "decoder_attention_heads": 8,
  "decoder_ffn_dim": 2048,
  "decoder_layerdrop": 0.0,
  "decoder_layers": 6,
  "decoder_start_token_id": 58100,
  "decoder_vocab_size": 58101,
  "dropout": 0.1,
  "encoder_attention_heads": 8,
  "encoder_ffn_dim": 2048,
  "encoder_layerdrop": 0.0,
  "encoder_layers": 6,
  "eos_token_id": 0,
  "extra_pos_embeddings": 58101,
  "forced_eos_token_id": 0,
  "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"},
  "init_std": 0.02,
  "is_encoder_decoder": true,
  "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2},
  "max_length": 512,
  "max_position_embeddings": 512,
  "model_type": "marian",
  "normalize_before": false,
  "normalize_embedding": false,
  "num_beams": 4,
  "num_hidden_layers": 6,
  "pad_token_id": 58100,
  "scale_embedding": true,
  "share_encoder_decoder_embeddings": true,
  "static_position_embeddings": true,
  "transformers_version": "4.22.0.dev0",
  "use_cache": true,
  "vocab_size": 58101
})";

const char* const kNllb200Distilled600M = R"({
  "_name_or_path": "facebook/nllb-200-distilled-600M",
  "activation_dropout": 0.0,
  "activation_function": "relu",
  "architectures": ["M2M100ForConditionalGeneration"],
  "attention_dropout": 0.1,
  "bos_token_id": 0,
  "d_model": 1024,
  "decoder_attention_heads": 16,
  "decoder_ffn_dim": 4096,
  "decoder_layerdrop": 0,
  "decoder_layers": 12,
  "decoder_start_token_id": 2,
  "dropout": 0.1,
  "encoder_attention_heads": 16,
  "encoder_ffn_dim": 4096,
  "encoder_layerdrop": 0,
  "encoder_layers": 12,
  "eos_token_id": 2,
  "init_std": 0.02,
  "is_encoder_decoder": true,
  "max_length": 200,
  "max_position_embeddings": 1024,
  "model_type": "m2m_100",
  "num_hidden_layers": 12,
  "pad_token_id": 1,
  "scale_embedding": true,
  "tokenizer_class": "NllbTokenizer",
  "torch_dtype": "float32",
  "transformers_version": "4.21.0.dev0",
  "use_cache": true,
  "vocab_size": 256206
})";

const char* const kWhisperTiny = R"({
  "_name_or_path": "openai/whisper-tiny",
  "activation_dropout": 0.0,
  "activation_function": "gelu",
  "architectures": ["WhisperForConditionalGeneration"],
  "attention_dropout": 0.0,
  "begin_suppress_tokens": [220, 50257],
  "bos_token_id": 50257,
  "d_model": 384,
  "decoder_attention_heads": 6,
  "decoder_ffn_dim": 1536,
  "decoder_layerdrop": 0.0,
  "decoder_layers": 4,
  "decoder_start_token_id": 50258,
  "dropout": 0.0,
  "encoder_attention_heads": 6,
  "encoder_ffn_dim": 1536,
  "encoder_layerdrop": 0.0,
  "encoder_layers": 4,
  "eos_token_id": 50257,
  "forced_decoder_ids": [[1, 50259], [2, 50359], [3, 50363]],
  "init_std": 0.02,
  "is_encoder_decoder": true,
  "max_length": 448,
  "max_source_positions": 1500,
  "max_target_positions": 448,
  "model_type": "whisper",
  "num_hidden_layers": 4,
  "num_mel_bins": 80,
  "pad_token_id": 50257,
  "scale_embedding": false,
  "suppress_tokens": [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359,
                      503, 522, 542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268,
                      3536, 3846, 3961, 4183, 4667, 6585, 6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033,
                      12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553, 16604, 18362, 18956, 20075, 21675,
                      22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470, 36865, 42863, 47425, 49870,
                      50254, 50258, 50358, 50359, 50360, 50361, 50362],
  "torch_dtype": "float32",
  "transformers_version": "4.27.0.dev0",
  "use_cache": true,
  "vocab_size": 51865
})";

const char* const kWhisperLargeV3 = R"({
  "_name_or_path": "openai/whisper-large-v3",
  "activation_dropout": 0.0,
  "activation_function": "gelu",
  "apply_spec_augment": false,
  "architectures": ["WhisperForConditionalGeneration"],
  "attention_dropout": 0.0,
  "begin_suppress_tokens": [220, 50257],
  "bos_token_id": 50257,
  "classifier_proj_size": 256,
  "d_model": 1280,
  "decoder_attention_heads": 20,
  "decoder_ffn_dim": 5120,
  "decoder_layerdrop": 0.0,
  "decoder_layers": 32,
  "decoder_start_token_id": 50258,
  "dropout": 0.0,
  "encoder_attention_heads": 20,
  "encoder_ffn_dim": 5120,
  "encoder_layerdrop": 0.0,
  "encoder_layers": 32,
  "eos_token_id": 50257,
  "init_std": 0.02,
  "is_encoder_decoder": true,
  "mask_feature_length": 10,
  "mask_feature_min_masks": 0,
  "mask_feature_prob": 0.0,
  "mask_time_length": 10,
  "mask_time_min_masks": 2,
  "mask_time_prob": 0.05,
  "max_length": 448,
  "max_source_positions": 1500,
  "max_target_positions": 448,
  "median_filter_width": 7,
  "model_type": "whisper",
  "num_hidden_layers": 32,
  "num_mel_bins": 128,
  "pad_token_id": 50256,
  "scale_embedding": false,
  "torch_dtype": "float16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "use_weighted_layer_sum": false,
  "vocab_size": 51866
})";

// Whisper's preprocessor_config.json as published (openai/whisper-tiny: feature_size 80,
// openai/whisper-large-v3: 128).
std::string whisper_preprocessor(int feature_size) {
  return R"({"chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": )" +
         std::to_string(feature_size) +
         R"(, "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
            "padding_value": 0.0, "processor_class": "WhisperProcessor", "return_attention_mask": false,
            "sampling_rate": 16000})";
}

// The inputs of a graph by name.
std::set<std::string> input_names(const onnx::ModelProto& m) {
  std::set<std::string> s;
  for (const auto& i : m.graph().input()) s.insert(i.name());
  return s;
}

// A graph's input's dims (a symbolic dim as -1).
std::vector<int64_t> input_dims(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& i : m.graph().input())
    if (i.name() == name) {
      std::vector<int64_t> d;
      for (const auto& dim : i.type().tensor_type().shape().dim()) d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
      return d;
    }
  FAIL("no input " << name);
  return {};
}

// Builds a checkpoint folder holding `config_json` (and `extra` files) without weights for
// `flags`, and checks that it succeeds with both graphs where the runtime looks for them.
// Returns the folder the graphs are in.
fs::path build_both_graphs(const TempDir& t, const std::string& out, const std::string& config_json,
                           const std::string& flags, const std::map<std::string, std::string>& extra = {}) {
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "config.json", config_json);
  for (const auto& [name, text] : extra) write_text(t / "ckpt" / name, text);
  RunResult r = build_cli(t / "ckpt", t / out, "--no-weights " + flags);
  INFO(flags);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const bool tjs = flags.find("transformers.js") != std::string::npos;
  const std::string suffix = tjs && flags.find("f16") != std::string::npos ? "_fp16" : "";
  const fs::path dir = tjs ? t / out / "onnx" : t / out;
  CHECK(fs::exists(dir / ("encoder_model" + suffix + ".onnx")));
  CHECK(fs::exists(dir / ("decoder_model_merged" + suffix + ".onnx")));
  return dir;
}

// Builds a copy of seq2seq case `c` (its config edited, `extra` files written beside it) and
// checks that it fails with each of `reasons` in the message, naming `file`, and writes nothing.
void expect_refused(const std::string& c, const std::function<void(nlohmann::json&)>& edit,
                    const std::vector<std::string>& reasons, const std::string& file = "config.json",
                    const std::map<std::string, std::string>& extra = {}) {
  TempDir t;
  copy_checkpoint(seq2seq_case(c), t / "ckpt", edit);
  for (const auto& [name, text] : extra) write_text(t / "ckpt" / name, text);
  RunResult r = build_cli(t / "ckpt", t / "out", "--runtime transformers.js");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("[config]") != std::string::npos);
  CHECK(r.output.find(file + ": ") != std::string::npos);
  for (const std::string& reason : reasons) CHECK(r.output.find(reason) != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}

}  // namespace

TEST_CASE("seq2seq: the published configs of full-size models build both graphs without weights") {
  struct Full {
    const char* name;
    const char* config;
    int64_t decoder_layers;
  };
  const std::vector<Full> models = {
      {"t5-small", kT5Small, 6},
      {"google/flan-t5-base", kFlanT5Base, 12},
      {"facebook/bart-large-cnn", kBartLargeCnn, 12},
      {"Helsinki-NLP/opus-mt-en-de", kOpusMtEnDe, 6},
      {"facebook/nllb-200-distilled-600M", kNllb200Distilled600M, 12},
      {"openai/whisper-tiny", kWhisperTiny, 4},
      {"openai/whisper-large-v3", kWhisperLargeV3, 32},
  };
  for (const Full& f : models) {
    CAPTURE(f.name);
    const bool whisper = std::string(f.name).find("whisper") != std::string::npos;
    const int64_t mels = nlohmann::json::parse(f.config).value("num_mel_bins", 0);
    std::map<std::string, std::string> extra;
    if (whisper) extra["preprocessor_config.json"] = whisper_preprocessor(static_cast<int>(mels));
    TempDir t;
    const fs::path dir = build_both_graphs(t, "tjs", f.config, "--runtime transformers.js", extra);
    build_both_graphs(t, "tjs16", f.config, "--runtime transformers.js --dtype f16", extra);
    build_both_graphs(t, "ort", f.config, "--runtime onnxruntime", extra);
    // The I/O contract of mobius/sdk/seq2seq.hpp.
    const onnx::ModelProto enc = load_model(dir / "encoder_model.onnx");
    const onnx::ModelProto dec = load_model(dir / "decoder_model_merged.onnx");
    if (whisper) {
      CHECK(input_names(enc) == std::set<std::string>{"input_features"});
      CHECK(input_dims(enc, "input_features")[1] == mels);
    } else {
      CHECK(input_names(enc) == std::set<std::string>{"input_ids", "attention_mask"});
    }
    REQUIRE(enc.graph().output_size() == 1);
    CHECK(enc.graph().output(0).name() == "last_hidden_state");
    const std::set<std::string> in = input_names(dec);
    CHECK(in.count("input_ids"));
    CHECK(in.count("encoder_hidden_states"));
    CHECK(in.count("use_cache_branch"));
    CHECK(in.count("encoder_attention_mask") == (whisper ? 0u : 1u));
    CHECK(in.size() == 3 + (whisper ? 0 : 1) + 4 * static_cast<size_t>(f.decoder_layers));
    const int64_t last = f.decoder_layers - 1;
    for (const char* kind : {"decoder.key", "decoder.value", "encoder.key", "encoder.value"}) {
      CHECK(in.count("past_key_values.0." + std::string(kind)));
      CHECK(in.count("past_key_values." + std::to_string(last) + "." + kind));
    }
    std::set<std::string> out;
    for (const auto& o : dec.graph().output()) out.insert(o.name());
    CHECK(out.count("logits"));
    CHECK(out.count("present." + std::to_string(last) + ".encoder.value"));
    CHECK(out.size() == 1 + 4 * static_cast<size_t>(f.decoder_layers));
  }
}

TEST_CASE("seq2seq: configs that cannot be built are refused naming config.json and the key; nothing is written") {
  struct Bad {
    const char* what;
    const char* model_case;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> reasons;
  };
  auto set = [](const char* key, nlohmann::json v) { return [key, v](nlohmann::json& c) { c[key] = v; }; };
  const std::vector<Bad> cases = {
      // Sizes: zero or negative.
      {"T5 d_model 0", "t5-tiny", set("d_model", 0), {"'d_model' must be positive, got 0"}},
      {"T5 d_model negative", "flan-t5-tiny", set("d_model", -64), {"'d_model' must be positive, got -64"}},
      {"T5 num_layers 0", "t5-tiny", set("num_layers", 0), {"'num_layers' must be positive, got 0"}},
      {"T5 num_decoder_layers negative", "mt5-tiny", set("num_decoder_layers", -2),
       {"'num_decoder_layers' must be positive, got -2"}},
      {"T5 num_heads 0", "umt5-tiny", set("num_heads", 0), {"'num_heads' must be positive, got 0"}},
      {"T5 num_heads negative", "t5-tiny", set("num_heads", -4), {"'num_heads' must be positive, got -4"}},
      {"T5 d_kv 0", "t5-tiny", set("d_kv", 0), {"'d_kv' must be positive, got 0"}},
      {"T5 d_ff 0", "t5-tiny", set("d_ff", 0), {"'d_ff' must be positive, got 0"}},
      {"T5 d_ff negative", "flan-t5-tiny", set("d_ff", -96), {"'d_ff' must be positive, got -96"}},
      {"BART d_model 0", "bart-tiny", set("d_model", 0), {"'d_model' must be positive, got 0"}},
      {"mBART d_model negative", "mbart-tiny", set("d_model", -64), {"'d_model' must be positive, got -64"}},
      {"BART encoder_layers 0", "bart-tiny", set("encoder_layers", 0), {"'encoder_layers' must be positive, got 0"}},
      {"Marian decoder_layers negative", "marian-tiny", set("decoder_layers", -1),
       {"'decoder_layers' must be positive, got -1"}},
      {"Pegasus encoder_attention_heads 0", "pegasus-tiny", set("encoder_attention_heads", 0),
       {"'encoder_attention_heads' must be positive, got 0"}},
      {"M2M-100 decoder_attention_heads negative", "m2m100-tiny", set("decoder_attention_heads", -4),
       {"'decoder_attention_heads' must be positive, got -4"}},
      {"Blenderbot encoder_ffn_dim 0", "blenderbot-tiny", set("encoder_ffn_dim", 0),
       {"'encoder_ffn_dim' must be positive, got 0"}},
      {"BlenderbotSmall decoder_ffn_dim negative", "blenderbot-small-tiny", set("decoder_ffn_dim", -96),
       {"'decoder_ffn_dim' must be positive, got -96"}},
      {"Whisper d_model 0", "whisper-tiny", set("d_model", 0), {"'d_model' must be positive, got 0"}},
      {"Whisper encoder_layers negative", "whisper-tiny", set("encoder_layers", -2),
       {"'encoder_layers' must be positive, got -2"}},
      {"Whisper decoder_attention_heads 0", "whisper-tiny", set("decoder_attention_heads", 0),
       {"'decoder_attention_heads' must be positive, got 0"}},
      {"Whisper num_mel_bins 0", "whisper-tiny", set("num_mel_bins", 0), {"'num_mel_bins' must be positive, got 0"}},
      // Heads that do not divide d_model (T5's head size is d_kv: any head count fits).
      {"BART encoder heads not dividing d_model", "bart-tiny", set("encoder_attention_heads", 5),
       {"'encoder_attention_heads' must divide d_model 64"}},
      {"Marian decoder heads not dividing d_model", "marian-tiny", set("decoder_attention_heads", 3),
       {"'decoder_attention_heads' must divide d_model 64"}},
      {"Whisper encoder heads not dividing d_model", "whisper-tiny", set("encoder_attention_heads", 7),
       {"'encoder_attention_heads' must divide d_model 64"}},
      // Activations.
      {"T5 unknown activation", "t5-tiny", set("feed_forward_proj", "swoosh"),
       {"'feed_forward_proj' has unknown activation 'swoosh'"}},
      {"T5 unknown gated activation", "flan-t5-tiny", set("feed_forward_proj", "gated-swoosh"),
       {"'feed_forward_proj' has unknown activation 'swoosh'"}},
      {"T5 feed_forward_proj of another form", "t5-tiny", set("feed_forward_proj", "gelu-gated"),
       {"'feed_forward_proj' 'gelu-gated' is not '<act>' or 'gated-<act>'"}},
      {"BART unknown activation", "bart-tiny", set("activation_function", "swoosh"),
       {"'activation_function' has unknown activation 'swoosh'"}},
      {"M2M-100 unknown activation", "m2m100-tiny", set("activation_function", "gelu_fancy"),
       {"'activation_function' has unknown activation 'gelu_fancy'"}},
      {"Whisper unknown activation", "whisper-tiny", set("activation_function", "swoosh"),
       {"'activation_function' has unknown activation 'swoosh'"}},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    expect_refused(b.model_case, b.edit, b.reasons);
  }
}

TEST_CASE("seq2seq: layer counts that disagree with the checkpoint are refused naming the key and the tensor") {
  // More layers than the checkpoint holds: the last one the config names is missing.
  expect_refused("bart-tiny", [](auto& c) { c["encoder_layers"] = 4; },
                 {"'encoder_layers' is 4 but the checkpoint has 2 encoder layers "
                  "(no tensor model.encoder.layers.3.self_attn.q_proj.weight)"});
  expect_refused("bart-enc3-dec1", [](auto& c) { c["decoder_layers"] = 2; },
                 {"'decoder_layers' is 2 but the checkpoint has 1 decoder layer "
                  "(no tensor model.decoder.layers.1.self_attn.q_proj.weight)"});
  expect_refused("t5-tiny", [](auto& c) { c["num_layers"] = 3; },
                 {"'num_layers' is 3 but the checkpoint has 2 encoder layers "
                  "(no tensor encoder.block.2.layer.0.SelfAttention.q.weight)"});
  expect_refused("umt5-tiny", [](auto& c) { c["num_decoder_layers"] = 5; },
                 {"'num_decoder_layers' is 5 but the checkpoint has 2 decoder layers "
                  "(no tensor decoder.block.4.layer.0.SelfAttention.q.weight)"});
  expect_refused("whisper-tiny", [](auto& c) { c["decoder_layers"] = 3; },
                 {"'decoder_layers' is 3 but the checkpoint has 2 decoder layers "
                  "(no tensor model.decoder.layers.2.self_attn.q_proj.weight)"});
  // Fewer: the checkpoint holds the layer after the last.
  expect_refused("mbart-tiny", [](auto& c) { c["encoder_layers"] = 1; },
                 {"'encoder_layers' is 1 but the checkpoint has more encoder layers "
                  "(tensor model.encoder.layers.1.self_attn.q_proj.weight)"});
  expect_refused("marian-tiny", [](auto& c) { c["decoder_layers"] = 1; },
                 {"'decoder_layers' is 1 but the checkpoint has more decoder layers "
                  "(tensor model.decoder.layers.1.self_attn.q_proj.weight)"});
  expect_refused("mt5-tiny", [](auto& c) { c["num_decoder_layers"] = 1; },
                 {"'num_decoder_layers' is 1 but the checkpoint has more decoder layers "
                  "(tensor decoder.block.1.layer.0.SelfAttention.q.weight)"});
  expect_refused("whisper-mel128", [](auto& c) { c["encoder_layers"] = 2; },
                 {"'encoder_layers' is 2 but the checkpoint has more encoder layers "
                  "(tensor model.encoder.layers.2.self_attn.q_proj.weight)"});
  // T5 without num_decoder_layers: num_layers counts the decoder's layers too (t5-inner-dim has 3).
  expect_refused("t5-inner-dim", [](auto& c) { c.erase("num_decoder_layers"); },
                 {"'num_layers' is 2 but the checkpoint has more decoder layers "
                  "(tensor decoder.block.2.layer.0.SelfAttention.q.weight)"});
}

TEST_CASE("seq2seq: Whisper's num_mel_bins and preprocessor_config.json are checked against conv1") {
  expect_refused("whisper-tiny", [](auto& c) { c["num_mel_bins"] = 128; },
                 {"'num_mel_bins' is 128 but the checkpoint's conv1 takes 80 input channels "
                  "(tensor model.encoder.conv1.weight, shape [64, 80, 3])"});
  expect_refused("whisper-mel128", [](auto& c) { c["num_mel_bins"] = 80; },
                 {"'num_mel_bins' is 80 but the checkpoint's conv1 takes 128 input channels"});
  const auto pre = [](const std::function<void(nlohmann::json&)>& edit, int mels = 80) {
    nlohmann::json j = nlohmann::json::parse(whisper_preprocessor(mels));
    edit(j);
    return std::map<std::string, std::string>{{"preprocessor_config.json", j.dump()}};
  };
  {
    // As published (the checkpoint's own mel bins): builds, and the file goes beside the model.
    TempDir t;
    copy_checkpoint(seq2seq_case("whisper-mel128"), t / "ckpt");
    write_text(t / "ckpt" / "preprocessor_config.json", whisper_preprocessor(128));
    RunResult r = build_cli(t / "ckpt", t / "out", "--runtime transformers.js");
    INFO(r.output);
    CHECK(r.status == 0);
  }
  // feature_size against num_mel_bins and conv1 (whisper-tiny: 80 of each).
  expect_refused("whisper-tiny", {},
                 {"'feature_size' is 128 but config.json's 'num_mel_bins' is 80 and the checkpoint's conv1 takes 80 "
                  "input channels (tensor model.encoder.conv1.weight)"},
                 "preprocessor_config.json", pre([](auto& j) { j["feature_size"] = 128; }));
  expect_refused("whisper-mel128", {}, {"'feature_size' is 80 but config.json's 'num_mel_bins' is 128"},
                 "preprocessor_config.json", pre([](auto&) {}));
  struct BadValue {
    const char* key;
    nlohmann::json value;
    const char* reason;
  };
  for (const BadValue& b : std::vector<BadValue>{{"n_fft", 0, "'n_fft' must be positive, got 0"},
                                                 {"n_fft", -400, "'n_fft' must be positive, got -400"},
                                                 {"hop_length", 0, "'hop_length' must be positive, got 0"},
                                                 {"hop_length", -160, "'hop_length' must be positive, got -160"},
                                                 {"sampling_rate", 0, "'sampling_rate' must be positive, got 0"},
                                                 {"sampling_rate", -16000, "'sampling_rate' must be positive, got -16000"},
                                                 {"chunk_length", 0, "'chunk_length' must be positive, got 0"},
                                                 {"chunk_length", -30, "'chunk_length' must be positive, got -30"},
                                                 {"chunk_length", "30", "'chunk_length' must be a positive number, got '30'"}}) {
    CAPTURE(b.key);
    CAPTURE(b.value.dump());
    expect_refused("whisper-tiny", {}, {b.reason}, "preprocessor_config.json",
                   pre([&](auto& j) { j[b.key] = b.value; }));
  }
  // Text that is not JSON.
  expect_refused("whisper-tiny", {}, {"preprocessor_config.json"}, "preprocessor_config.json",
                 {{"preprocessor_config.json", "{\"feature_size\": "}});
  // A graph-only build has no conv1: the preprocessor is checked against config.json alone.
  TempDir t;
  fs::create_directories(t / "ckpt");
  write_text(t / "ckpt" / "config.json", kWhisperLargeV3);
  write_text(t / "ckpt" / "preprocessor_config.json", whisper_preprocessor(80));
  RunResult r = build_cli(t / "ckpt", t / "out", "--no-weights --runtime transformers.js");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("preprocessor_config.json: 'feature_size' is 80 but config.json's 'num_mel_bins' is 128") !=
        std::string::npos);
  CHECK(r.output.find("conv1") == std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}
