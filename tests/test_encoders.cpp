// test_encoders.cpp - the bert plugin's families (BERT, RoBERTa, XLM-RoBERTa, CamemBERT,
// Data2VecText, DistilBERT) beyond their golden parity (tests/parity, tests/golden-encoders): configs that
// cannot be built are refused naming the key and writing nothing; the head config.json names is
// built and --task builds another (a head's checkpoint, tensors under "bert." / "roberta.", builds
// the base model); full-size configs build without weights; GenAI refuses an encoder with the
// reason.
#include <doctest/doctest.h>

#include <chrono>

#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

fs::path encoder_case(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-encoders" / c;
}

}  // namespace

TEST_CASE("encoders: configs that cannot be built are refused naming the key; nothing is written") {
  struct Bad {
    const char* what;
    const char* model_case;
    std::function<void(nlohmann::json&)> edit;
    const char* reason;
  };
  const std::vector<Bad> cases = {
      {"relative positions", "bert-base", [](auto& c) { c["position_embedding_type"] = "relative_key"; },
       "'position_embedding_type' is 'relative_key'"},
      {"unknown activation", "bert-base", [](auto& c) { c["hidden_act"] = "swoosh"; }, "'hidden_act' has unknown activation 'swoosh'"},
      {"heads do not divide", "bert-base", [](auto& c) { c["num_attention_heads"] = 5; }, "'num_attention_heads' (5) must divide 'hidden_size' (64)"},
      {"padding index past the table", "roberta-base", [](auto& c) { c["pad_token_id"] = 96; },
       "'pad_token_id' (96) leaves no position in the 96 of 'max_position_embeddings'"},
      {"DistilBERT's own keys", "distilbert-base", [](auto& c) { c["n_heads"] = 5; },
       "'n_heads' (5) must divide 'dim' (64)"},
      {"DistilBERT's activation key", "distilbert-base", [](auto& c) { c["activation"] = "swoosh"; },
       "'activation' has unknown activation 'swoosh'"},
      {"a head mobius does not build", "bert-base", [](auto& c) { c["architectures"] = {"BertForQuestionAnswering"}; },
       "'architectures' names 'BertForQuestionAnswering', whose head QuestionAnswering mobius does not build for bert "
       "(it builds feature-extraction, sequence-classification, token-classification, fill-mask); --task "
       "feature-extraction builds its base model"},
      {"a decoder head", "bert-base", [](auto& c) { c["architectures"] = {"BertLMHeadModel"}; },
       "'architectures' names 'BertLMHeadModel', whose task text-generation mobius does not build for bert"},
      {"labels disagreeing with the classifier", "bert-seqcls",
       [](auto& c) { c["id2label"] = {{"0", "a"}, {"1", "b"}, {"2", "c"}, {"3", "d"}}; },
       "4 labels ('id2label' or 'num_labels'), but the checkpoint's classifier.weight has 3 rows"},
      {"num_labels disagreeing with id2label", "bert-tokcls", [](auto& c) { c["num_labels"] = 7; },
       "'num_labels' (7) disagrees with the 5 labels of 'id2label'"},
      {"no labels", "bert-tokcls",
       [](auto& c) {
         c.erase("id2label");
         c.erase("label2id");
         c["num_labels"] = 0;
       },
       "'num_labels'"},
      {"absurd size", "bert-base", [](auto& c) { c["hidden_size"] = int64_t{1} << 40; }, "'hidden_size'"},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    TempDir t;
    copy_checkpoint(encoder_case(b.model_case), t / "ckpt", b.edit);
    RunResult r = build_cli(t / "ckpt", t / "out");
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find(b.reason) != std::string::npos);
    CHECK(r.output.find("config.json") != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }
}

TEST_CASE("encoders: a head's checkpoint (tensors under the family's prefix) builds the base model") {
  TempDir t;
  copy_checkpoint(encoder_case("roberta-base"), t / "ckpt", {}, [](StTensor& s) {
    s.name = "roberta." + s.name;
    return true;
  });
  RunResult a = build_cli(encoder_case("roberta-base"), t / "base", "--runtime onnxruntime");
  RunResult b = build_cli(t / "ckpt", t / "head", "--runtime onnxruntime");
  INFO(a.output);
  INFO(b.output);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(read_text(t / "base" / "model.onnx.data") == read_text(t / "head" / "model.onnx.data"));
}

TEST_CASE("encoders: the head config.json names is built; --task chooses another; list shows the tasks") {
  TempDir t;
  // BertForSequenceClassification: logits by default; its base model (with its pooler) by --task.
  RunResult h = build_cli(encoder_case("bert-seqcls"), t / "head", "--runtime onnxruntime");
  RunResult b = build_cli(encoder_case("bert-seqcls"), t / "base", "--runtime onnxruntime --task feature-extraction");
  INFO(h.output);
  INFO(b.output);
  REQUIRE(h.status == 0);
  REQUIRE(b.status == 0);
  const std::string head = read_text(t / "head" / "model.onnx"), base = read_text(t / "base" / "model.onnx");
  CHECK(head.find("logits") != std::string::npos);
  CHECK(head.find("last_hidden_state") == std::string::npos);
  CHECK(base.find("last_hidden_state") != std::string::npos);
  CHECK(base.find("pooler_output") != std::string::npos);
  CHECK(base.find("logits") == std::string::npos);
  // A token classifier's checkpoint has no pooler: its base model has none either.
  RunResult tok = build_cli(encoder_case("bert-tokcls"), t / "tok", "--runtime onnxruntime --task feature-extraction");
  INFO(tok.output);
  REQUIRE(tok.status == 0);
  CHECK(read_text(t / "tok" / "model.onnx").find("pooler_output") == std::string::npos);
  // A task the type does not build: refused before anything is written.
  RunResult bad = build_cli(encoder_case("bert-base"), t / "bad", "--task text-generation");
  INFO(bad.output);
  CHECK(bad.status != 0);
  CHECK(bad.output.find("--task 'text-generation': bert builds the tasks feature-extraction, sequence-classification, "
                        "token-classification, fill-mask") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "bad"));
  // A head built from a base model's checkpoint: the head's tensors are missing, by name.
  RunResult missing = build_cli(encoder_case("bert-base"), t / "missing", "--task token-classification");
  INFO(missing.output);
  CHECK(missing.status != 0);
  CHECK(missing.output.find("classifier.weight") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "missing"));
  RunResult list = run(quote(env_or_empty("MOBIUS_CLI")) + " list --json");
  REQUIRE(list.status == 0);
  const nlohmann::json types = nlohmann::json::parse(list.output);
  bool found = false;
  for (const auto& e : types)
    if (e["model_type"] == "roberta") {
      found = true;
      CHECK(e["tasks"] == nlohmann::json({"feature-extraction", "sequence-classification", "token-classification", "fill-mask"}));
      CHECK(e["default_runtime"] == "transformers.js");
    }
  CHECK(found);
}

namespace {

// A copy of the st-bert-mean-norm case (a sentence-transformers folder: modules.json, 1_Pooling,
// 2_Normalize) in `dir`, its files then edited by the caller.
void copy_sentence_folder(const fs::path& dir) {
  const fs::path src = encoder_case("st-bert-mean-norm");
  copy_checkpoint(src, dir);
  for (const char* f : {"modules.json", "1_Pooling/config.json", "2_Normalize/config.json"}) {
    fs::create_directories((dir / f).parent_path());
    write_text(dir / f, read_text(src / f));
  }
}

const char* const kPoolingOnly = R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])";

}  // namespace

TEST_CASE("encoders: a sentence-transformers folder's pooling modes and normalization give sentence_embedding") {
  // Each pooling mode (both config formats), checked against the pooling sentence-transformers
  // computes from the same run's last_hidden_state (tests/parity/sentence_pooling.mjs).
  struct Mode {
    const char* modes;
    const char* config;
    bool normalize;
  };
  const std::vector<Mode> modes = {
      {"cls", R"({"embedding_dimension": 64, "pooling_mode": "cls"})", false},
      {"max", R"({"embedding_dimension": 64, "pooling_mode": "max"})", true},
      {"mean_sqrt_len_tokens", R"({"embedding_dimension": 64, "pooling_mode": "mean_sqrt_len_tokens"})", false},
      {"weightedmean", R"({"embedding_dimension": 64, "pooling_mode": "weightedmean"})", false},
      {"lasttoken", R"({"embedding_dimension": 64, "pooling_mode": "lasttoken"})", true},
      {"cls,max,mean",
       R"({"word_embedding_dimension": 64, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true,
           "pooling_mode_max_tokens": true, "pooling_mode_mean_sqrt_len_tokens": false, "include_prompt": true})",
       true},
  };
  for (const Mode& m : modes) {
    CAPTURE(m.modes);
    TempDir t;
    copy_sentence_folder(t / "ckpt");
    write_text(t / "ckpt" / "1_Pooling" / "config.json", m.config);
    if (!m.normalize) write_text(t / "ckpt" / "modules.json", kPoolingOnly);
    RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(b.output);
    REQUIRE(b.status == 0);
    RunResult p = run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node tests/parity/sentence_pooling.mjs " +
                      quote((t / "out").string()) + " " + quote(encoder_case("st-bert-mean-norm").string()) + " " +
                      m.modes + (m.normalize ? " normalize" : ""));
    INFO(p.output);
    CHECK(p.status == 0);
    CHECK(p.output.find("PASS") != std::string::npos);
  }
}

TEST_CASE("encoders: a sentence-transformers folder that cannot be built is refused naming the file and why") {
  struct Bad {
    const char* what;
    std::function<void(const fs::path&)> edit;
    const char* reason;
  };
  const auto modules = [](const std::string& second) {
    return R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}, )" + second + "]";
  };
  const std::vector<Bad> cases = {
      {"modules.json not JSON", [](const fs::path& d) { write_text(d / "modules.json", "[{"); }, "modules.json"},
      {"modules.json not a list", [](const fs::path& d) { write_text(d / "modules.json", R"({"0": "x"})"); },
       "modules.json: must be a list of 1 to 32 modules"},
      {"an absolute path",
       [&](const fs::path& d) {
         write_text(d / "modules.json", modules(R"({"idx": 1, "path": "/etc", "type": "sentence_transformers.models.Pooling"})"));
       },
       "modules.json: module 1: 'path' is '/etc', not one folder inside the checkpoint folder"},
      {"a path with ..",
       [&](const fs::path& d) {
         write_text(d / "modules.json", modules(R"({"idx": 1, "path": "../1_Pooling", "type": "sentence_transformers.models.Pooling"})"));
       },
       "'path' is '../1_Pooling', not one folder inside the checkpoint folder"},
      {"a module folder linking out of the checkpoint",
       [](const fs::path& d) {
         fs::create_directories(d.parent_path() / "elsewhere");
         write_text(d.parent_path() / "elsewhere" / "config.json", R"({"embedding_dimension": 64, "pooling_mode": "mean"})");
         fs::remove_all(d / "1_Pooling");
         fs::create_directory_symlink(d.parent_path() / "elsewhere", d / "1_Pooling");
       },
       "1_Pooling/config.json"},
      {"a module type of its own code",
       [&](const fs::path& d) {
         write_text(d / "modules.json", modules(R"({"idx": 1, "path": "1_Pooling", "type": "my_package.CustomPooling"})"));
       },
       "modules.json: module 1: 'type' is 'my_package.CustomPooling', a module mobius does not build"},
      {"a Dense module without weights",
       [&](const fs::path& d) {
         fs::create_directories(d / "2_Dense");
         write_text(d / "2_Dense" / "config.json", R"({"in_features": 64, "out_features": 32, "bias": true})");
         write_text(d / "modules.json",
                    modules(R"({"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                               {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"})"));
       },
       "2_Dense: has no weights for its Dense layer"},
      {"Dense weights of another shape than its config's",
       [](const fs::path& d) {
         const fs::path dense = encoder_case("st-bert-dense") / "2_Dense";
         fs::create_directories(d / "2_Dense");
         write_text(d / "2_Dense" / "model.safetensors", read_text(dense / "model.safetensors"));
         write_text(d / "2_Dense" / "config.json", R"({"in_features": 64, "out_features": 16, "bias": true})");
         write_text(d / "modules.json",
                    R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                        {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])");
       },
       "2_Dense/model.safetensors: linear.weight is [32, 64], not [16, 64] as config.json's in_features and "
       "out_features say"},
      {"a Dense activation of its own code",
       [](const fs::path& d) {
         fs::create_directories(d / "2_Dense");
         write_text(d / "2_Dense" / "config.json",
                    R"({"in_features": 64, "out_features": 32, "activation_function": "my_package.Swish"})");
         write_text(d / "modules.json",
                    R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                        {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])");
       },
       "'activation_function' is 'my_package.Swish', which mobius does not build"},
      {"a pooling size that is not the model's",
       [](const fs::path& d) { write_text(d / "1_Pooling" / "config.json", R"({"embedding_dimension": 32, "pooling_mode": "mean"})"); },
       "1_Pooling/config.json: 'embedding_dimension' (32) is not the transformer's hidden size (64)"},
      {"an unknown pooling mode",
       [](const fs::path& d) { write_text(d / "1_Pooling" / "config.json", R"({"embedding_dimension": 64, "pooling_mode": "median"})"); },
       "'pooling_mode' names 'median', which is not a pooling mode"},
      {"no pooling mode",
       [](const fs::path& d) {
         write_text(d / "1_Pooling" / "config.json", R"({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": false})");
       },
       "1_Pooling/config.json: turns on no pooling mode"},
      {"a missing pooling config", [](const fs::path& d) { fs::remove(d / "1_Pooling" / "config.json"); },
       "1_Pooling/config.json: is missing"},
      {"the transformer not first",
       [](const fs::path& d) {
         write_text(d / "modules.json", R"([{"idx": 0, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
       },
       "the first module must be sentence_transformers' Transformer"},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    TempDir t;
    copy_sentence_folder(t / "ckpt");
    b.edit(t / "ckpt");
    RunResult r = build_cli(t / "ckpt", t / "out");
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find(b.reason) != std::string::npos);
    CHECK(r.output.find("terminate") == std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }
}

TEST_CASE("encoders: GenAI refuses an encoder with the reason; the default is the transformers.js layout") {
  TempDir t;
  RunResult g = build_cli(encoder_case("bert-base"), t / "genai", "--runtime ort-genai");
  INFO(g.output);
  CHECK(g.status != 0);
  CHECK(g.output.find("bert is a text encoder (task feature-extraction), which ONNX Runtime GenAI does not run") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(t / "genai"));
  RunResult d = build_cli(encoder_case("bert-base"), t / "default");
  INFO(d.output);
  REQUIRE(d.status == 0);
  CHECK(fs::exists(t / "default" / "onnx" / "model.onnx"));
  CHECK(nlohmann::json::parse(read_text(t / "default" / "config.json"))["transformers.js_config"]["dtype"] == "fp32");
}

TEST_CASE("encoders: full-size configs build without weights, each in well under a second") {
  // The sizes of bert-base-uncased, all-MiniLM-L6-v2, xlm-roberta-large (its masked-LM head),
  // ModernBERT-base and mobilebert-uncased.
  const std::vector<std::pair<std::string, nlohmann::json>> configs = {
      {"bert-base-uncased", {{"model_type", "bert"}, {"architectures", {"BertModel"}}, {"hidden_size", 768},
                             {"num_hidden_layers", 12}, {"num_attention_heads", 12}, {"intermediate_size", 3072},
                             {"max_position_embeddings", 512}, {"type_vocab_size", 2}, {"vocab_size", 30522}}},
      {"all-MiniLM-L6-v2", {{"model_type", "bert"}, {"architectures", {"BertModel"}}, {"hidden_size", 384},
                            {"num_hidden_layers", 6}, {"num_attention_heads", 12}, {"intermediate_size", 1536},
                            {"max_position_embeddings", 512}, {"type_vocab_size", 2}, {"vocab_size", 30522}}},
      {"xlm-roberta-large", {{"model_type", "xlm-roberta"}, {"architectures", {"XLMRobertaForMaskedLM"}},
                             {"hidden_size", 1024}, {"num_hidden_layers", 24}, {"num_attention_heads", 16},
                             {"intermediate_size", 4096}, {"max_position_embeddings", 514}, {"type_vocab_size", 1},
                             {"vocab_size", 250002}, {"pad_token_id", 1}, {"layer_norm_eps", 1e-5}}},
      {"ModernBERT-base", {{"model_type", "modernbert"}, {"architectures", {"ModernBertForMaskedLM"}},
                           {"hidden_size", 768}, {"num_hidden_layers", 22}, {"num_attention_heads", 12},
                           {"intermediate_size", 1152}, {"max_position_embeddings", 8192}, {"vocab_size", 50368},
                           {"global_attn_every_n_layers", 3}, {"local_attention", 128}, {"global_rope_theta", 160000.0},
                           {"local_rope_theta", 10000.0}, {"pad_token_id", 50283}}},
      {"mobilebert-uncased", {{"model_type", "mobilebert"}, {"architectures", {"MobileBertModel"}},
                              {"hidden_size", 512}, {"embedding_size", 128}, {"num_hidden_layers", 24},
                              {"num_attention_heads", 4}, {"intermediate_size", 512}, {"intra_bottleneck_size", 128},
                              {"vocab_size", 30522}}},
  };
  for (const auto& [name, cfg] : configs) {
    CAPTURE(name);
    TempDir t;
    fs::create_directories(t / "ckpt");
    write_text(t / "ckpt" / "config.json", cfg.dump());
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = build_cli(t / "ckpt", t / "out", "--no-weights");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.output);
    CHECK(r.status == 0);
    MESSAGE(name << ": " << s << " s");
  }
}

TEST_CASE("encoders: a BERT family under other tensor names and config keys is one spec row") {
  // tests/plugins_tasks: renamed_bert, nn::EncoderSpec with every tensor renamed and two keys
  // respelled. bert-base's checkpoint under those names gives bert-base's reference outputs.
  const fs::path dir = env_or_empty("MOBIUS_TEST_TASKS_DIR");
  REQUIRE_FALSE(dir.empty());
  const std::vector<std::pair<std::string, std::string>> renames = {
      {"embeddings.word_embeddings", "emb.tokens"}, {"embeddings.position_embeddings", "emb.positions"},
      {"embeddings.token_type_embeddings", "emb.segments"}, {"embeddings.LayerNorm", "emb.norm"},
      {"encoder.layer.", "blocks."}, {"attention.self.query", "attn.q"}, {"attention.self.key", "attn.k"},
      {"attention.self.value", "attn.v"}, {"attention.output.dense", "attn.o"},
      {"attention.output.LayerNorm", "norm1"}, {"intermediate.dense", "mlp.up"}, {"output.dense", "mlp.down"},
      {"output.LayerNorm", "norm2"}, {"pooler.dense", "pool"}};
  TempDir t;
  copy_checkpoint(
      encoder_case("bert-base"), t / "ckpt",
      [](nlohmann::json& c) {
        c["model_type"] = "renamed_bert";
        c["width"] = c["hidden_size"];
        c["depth"] = c["num_hidden_layers"];
        c.erase("hidden_size");
        c.erase("num_hidden_layers");
      },
      [&](StTensor& s) {
        for (const auto& [from, to] : renames)
          if (size_t at = s.name.find(from); at != std::string::npos) s.name.replace(at, from.size(), to);
        return true;
      });
  RunResult b = run(quote(env_or_empty("MOBIUS_CLI")) + " build -q --runtime onnxruntime --plugin-path " + quote(dir.string()) +
                    " --model " + quote((t / "ckpt").string()) + " " + quote((t / "out").string()));
  INFO(b.output);
  REQUIRE(b.status == 0);
  RunResult p = run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node tests/parity/component_parity.mjs --model " +
                    quote((t / "out").string()) + " --case " + quote(encoder_case("bert-base").string()) + " --graph encode");
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(p.output.find("component parity: 2 passed, 0 failed") != std::string::npos);
}
