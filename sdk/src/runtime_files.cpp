// runtime_files.cpp - the text-generation task's runtime files (plugin.hpp,
// add_text_generation_files): what a runtime reads beside the graph, made from the graph's
// inputs and outputs and from the checkpoint's small config files.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "genai_config.hpp"
#include "mobius/sdk/config.hpp"
#include "mobius/sdk/error.hpp"
#include "mobius/sdk/plugin.hpp"

namespace mobius {
namespace detail {
namespace {

// A JSON file of the checkpoint folder, parsed within the config limits; null when absent or
// not a JSON object.
nlohmann::json source_json(BuildContext& ctx, const std::string& name) {
  std::optional<std::string> text =
      name == "config.json" ? ctx.source_config() : ctx.source_file(name);
  if (!text) return nullptr;
  try {
    nlohmann::json j = parse_config_text(*text, name);
    return j.is_object() ? j : nlohmann::json(nullptr);
  } catch (const std::exception&) {
    return nullptr;
  }
}

int64_t int_of(const nlohmann::json& cfg, const char* key, int64_t def = 0) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_number_integer() ? it->get<int64_t>() : def;
}

// What genai_config.json says about the built graph (genai_config.hpp's GenaiFacts).
GenaiFacts genai_facts(BuildContext& ctx, const std::string& model_type, const nlohmann::json& cfg) {
  const Graph& g = ctx.graph();
  GenaiFacts f;
  f.model_type = model_type;
  f.filename = ctx.model_file();
  f.config = source_json(ctx, "config.json");
  f.generation_config = source_json(ctx, "generation_config.json");
  if (f.config.is_object())
    if (auto it = f.config.find("architectures"); it != f.config.end() && it->is_array())
      for (const auto& a : *it)
        if (a.is_string() && f.architectures.size() < 16) f.architectures.push_back(a.get<std::string>());
  f.hidden_size = int_of(cfg, "hidden_size");
  f.num_attention_heads = int_of(cfg, "num_attention_heads");
  f.num_hidden_layers = int_of(cfg, "num_hidden_layers");
  f.vocab_size = int_of(cfg, "vocab_size");
  f.context_length = int_of(cfg, "max_position_embeddings", 4096);
  auto has_input = [&](const std::string& n) { return g.input_type(n).has_value(); };
  f.input_ids = has_input("input_ids") ? "input_ids" : "";
  f.inputs_embeds = has_input("inputs_embeds") ? "inputs_embeds" : "";
  f.attention_mask = has_input("attention_mask") ? "attention_mask" : "";
  f.position_ids = has_input("position_ids") ? "position_ids" : "";
  f.logits = g.output_type("logits") ? "logits" : "";
  bool sized = false;
  for (int64_t i = 0; i < f.num_hidden_layers; ++i) {
    const std::string past = "past_key_values." + std::to_string(i) + ".";
    std::vector<std::string> kinds;
    for (const std::string& k : genai_known_cache_kinds()) {
      std::optional<TensorType> t = g.input_type(past + k);
      if (!t) continue;
      kinds.push_back(k);
      if (k == "key" && !sized && t->rank_known && t->dims.size() == 4) {
        // The first attention layer's past key: [batch, kv_heads, past, head_size].
        f.num_key_value_heads = t->dims[1].is_static() ? t->dims[1].size : 0;
        f.head_size = t->dims[3].is_static() ? t->dims[3].size : 0;
        sized = true;
      }
      if ((k == "conv_state" || k == "recurrent_state") && t->rank_known)
        for (size_t d = 1; d < t->dims.size(); ++d) f.state_dims_static &= t->dims[d].is_static();
    }
    f.cache_kinds.push_back(std::move(kinds));
  }
  size_t kv_layers = 0;
  bool only_kv = true;
  for (const auto& kinds : f.cache_kinds) {
    const bool kv = kinds.size() == 2 && std::count(kinds.begin(), kinds.end(), "key") == 1 &&
                    std::count(kinds.begin(), kinds.end(), "value") == 1;
    if (kv) ++kv_layers;
    else if (!kinds.empty()) only_kv = false;
  }
  f.share_buffer = only_kv && kv_layers > 0 && g.op_count("GroupQueryAttention") == kv_layers;
  f.provider = ctx.execution_provider();
  return f;
}

// tokenizer_config.json as the runtime should read it, or nullopt when the copy serves as is.
// GenAI's tokenizer takes the chat template from tokenizer_config.json only; transformers
// releases since 4.43 write it to chat_template.jinja instead. A model_max_length beyond what a
// double holds exactly (transformers writes int(1e30) for "no limit") becomes the context length.
std::optional<std::string> adapted_tokenizer_config(BuildContext& ctx, bool merge_template,
                                                    int64_t context_length) {
  std::optional<std::string> text = ctx.source_file("tokenizer_config.json");
  if (!text) return std::nullopt;
  nlohmann::ordered_json tc;
  try {
    parse_config_text(*text, "tokenizer_config.json");  // the limits, before the ordered parse
    tc = nlohmann::ordered_json::parse(*text);
  } catch (const std::exception&) {
    return std::nullopt;  // the copy goes as it is; the runtime reports what it cannot read
  }
  if (!tc.is_object()) return std::nullopt;
  bool changed = false;
  if (merge_template && !tc.contains("chat_template")) {
    if (std::optional<std::string> tmpl = ctx.source_file("chat_template.jinja")) {
      tc["chat_template"] = *tmpl;
      changed = true;
    }
  }
  if (auto it = tc.find("model_max_length"); it != tc.end() && context_length > 0) {
    const bool usable = it->is_number_integer()
                            ? (it->is_number_unsigned() ? it->get<uint64_t>() <= (1ull << 53)
                                                        : it->get<int64_t>() > 0 &&
                                                              it->get<int64_t>() <= (1ll << 53))
                            : false;
    if (!usable) {
      *it = context_length;
      changed = true;
    }
  }
  if (!changed) return std::nullopt;
  return tc.dump(2) + "\n";
}

// The model types transformers.js 4.x loads with AutoModelForCausalLM
// (models/registry.js, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES of 4.3.2): it picks the model class by
// config.json's model_type, and refuses a folder whose type it does not list.
bool transformers_js_causal_lm(const std::string& t) {
  static const std::set<std::string> k{
      "afmoe", "apertus", "arcee", "bloom", "codegen", "cohere", "cohere2", "deepseek_v3",
      "deepseek_v4", "ernie4_5", "exaone", "falcon", "falcon_h1", "gemma", "gemma2", "gemma3",
      "gemma3_text", "gemma3n", "gemma4", "glm", "glm_moe_dsa", "gpt2", "gpt_bigcode", "gpt_neo",
      "gpt_neox", "gpt_oss", "gptj", "granite", "granitemoehybrid", "helium", "hrm_text",
      "hunyuan_v1_dense", "jais", "lfm2", "lfm2_moe", "lfm3", "llama", "llama4_text", "mbart",
      "ministral", "ministral3", "mistral", "mistral4", "mobilellm", "modernbert-decoder", "mpt",
      "nanochat", "nemotron_h", "olmo", "olmo2", "olmo3", "olmo_hybrid", "openelm", "opt", "phi",
      "phi3", "qwen2", "qwen2_5_vl", "qwen2_moe", "qwen2_vl", "qwen3", "qwen3_5", "qwen3_5_moe",
      "qwen3_5_text", "qwen3_moe", "qwen3_next", "qwen3_vl", "qwen3_vl_moe", "smollm3",
      "solar_open", "stablelm", "starcoder2", "trocr", "vaultgemma", "youtu", "zaya"};
  return k.count(t) > 0;
}

// transformers.js 4.3 (configs.js getCacheNames) reads the layers of granitemoehybrid and
// nemotron_h from layer_types (else layers_block_type) spelled "mamba" and "attention", and gives
// every layer both a Mamba state and a key/value cache when neither key is there; transformers 5
// writes "linear_attention" and "full_attention", and Nemotron-H checkpoints often give only
// hybrid_override_pattern ("M" Mamba-2, "*" attention, "-" MLP, "E" MoE). The config's layer
// kinds in transformers.js's spelling; nullopt when the config names none it can read (the
// plugin refused such a config already).
std::optional<nlohmann::ordered_json> transformers_js_layer_types(const nlohmann::ordered_json& cfg,
                                                                  const std::string& model_type) {
  auto spelled = [](const std::string& t) -> std::string {
    if (t == "linear_attention" || t == "mamba" || t == "M") return "mamba";
    if (t == "full_attention" || t == "attention" || t == "*") return "attention";
    if (t == "-") return "mlp";
    if (t == "E") return "moe";
    return t;  // mlp, moe
  };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const char* key : {"layer_types", "layers_block_type"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || !it->is_array()) continue;
    for (const auto& t : *it) {
      if (!t.is_string()) return std::nullopt;
      out.push_back(spelled(t.get<std::string>()));
    }
    return out;
  }
  auto pattern = cfg.find("hybrid_override_pattern");
  if (model_type == "nemotron_h" && pattern != cfg.end() && pattern->is_string()) {
    for (char ch : pattern->get<std::string>()) out.push_back(spelled(std::string(1, ch)));
    return out;
  }
  // GraniteMoeHybridConfig: every layer Mamba-2 when the config names none.
  auto layers = cfg.find("num_hidden_layers");
  if (model_type == "granitemoehybrid" && layers != cfg.end() && layers->is_number_integer() &&
      layers->get<int64_t>() > 0 && layers->get<int64_t>() <= 4096) {
    for (int64_t i = 0; i < layers->get<int64_t>(); ++i) out.push_back("mamba");
    return out;
  }
  return std::nullopt;
}

}  // namespace

// config.json as transformers.js 4.3 loads a Qwen3.5 text model from one onnx/model.onnx, or
// nullopt when the copy serves as is:
// - a composite checkpoint names Qwen3_5ForConditionalGeneration, which makes
//   AutoModelForCausalLM load the two-file embed_tokens + decoder_model_merged layout (and that
//   layout loses the left-padding mask after prefill); Qwen3_5ForCausalLM loads one session
//   named "model". model_type stays: transformers.js reads the cache layout from text_config.
// - every Qwen3.5 class computes positions with the Qwen2-VL get_rope_index, which reads
//   config.vision_config.spatial_merge_size even for text (models/qwen2_vl, `?? 2` when the key
//   is absent but not when vision_config is): a text-only config gets an empty vision_config.
// - a model built as another type (a manifest's alias, a fallback for a type nobody registers)
//   is loaded as that type: transformers.js picks the class by model_type.
// - a type transformers.js 4.x has no class for, whose graphs and config keys another type's
//   class runs (models/registry.js, configs.js getNormalizedConfig), is loaded as that type:
//   UMT5 as MT5, Pegasus as BART.
// - granitemoehybrid and nemotron_h name their layers as transformers.js reads them
//   (transformers_js_layer_types).
std::optional<std::string> transformers_js_config(BuildContext& ctx, const std::string& model_type) {
  static const std::map<std::string, std::string> runs_as = {{"umt5", "mt5"}, {"pegasus", "bart"}};
  std::optional<std::string> text = ctx.source_config();
  if (!text) return std::nullopt;
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(*text, nullptr, false);
  if (!cfg.is_object()) return std::nullopt;
  if (model_type == "granitemoehybrid" || model_type == "nemotron_h") {
    auto layer_types = transformers_js_layer_types(cfg, model_type);
    if (!layer_types) return std::nullopt;
    cfg.erase("layers_block_type");
    cfg["layer_types"] = *layer_types;
    return cfg.dump(2) + "\n";
  }
  if (model_type != "qwen3_5" && model_type != "qwen3_5_text") {
    const auto as = runs_as.find(model_type);
    const std::string type = as == runs_as.end() ? model_type : as->second;
    auto t = cfg.find("model_type");
    if (t == cfg.end() || !t->is_string() || t->get<std::string>() == type) return std::nullopt;
    *t = type;
    return cfg.dump(2) + "\n";
  }
  if (model_type == "qwen3_5") cfg["architectures"] = nlohmann::ordered_json::array({"Qwen3_5ForCausalLM"});
  if (!cfg.contains("vision_config") || !cfg["vision_config"].is_object())
    cfg["vision_config"] = nlohmann::ordered_json::object();
  return cfg.dump(2) + "\n";
}

void add_text_generation_files(BuildContext& ctx, const std::string& model_type,
                               const nlohmann::json& cfg) {
  if (!ctx.host_has_runtime_files() || !cfg.is_object()) return;
  const std::string runtime = ctx.runtime();
  const int64_t context = int_of(cfg, "max_position_embeddings", 0);
  if (runtime == "ort-genai") {
    nlohmann::json genai;
    try {
      genai = make_genai_config(genai_facts(ctx, model_type, cfg));
    } catch (const Error& e) {
      if (e.kind() != MOBIUS_ERROR_KIND_CONFIG) throw;
      if (ctx.runtime_is_default()) {
        // Nobody asked for GenAI: the folder is for ONNX Runtime alone, and the user learns why.
        std::string why = e.what();
        if (why.rfind("[config] ", 0) == 0) why = why.substr(9);
        // transformers.js is named as another choice only for a type it runs.
        const bool tjs = transformers_js_causal_lm(model_type);
        ctx.log(MOBIUS_LOG_WARNING, why + "; the folder is laid out for ONNX Runtime alone" +
                                        (tjs ? " (--runtime transformers.js is another choice)" : ""));
        return;
      }
      throw Error(MOBIUS_ERROR_KIND_CONFIG,
                  std::string(e.what()) +
                      " (--runtime onnxruntime builds the graph for ONNX Runtime alone" +
                      (transformers_js_causal_lm(model_type)
                           ? "; --runtime transformers.js lays it out for transformers.js)"
                           : ")"));
    }
    ctx.add_runtime_file("genai_config.json", genai.dump(2) + "\n");
    if (auto tc = adapted_tokenizer_config(ctx, true, context))
      ctx.add_runtime_file("tokenizer_config.json", *tc);
  } else if (runtime == "transformers.js") {
    if (!transformers_js_causal_lm(model_type))
      throw Error(MOBIUS_ERROR_KIND_CONFIG,
                  "[config] transformers.js cannot run model type '" + model_type +
                      "': its AutoModelForCausalLM has no class for it (transformers.js 4.x); "
                      "--runtime onnxruntime builds the graph for ONNX Runtime alone");
    if (auto tc = adapted_tokenizer_config(ctx, false, context))
      ctx.add_runtime_file("tokenizer_config.json", *tc);
    if (auto c = transformers_js_config(ctx, model_type)) ctx.add_runtime_file("config.json", *c);
  }
}

}  // namespace detail
}  // namespace mobius
