// test_deberta.cpp - the deberta plugin (DeBERTa, DeBERTa-v2/v3) beyond its golden parity
// (tests/golden-encoders/deberta-base, debertav2-seqcls): v2's log buckets as transformers computes
// them; configs that cannot be built are refused naming the key and writing nothing; a head's
// checkpoint (tensors under "deberta.") and legacy gamma/beta names build the same weights as the
// base checkpoint; the head config.json names is built and --task builds another; full-size
// configs build without weights in well under a second.
#include <doctest/doctest.h>

#include <chrono>

#include "golden_util.hpp"
#include "mobius/sdk/deberta.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path encoder_case(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-encoders" / c;
}

}  // namespace

TEST_CASE("deberta: v2's log buckets are transformers' make_log_bucket_position") {
  struct Row {
    int64_t buckets, max_position, d, bucket;
  };
  // Within bucket_size / 2 a distance is its own bucket; beyond, log-spaced up to max_position.
  const std::vector<Row> rows = {
      {32, 96, 0, 0},     {32, 96, 7, 7},     {32, 96, 16, 16},   {32, 96, 17, 17},   {32, 96, 18, 17},
      {32, 96, 20, 18},   {32, 96, 30, 22},   {32, 96, 95, 31},   {32, 96, 96, 32},   {256, 512, 128, 128},
      {256, 512, 200, 169}, {256, 512, 511, 255}, {256, 512, 512, 256}, {256, 512, 1000, 317},
  };
  for (const Row& r : rows) {
    CAPTURE(r.buckets);
    CAPTURE(r.d);
    CHECK(nn::deberta_log_bucket(r.d, r.buckets, r.max_position) == r.bucket);
    CHECK(nn::deberta_log_bucket(-r.d, r.buckets, r.max_position) == -r.bucket);
  }
}

TEST_CASE("deberta: configs that cannot be built are refused naming the key; nothing is written") {
  struct Bad {
    const char* what;
    const char* model_case;
    std::function<void(nlohmann::json&)> edit;
    const char* reason;
    const char* flags = "";
  };
  const std::vector<Bad> cases = {
      {"a relative term not built", "deberta-base", [](auto& c) { c["pos_att_type"] = {"c2p", "p2p"}; },
       "'pos_att_type' names 'p2p', a relative attention term mobius does not build (known: c2p, p2c)"},
      {"a relative term in the string form", "debertav2-seqcls", [](auto& c) { c["pos_att_type"] = "p2c|C2Q"; },
       "'pos_att_type' names 'c2q'"},
      {"pos_att_type neither a list nor a string", "deberta-base", [](auto& c) { c["pos_att_type"] = 3; },
       "'pos_att_type' must be a list of strings"},
      {"talking heads", "deberta-base", [](auto& c) { c["talking_head"] = true; }, "'talking_head' is true"},
      {"a relative normalization not built", "debertav2-seqcls", [](auto& c) { c["norm_rel_ebd"] = "layer_norm|batch_norm"; },
       "'norm_rel_ebd' names 'batch_norm'"},
      {"one bucket", "debertav2-seqcls", [](auto& c) { c["position_buckets"] = 1; }, "'position_buckets' (1) must be at least 2"},
      {"buckets beyond the relative positions", "debertav2-seqcls", [](auto& c) { c["position_buckets"] = 200; },
       "'position_buckets' (200) needs more than 101 relative positions; the model has 96"},
      {"buckets that never saturate", "debertav2-seqcls",
       [](auto& c) {
         c["position_buckets"] = 5;
         c["max_relative_positions"] = 100000;
       },
       "'position_buckets' (5) with 100000 relative positions gives buckets that keep changing"},
      {"absurd relative positions", "deberta-base", [](auto& c) { c["max_relative_positions"] = int64_t{1} << 40; },
       "'max_relative_positions'"},
      {"a head size that is not hidden_size's", "debertav2-seqcls", [](auto& c) { c["attention_head_size"] = 8; },
       "'attention_head_size' (8) times 'num_attention_heads' (4) must be 'hidden_size' (64)"},
      {"an even convolution", "debertav2-seqcls", [](auto& c) { c["conv_kernel_size"] = 4; }, "'conv_kernel_size' (4) must be odd"},
      {"convolution groups", "debertav2-seqcls",
       [](auto& c) {
         c["conv_kernel_size"] = 3;
         c["conv_groups"] = 3;
       },
       "'conv_groups' (3) must divide 'hidden_size' (64)"},
      {"convolution activation", "debertav2-seqcls",
       [](auto& c) {
         c["conv_kernel_size"] = 3;
         c["conv_act"] = "swoosh";
       },
       "'conv_act' has unknown activation 'swoosh'"},
      {"a pooler of another width", "debertav2-seqcls", [](auto& c) { c["pooler_hidden_size"] = 32; },
       "'pooler_hidden_size' (32) is not 'hidden_size' (64)"},
      {"a pooler activation", "debertav2-seqcls", [](auto& c) { c["pooler_hidden_act"] = "swoosh"; },
       "'pooler_hidden_act' has unknown activation 'swoosh'"},
      {"the masked-LM head on factorized embeddings", "deberta-base",
       [](auto& c) {
         c["legacy"] = false;
         c["embedding_size"] = 32;
       },
       "'embedding_size' (32) is not 'hidden_size' (64): with 'legacy' false", "--task fill-mask"},
      {"unknown activation", "deberta-base", [](auto& c) { c["hidden_act"] = "swoosh"; }, "'hidden_act' has unknown activation 'swoosh'"},
      {"heads do not divide", "debertav2-seqcls", [](auto& c) { c["num_attention_heads"] = 5; },
       "'num_attention_heads' (5) must divide 'hidden_size' (64)"},
      {"labels disagreeing with the classifier", "debertav2-seqcls",
       [](auto& c) { c["id2label"] = {{"0", "a"}, {"1", "b"}, {"2", "c"}, {"3", "d"}}; },
       "4 labels ('id2label' or 'num_labels'), but the checkpoint's classifier.weight has 3 rows"},
      {"a head mobius does not build", "debertav2-seqcls",
       [](auto& c) { c["architectures"] = {"DebertaV2ForQuestionAnswering"}; },
       "'architectures' names 'DebertaV2ForQuestionAnswering', whose head QuestionAnswering mobius does not build for deberta-v2"},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    TempDir t;
    copy_checkpoint(encoder_case(b.model_case), t / "ckpt", b.edit);
    RunResult r = build_cli(t / "ckpt", t / "out", b.flags);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find(b.reason) != std::string::npos);
    CHECK(r.output.find("config.json") != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }
}

TEST_CASE("deberta: a head's checkpoint and legacy gamma/beta names build the base checkpoint's weights") {
  TempDir t;
  copy_checkpoint(encoder_case("deberta-base"), t / "head", {}, [](StTensor& s) {
    s.name = "deberta." + s.name;
    return true;
  });
  copy_checkpoint(encoder_case("deberta-base"), t / "legacy", {}, [](StTensor& s) {
    for (const auto& [now, then] : {std::pair<std::string, std::string>{"LayerNorm.weight", "LayerNorm.gamma"},
                                    {"LayerNorm.bias", "LayerNorm.beta"}})
      if (size_t at = s.name.find(now); at != std::string::npos) s.name.replace(at, now.size(), then);
    return true;
  });
  RunResult a = build_cli(encoder_case("deberta-base"), t / "a", "--runtime onnxruntime");
  RunResult b = build_cli(t / "head", t / "b", "--runtime onnxruntime");
  RunResult c = build_cli(t / "legacy", t / "c", "--runtime onnxruntime");
  INFO(a.output);
  INFO(b.output);
  INFO(c.output);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  REQUIRE(c.status == 0);
  CHECK(read_text(t / "a" / "model.onnx.data") == read_text(t / "b" / "model.onnx.data"));
  CHECK(read_text(t / "a" / "model.onnx.data") == read_text(t / "c" / "model.onnx.data"));
}

TEST_CASE("deberta: the head config.json names is built; --task chooses another; list shows both types") {
  TempDir t;
  RunResult h = build_cli(encoder_case("debertav2-seqcls"), t / "head", "--runtime onnxruntime");
  RunResult b = build_cli(encoder_case("debertav2-seqcls"), t / "base", "--runtime onnxruntime --task feature-extraction");
  INFO(h.output);
  INFO(b.output);
  REQUIRE(h.status == 0);
  REQUIRE(b.status == 0);
  const std::string head = read_text(t / "head" / "model.onnx"), base = read_text(t / "base" / "model.onnx");
  CHECK(head.find("logits") != std::string::npos);
  CHECK(head.find("last_hidden_state") == std::string::npos);
  CHECK(base.find("last_hidden_state") != std::string::npos);
  CHECK(base.find("logits") == std::string::npos);
  // A head built from a base model's checkpoint: the head's tensors are missing, by name.
  RunResult missing = build_cli(encoder_case("deberta-base"), t / "missing", "--task token-classification");
  INFO(missing.output);
  CHECK(missing.status != 0);
  CHECK(missing.output.find("classifier.weight") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "missing"));
  RunResult list = run(quote(env_or_empty("MOBIUS_CLI")) + " list --json");
  REQUIRE(list.status == 0);
  const nlohmann::json types = nlohmann::json::parse(list.output);
  int found = 0;
  for (const auto& e : types)
    if (e["model_type"] == "deberta" || e["model_type"] == "deberta-v2") {
      ++found;
      CHECK(e["tasks"] == nlohmann::json({"feature-extraction", "sequence-classification", "token-classification", "fill-mask"}));
      CHECK(e["default_runtime"] == "transformers.js");
    }
  CHECK(found == 2);
}

TEST_CASE("deberta: full-size configs build without weights, each in well under a second") {
  // deberta-v3-base; deberta-base (v1, its pos_att_type as a string); deberta-v2-xlarge's MNLI
  // classifier (convolution after layer 0); mdeberta-v3-base's masked LM (legacy head).
  const nlohmann::json v3 = {{"model_type", "deberta-v2"}, {"architectures", {"DebertaV2Model"}}, {"hidden_size", 768},
                             {"num_hidden_layers", 12}, {"num_attention_heads", 12}, {"intermediate_size", 3072},
                             {"vocab_size", 128100}, {"max_position_embeddings", 512}, {"position_buckets", 256},
                             {"relative_attention", true}, {"pos_att_type", {"p2c", "c2p"}}, {"norm_rel_ebd", "layer_norm"},
                             {"share_att_key", true}, {"position_biased_input", false}, {"type_vocab_size", 0},
                             {"max_relative_positions", -1}, {"layer_norm_eps", 1e-7}};
  nlohmann::json xlarge = v3;
  xlarge.update({{"architectures", {"DebertaV2ForSequenceClassification"}}, {"hidden_size", 1536}, {"num_hidden_layers", 24},
                 {"num_attention_heads", 24}, {"intermediate_size", 6144}, {"pos_att_type", "p2c|c2p"},
                 {"conv_kernel_size", 3}, {"conv_act", "gelu"}, {"pooler_hidden_size", 1536}, {"num_labels", 3}});
  nlohmann::json mdeberta = v3;
  mdeberta.update({{"architectures", {"DebertaV2ForMaskedLM"}}, {"vocab_size", 251000}});
  const std::vector<std::pair<std::string, nlohmann::json>> configs = {
      {"deberta-v3-base", v3},
      {"deberta-base", {{"model_type", "deberta"}, {"architectures", {"DebertaModel"}}, {"hidden_size", 768},
                        {"num_hidden_layers", 12}, {"num_attention_heads", 12}, {"intermediate_size", 3072},
                        {"vocab_size", 50265}, {"max_position_embeddings", 512}, {"relative_attention", true},
                        {"pos_att_type", "c2p|p2c"}, {"position_biased_input", false}, {"type_vocab_size", 0},
                        {"max_relative_positions", -1}, {"layer_norm_eps", 1e-7}}},
      {"deberta-v2-xlarge-mnli", xlarge},
      {"mdeberta-v3-base", mdeberta},
  };
  for (const auto& [name, cfg] : configs) {
    CAPTURE(name);
    TempDir t;
    double secs = 0;
    onnx::ModelProto m = build_config_only(t, cfg.dump(), "--runtime onnxruntime", &secs);
    CHECK(secs < 1.0);
    MESSAGE(name << ": " << secs << " s");
    REQUIRE(m.graph().output_size() == 1);
    const auto& dims = m.graph().output(0).type().tensor_type().shape().dim();
    CHECK(dims[0].dim_param() == "batch_size");
  }
}
