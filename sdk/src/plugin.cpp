// plugin.cpp - the C callbacks behind PluginRegistrar::add: exceptions become a status, an error
// kind and a message; and the text-generation task's runtime files.
#include "mobius/sdk/plugin.hpp"

#include <deque>
#include <new>

#include "mobius/sdk/config.hpp"

namespace mobius {
namespace {

struct Entry {
  std::string model_type;
  std::string task;
  ConfigParser parse;
  GraphBuilder build;
  const mobius_host_api* host = nullptr;
};

// Registrations live as long as the plugin is loaded.
std::deque<Entry>& entries() {
  static std::deque<Entry> e;
  return e;
}

mobius_status parse_cb(void* user, mobius_context* ctx, const char* config_json,
                       mobius_string_sink* out) {
  auto* e = static_cast<Entry*>(user);
  return detail::run_guarded(e->host, ctx, MOBIUS_ERROR_KIND_CONFIG, [&] {
    // config.json as the user gave it: a JSON error here is a config error. The host checked
    // the limits already; they hold here whatever host this runs in.
    nlohmann::json in = parse_config_text(config_json ? config_json : "", "config.json");
    std::string s = e->parse(in).dump();
    out->write(out->opaque, s.data(), s.size());
  });
}

mobius_status build_cb(void* user, mobius_context* ctx, const char* config_json) {
  auto* e = static_cast<Entry*>(user);
  return detail::run_guarded(e->host, ctx, MOBIUS_ERROR_KIND_PLUGIN, [&] {
    BuildContext bc(e->host, ctx);
    // The normalized config is the plugin's own output: a problem reading it is the plugin's.
    nlohmann::json cfg = parse_config_text(config_json ? config_json : "", "normalized config",
                                           MOBIUS_ERROR_KIND_PLUGIN);
    e->build(bc, cfg);
    if (e->task == "text-generation") detail::add_text_generation_files(bc, e->model_type, cfg);
  });
}

void report_to_host(const mobius_host_api* host, mobius_context* ctx, mobius_error_kind kind,
                    const std::string& message) {
  if (!host) return;
  if (MOBIUS_HAS_FIELD(host, mobius_host_api, set_error_kind) && host->set_error_kind) {
    host->set_error_kind(ctx, kind, message.c_str());
  } else if (host->set_error) {
    // A host without kinds reads "[config]" as a config error and anything else as the plugin's.
    bool tagged = message.rfind("[config]", 0) == 0;
    if (kind == MOBIUS_ERROR_KIND_CONFIG && !tagged)
      host->set_error(ctx, ("[config] " + message).c_str());
    else
      host->set_error(ctx, message.c_str());
  }
}

}  // namespace

void PluginRegistrar::add(const std::string& model_type, const std::string& task,
                          ConfigParser parse, GraphBuilder build) {
  Entry& e = entries().emplace_back(Entry{model_type, task, std::move(parse), std::move(build), host_});
  mobius_architecture a{};
  a.struct_size = sizeof(a);
  a.model_type = e.model_type.c_str();
  a.task = e.task.c_str();
  a.user = &e;
  a.parse_config = &parse_cb;
  a.build = &build_cb;
  if (host_->register_architecture(reg_, &a) != MOBIUS_OK)
    throw Error("[plugin] the host refused model type '" + model_type + "'");
}

void PluginRegistrar::add_each(const std::vector<std::string>& model_types, const std::string& task,
                               const TypedParser& parse, const GraphBuilder& build) {
  for (const auto& t : model_types)
    add(t, task, [t, parse](const nlohmann::json& raw) { return parse(t, raw); }, build);
}

namespace detail {

mobius_status run_register(const mobius_host_api* host, mobius_registrar* reg, RegisterFn fn) {
  if (!host || host->abi_version != MOBIUS_ABI_VERSION ||
      host->struct_size < MOBIUS_HOST_API_SIZE_V1)
    return MOBIUS_ERROR;
  try {
    PluginRegistrar r(host, reg);
    fn(r);
    return MOBIUS_OK;
  } catch (const std::exception& ex) {
    host->registrar_error(reg, ex.what());
  } catch (...) {
    host->registrar_error(reg, "unknown error while registering");
  }
  return MOBIUS_ERROR;
}

void report_current_exception(const mobius_host_api* host, mobius_context* ctx,
                              mobius_error_kind unspecified) noexcept {
  try {
    mobius_error_kind kind = MOBIUS_ERROR_KIND_INTERNAL;
    std::string message;
    try {
      throw;
    } catch (const Error& e) {
      kind = e.kind() ? e.kind() : unspecified;
      message = e.what();
    } catch (const nlohmann::json::exception& e) {
      // Reading JSON: config.json while parsing it; the plugin's own normalized config later.
      kind = unspecified == MOBIUS_ERROR_KIND_CONFIG ? MOBIUS_ERROR_KIND_CONFIG
                                                     : MOBIUS_ERROR_KIND_PLUGIN;
      message = (kind == MOBIUS_ERROR_KIND_CONFIG ? "[config] " : "[plugin] ") +
                std::string(e.what());
    } catch (const std::bad_alloc&) {
      kind = MOBIUS_ERROR_KIND_INTERNAL;
      message = "[internal] out of memory in the plugin";
    } catch (const std::exception& e) {
      kind = MOBIUS_ERROR_KIND_PLUGIN;
      message = std::string("[plugin] unexpected exception: ") + e.what();
    } catch (...) {
      kind = MOBIUS_ERROR_KIND_INTERNAL;
      message = "[internal] unknown exception in the plugin";
    }
    report_to_host(host, ctx, kind, message);
  } catch (...) {
    // Out of memory while reporting: the status alone says the callback failed.
  }
}

void add_text_generation_files(BuildContext& ctx, const std::string& model_type,
                               const nlohmann::json& cfg) {
  if (!ctx.host_has_runtime_files()) return;  // hosts older than this slot wrote it themselves
  if (!cfg.is_object() || !cfg.contains("num_hidden_layers")) return;
  const Graph& g = ctx.graph();
  int64_t layers = cfg.value("num_hidden_layers", int64_t{0});
  for (int64_t i = 0; i < layers; ++i)
    if (!g.input_type("past_key_values." + std::to_string(i) + ".key") ||
        !g.input_type("past_key_values." + std::to_string(i) + ".value"))
      return;
  if (layers == 0 || !g.input_type("input_ids")) return;
  const TensorType key = *g.input_type("past_key_values.0.key");
  if (!key.rank_known || key.dims.size() != 4) return;
  auto dim_value = [&](size_t i) -> int64_t {
    return key.dims[i].is_static() ? key.dims[i].size : 0;
  };
  // Token ids from config.json: text_config's first (a composite model's), then the top
  // level's. Parsed within the config limits, and only a number or a flat list of numbers is
  // taken: nothing deep or large reaches the file written here.
  nlohmann::json src = nlohmann::json::object();
  try {
    if (std::optional<std::string> text = ctx.source_config())
      src = parse_config_text(*text, "config.json");
  } catch (const std::exception&) {
    src = nlohmann::json::object();
  }
  if (!src.is_object()) src = nlohmann::json::object();
  const nlohmann::json* text_cfg = nullptr;
  if (auto it = src.find("text_config"); it != src.end() && it->is_object()) text_cfg = &*it;
  auto token_id = [](const nlohmann::json& v) {
    if (v.is_number()) return true;
    if (!v.is_array() || v.empty() || v.size() > 1024) return false;
    for (const auto& e : v)
      if (!e.is_number()) return false;
    return true;
  };
  auto token = [&](const char* k, nlohmann::json def) {
    for (const nlohmann::json* j : {text_cfg, static_cast<const nlohmann::json*>(&src)}) {
      if (!j) continue;
      auto it = j->find(k);
      if (it == j->end()) continue;
      return !it->is_null() && token_id(*it) ? *it : def;
    }
    return def;
  };
  int64_t context = cfg.value("max_position_embeddings", int64_t{4096});
  nlohmann::json decoder = {
      {"filename", "model.onnx"},
      {"session_options", {{"log_id", "onnxruntime-genai"}, {"provider_options", nlohmann::json::array()}}},
      {"head_size", dim_value(3)},
      {"hidden_size", cfg.value("hidden_size", int64_t{0})},
      {"num_attention_heads", cfg.value("num_attention_heads", int64_t{0})},
      {"num_key_value_heads", dim_value(1)},
      {"num_hidden_layers", layers},
      {"inputs",
       {{"input_ids", "input_ids"},
        {"attention_mask", "attention_mask"},
        {"position_ids", "position_ids"},
        {"past_key_names", "past_key_values.%d.key"},
        {"past_value_names", "past_key_values.%d.value"}}},
      {"outputs",
       {{"logits", "logits"},
        {"present_key_names", "present.%d.key"},
        {"present_value_names", "present.%d.value"}}}};
  nlohmann::json genai = {
      {"model",
       {{"type", model_type},
        {"context_length", context},
        {"vocab_size", cfg.value("vocab_size", int64_t{0})},
        {"bos_token_id", token("bos_token_id", 1)},
        {"eos_token_id", token("eos_token_id", 2)},
        {"pad_token_id", token("pad_token_id", token("eos_token_id", 0))},
        {"decoder", decoder}}},
      {"search",
       {{"do_sample", false},
        {"early_stopping", true},
        {"max_length", context},
        {"min_length", 0},
        {"num_beams", 1},
        {"num_return_sequences", 1},
        {"past_present_share_buffer", false},
        {"repetition_penalty", 1.0},
        {"temperature", 1.0},
        {"top_k", 1},
        {"top_p", 1.0}}}};
  ctx.add_runtime_file("genai_config.json", genai.dump(2) + "\n");
}

}  // namespace detail

}  // namespace mobius
