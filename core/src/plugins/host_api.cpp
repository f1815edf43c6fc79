// host_api.cpp - the host's side of the C ABI: every entry validates its arguments, catches
// every exception and turns it into a status plus last_error (the hourglass). Structs from a
// plugin are read through read_abi_struct: only the bytes its struct_size declares. Here: the
// table itself, diagnostics, registration, runtime and source files; graph building is
// host_graph.cpp, the weight plan host_weights.cpp, the budget host_budget.cpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>

#include "checkpoint/checkpoint_files.hpp"
#include "plugins/context.hpp"
#include "plugins/host_calls.hpp"
#include "save/layout.hpp"
#include "mobius/build.hpp"
#include "mobius/error.hpp"
#include "util/untrusted.hpp"

#include <nlohmann/json.hpp>

mobius_context::mobius_context() {
  options.struct_size = sizeof(options);
  options.dtype = MOBIUS_DTYPE_FLOAT;
  options.execution_provider = execution_provider.c_str();
  // The operator set and weight quantization; a build sets them from its options.
  options.ops = ops.c_str();
  options.weight_bits = 0;
  options.block_size = 32;
  options.symmetric = 0;
  options.accuracy_level = 4;
  graphs.emplace_back();
  mobius_graph& g = graphs.front();
  g.ctx = this;
  g.proto = model.mutable_graph();
  g.is_main = true;
}

namespace mobius::host {

namespace {

thread_local std::string g_orphan_error;  // errors of calls made without a context

}  // namespace

void record(mobius_context* ctx, const char* message) noexcept {
  try {
    (ctx ? ctx->last_error : g_orphan_error) = message;
  } catch (...) {
    // Out of memory for the message itself: the status still says the call failed.
  }
}

std::string str(const char* s, const char* what) {
  if (!s) throw Error(std::string("[abi] ") + what + " is NULL");
  return s;
}

void check_name(const std::string& name, const char* what) {
  if (name.empty()) throw Error(std::string("[abi] empty ") + what + " name");
  if (name.size() > 4096) throw Error(std::string("[abi] ") + what + " name too long");
}

bool known_dtype(int32_t dt) { return dtype_size(dt) != 0 || dt == MOBIUS_DTYPE_BOOL; }

}  // namespace mobius::host

namespace mobius {
namespace {

using namespace host;

// --- diagnostics ---

void api_log(mobius_context* ctx, int32_t level, const char* message) {
  if (!message) return;
  if (ctx && ctx->quiet && level < MOBIUS_LOG_WARNING) return;
  if (level < MOBIUS_LOG_INFO) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  try {
    // A plugin's words may quote its config: made safe for the terminal and cut.
    std::cerr << "mobius: " << names[std::clamp(level, 0, 3)] << ": " << printable_lines(message)
              << "\n";
  } catch (...) {
    // A log line that cannot be written is dropped.
  }
}

const char* api_last_error(mobius_context* ctx) {
  return ctx ? ctx->last_error.c_str() : g_orphan_error.c_str();
}

constexpr size_t kMaxPluginMessage = 64u << 10;

std::string cut_message(const char* message) {
  const size_t len = ::strnlen(message, kMaxPluginMessage + 1);
  if (len <= kMaxPluginMessage) return std::string(message, len);
  size_t n = kMaxPluginMessage;
  while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  return std::string(message, n) + "... (cut at " + std::to_string(kMaxPluginMessage >> 10) +
         " KiB)";
}

void api_set_error_kind(mobius_context* ctx, mobius_error_kind kind, const char* message) {
  try {
    // A copy first: the message may be last_error(ctx) itself. A plugin's message may quote
    // its config at any length; the host keeps at most kMaxPluginMessage bytes of it.
    std::string m = message ? cut_message(message) : "unknown plugin error";
    if (ctx) {
      ctx->plugin_error = m;
      ctx->plugin_error_kind = kind;
      ctx->last_error = m;
    } else {
      g_orphan_error = m;
    }
  } catch (...) {
    if (ctx) ctx->plugin_error_kind = MOBIUS_ERROR_KIND_INTERNAL;
  }
}

// The version-1 call: a plugin error, unless the message says it is about the config.
void api_set_error(mobius_context* ctx, const char* message) {
  bool config = message && std::strncmp(message, "[config]", 8) == 0;
  api_set_error_kind(ctx, config ? MOBIUS_ERROR_KIND_CONFIG : MOBIUS_ERROR_KIND_PLUGIN, message);
}

// The exception for a plugin callback that failed: the kind and message the plugin set, or
// `fallback` (a plugin error) when it set none.
Error plugin_failure(mobius_context* ctx, const std::string& fallback) {
  if (ctx->plugin_error.empty()) return Error(ErrorKind::Plugin, fallback);
  return Error(error_kind_from_abi(ctx->plugin_error_kind), ctx->plugin_error);
}

// --- registration ---

mobius_status api_register_architecture(mobius_registrar* reg, const mobius_architecture* arch) {
  if (!reg) return MOBIUS_ERROR;
  try {
    const mobius_architecture av =
        read_abi_struct(arch, MOBIUS_ARCHITECTURE_SIZE_V1, "register_architecture: architecture");
    const mobius_architecture* a = &av;
    std::string model_type = str(a->model_type, "model_type");
    std::string task = str(a->task, "task");
    check_name(model_type, "model type");
    if (!a->build || !a->parse_config)
      throw Error("[abi] model type " + quote_name(model_type) + ": build or parse_config is NULL");
    Registration r;
    r.model_type = model_type;
    r.task = task;
    r.plugin = reg->plugin_name;
    r.plugin_path = reg->plugin_path;
    r.version = reg->version;
    r.vendor = reg->vendor;
    r.priority = reg->priority;
    if (a->n_graphs > 0) {  // zero when the plugin's struct ends before the field
      if (!a->graphs || a->n_graphs > 64)
        throw Error("[abi] model type " + quote_name(model_type) +
                    ": graphs is NULL or lists more than 64 names");
      for (size_t i = 0; i < a->n_graphs; ++i) {
        std::string g = str(a->graphs[i], "graph name");
        if (g.empty() || g.size() > 64 ||
            !std::all_of(g.begin(), g.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_';
            }) ||
            std::find(r.graphs.begin(), r.graphs.end(), g) != r.graphs.end())
          throw Error("[abi] model type " + quote_name(model_type) + ": graph name " +
                      quote_name(g) + " is empty, repeated, or not letters, digits and '_'");
        r.graphs.push_back(std::move(g));
      }
    }
    if (a->flags & ~MOBIUS_ARCHITECTURE_GRAPHS_IN_ONE_FOLDER)
      throw Error("[abi] model type " + quote_name(model_type) + ": flags has bits this host does not know");
    if (a->flags & MOBIUS_ARCHITECTURE_GRAPHS_IN_ONE_FOLDER) {  // zero when the struct ends before it
      if (r.graphs.empty())
        throw Error("[abi] model type " + quote_name(model_type) +
                    ": graphs_in_one_folder is set but it registers no graphs");
      r.graphs_in_one_folder = true;
    }
    if (a->default_runtime) {  // NULL when the plugin's struct ends before the field
      r.default_runtime = str(a->default_runtime, "default_runtime");
      const std::vector<std::string> known = runtimes();
      if (std::find(known.begin(), known.end(), r.default_runtime) == known.end())
        throw Error("[abi] model type " + quote_name(model_type) + ": default_runtime " +
                    quote_name(r.default_runtime) + " is not a runtime mobius lays folders out for");
    }
    if (a->n_tasks > 0) {  // zero when the plugin's struct ends before the field
      if (!a->tasks || a->n_tasks > 64)
        throw Error("[abi] model type " + quote_name(model_type) + ": tasks is NULL or lists more than 64");
      for (size_t i = 0; i < a->n_tasks; ++i) {
        std::string t = str(a->tasks[i], "task");
        if (t.empty() || std::find(r.tasks.begin(), r.tasks.end(), t) != r.tasks.end())
          throw Error("[abi] model type " + quote_name(model_type) + ": task " + quote_name(t) +
                      " is empty or listed twice");
        r.tasks.push_back(std::move(t));
      }
      if (std::find(r.tasks.begin(), r.tasks.end(), task) == r.tasks.end())
        throw Error("[abi] model type " + quote_name(model_type) + ": its task " + quote_name(task) +
                    " is not one of its tasks");
    } else {
      r.tasks.push_back(task);
    }
    auto parse = a->parse_config;
    auto build = a->build;
    void* user = a->user;
    r.parse_config = [parse, user, model_type](mobius_context* ctx, const std::string& json) {
      struct Sink {
        std::string text;
        bool failed = false;
      } out;
      mobius_string_sink sink{&out, [](void* o, const char* d, size_t n) {
                                auto* s = static_cast<Sink*>(o);
                                try {
                                  if (d) s->text.append(d, n);
                                } catch (...) {
                                  s->failed = true;  // never throw into the plugin
                                }
                              }};
      // The text a plugin parses is within the config limits (size, nesting, value count),
      // whoever read it: the plugin's parser never sees a document it could choke on.
      parse_json_limited(json, "config.json", kConfigLimits);
      ctx->plugin_error.clear();
      ctx->plugin_error_kind = 0;
      mobius_status st = MOBIUS_ERROR;
      try {
        st = parse(user, ctx, json.c_str(), &sink);
      } catch (...) {
        throw Error(ErrorKind::Internal, "[plugin] parse_config of " + quote_name(model_type) +
                                             " let an exception cross the C ABI");
      }
      if (st != MOBIUS_OK)
        throw plugin_failure(ctx, "[plugin] parse_config of " + quote_name(model_type) +
                                      " failed without a message");
      if (out.failed) throw Error(ErrorKind::Internal, "[internal] out of memory");
      return std::move(out.text);
    };
    r.build = [build, user, model_type](mobius_context* ctx, const std::string& json) {
      ctx->plugin_error.clear();
      ctx->plugin_error_kind = 0;
      mobius_status st = MOBIUS_ERROR;
      try {
        st = build(user, ctx, json.c_str());
      } catch (...) {
        throw Error(ErrorKind::Internal,
                    "[plugin] build of " + quote_name(model_type) + " let an exception cross the C ABI");
      }
      if (st != MOBIUS_OK)
        throw plugin_failure(ctx, "[plugin] build of " + quote_name(model_type) + " failed without a message");
    };
    for (const auto& existing : reg->registrations)
      if (existing.model_type == model_type)
        throw Error("[registry] model type " + quote_name(model_type) + " registered twice");
    reg->registrations.push_back(std::move(r));
    return MOBIUS_OK;
  } catch (const std::exception& e) {
    try {
      if (reg->error.empty()) reg->error = e.what();
    } catch (...) {
    }
  } catch (...) {
    try {
      if (reg->error.empty()) reg->error = "[internal] unknown exception in the host";
    } catch (...) {
    }
  }
  return MOBIUS_ERROR;
}

void api_registrar_error(mobius_registrar* reg, const char* message) {
  try {
    if (reg && reg->error.empty()) reg->error = message ? message : "unknown error";
  } catch (...) {
  }
}

const mobius_build_options* api_build_options(mobius_context* ctx) {
  return ctx ? &ctx->options : nullptr;
}
// --- appended after version 1 ---

bool reserved_file(const std::string& n) {
  return n == "model.onnx" || n == "model.onnx.data" || n == "mobius_provenance.json";
}

mobius_status api_add_runtime_file(mobius_context* ctx, const char* name, const void* data,
                                   size_t size) {
  return guarded(ctx, [&] {
    if (!ctx) throw Error("[abi] NULL context");
    std::string n = str(name, "runtime file name");
    bool bare = !n.empty() && n.size() <= 255 && n[0] != '.' &&
                n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789._-") == std::string::npos;
    if (!bare)
      throw Error("[abi] runtime file name " + quote_name(n) +
                  " is not a bare file name (letters, digits, '.', '_', '-'; not starting with '.')");
    if (reserved_file(n)) throw Error("[abi] runtime file " + quote_name(n) + " is written by the host itself");
    if (size && !data) throw Error("[abi] runtime file " + quote_name(n) + ": data is NULL");
    if (size > (64u << 20)) throw Error("[abi] runtime file " + quote_name(n) + " is larger than 64 MiB");
    for (const auto& f : ctx->runtime_files)
      if (f.first == n) throw Error("[abi] runtime file " + quote_name(n) + " added twice");
    ctx->runtime_files.emplace_back(n, std::string(static_cast<const char*>(data), size));
  });
}

// The config.json text, only when it is within the config limits (so a plugin that parses it
// again never sees a document it could choke on); else none.
const char* api_source_config(mobius_context* ctx) {
  if (!ctx || !ctx->source_config) return nullptr;
  if (!ctx->source_config_ok) {
    try {
      parse_json_limited(*ctx->source_config, "config.json", kConfigLimits);
      ctx->source_config_ok = true;
    } catch (...) {
      ctx->source_config_ok = false;
    }
  }
  return *ctx->source_config_ok ? ctx->source_config->c_str() : nullptr;
}

// The small files a plugin may read from the checkpoint folder: the runtime files a runtime
// config is made from, an audio model's preprocessor_config.json (what its graph reads), a
// sentence-transformers folder's modules.json, and a module's config
// ("<module>/config.json", the module one folder name of letters, digits, '_', '-' and '.', not
// starting with '.').
bool allowed_source_file(const std::string& n) {
  static const char* const kAllowed[] = {"generation_config.json", "tokenizer_config.json",
                                         "special_tokens_map.json", "chat_template.jinja", "modules.json",
                                         "preprocessor_config.json"};
  if (std::find(std::begin(kAllowed), std::end(kAllowed), n) != std::end(kAllowed)) return true;
  const size_t slash = n.find('/');
  if (slash == std::string::npos || n.substr(slash) != "/config.json") return false;
  return is_component_name(n.substr(0, slash));
}

// A small file of the checkpoint folder, read once under the folder's rule; JSON files only
// when within the config limits. nullopt when the folder has none; throws mobius::Error
// "[checkpoint] <file>: <reason>" when it cannot be read.
const std::optional<std::string>& read_source_file(mobius_context* ctx, const std::string& n) {
  if (!allowed_source_file(n))
    throw Error("[abi] " + quote_name(n) + " is not a file of the checkpoint folder a plugin may read");
  auto it = ctx->source_files.find(n);
  if (it != ctx->source_files.end()) return it->second;
  std::optional<std::string> text;
  const std::filesystem::path shown = ctx->source_dir / n;
  const mobius::ModelFolder folder(ctx->source_dir);
  const size_t slash = n.find('/');
  if (slash == std::string::npos ? folder.has(n) : folder.has(n.substr(0, slash))) {
    FolderResult r = folder.try_open(n);
    if (r.error == FolderError::Missing) {
      // A module folder without the file: absent.
    } else {
      text = folder.read_text(n, shown.string(), "checkpoint", kConfigLimits.max_bytes);
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) parse_json_limited(*text, shown.string(), kConfigLimits);
      if (text->find('\0') != std::string::npos)
        throw Error("[checkpoint] " + shown.string() + ": holds a NUL byte; it is not a text file");
    }
  }
  return ctx->source_files.emplace(n, std::move(text)).first->second;
}

// source_file: read_source_file with every failure as absence.
const char* api_source_file(mobius_context* ctx, const char* name) {
  if (!ctx || !name || ctx->source_dir.empty()) return nullptr;
  try {
    const std::optional<std::string>& text = read_source_file(ctx, name);
    return text ? text->c_str() : nullptr;
  } catch (...) {
    return nullptr;  // unreadable, too large or too deep: as if absent
  }
}

mobius_status api_read_source_file(mobius_context* ctx, const char* name, mobius_string_sink* out, int32_t* found) {
  if (found) *found = 0;
  return guarded(ctx, [&] {
    if (!name || !out || !out->write || !found) throw Error("[abi] read_source_file: NULL argument");
    if (ctx->source_dir.empty()) return;
    const std::optional<std::string>& text = read_source_file(ctx, name);
    if (!text) return;
    *found = 1;
    out->write(out->opaque, text->data(), text->size());
  });
}

mobius_host_api make_api() {
  mobius_host_api a{};
  a.struct_size = sizeof(a);
  a.abi_version = MOBIUS_ABI_VERSION;
  a.log = &api_log;
  a.last_error = &api_last_error;
  a.set_error = &api_set_error;
  a.register_architecture = &api_register_architecture;
  a.registrar_error = &api_registrar_error;
  a.build_options = &api_build_options;
  add_graph_calls(a);
  add_weight_calls(a);
  a.set_error_kind = &api_set_error_kind;
  a.add_runtime_file = &api_add_runtime_file;
  a.source_config = &api_source_config;
  a.source_file = &api_source_file;
  a.read_source_file = &api_read_source_file;
  return a;
}

}  // namespace


const mobius_host_api* host_api() {
  static const mobius_host_api api = make_api();
  return &api;
}

void run_plugin_register(mobius_plugin_register_fn fn, mobius_registrar& reg) {
  mobius_status st = MOBIUS_ERROR;
  try {
    st = fn(host_api(), &reg);
  } catch (...) {
    throw Error(ErrorKind::Internal, "mobius_plugin_register let an exception cross the C ABI");
  }
  if (st != MOBIUS_OK)
    throw Error(reg.error.empty() ? "register() failed without a message" : reg.error);
  if (!reg.error.empty()) throw Error(reg.error);
}

}  // namespace mobius
