// main.cpp - the mobius command line: build, download, list, plugins.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <string_view>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "info.hpp"
#include "mobius/build.hpp"
#include "mobius/convert.hpp"
#include "mobius/hub.hpp"
#include "mobius/pipeline.hpp"
#include "mobius/plugins.hpp"
#include "mobius/registry.hpp"

#ifndef MOBIUS_VERSION
#define MOBIUS_VERSION "0.0.0"
#endif

namespace {

std::atomic<bool> g_interrupted{false};

// Every message the CLI prints to a terminal passes through here, as the last line of defence
// for values quoted from files: control bytes (C0 but '\n' between lines, DEL, C1 as UTF-8, and
// any byte that is not UTF-8) become \xNN, and the whole is cut at 16 KiB.
std::string terminal_safe(std::string_view s) {
  constexpr size_t kMax = 16u << 10;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  auto escape = [&](size_t n) {
    for (size_t k = 0; k < n; ++k) {
      const auto u = static_cast<unsigned char>(s[i + k]);
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
    i += n;
  };
  while (i < s.size() && out.size() < kMax) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u == '\n' || (u >= 0x20 && u < 0x7F)) {
      out += static_cast<char>(u);
      ++i;
      continue;
    }
    if (u < 0x80) {
      escape(1);
      continue;
    }
    // A UTF-8 sequence is kept when it is valid and not a C1 control (U+0080..U+009F).
    const size_t n = u >= 0xC2 && u <= 0xDF ? 2 : u >= 0xE0 && u <= 0xEF ? 3 : u >= 0xF0 && u <= 0xF4 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size() && !(u == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0);
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      escape(1);
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size() - i) + " more bytes not shown)";
  return out;
}

void on_signal(int sig) {
  g_interrupted = true;
  // A second signal ends the process at once; the next run removes the temp folder.
  ::signal(sig, SIG_DFL);
}

// Every plugin of the search path.
std::shared_ptr<mobius::PluginSet> load_plugins(const std::vector<std::string>& paths) {
  return mobius::load_plugins(mobius::plugin_search_path(paths));
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
                     {"aliases", r.aliases},
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
    } else if (r.loaded && r.library.empty()) {
      std::cout << "loaded  " << label << " " << r.version << " ("
                << (r.vendor.empty() ? "unknown vendor" : r.vendor) << ", manifest only) "
                << r.manifest.string() << " [" << r.origin << "]\n";
      for (const auto& [from, to] : r.aliases)
        std::cout << "        alias " << from << " -> " << to << "\n";
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

void warn_failed(const mobius::PluginSet& l) {
  for (const auto& f : l.failures()) std::cerr << terminal_safe("mobius: warning: " + f) << "\n";
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
                     {"tasks", r.tasks},
                     {"default_runtime", r.default_runtime.empty() ? std::string("ort-genai") : r.default_runtime},
                     {"plugin", r.plugin},
                     {"version", r.version},
                     {"vendor", r.vendor},
                     {"library", r.plugin_path},
                     {"alias_of", r.alias_of},
                     {"builder_plugin", r.alias_of.empty() ? r.plugin : r.target_plugin},
                     {"fallback", r.fallback},
                     {"shadows", shadowed}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (reg.size() == 0) {
    std::cout << "no architectures registered (see `mobius plugins` for what was found)\n";
    return 0;
  }
  // Each type's tasks, the one it builds by default first.
  auto tasks_of = [](const mobius::Registration& r) {
    std::string s;
    for (const auto& t : r.tasks.empty() ? std::vector<std::string>{r.task} : r.tasks) s += (s.empty() ? "" : ",") + t;
    return s;
  };
  size_t w = 10, tw = 4;
  for (const auto& t : reg.architectures()) {
    w = std::max(w, t.size());
    tw = std::max(tw, tasks_of(reg.get(t)).size());
  }
  for (const auto& t : reg.architectures()) {
    const auto& r = reg.get(t);
    const std::string tasks = tasks_of(r);
    std::cout << t << std::string(w + 2 - t.size(), ' ') << tasks << std::string(tw + 2 - tasks.size(), ' ')
              << r.plugin << " "
              << r.version << (r.vendor.empty() ? "" : " (" + r.vendor + ")");
    if (r.fallback) std::cout << "  [also builds an unknown decoder type whose tensors are " << t << "'s]";
    // Where an alias comes from: the manifest that declared it, and what builds it.
    if (!r.alias_of.empty())
      std::cout << "  [alias of " << r.alias_of << ", built by plugin " << r.target_plugin
                << "; declared in " << r.plugin_path << "]";
    for (const auto& s : reg.shadowed())
      if (s.model_type == t) std::cout << "  [overrides " << s.plugin << " " << s.plugin_path << "]";
    std::cout << "\n";
  }
  return 0;
}

int cmd_build(const std::string& model_arg, const std::string& revision, const std::string& out,
              const std::vector<std::string>& paths, const mobius::BuildOptions& opts, int threads,
              const std::vector<std::string>& components) {
  mobius::ConvertOptions co;
  co.build = opts;
  co.revision = revision;
  co.components = components;
  co.out = out;
  co.plugin_paths = paths;
  co.download_progress = !opts.quiet && ::isatty(STDERR_FILENO);
  co.warn = [](const std::string& w) { std::cerr << terminal_safe("mobius: warning: " + w) << "\n"; };
  const mobius::ConvertedModel built = mobius::convert(model_arg, co);
  auto t0 = std::chrono::steady_clock::now();
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  mobius::SaveOptions so;
  so.progress = !opts.quiet && ::isatty(STDERR_FILENO);
  so.threads = threads;
  so.cancelled = [] { return g_interrupted.load(); };
  built.save(out, so);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opts.quiet) return 0;
  const auto parts = built.parts();
  if (parts.size() == 1 && parts.front().folder.empty() && built.copied().empty() &&
      parts.front().graph.empty()) {
    const mobius::ModelPackage& pkg = *parts.front().package;
    char line[256];
    std::snprintf(line, sizeof(line), "%zu nodes, %zu initializers, %.1f MiB of weights, %.2f s",
                  pkg.node_count(), pkg.initializer_count(),
                  static_cast<double>(pkg.weight_bytes()) / (1024.0 * 1024.0), secs);
    std::cout << terminal_safe("built " + pkg.model_type() + " for " + pkg.runtime() + " -> " + out + " (" + line + ")")
              << "\n";
    return 0;
  }
  for (const auto& p : parts) {
    char line[160];
    std::snprintf(line, sizeof(line), "%zu nodes, %.1f MiB of weights", p.package->node_count(),
                  static_cast<double>(p.package->weight_bytes()) / (1024.0 * 1024.0));
    std::cout << terminal_safe("built " + p.package->model_type() + (p.graph.empty() ? "" : " " + p.graph) + " -> " +
                               (p.folder.empty() ? std::filesystem::path(out) / p.package->graph_file()
                                                 : std::filesystem::path(out) / p.folder)
                                   .string() +
                               " (" + line + ")")
              << "\n";
  }
  for (const auto& c : built.copied())
    std::cout << terminal_safe("copied " + c + " -> " + (std::filesystem::path(out) / c).string()) << "\n";
  char line[64];
  std::snprintf(line, sizeof(line), "%.2f s", secs);
  std::cout << terminal_safe("built " + std::to_string(parts.size()) + " graph(s) for " + built.runtime() + " -> " +
                             out + " (" + line + ")")
            << "\n";
  return 0;
}

// Fetches only, and prints the snapshot folder (as `hf download` does).
int cmd_download(const std::string& spec, const std::string& revision, bool quiet) {
  mobius::HubOptions ho;
  ho.revision = revision;
  ho.quiet = quiet;
  ho.progress = !quiet && ::isatty(STDERR_FILENO);
  std::cout << mobius::fetch_from_hub(spec, ho).dir.string() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mobius " MOBIUS_VERSION
      " - build Hugging Face checkpoints into ONNX models for ONNX Runtime.\n"
      "Architectures come from plugins, searched in every --plugin-path, then\n"
      "MOBIUS_PLUGIN_PATH (colon-separated), then the installed plugins folder.\n"
      "The sha256 of a local checkpoint's files (for mobius_provenance.json) is kept in\n"
      "MOBIUS_CACHE_DIR (default ~/.cache/mobius; none: off) for the next build of the\n"
      "same, unchanged files."};
  app.require_subcommand(1);
  app.set_version_flag("--version", MOBIUS_VERSION);

  std::vector<std::string> plugin_paths;
  bool json = false;
  auto add_plugin_path = [&](CLI::App* c) {
    c->add_option("--plugin-path", plugin_paths,
                  "Folder to search for plugins (repeatable; searched before the defaults)")
        ->type_name("DIR");
  };

  std::string model, out, revision;
  mobius::BuildOptions opts;
  CLI::App* build = app.add_subcommand(
      "build", "Build a checkpoint into an ONNX model folder laid out for a runtime (--runtime)");
  build->add_option("--model,-m", model,
                    "Checkpoint folder holding config.json and weights (or a diffusers pipeline\n"
                    "folder holding model_index.json), or a Hugging Face Hub id org/name[@REV]\n"
                    "fetched into the huggingface_hub cache")
      ->required()
      ->type_name("DIR|ORG/NAME");
  build->add_option("--revision", revision, "Hub branch, tag or commit of --model (default: main)")
      ->type_name("REV");
  build->add_option("out", out, "Output folder (replaced atomically when it holds an earlier model)")
      ->required()
      ->type_name("OUT");
  build->add_option("--dtype", opts.dtype,
                    "Weight dtype of the model:\n"
                    "  f32, f16, bf16  every weight in that dtype (on the CPU, f16 halves the\n"
                    "                  files but ONNX Runtime holds more memory than for f32;\n"
                    "                  bf16 is cast to float32 where it is used)\n"
                    "  int4, int8      MatMul weights block-quantized (RTN, MatMulNBits; needs\n"
                    "                  --ops ort); norms and untied embeddings stay float, an\n"
                    "                  int4 table tied to lm_head is quantized once for both\n"
                    "                  (GatherBlockQuantized). int4 is the fastest and smallest\n"
                    "                  choice on the CPU")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "int4", "int8"}))
      ->capture_default_str();
  build->add_option("--ep", opts.ep,
                    "Execution provider the graph is tuned for: cpu or cuda (float32 attention on\n"
                    "CUDA keeps standard operators: GroupQueryAttention there is f16/bf16 only)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  build->add_option("--ops", opts.ops,
                    "Operators the graph may use:\n"
                    "  ort       ONNX Runtime's fused operators where they fit (GroupQueryAttention\n"
                    "            with rotary inside, SimplifiedLayerNormalization, MatMulNBits)\n"
                    "  standard  the ONNX domain only (opset 17), for any ONNX runtime")
      ->check(CLI::IsMember({"ort", "standard"}))
      ->capture_default_str();
  build->add_option("--block-size", opts.block_size,
                    "int4/int8: weights per quantization block along the input dimension")
      ->check(CLI::IsMember({16, 32, 64, 128, 256}))
      ->capture_default_str();
  build->add_flag("--symmetric,!--asymmetric", opts.symmetric,
                  "int4/int8: symmetric quantization, no zero points (the default, as ONNX\n"
                  "Runtime GenAI's builder; its kernels are the fastest), or asymmetric, with a\n"
                  "zero point per block (a closer fit for skewed blocks, about 15% slower decode)");
  build->add_option("--accuracy-level", opts.accuracy_level,
                    "int4/int8: MatMulNBits accuracy_level, the compute type of its kernels\n"
                    "(0 unset, 1 f32, 2 f16, 3 bf16, 4 int8; default 4 on cpu, 0 on cuda)")
      ->check(CLI::Range(0, 4));
  build->add_flag("--expert-loop", opts.expert_loop,
                  "int4: run mixture-of-experts layers as a loop over the experts hit, not as\n"
                  "ONNX Runtime's fused QMoE (the default where it computes the same: symmetric\n"
                  "int4 SiLU experts on the CPU); for a runtime without QMoE");
  build->add_option("--runtime", opts.runtime,
                    "Runtime the output folder is laid out for:\n"
                    "  ort-genai        ONNX Runtime GenAI: model.onnx, model.onnx.data,\n"
                    "                   genai_config.json, tokenizer files\n"
                    "  onnxruntime      ONNX Runtime alone: model.onnx, model.onnx.data\n"
                    "  transformers.js  onnx/model.onnx (f16: onnx/model_fp16.onnx) and\n"
                    "                   model.onnx_data, config.json with transformers.js_config,\n"
                    "                   tokenizer files\n"
                    "A model type the runtime cannot run is refused with the reason. Default:\n"
                    "the model's task's: ort-genai for text generation (onnxruntime, with a\n"
                    "warning, for a model GenAI cannot run), transformers.js for encoders\n"
                    "(feature extraction, classification, fill-mask), onnxruntime for the others\n"
                    "(Stable Diffusion's graphs)")
      ->check(CLI::IsMember(mobius::runtimes()));
  build->add_option("--task", opts.task,
                    "The task to build, for a model type that builds several (`mobius list`\n"
                    "shows each type's): e.g. feature-extraction builds a BERT classifier's base\n"
                    "model. Default: the head the checkpoint's config.json names in its\n"
                    "architectures (BertForSequenceClassification: sequence-classification)")
      ->type_name("TASK");
  build->add_option("--position-ids", opts.positions,
                    "Where a text-generation graph's rotary positions come from:\n"
                    "  input  a position_ids input, rotated at as given: a caller's own\n"
                    "         positions (packed or gapped sequences) are honoured\n"
                    "  slots  GroupQueryAttention rotates each token at its cache slot and the\n"
                    "         graph has no position_ids input: the same logits for generation's\n"
                    "         positions (cumsum(attention_mask) - 1), and the fastest\n"
                    "Default: slots for ort-genai (GenAI feeds generation's positions), input\n"
                    "for onnxruntime and transformers.js. --ops standard always takes input")
      ->check(CLI::IsMember({"input", "slots"}));
  build->add_flag("--no-weights", opts.no_weights,
                  "Build the graph only; weights are zeros in a sparse data file");
  // Tensors stream in bounded chunks, so more threads cost little memory.
  int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  build->add_option("--threads,-j", threads,
                    "Tensors written at once (the output bytes are identical for any value)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  std::vector<std::string> components;
  build->add_option("--component", components,
                    "For a diffusers pipeline (a folder with model_index.json, built into\n"
                    "OUT/text_encoder, OUT/unet, OUT/vae_encoder, OUT/vae_decoder): build only\n"
                    "this component (e.g. unet, or vae for both of its graphs); repeatable")
      ->type_name("NAME");
  build->add_flag("--quiet,-q", opts.quiet, "Print errors only (no progress bar)");
  add_plugin_path(build);

  std::string repo;
  bool download_quiet = false;
  CLI::App* download = app.add_subcommand(
      "download", "Fetch a hub model's (or diffusers pipeline's) config, tokenizer and weights into the huggingface_hub "
                  "cache; print its snapshot folder");
  download->add_option("repo", repo, "Hugging Face Hub id")->required()->type_name("ORG/NAME[@REV]");
  download->add_option("--revision", revision, "Branch, tag or commit (default: main)")->type_name("REV");
  download->add_flag("--quiet,-q", download_quiet, "Print the folder and errors only (no progress bar)");
  download->footer(
      "Settings, as huggingface_hub reads them: HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN, "
      "HF_HUB_OFFLINE; HF_HUB_ETAG_TIMEOUT (seconds a metadata request may take, default 10) and "
      "HF_HUB_DOWNLOAD_TIMEOUT (seconds a download may go without its headers or below 1 KiB/s, "
      "default 10). Every file is checked against the digest the hub names it by before it "
      "enters the cache; a file is tried at most 5 times, and a hub that does not answer fails "
      "it within 2 x the timeout + 1 s.");

  CLI::App* list = app.add_subcommand("list", "List the model types the plugins register");
  list->add_flag("--json", json, "Machine-readable output");
  add_plugin_path(list);

  CLI::App* plugins = app.add_subcommand("plugins", "List every plugin found, loaded or not, and why");
  plugins->add_flag("--json", json, "Machine-readable output");
  add_plugin_path(plugins);

  auto info = mobius::cli::add_info_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*build) return cmd_build(model, revision, out, plugin_paths, opts, threads, components);
    if (*download) return cmd_download(repo, revision, download_quiet);
    if (*list) return cmd_list(plugin_paths, json);
    if (*plugins) return cmd_plugins(plugin_paths, json);
    if (*info->app) return info->run(std::cout);
  } catch (const mobius::Error& e) {
    // A plugin's fault (its message names the plugin) is never reported as the user's.
    bool plugin = e.kind() == mobius::ErrorKind::Plugin || e.kind() == mobius::ErrorKind::Internal;
    std::cerr << terminal_safe(std::string("mobius: ") + (plugin ? "plugin error: " : "error: ") +
                               e.what())
              << "\n";
    return g_interrupted ? 130 : 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "mobius: internal error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << terminal_safe(std::string("mobius: error: ") + e.what()) << "\n";
    return g_interrupted ? 130 : 1;
  }
  return 0;
}
