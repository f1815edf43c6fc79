// genai_config.cpp - genai_config.json for ONNX Runtime GenAI (see genai_config.hpp).
//
// What GenAI does with the file (onnxruntime-genai, src/):
// - config.cpp parses it with one JSON::Element per object. Inside "model", "decoder", its
//   "inputs"/"outputs" and "search", a key it does not know throws JSON::unknown_value_error
//   ("Unknown value"); a value of the wrong JSON type throws type_mismatch; every int field goes
//   through SafeDoubleToInt (an integral number within int32), so ints are written as ints and
//   nothing is null. eos_token_id is a number or an array of numbers (Model_Element::OnArray);
//   pad_token_id and bos_token_id are numbers only. model.context_length must be > 0; a
//   search.max_length of 0 becomes context_length; an absent eos_token_id becomes {pad_token_id}.
// - model.cpp CreateModel runs any type of ModelType::IsLLM (model_type.h) as DecoderOnly_Model,
//   except "lfm2" and "gpt2" (runners of their own); "qwen3_5" is a VLM type there (it wants a
//   vision model), so the text model of a composite checkpoint is "qwen3_5_text".
// - lfm2.cpp / kv_cache.cpp LFM2Cache runs "lfm2": decoder.layer_types says per layer
//   "full_attention" (a key/value pair, past_key_names) or anything else, a conv layer with one
//   state named by decoder.inputs.past_conv_names / outputs.present_conv_names ("past_conv.%d"
//   unless given), allocated rank 3 from the graph's shape; every layer is one or the other.
// - generators.cpp rejects max_length > context_length, vocab_size < 1, an eos id outside
//   [0, vocab_size), and, when sampling, top_k > vocab_size or top_p outside [0, 1].
// - kv_cache.cpp finds the attention layers by matching the graph's input names against
//   past_key_names ("past_key_values.%d.key"), so layers without a key/value cache are allowed;
//   names are composed with snprintf into 64 bytes (ComposeKeyValueName).
// - recurrent_state.cpp finds Gated DeltaNet layers the same way, with templates *derived* from
//   past_key_names/present_key_names: what follows their last '.' replaced by "conv_state" and
//   "recurrent_state" (there is no key for them in the parser). It allocates both states from
//   the graph's shapes and rejects a dynamic dim other than batch.
#include "genai_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "mobius/sdk/error.hpp"

namespace mobius::detail {
namespace {

using json = nlohmann::json;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr size_t kMaxTokenList = 1024;
constexpr size_t kGenaiNameBuffer = 64;  // ComposeKeyValueName's buffer, NUL included

[[noreturn]] void fail_config(const std::string& why) {
  throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] genai_config.json: " + why);
}
[[noreturn]] void fail_plugin(const std::string& why) {
  throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] genai_config.json: " + why);
}

// ModelType::IsLLM of onnxruntime-genai (src/models/model_type.h).
const std::set<std::string>& genai_llm_types() {
  static const std::set<std::string> t{
      "chatglm", "decoder",  "ernie4_5", "gemma",     "gemma2",   "gemma3_text",      "gemma4_text",
      "gpt2",    "gptoss",   "granite",  "granitemoehybrid",    "hunyuandensev1",   "internlm2",
      "lfm2",    "llama",    "mistral",  "nemotron",  "olmo",     "phi",              "phimoe",
      "phi3",    "phi3small", "qwen2",   "qwen3",     "qwen3_5_moe_text", "qwen3_5_text", "smollm3"};
  return t;
}

// IsLLM types GenAI runs with a runner of its own whose cache layout a mobius graph does not
// have: lfm2 (LFM2Cache: past_conv.%d and decoder.layer_types), gpt2 (Gpt_Model). A mobius lfm2
// model does have LFM2's layout and is written for that runner (genai_model_type's table).
bool own_runner(const std::string& t) { return t == "lfm2" || t == "gpt2"; }

// What a mobius graph of these types keeps that GenAI's decoder has no cache for.
std::optional<std::string> unrunnable_reason(const std::string& hf_model_type) {
  if (hf_model_type == "deepseek_v2" || hf_model_type == "deepseek_v3")
    return "model type '" + hf_model_type +
           "' cannot run in onnxruntime-genai: its Multi-head Latent Attention keeps a compressed "
           "latent cache (past_key_values.N.latent), and GenAI's decoder runs key/value caches "
           "and Gated DeltaNet states only (no GenAI model type has a latent cache)";
  if (hf_model_type == "mamba2" || hf_model_type == "bamba" || hf_model_type == "falcon_h1" ||
      hf_model_type == "nemotron_h")
    return "model type '" + hf_model_type +
           "' cannot run in onnxruntime-genai: its Mamba-2 layers keep a convolution state and an "
           "SSM state (past_key_values.N.conv_state, past_key_values.N.ssm_state), and GenAI's "
           "decoder runs key/value caches and Gated DeltaNet states only (no GenAI model type "
           "has a Mamba-2 state)";
  if (hf_model_type == "mamba" || hf_model_type == "jamba")
    return "model type '" + hf_model_type +
           "' cannot run in onnxruntime-genai: its Mamba layers keep a convolution state and a "
           "selective-scan state (past_key_values.N.conv_state, past_key_values.N.ssm_state), and "
           "GenAI's decoder runs key/value caches and Gated DeltaNet states only (no GenAI model "
           "type has a Mamba state)";
  return std::nullopt;
}

// A token id as GenAI reads it: an integral number within int32; token ids are not negative.
std::optional<int64_t> token_id(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(kInt32Max)) return static_cast<int64_t>(u);
    return std::nullopt;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i >= 0 && i <= kInt32Max) return i;
    return std::nullopt;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && d >= 0 && d <= static_cast<double>(kInt32Max))
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// A number or a flat, non-empty list of at most 1024 numbers, each a token id; anything else
// (strings, nested lists, objects, null, huge lists) is not taken. Returned as plain ints.
std::optional<std::vector<int64_t>> token_ids(const json& v, bool* was_list) {
  if (auto id = token_id(v)) {
    *was_list = false;
    return std::vector<int64_t>{*id};
  }
  if (!v.is_array() || v.empty() || v.size() > kMaxTokenList) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& e : v) {
    auto id = token_id(e);
    if (!id) return std::nullopt;
    out.push_back(*id);
  }
  *was_list = true;
  return out;
}

struct Tokens {
  std::vector<int64_t> ids;
  bool list = false;
};

// The first acceptable value of `key` among the sources (generation_config.json, then
// config.json's text_config, then its top level); null or unacceptable values are skipped.
std::optional<Tokens> find_tokens(const std::vector<const json*>& sources, const char* key) {
  for (const json* src : sources) {
    if (!src || !src->is_object()) continue;
    auto it = src->find(key);
    if (it == src->end()) continue;
    Tokens t;
    if (auto ids = token_ids(*it, &t.list)) {
      t.ids = std::move(*ids);
      return t;
    }
  }
  return std::nullopt;
}

std::optional<double> finite_number(const json& g, const char* key) {
  if (!g.is_object()) return std::nullopt;
  auto it = g.find(key);
  if (it == g.end() || !it->is_number()) return std::nullopt;
  double d = it->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<int64_t> int_number(const json& g, const char* key) {
  auto d = finite_number(g, key);
  if (!d || *d != std::trunc(*d) || *d < 0 || *d > static_cast<double>(kInt32Max)) return std::nullopt;
  return static_cast<int64_t>(*d);
}

void check_size(const char* name, int64_t v, bool allow_zero = false) {
  if (v < (allow_zero ? 0 : 1) || v > kInt32Max)
    fail_plugin(std::string(name) + " is " + std::to_string(v) + ", not " +
                (allow_zero ? "0 or more" : "positive") + " within int32");
}

// A printf template GenAI fills with the layer index: exactly one "%d" and no other '%'.
void check_template(const char* what, const std::string& t) {
  size_t pos = t.find("%d");
  if (pos == std::string::npos || t.find('%', pos + 2) != std::string::npos ||
      t.find('%') != pos)
    fail_plugin(std::string(what) + " '" + t + "' must hold exactly one %d and no other '%'");
}

std::string compose(const std::string& t, int64_t layer) {
  size_t pos = t.find("%d");
  return t.substr(0, pos) + std::to_string(layer) + t.substr(pos + 2);
}

// GenAI checks paths it reads (config.cpp ValidateConfigPath): relative, no ".." component.
void check_filename(const std::string& f) {
  if (f.empty()) fail_plugin("the model filename is empty");
  if (f[0] == '/' || f[0] == '\\' || (f.size() >= 2 && std::isalpha(static_cast<unsigned char>(f[0])) && f[1] == ':'))
    fail_plugin("the model filename '" + f + "' must be relative to the output folder");
  std::string comp;
  for (size_t i = 0; i <= f.size(); ++i) {
    if (i == f.size() || f[i] == '/' || f[i] == '\\') {
      if (comp == "..") fail_plugin("the model filename '" + f + "' must not contain '..'");
      comp.clear();
    } else {
      comp += f[i];
    }
  }
}

std::string join_names(const std::string& prefix, const std::vector<std::string>& kinds) {
  std::string s;
  for (const auto& k : kinds) s += (s.empty() ? "" : ", ") + prefix + k;
  return s;
}

}  // namespace

std::optional<std::string> genai_model_type(const std::string& hf_model_type,
                                            const std::vector<std::string>& architectures) {
  if (unrunnable_reason(hf_model_type)) return std::nullopt;
  // HF model types whose GenAI name differs, or that the model builder names after the family.
  static const std::vector<std::pair<std::string, std::string>> renamed{
      // The builder's only OLMo type: OlmoForCausalLM -> "olmo" (builder.py); OLMo 2 and 3 are
      // the same decoder-only runner in GenAI (the type selects nothing else for them).
      {"olmo", "olmo"}, {"olmo2", "olmo"}, {"olmo3", "olmo"},
      // The text model of a composite checkpoint: "qwen3_5" is GenAI's VLM type (it wants the
      // vision model too); the builder writes "qwen3_5_text" for the text decoder
      // (Qwen35TextModel: "Qwen3_5_textForCausalLM").
      {"qwen3_5", "qwen3_5_text"}, {"qwen3_5_text", "qwen3_5_text"},
      {"qwen3_5_moe", "qwen3_5_moe_text"}, {"qwen3_5_moe_text", "qwen3_5_moe_text"},
      {"gemma3", "gemma3_text"},  // Gemma3ForConditionalGeneration's text model
      {"gpt_oss", "gptoss"},      // GptOssForCausalLM -> "gptoss" (base.py: name before "For", lowercased)
      // LFM2's conv layers keep one state each: GenAI's LFM2 runner (make_genai_config names it).
      {"lfm2", "lfm2"},
      // No GenAI type and no builder support: plain key/value-cache decoders whose MoE lives in
      // the graph, run by GenAI's generic decoder type.
      {"mixtral", "decoder"}, {"qwen3_moe", "decoder"}, {"qwen2_moe", "decoder"},
  };
  for (const auto& [hf, genai] : renamed)
    if (hf == hf_model_type) return genai;
  const auto& llm = genai_llm_types();
  if (llm.count(hf_model_type) && !own_runner(hf_model_type)) return hf_model_type;
  // What the builder writes (base.py make_genai_config): architectures[0] up to "For",
  // lowercased, when GenAI runs that type as a decoder.
  if (!architectures.empty()) {
    std::string a = architectures[0];
    if (size_t p = a.find("For"); p != std::string::npos) a.resize(p);
    std::transform(a.begin(), a.end(), a.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (llm.count(a) && !own_runner(a)) return a;
  }
  // Anything else: GenAI's generic decoder-only type ("decoder" is in IsLLM), which reads the
  // graph's inputs by the names below and nothing type-specific.
  return std::string("decoder");
}

json make_genai_config(const GenaiFacts& f) {
  std::optional<std::string> type = genai_model_type(f.model_type, f.architectures);
  if (!type) {
    if (auto why = unrunnable_reason(f.model_type)) fail_config(*why);
    fail_config("onnxruntime-genai has no model type for '" + f.model_type + "'");
  }

  check_filename(f.filename);
  check_size("hidden_size", f.hidden_size);
  check_size("num_attention_heads", f.num_attention_heads);
  check_size("num_hidden_layers", f.num_hidden_layers);
  check_size("vocab_size", f.vocab_size);
  check_size("context_length", f.context_length);
  check_size("head_size", f.head_size, true);
  check_size("num_key_value_heads", f.num_key_value_heads, true);
  if (f.logits.empty()) fail_plugin("the graph has no logits output");
  if (f.input_ids.empty())
    fail_config("the graph takes " + (f.inputs_embeds.empty() ? std::string("no token ids") : "inputs_embeds") +
                ", not input_ids: onnxruntime-genai's decoder feeds token ids (an embedding model "
                "of its own would be needed)");
  if (f.cache_kinds.size() != static_cast<size_t>(f.num_hidden_layers))
    fail_plugin("cache kinds are given for " + std::to_string(f.cache_kinds.size()) + " layers, not " +
                std::to_string(f.num_hidden_layers));
  check_template("the past cache name template", f.past_names);
  check_template("the present cache name template", f.present_names);

  // GenAI's granitemoehybrid runs Granite 4.0's attention-only models: its model builder makes
  // no Mamba-2 layer (builders/granite.py), and its decoder has no cache for one.
  if (*type == "granitemoehybrid")
    for (int64_t i = 0; i < f.num_hidden_layers; ++i)
      for (const auto& k : f.cache_kinds[static_cast<size_t>(i)])
        if (k == "conv_state")
          fail_config("model type 'granitemoehybrid' with Mamba-2 layers cannot run in "
                      "onnxruntime-genai: layer " +
                      std::to_string(i) + " keeps a convolution state and an SSM state (" +
                      compose(f.past_names, i) + "conv_state, " + compose(f.past_names, i) +
                      "ssm_state); GenAI runs Granite 4.0's attention-only models under that type, "
                      "and its decoder has no cache for a Mamba-2 state");
  // Every layer's cache must be one GenAI's decoder has: a key/value pair, a Gated DeltaNet
  // state pair, or nothing.
  const std::set<std::string> kv{"key", "value"}, state{"conv_state", "recurrent_state"};
  // LFM2's runner: a key/value pair or a lone conv state (a short convolution's) on every layer.
  const bool lfm2 = *type == "lfm2";
  const std::set<std::string> short_conv{"conv_state"};
  json lfm2_layer_types = json::array();
  bool any_kv = false, any_state = false;
  size_t longest_kind = 0;
  for (int64_t i = 0; i < f.num_hidden_layers; ++i) {
    const auto& kinds = f.cache_kinds[static_cast<size_t>(i)];
    std::set<std::string> s(kinds.begin(), kinds.end());
    for (const auto& k : s) longest_kind = std::max(longest_kind, k.size());
    if (lfm2) {
      if (s == kv || s == short_conv) {
        lfm2_layer_types.push_back(s == kv ? "full_attention" : "conv");
        any_kv |= s == kv;
        continue;
      }
      fail_config("layer " + std::to_string(i) + "'s cache (" +
                  (s.empty() ? std::string("none") : join_names(compose(f.past_names, i), kinds)) +
                  ") does not fit onnxruntime-genai's LFM2 runner: every layer has a key/value pair "
                  "(key, value) or one short-convolution state (conv_state)");
    }
    if (s.empty()) continue;
    if (s == kv) {
      any_kv = true;
      continue;
    }
    if (s == state) {
      any_state = true;
      continue;
    }
    const std::string names = join_names(compose(f.past_names, i), kinds);
    if (s.count("latent"))
      fail_config("layer " + std::to_string(i) + " keeps a Multi-head Latent Attention latent cache (" +
                  names + "), which onnxruntime-genai's decoder has no cache for (it runs key/value "
                  "caches and Gated DeltaNet states only)");
    fail_config("layer " + std::to_string(i) + "'s cache (" + names +
                ") is not one onnxruntime-genai's decoder knows: it runs a key/value pair (key, value) "
                "or a Gated DeltaNet state pair (conv_state, recurrent_state) per layer");
  }
  if (any_kv && (f.head_size < 1 || f.num_key_value_heads < 1))
    fail_plugin("the attention layers' head_size and num_key_value_heads must be positive");
  if (lfm2 && !f.state_dims_static)
    fail_config("a conv_state input has a dynamic dim besides batch: onnxruntime-genai's LFM2 "
                "runner allocates the states from the graph's shapes");
  if (any_state) {
    // recurrent_state.cpp: the state templates are past_key_names/present_key_names with what
    // follows their last '.' replaced, so the graph's names must be the key's with another kind.
    for (const std::string* t : {&f.past_names, &f.present_names})
      if (t->empty() || t->back() != '.')
        fail_config("onnxruntime-genai finds a layer's conv_state and recurrent_state by replacing "
                    "what follows the last '.' of the key cache name; '" + *t +
                    "key' and '" + *t + "conv_state' do not fit that");
    if (!f.state_dims_static)
      fail_config("a conv_state or recurrent_state input has a dynamic dim besides batch: "
                  "onnxruntime-genai allocates those states from the graph's shapes");
  }
  // ComposeKeyValueName writes each name into 64 bytes.
  for (const std::string* t : {&f.past_names, &f.present_names}) {
    std::string longest = compose(*t, f.num_hidden_layers - 1) + std::string(longest_kind, 'x');
    if (longest.size() >= kGenaiNameBuffer)
      fail_config("the cache name '" + longest.substr(0, longest.size() - longest_kind) +
                  "...' is longer than onnxruntime-genai composes (63 characters)");
  }

  // Token ids: generation_config.json first (it overrides config.json, as the builder's
  // make_genai_config does for bos/eos/pad), then config.json's text_config (a composite
  // checkpoint's text model), then its top level.
  const json* text_cfg = nullptr;
  if (f.config.is_object())
    if (auto it = f.config.find("text_config"); it != f.config.end() && it->is_object()) text_cfg = &*it;
  const std::vector<const json*> sources{&f.generation_config, text_cfg, &f.config};

  json model = json::object();
  model["type"] = *type;
  model["context_length"] = f.context_length;
  model["vocab_size"] = f.vocab_size;
  // bos: 1 when the checkpoint names none, as the builder writes (GenAI reads it as a number).
  std::optional<Tokens> bos = find_tokens(sources, "bos_token_id");
  model["bos_token_id"] = bos ? bos->ids.front() : int64_t{1};

  std::optional<Tokens> eos = find_tokens(sources, "eos_token_id");
  std::optional<Tokens> pad = find_tokens(sources, "pad_token_id");
  if (!eos && pad) eos = Tokens{{pad->ids.front()}, false};  // GenAI's own rule, made explicit
  if (eos) {
    // generators.cpp rejects an eos id outside [0, vocab_size). Such an id cannot be generated,
    // so it can stop nothing: it is dropped; a list of nothing else is an error.
    std::vector<int64_t> in_vocab;
    for (int64_t id : eos->ids)
      if (id < f.vocab_size && std::find(in_vocab.begin(), in_vocab.end(), id) == in_vocab.end())
        in_vocab.push_back(id);
    if (in_vocab.empty())
      fail_config("eos_token_id " + std::to_string(eos->ids.front()) + " is not below vocab_size " +
                  std::to_string(f.vocab_size) + ": onnxruntime-genai rejects an eos id outside the vocabulary");
    model["eos_token_id"] = eos->list ? json(in_vocab) : json(in_vocab.front());
    // pad: the checkpoint's, else the first eos (the builder: config.eos_token_id[0] when it is
    // a list, else eos_token_id). Always a single number: GenAI reads pad_token_id as one.
    model["pad_token_id"] = pad ? pad->ids.front() : in_vocab.front();
  }
  // Neither eos nor pad anywhere: both are left out, and GenAI uses its defaults (pad 0, and
  // eos = {pad}); writing a guessed id would be no better.

  json inputs = json::object();
  inputs["input_ids"] = f.input_ids;
  if (!f.attention_mask.empty()) inputs["attention_mask"] = f.attention_mask;
  if (!f.position_ids.empty()) inputs["position_ids"] = f.position_ids;
  inputs["past_key_names"] = f.past_names + "key";
  inputs["past_value_names"] = f.past_names + "value";
  json outputs = {{"logits", f.logits},
                  {"present_key_names", f.present_names + "key"},
                  {"present_value_names", f.present_names + "value"}};
  model["decoder"] = {
      {"filename", f.filename},
      {"session_options",
       {{"log_id", "onnxruntime-genai"},
        {"provider_options", f.provider == "cuda" ? json::array({{{"cuda", json::object()}}})
                                                  : json::array()}}},
      {"head_size", f.head_size},
      {"hidden_size", f.hidden_size},
      {"num_attention_heads", f.num_attention_heads},
      {"num_key_value_heads", f.num_key_value_heads},
      {"num_hidden_layers", f.num_hidden_layers},
      {"inputs", inputs},
      {"outputs", outputs}};
  if (lfm2) {
    // As GenAI's builder writes it (builders/lfm2.py), with the graph's own state names.
    // conv_cache_size is informational (the runner sizes the states from the graph):
    // conv_L_cache, transformers' default 3 when the config has none.
    json& d = model["decoder"];
    d["layer_types"] = lfm2_layer_types;
    int64_t conv = 3;
    for (const json* src : {text_cfg, &f.config})
      if (auto k = src ? int_number(*src, "conv_L_cache") : std::nullopt; k && *k > 0) {
        conv = *k;
        break;
      }
    d["conv_cache_size"] = conv;
    d["inputs"]["past_conv_names"] = f.past_names + "conv_state";
    d["outputs"]["present_conv_names"] = f.present_names + "conv_state";
  }

  // search: greedy defaults (transformers' GenerationConfig defaults, top_k 50 included, which
  // is also GenAI's), overridden by generation_config.json's values where they are valid.
  // past_present_share_buffer: GroupQueryAttention writes the new tokens into the past buffer
  // itself (GenAI then allocates max_length once); otherwise present = past + new tokens.
  const json& g = f.generation_config;
  bool do_sample = false;
  if (g.is_object())
    if (auto it = g.find("do_sample"); it != g.end() && it->is_boolean()) do_sample = it->get<bool>();
  double temperature = 1.0, top_p = 1.0, repetition_penalty = 1.0;
  int64_t top_k = 50, max_length = f.context_length;
  if (auto t = finite_number(g, "temperature"); t && *t > 0 && *t <= std::numeric_limits<float>::max())
    temperature = *t;
  if (auto p = finite_number(g, "top_p"); p && *p > 0 && *p <= 1) top_p = *p;
  if (auto r = finite_number(g, "repetition_penalty"); r && *r > 0 && *r <= std::numeric_limits<float>::max())
    repetition_penalty = *r;
  // top_k: an explicit value (0 = no top-k filter, in transformers and GenAI alike) is kept;
  // above vocab_size it filters nothing, and GenAI rejects it when sampling, so it is capped.
  if (auto k = int_number(g, "top_k")) top_k = *k;
  top_k = std::min(top_k, f.vocab_size);
  // max_length counts the prompt too in both; GenAI rejects one above context_length.
  if (auto m = int_number(g, "max_length"); m && *m > 0) max_length = std::min(*m, f.context_length);

  json search = {{"diversity_penalty", 0.0},
                 {"do_sample", do_sample},
                 {"early_stopping", true},
                 {"length_penalty", 1.0},
                 {"max_length", max_length},
                 {"min_length", 0},
                 {"no_repeat_ngram_size", 0},
                 {"num_beams", 1},
                 {"num_return_sequences", 1},
                 {"past_present_share_buffer", f.share_buffer},
                 {"repetition_penalty", repetition_penalty},
                 {"temperature", temperature},
                 {"top_k", top_k},
                 {"top_p", top_p}};
  return json{{"model", model}, {"search", search}};
}

}  // namespace mobius::detail
