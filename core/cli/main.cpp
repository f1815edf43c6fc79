// main.cpp - the mobius command line: build, list, plugins.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mobius/build.hpp"
#include "mobius/plugins.hpp"
#include "mobius/registry.hpp"

#ifndef MOBIUS_VERSION
#define MOBIUS_VERSION "0.0.0"
#endif

namespace {

std::atomic<bool> g_interrupted{false};

void on_signal(int sig) {
  g_interrupted = true;
  // A second signal ends the process at once; the next run removes the temp folder.
  ::signal(sig, SIG_DFL);
}

struct Loaded {
  mobius::PluginHost host;
  mobius::ModelRegistry registry;
  std::vector<mobius::PluginRecord> records;
};

// Every plugin, or (with `model_types`) only those whose manifest claims one of them: the
// others' manifests are read, their code is not run.
std::unique_ptr<Loaded> load_plugins(const std::vector<std::string>& paths,
                                     const std::vector<std::string>& model_types = {}) {
  auto l = std::make_unique<Loaded>();
  l->records = l->host.load(mobius::plugin_search_path(paths), l->registry, model_types);
  return l;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

int cmd_plugins(const std::vector<std::string>& paths, bool json) {
  auto l = load_plugins(paths);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : l->records) {
      const char* status = r.loaded ? "loaded" : r.deferred ? "deferred" : "error";
      out.push_back({{"name", r.name},
                     {"version", r.version},
                     {"vendor", r.vendor},
                     {"abi_version", r.abi_version},
                     {"library", r.library.string()},
                     {"manifest", r.manifest.string()},
                     {"origin", r.origin},
                     {"model_types", r.model_types},
                     {"status", status},
                     {"error", r.error}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (l->records.empty()) {
    std::cout << "no plugins found. Searched:";
    for (const auto& d : mobius::plugin_search_path(paths)) std::cout << " " << d.path.string();
    std::cout << "\n";
    return 0;
  }
  for (const auto& r : l->records) {
    std::string label = r.name.empty() ? r.library.filename().string() : r.name;
    if (r.deferred) {
      std::cout << "manifest " << label << " " << r.version << " " << r.library.string() << " ["
                << r.origin << "] (not loaded: not needed)\n";
    } else if (r.loaded) {
      std::cout << "loaded  " << label << " " << r.version << " ("
                << (r.vendor.empty() ? "unknown vendor" : r.vendor) << ", ABI " << r.abi_version
                << ") " << r.library.string() << " [" << r.origin << "]\n"
                << "        model types: " << join(r.registered) << "\n";
    } else {
      std::cout << "error   " << (r.library.empty() ? r.manifest : r.library).string() << ": "
                << r.error << " [" << r.origin << "]\n";
    }
  }
  return 0;
}

void warn_failed(const Loaded& l) {
  for (const auto& r : l.records)
    if (!r.loaded && !r.deferred)
      std::cerr << "mobius: warning: plugin " << (r.library.empty() ? r.manifest : r.library).string()
                << " not loaded: " << r.error << "\n";
}

int cmd_list(const std::vector<std::string>& paths, bool json) {
  auto l = load_plugins(paths);
  warn_failed(*l);
  const auto& reg = l->registry;
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : reg.architectures()) {
      const auto& r = reg.get(t);
      nlohmann::json shadowed = nlohmann::json::array();
      for (const auto& s : reg.shadowed())
        if (s.model_type == t) shadowed.push_back({{"plugin", s.plugin}, {"library", s.plugin_path}});
      out.push_back({{"model_type", t},
                     {"task", r.task},
                     {"plugin", r.plugin},
                     {"version", r.version},
                     {"vendor", r.vendor},
                     {"library", r.plugin_path},
                     {"shadows", shadowed}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (reg.size() == 0) {
    std::cout << "no architectures registered (see `mobius plugins` for what was found)\n";
    return 0;
  }
  size_t w = 10;
  for (const auto& t : reg.architectures()) w = std::max(w, t.size());
  for (const auto& t : reg.architectures()) {
    const auto& r = reg.get(t);
    std::cout << t << std::string(w + 2 - t.size(), ' ') << r.task << "  " << r.plugin << " "
              << r.version << (r.vendor.empty() ? "" : " (" + r.vendor + ")");
    for (const auto& s : reg.shadowed())
      if (s.model_type == t) std::cout << "  [overrides " << s.plugin << " " << s.plugin_path << "]";
    std::cout << "\n";
  }
  return 0;
}

// The model types the checkpoint's config.json names; empty when it cannot be read (the build
// then reports why, with every plugin loaded).
std::vector<std::string> wanted_types(const std::string& model) {
  try {
    return mobius::config_model_types(std::filesystem::path(model) / "config.json");
  } catch (const std::exception&) {
    return {};
  }
}

int cmd_build(const std::string& model, const std::string& out,
              const std::vector<std::string>& paths, const mobius::BuildOptions& opts,
              int threads) {
  // Only the plugin whose manifest claims the config's model type runs; when none does, every
  // plugin is loaded so the error can suggest near matches.
  std::vector<std::string> types = wanted_types(model);
  auto l = load_plugins(paths, types);
  if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) {
        return l->registry.contains(t);
      }))
    l = load_plugins(paths);
  if (!opts.quiet) warn_failed(*l);
  auto t0 = std::chrono::steady_clock::now();
  mobius::ModelPackage pkg = [&] {
    try {
      return mobius::build(model, opts, l->registry);
    } catch (const mobius::Error& e) {
      std::string m = e.what();
      if (m.rfind("[registry] unknown model type", 0) != 0) throw;
      m += "; plugin folders searched:";
      for (const auto& d : mobius::plugin_search_path(paths)) m += " " + d.path.string();
      throw mobius::Error(m + " (see `mobius plugins`)");
    }
  }();
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  mobius::SaveOptions so;
  so.progress = !opts.quiet && ::isatty(STDERR_FILENO);
  so.threads = threads;
  so.cancelled = [] { return g_interrupted.load(); };
  pkg.save(out, so);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!opts.quiet) {
    char line[256];
    std::snprintf(line, sizeof(line), "%zu nodes, %zu initializers, %.1f MiB of weights, %.2f s",
                  pkg.node_count(), pkg.initializer_count(),
                  static_cast<double>(pkg.weight_bytes()) / (1024.0 * 1024.0), secs);
    std::cout << "built " << pkg.model_type() << " -> " << out << " (" << line << ")\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mobius " MOBIUS_VERSION
      " - build Hugging Face checkpoints into ONNX models for ONNX Runtime.\n"
      "Architectures come from plugins, searched in every --plugin-path, then\n"
      "MOBIUS_PLUGIN_PATH (colon-separated), then the installed plugins folder."};
  app.require_subcommand(1);
  app.set_version_flag("--version", MOBIUS_VERSION);

  std::vector<std::string> plugin_paths;
  bool json = false;
  auto add_plugin_path = [&](CLI::App* c) {
    c->add_option("--plugin-path", plugin_paths,
                  "Folder to search for plugins (repeatable; searched before the defaults)")
        ->type_name("DIR");
  };

  std::string model, out;
  mobius::BuildOptions opts;
  CLI::App* build = app.add_subcommand("build", "Build a checkpoint into OUT/model.onnx + external data");
  build->add_option("--model,-m", model, "Checkpoint folder holding config.json and weights")
      ->required()
      ->type_name("DIR");
  build->add_option("out", out, "Output folder (replaced atomically when it holds an earlier model)")
      ->required()
      ->type_name("OUT");
  build->add_option("--dtype", opts.dtype, "Weight dtype of the model")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  build->add_flag("--no-weights", opts.no_weights,
                  "Build the graph only; weights are zeros in a sparse data file");
  // Tensors stream in bounded chunks, so more threads cost little memory.
  int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  build->add_option("--threads,-j", threads,
                    "Tensors written at once (the output bytes are identical for any value)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  build->add_flag("--quiet,-q", opts.quiet, "Print errors only (no progress bar)");
  add_plugin_path(build);

  CLI::App* list = app.add_subcommand("list", "List the model types the plugins register");
  list->add_flag("--json", json, "Machine-readable output");
  add_plugin_path(list);

  CLI::App* plugins = app.add_subcommand("plugins", "List every plugin found, loaded or not, and why");
  plugins->add_flag("--json", json, "Machine-readable output");
  add_plugin_path(plugins);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*build) return cmd_build(model, out, plugin_paths, opts, threads);
    if (*list) return cmd_list(plugin_paths, json);
    if (*plugins) return cmd_plugins(plugin_paths, json);
  } catch (const mobius::Error& e) {
    // A plugin's fault (its message names the plugin) is never reported as the user's.
    bool plugin = e.kind() == mobius::ErrorKind::Plugin || e.kind() == mobius::ErrorKind::Internal;
    std::cerr << "mobius: " << (plugin ? "plugin error: " : "error: ") << e.what() << "\n";
    return g_interrupted ? 130 : 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "mobius: internal error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mobius: error: " << e.what() << "\n";
    return g_interrupted ? 130 : 1;
  }
  return 0;
}
