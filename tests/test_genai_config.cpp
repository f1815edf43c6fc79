// test_genai_config.cpp - genai_config.json's rules (sdk/src/genai_config.cpp): GenAI's model type
// names, token ids as GenAI's parser reads them, the search section from generation_config.json,
// the hybrid cache of Qwen3.5, and refusals with a reason.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../sdk/src/genai_config.hpp"
#include "mobius/sdk/error.hpp"

using mobius::detail::GenaiFacts;
using mobius::detail::genai_model_type;
using mobius::detail::make_genai_config;
using json = nlohmann::json;

namespace {

GenaiFacts llama_facts(int64_t layers = 2) {
  GenaiFacts f;
  f.model_type = "llama";
  f.architectures = {"LlamaForCausalLM"};
  f.head_size = 16;
  f.hidden_size = 64;
  f.num_attention_heads = 4;
  f.num_key_value_heads = 2;
  f.num_hidden_layers = layers;
  f.vocab_size = 128256;
  f.context_length = 8192;
  f.cache_kinds.assign(static_cast<size_t>(layers), {"key", "value"});
  f.config = {{"model_type", "llama"}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  f.generation_config = nullptr;
  return f;
}

// Message and kind of the mobius::Error make_genai_config throws ("" when it does not throw).
std::pair<std::string, mobius_error_kind> failure(const GenaiFacts& f) {
  try {
    make_genai_config(f);
  } catch (const mobius::sdk::Error& e) {
    return {e.what(), e.kind()};
  }
  return {"", 0};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("genai config: llama-3-instruct eos list without pad gives a scalar pad, the first eos") {
  GenaiFacts f = llama_facts();
  f.config = {{"model_type", "llama"}, {"bos_token_id", 128000}, {"eos_token_id", {128001, 128008, 128009}}};
  json g = make_genai_config(f);
  CHECK(g["model"]["type"] == "llama");
  CHECK(g["model"]["bos_token_id"] == 128000);
  CHECK(g["model"]["eos_token_id"] == json({128001, 128008, 128009}));
  REQUIRE(g["model"]["pad_token_id"].is_number_integer());
  CHECK(g["model"]["pad_token_id"] == 128001);
  // A config pad wins over the eos; a scalar eos stays scalar.
  f.config = {{"bos_token_id", 1}, {"eos_token_id", 2}, {"pad_token_id", 0}};
  g = make_genai_config(f);
  CHECK(g["model"]["eos_token_id"] == 2);
  CHECK(g["model"]["pad_token_id"] == 0);
}

TEST_CASE("genai config: the decoder section as GenAI's parser reads it") {
  json g = make_genai_config(llama_facts());
  const json& d = g["model"]["decoder"];
  CHECK(d["filename"] == "model.onnx");
  CHECK(d["head_size"] == 16);
  CHECK(d["num_key_value_heads"] == 2);
  CHECK(d["num_hidden_layers"] == 2);
  CHECK(d["inputs"] == json({{"input_ids", "input_ids"},
                             {"attention_mask", "attention_mask"},
                             {"position_ids", "position_ids"},
                             {"past_key_names", "past_key_values.%d.key"},
                             {"past_value_names", "past_key_values.%d.value"}}));
  CHECK(d["outputs"] == json({{"logits", "logits"},
                              {"present_key_names", "present.%d.key"},
                              {"present_value_names", "present.%d.value"}}));
  CHECK(g["model"]["context_length"] == 8192);
  CHECK(g["model"]["vocab_size"] == 128256);
  // Ints where GenAI reads ints (SafeDoubleToInt), floats where it reads floats.
  for (const char* k : {"head_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers"})
    CHECK_MESSAGE(d[k].is_number_integer(), k);
  for (const char* k : {"max_length", "min_length", "num_beams", "num_return_sequences", "top_k", "no_repeat_ngram_size"})
    CHECK_MESSAGE(g["search"][k].is_number_integer(), k);
  for (const char* k : {"temperature", "top_p", "repetition_penalty", "length_penalty", "diversity_penalty"})
    CHECK_MESSAGE(g["search"][k].is_number_float(), k);
  // An input the graph does not have is not named.
  GenaiFacts f = llama_facts();
  f.position_ids.clear();
  CHECK_FALSE(make_genai_config(f)["model"]["decoder"]["inputs"].contains("position_ids"));
}

TEST_CASE("genai config: GenAI's model type names") {
  CHECK(genai_model_type("olmo2", {"Olmo2ForCausalLM"}) == "olmo");
  CHECK(genai_model_type("olmo", {"OlmoForCausalLM"}) == "olmo");
  CHECK(genai_model_type("olmo3", {}) == "olmo");
  for (const char* t : {"llama", "mistral", "qwen2", "qwen3", "granite", "gemma", "gemma2", "gemma3_text", "phi3"})
    CHECK_MESSAGE(genai_model_type(t, {}) == t, t);
  CHECK(genai_model_type("qwen3_5_text", {"Qwen3_5ForCausalLM"}) == "qwen3_5_text");
  CHECK(genai_model_type("qwen3_5", {"Qwen3_5ForConditionalGeneration"}) == "qwen3_5_text");
  CHECK(genai_model_type("gpt_oss", {"GptOssForCausalLM"}) == "gptoss");
  CHECK(genai_model_type("mixtral", {"MixtralForCausalLM"}) == "decoder");
  CHECK(genai_model_type("qwen3_moe", {"Qwen3MoeForCausalLM"}) == "decoder");
  CHECK(genai_model_type("deepseek_v2", {}) == std::nullopt);
  CHECK(genai_model_type("deepseek_v3", {"DeepseekV3ForCausalLM"}) == std::nullopt);
  // Unknown to the table: what the builder writes when GenAI runs it, else the generic decoder.
  CHECK(genai_model_type("smollm3", {}) == "smollm3");
  CHECK(genai_model_type("phi3small_custom", {"Phi3SmallForCausalLM"}) == "phi3small");
  CHECK(genai_model_type("starcoder2", {"Starcoder2ForCausalLM"}) == "decoder");
  CHECK(genai_model_type("whatever", {}) == "decoder");
  // Types with runners of their own: LFM2's, whose cache layout a mobius lfm2 graph has; GPT-2's,
  // whose a mobius graph does not.
  CHECK(genai_model_type("lfm2", {"Lfm2ForCausalLM"}) == "lfm2");
  CHECK(genai_model_type("gpt2", {"GPT2LMHeadModel"}) == "decoder");

  GenaiFacts f = llama_facts();
  f.model_type = "olmo2";
  f.architectures = {"Olmo2ForCausalLM"};
  CHECK(make_genai_config(f)["model"]["type"] == "olmo");
}

TEST_CASE("genai config: deepseek_v3 and a latent cache are refused with the reason") {
  GenaiFacts f = llama_facts();
  f.model_type = "deepseek_v3";
  f.architectures = {"DeepseekV3ForCausalLM"};
  f.cache_kinds.assign(2, {"latent"});
  auto [msg, kind] = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "deepseek_v3"));
  CHECK(contains(msg, "cannot run in onnxruntime-genai"));
  CHECK(contains(msg, "latent cache"));
  // The cache alone, whatever the type says.
  f.model_type = "my_mla_model";
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "layer 0 keeps a Multi-head Latent Attention latent cache (past_key_values.0.latent)"));
  // A layer with half a key/value pair is no cache GenAI knows.
  f = llama_facts();
  f.cache_kinds[1] = {"key"};
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "layer 1's cache (past_key_values.1.key)"));
}

TEST_CASE("genai config: search from generation_config.json, top_k 50 when sampling and unset") {
  GenaiFacts f = llama_facts();
  // No generation_config.json: greedy, and top_k is transformers' (and GenAI's) default, never 1.
  json s = make_genai_config(f)["search"];
  CHECK(s["do_sample"] == false);
  CHECK(s["top_k"] == 50);
  CHECK(s["temperature"] == 1.0);
  CHECK(s["top_p"] == 1.0);
  CHECK(s["max_length"] == 8192);
  CHECK(s["num_beams"] == 1);
  CHECK(s["past_present_share_buffer"] == false);

  f.generation_config = {{"do_sample", true}, {"temperature", 0.6}, {"top_p", 0.9}};
  s = make_genai_config(f)["search"];
  CHECK(s["do_sample"] == true);
  CHECK(s["temperature"].get<double>() == doctest::Approx(0.6));
  CHECK(s["top_p"].get<double>() == doctest::Approx(0.9));
  CHECK(s["top_k"] == 50);

  f.generation_config = {{"do_sample", true}, {"top_k", 20}, {"repetition_penalty", 1.05}, {"max_length", 4096}};
  s = make_genai_config(f)["search"];
  CHECK(s["top_k"] == 20);
  CHECK(s["repetition_penalty"].get<double>() == doctest::Approx(1.05));
  CHECK(s["max_length"] == 4096);
  // GenAI rejects max_length > context_length and, when sampling, top_k > vocab_size.
  f.generation_config = {{"do_sample", true}, {"max_length", 1000000}};
  f.vocab_size = 32;
  s = make_genai_config(f)["search"];
  CHECK(s["max_length"] == 8192);
  CHECK(s["top_k"] == 32);
  // Values of the wrong type or out of range are not taken.
  f.vocab_size = 128256;
  f.generation_config = {{"do_sample", "yes"}, {"temperature", -1}, {"top_p", 7}, {"top_k", 2.5},
                         {"repetition_penalty", "x"}, {"max_length", {1, 2}}};
  s = make_genai_config(f)["search"];
  CHECK(s["do_sample"] == false);
  CHECK(s["temperature"] == 1.0);
  CHECK(s["top_p"] == 1.0);
  CHECK(s["top_k"] == 50);
  CHECK(s["repetition_penalty"] == 1.0);
  CHECK(s["max_length"] == 8192);
}

TEST_CASE("genai config: generation_config.json's eos ids override config.json's") {
  GenaiFacts f = llama_facts();
  f.config = {{"bos_token_id", 128000}, {"eos_token_id", 128001}};
  f.generation_config = {{"bos_token_id", 128000}, {"eos_token_id", {128001, 128009}}, {"do_sample", true}};
  json m = make_genai_config(f)["model"];
  CHECK(m["eos_token_id"] == json({128001, 128009}));
  CHECK(m["pad_token_id"] == 128001);
  // An eos id at or above vocab_size can never be generated; GenAI rejects it, so it is dropped,
  // and an eos list of nothing else is refused.
  f.generation_config = {{"eos_token_id", {128001, 999999}}};
  CHECK(make_genai_config(f)["model"]["eos_token_id"] == json({128001}));
  f.generation_config = {{"eos_token_id", 999999}};
  auto [msg, kind] = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "not below vocab_size"));
}

TEST_CASE("genai config: qwen3_5 composite gives qwen3_5_text with the hybrid cache names") {
  GenaiFacts f;
  f.model_type = "qwen3_5";
  f.architectures = {"Qwen3_5ForConditionalGeneration"};
  f.head_size = 32;
  f.hidden_size = 64;
  f.num_attention_heads = 4;
  f.num_key_value_heads = 2;
  f.num_hidden_layers = 4;
  f.vocab_size = 256;
  f.context_length = 4096;
  f.cache_kinds = {{"conv_state", "recurrent_state"}, {"conv_state", "recurrent_state"},
                   {"recurrent_state", "conv_state"}, {"key", "value"}};
  f.config = {{"model_type", "qwen3_5"},
              {"architectures", {"Qwen3_5ForConditionalGeneration"}},
              {"eos_token_id", 7},
              {"text_config", {{"model_type", "qwen3_5_text"}, {"bos_token_id", nullptr}, {"eos_token_id", 1},
                               {"pad_token_id", nullptr}}}};
  json g = make_genai_config(f);
  CHECK(g["model"]["type"] == "qwen3_5_text");
  CHECK(g["model"]["eos_token_id"] == 1);  // text_config's first
  CHECK(g["model"]["pad_token_id"] == 1);
  CHECK(g["model"]["bos_token_id"] == 1);  // none anywhere: the builder's default
  const json& d = g["model"]["decoder"];
  CHECK(d["num_hidden_layers"] == 4);  // every layer: GenAI indexes cache names by layer
  // GenAI derives the state names from the key names (recurrent_state.cpp): what follows the
  // last '.' replaced. They must be the graph's.
  for (auto [key, io] : {std::pair{"past_key_names", "inputs"}, std::pair{"present_key_names", "outputs"}}) {
    std::string t = d[io][key];
    std::string base = t.substr(0, t.rfind('.') + 1);
    CHECK(base + "conv_state" == (std::string(io) == "inputs" ? "past_key_values.%d.conv_state" : "present.%d.conv_state"));
    CHECK(base + "recurrent_state" == (std::string(io) == "inputs" ? "past_key_values.%d.recurrent_state" : "present.%d.recurrent_state"));
  }
  CHECK(d["inputs"]["past_key_names"] == "past_key_values.%d.key");
  CHECK(d["outputs"]["present_value_names"] == "present.%d.value");

  // Names GenAI could not derive, or states it could not allocate, are refused.
  GenaiFacts bad = f;
  bad.past_names = "past_%d_";
  auto [msg, kind] = failure(bad);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "conv_state"));
  bad = f;
  bad.state_dims_static = false;
  std::tie(msg, kind) = failure(bad);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "dynamic dim"));
}

TEST_CASE("genai config: garbage token ids are ignored") {
  GenaiFacts f = llama_facts();
  std::vector<json> garbage{"2", json::array(), json({1, json({2})}), json({{"a", 1}}), -1, 1.5, 1e12,
                            true, nullptr, json(std::vector<int>(2000, 3))};
  for (const json& v : garbage) {
    f.config = {{"bos_token_id", v}, {"eos_token_id", v}, {"pad_token_id", v}};
    json m = make_genai_config(f)["model"];
    CHECK_MESSAGE(m["bos_token_id"] == 1, v.dump().substr(0, 40));
    CHECK_MESSAGE(!m.contains("eos_token_id"), v.dump().substr(0, 40));
    CHECK_MESSAGE(!m.contains("pad_token_id"), v.dump().substr(0, 40));
  }
  // Garbage in text_config falls through to the top level; an integral float is an int.
  f.config = {{"eos_token_id", 2.0}, {"text_config", {{"eos_token_id", "</s>"}, {"pad_token_id", {{"x", 1}}}}}};
  json m = make_genai_config(f)["model"];
  CHECK(m["eos_token_id"] == 2);
  CHECK(m["eos_token_id"].is_number_integer());
  CHECK(m["pad_token_id"] == 2);
  // Not an object at all.
  f.config = "nonsense";
  f.generation_config = json::array({1, 2});
  CHECK(make_genai_config(f)["model"]["bos_token_id"] == 1);
  // Only pad known: eos is the pad, GenAI's own rule written out.
  f.config = {{"pad_token_id", 5}};
  f.generation_config = nullptr;
  m = make_genai_config(f)["model"];
  CHECK(m["eos_token_id"] == 5);
  CHECK(m["pad_token_id"] == 5);
}

TEST_CASE("genai config: facts GenAI cannot use") {
  GenaiFacts f = llama_facts();
  f.input_ids.clear();
  f.inputs_embeds = "inputs_embeds";
  auto [msg, kind] = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "inputs_embeds, not input_ids"));

  f = llama_facts();
  f.filename = "../model.onnx";
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_PLUGIN);
  f.filename = "onnx/model_fp16.onnx";
  CHECK(make_genai_config(f)["model"]["decoder"]["filename"] == "onnx/model_fp16.onnx");

  f = llama_facts();
  f.context_length = 0;
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_PLUGIN);
  CHECK(contains(msg, "context_length"));

  f = llama_facts();
  f.past_names = "past_key_values.%s.";
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_PLUGIN);

  f = llama_facts();
  f.cache_kinds.pop_back();
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_PLUGIN);

  // GenAI composes cache names into 64 bytes.
  f = llama_facts();
  f.past_names = std::string(60, 'p') + ".%d.";
  std::tie(msg, kind) = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "63 characters"));
}

TEST_CASE("genai config: lfm2 runs in GenAI's LFM2 runner with its layer types and conv states") {
  GenaiFacts f = llama_facts(3);
  f.model_type = "lfm2";
  f.architectures = {"Lfm2ForCausalLM"};
  f.cache_kinds = {{"conv_state"}, {"key", "value"}, {"conv_state"}};
  f.config = {{"model_type", "lfm2"}, {"bos_token_id", 1}, {"eos_token_id", 2}, {"conv_L_cache", 3}};
  json g = make_genai_config(f);
  const json& d = g["model"]["decoder"];
  CHECK(g["model"]["type"] == "lfm2");
  CHECK(d["layer_types"] == json({"conv", "full_attention", "conv"}));
  CHECK(d["conv_cache_size"] == 3);
  CHECK(d["inputs"]["past_conv_names"] == "past_key_values.%d.conv_state");
  CHECK(d["outputs"]["present_conv_names"] == "present.%d.conv_state");
  CHECK(d["inputs"]["past_key_names"] == "past_key_values.%d.key");
  CHECK(g["search"]["past_present_share_buffer"] == false);

  // A layer without a cache, or with a Gated DeltaNet pair, is not one the runner knows.
  f.cache_kinds = {{"conv_state"}, {}, {"conv_state"}};
  auto [msg, kind] = failure(f);
  CHECK(kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(contains(msg, "LFM2 runner"));
  f.cache_kinds = {{"conv_state", "recurrent_state"}, {"key", "value"}, {"conv_state"}};
  CHECK(contains(failure(f).first, "past_key_values.0.recurrent_state"));
  // States GenAI cannot size from the graph.
  f.cache_kinds = {{"conv_state"}, {"key", "value"}, {"conv_state"}};
  f.state_dims_static = false;
  CHECK(contains(failure(f).first, "dynamic dim"));
  // A lone conv state is LFM2's alone: GenAI's generic decoder has no cache for it.
  f.state_dims_static = true;
  f.model_type = "qwen3";
  f.architectures = {"Qwen3ForCausalLM"};
  CHECK(contains(failure(f).first, "past_key_values.0.conv_state"));
}
