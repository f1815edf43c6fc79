// plugin.cpp - the C callbacks behind PluginRegistrar::add, and the build driver: a model type's
// task row (mobius/sdk/task.hpp) is read around the plugin's own build (the runtime checked
// before it, the graph's promised inputs and outputs after, then the task's runtime files).
// Exceptions become a status, an error kind and a message.
#include "mobius/sdk/plugin.hpp"

#include <deque>
#include <new>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/task.hpp"

namespace mobius {
namespace {

struct Entry {
  std::string model_type;
  std::string task;
  std::vector<std::string> tasks;      // several tasks (add_tasks); empty: `task` alone
  std::vector<const char*> task_names;  // into `tasks`, for the ABI
  PluginRegistrar::TaskConfigParser parse_task;
  ConfigParser parse;
  GraphBuilder build;
  const mobius_host_api* host = nullptr;
  std::vector<std::string> graphs;
  std::vector<const char*> graph_names;  // into `graphs`, for the ABI
};

// Registrations live as long as the plugin is loaded.
std::deque<Entry>& entries() {
  static std::deque<Entry> e;
  return e;
}

// Asked to build a model type nobody registers (mobius_build_options::fallback): only a
// text-generation decoder whose config.json states the fields a decoder is sized by (none of them
// left to this type's defaults) and names a causal LM class, if it names one.
void check_fallback(const Entry& e, const nlohmann::json& in) {
  const nlohmann::json& t = text_config(in);
  const std::string type = t.is_object() ? t.value("model_type", std::string("?")) : std::string("?");
  const std::string as = "model type " + quote_value(type) + " is built as " + e.model_type + " only";
  if (e.task != "text-generation" || !e.tasks.empty())
    throw Error("[config] " + as + " by a text-generation decoder");
  std::string missing;
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"})
    if (!t.contains(k) || t.at(k).is_null()) missing += std::string(missing.empty() ? "'" : ", '") + k + "'";
  if (!missing.empty()) throw Error("[config] " + as + " when config.json states a decoder's sizes; it lacks " + missing);
  if (auto a = in.find("architectures"); a != in.end() && !a->is_null()) {
    bool causal = false;
    if (a->is_array())
      for (const auto& n : *a)
        if (n.is_string()) {
          const std::string s = n.get<std::string>();
          causal |= s.size() > 11 && s.compare(s.size() - 11, 11, "ForCausalLM") == 0;
        }
    if (!causal) throw Error("[config] " + as + " for a causal LM; 'architectures' names no *ForCausalLM class");
  }
}

mobius_status parse_cb(void* user, mobius_context* ctx, const char* config_json,
                       mobius_string_sink* out) {
  auto* e = static_cast<Entry*>(user);
  return detail::run_guarded(e->host, ctx, MOBIUS_ERROR_KIND_CONFIG, [&] {
    // config.json as the user gave it: a JSON error here is a config error. The host checked
    // the limits already; they hold here whatever host this runs in.
    nlohmann::json in = parse_config_text(config_json ? config_json : "", "config.json");
    nlohmann::json normalized;
    if (const mobius_build_options* o = e->host->build_options(ctx);
        o && MOBIUS_HAS_FIELD(o, mobius_build_options, fallback) && o->fallback)
      check_fallback(*e, in);
    if (e->tasks.empty()) {
      normalized = e->parse(in);
    } else {
      const mobius_build_options* o = e->host->build_options(ctx);
      const char* chosen = o && MOBIUS_HAS_FIELD(o, mobius_build_options, task) ? o->task : nullptr;
      const std::string task = detail::choose_task(e->model_type, e->tasks, chosen ? chosen : "", in);
      normalized = e->parse_task(in, task);
      if (!normalized.is_object() || normalized.contains("task"))
        throw Error(MOBIUS_ERROR_KIND_PLUGIN,
                    "[plugin] " + e->model_type + ": a normalized config must be an object without a 'task' key");
      normalized["task"] = task;
    }
    std::string s = normalized.dump();
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
    std::string task_name = e->task;
    if (!e->tasks.empty()) {
      const auto t = cfg.find("task");
      if (t == cfg.end() || !t->is_string() ||
          std::find(e->tasks.begin(), e->tasks.end(), t->get<std::string>()) == e->tasks.end())
        throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + e->model_type + ": the normalized config names no task it builds");
      task_name = t->get<std::string>();
    }
    const TaskRow* task = find_task(task_name);
    if (task) detail::check_task_runtime(bc, *task, e->model_type);
    e->build(bc, cfg);
    if (task) {
      detail::check_task_graph(bc, *task, e->model_type);
      if (task->runtime_files) task->runtime_files(bc, e->model_type, cfg);
    }
  });
}

// Hands an entry to the host as a mobius_architecture.
void register_entry(const mobius_host_api* host, mobius_registrar* reg, Entry& e) {
  const TaskRow* task = find_task(e.task);
  // A task of several graphs in one folder (an encoder-decoder's): the row names them.
  const bool one_folder = e.graphs.empty() && task && !task->graphs.empty();
  if (one_folder) e.graphs = task->graphs;
  for (const auto& g : e.graphs) e.graph_names.push_back(g.c_str());
  mobius_architecture a{};
  a.struct_size = sizeof(a);
  a.model_type = e.model_type.c_str();
  a.task = e.task.c_str();
  a.user = &e;
  a.parse_config = &parse_cb;
  a.build = &build_cb;
  a.graphs = e.graph_names.empty() ? nullptr : e.graph_names.data();
  a.n_graphs = e.graph_names.size();
  a.tasks = e.task_names.empty() ? nullptr : e.task_names.data();
  a.n_tasks = e.task_names.size();
  a.flags = one_folder ? MOBIUS_ARCHITECTURE_GRAPHS_IN_ONE_FOLDER : 0;
  if (task) a.default_runtime = task->runtimes.front().c_str();
  if (host->register_architecture(reg, &a) != MOBIUS_OK)
    throw Error("[plugin] the host refused model type '" + e.model_type + "'");
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
                          ConfigParser parse, GraphBuilder build, std::vector<std::string> graphs) {
  Entry& e = entries().emplace_back(
      Entry{model_type, task, {}, {}, {}, std::move(parse), std::move(build), host_, std::move(graphs), {}});
  register_entry(host_, reg_, e);
}

void PluginRegistrar::add_tasks(const std::string& model_type, std::vector<std::string> tasks, TaskConfigParser parse,
                                GraphBuilder build) {
  if (tasks.empty()) throw Error("[plugin] model type '" + model_type + "' registered with no task");
  Entry& e = entries().emplace_back(
      Entry{model_type, tasks.front(), std::move(tasks), {}, std::move(parse), {}, std::move(build), host_, {}, {}});
  for (const auto& t : e.tasks) e.task_names.push_back(t.c_str());
  register_entry(host_, reg_, e);
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

}  // namespace detail

}  // namespace mobius
