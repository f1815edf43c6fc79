// plugin.cpp - the C callbacks behind PluginRegistrar::add: exceptions become status + message.
#include "mobius/sdk/plugin.hpp"

#include <deque>

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

void fail(const mobius_host_api* host, mobius_context* ctx, const char* what) {
  if (host && host->set_error) host->set_error(ctx, what);
}

mobius_status parse_cb(void* user, mobius_context* ctx, const char* config_json,
                       mobius_string_sink* out) {
  auto* e = static_cast<Entry*>(user);
  try {
    nlohmann::json in = nlohmann::json::parse(config_json ? config_json : "");
    std::string s = e->parse(in).dump();
    out->write(out->opaque, s.data(), s.size());
    return MOBIUS_OK;
  } catch (const nlohmann::json::exception& ex) {
    fail(e->host, ctx, (std::string("[config] ") + ex.what()).c_str());
  } catch (const std::exception& ex) {
    fail(e->host, ctx, ex.what());
  } catch (...) {
    fail(e->host, ctx, "[config] unknown error in plugin");
  }
  return MOBIUS_ERROR;
}

mobius_status build_cb(void* user, mobius_context* ctx, const char* config_json) {
  auto* e = static_cast<Entry*>(user);
  try {
    BuildContext bc(e->host, ctx);
    e->build(bc, nlohmann::json::parse(config_json ? config_json : ""));
    return MOBIUS_OK;
  } catch (const nlohmann::json::exception& ex) {
    fail(e->host, ctx, (std::string("[config] ") + ex.what()).c_str());
  } catch (const std::exception& ex) {
    fail(e->host, ctx, ex.what());
  } catch (...) {
    fail(e->host, ctx, "[build] unknown error in plugin");
  }
  return MOBIUS_ERROR;
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
  if (!host || host->abi_version != MOBIUS_ABI_VERSION) return MOBIUS_ERROR;
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
}  // namespace detail

}  // namespace mobius
