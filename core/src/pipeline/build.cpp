// build.cpp - from a checkpoint folder to a ModelPackage: config, registry, plugin build, preflight.
#include "mobius/build.hpp"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_files.hpp"
#include "plugins/context.hpp"
#include "checkpoint/module_weights.hpp"
#include "save/package.hpp"
#include "util/untrusted.hpp"

namespace mobius {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

// config.json's text, read from its folder under the folder's rule (checkpoint_files.hpp): a
// regular file, or a cache snapshot's link into its repository's blobs, nothing else.
std::string read_config_text(const ModelFolder& folder, const fs::path& display) {
  return folder.read_text("config.json", display.string(), "config", kMaxConfigBytes);
}

nlohmann::json parse_config_text(const std::string& text, const fs::path& p) {
  // Size, nesting depth and value count are enforced while parsing (untrusted.hpp).
  return parse_json_limited(text, p.string(), kConfigLimits);
}

nlohmann::json read_json_file(const fs::path& p) {
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const ModelFolder folder(dir);
  const std::string name = p.filename().string();
  return parse_config_text(folder.read_text(name, p.string(), "config", kMaxConfigBytes), p);
}

// The model's float dtype and the MatMul weights' bits (0: not quantized) for --dtype. Quantized
// weights keep float32 activations and scales on the CPU, float16 on CUDA (the runtime's fast
// MatMulNBits kernels there).
std::pair<int32_t, int32_t> parse_dtype(const std::string& s, const std::string& ep) {
  if (s == "f32" || s == "float32" || s == "fp32") return {MOBIUS_DTYPE_FLOAT, 0};
  if (s == "f16" || s == "float16" || s == "fp16") return {MOBIUS_DTYPE_FLOAT16, 0};
  if (s == "bf16" || s == "bfloat16") return {MOBIUS_DTYPE_BFLOAT16, 0};
  const int32_t act = ep == "cuda" ? MOBIUS_DTYPE_FLOAT16 : MOBIUS_DTYPE_FLOAT;
  if (s == "int4") return {act, 4};
  if (s == "int8") return {act, 8};
  throw Error("[options] unknown dtype '" + s + "' (expected f32, f16, bf16, int4 or int8)");
}

// The text of config.json in dir when it has one (read under the folder's rule); else nothing.
std::optional<std::string> read_source_config(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  const ModelFolder folder(dir);
  if (!folder.has("config.json")) return {};
  return read_config_text(folder, dir / "config.json");
}

// Who ran the code that failed, for messages: "plugin 'llama' 0.1.0 (/path/libmobius_llama.so)".
std::string describe_code(const std::string& plugin, const std::string& version,
                          const std::string& path) {
  if (plugin.empty()) return "the in-process architecture";
  return "plugin '" + plugin + "' " + version + (path.empty() ? "" : " (" + path + ")");
}

// A failure inside a plugin's code (a bug, an exception it did not expect, out of memory): the
// message names the plugin, so it is never read as a mistake in the user's files.
Error blame_plugin(const Error& e, const std::string& who, const std::string& activity) {
  std::string what = e.kind() == ErrorKind::Internal ? "an internal error" : "an error";
  std::string m = e.what();
  if (m.rfind("[plugin] ", 0) == 0) m = m.substr(9);
  return Error(e.kind(), "[plugin] " + who + " failed " + activity + " with " + what +
                             " of the plugin, not of the checkpoint or its config.json: " + m);
}

bool plugin_fault(const Error& e) {
  return e.kind() == ErrorKind::Plugin || e.kind() == ErrorKind::Internal;
}

}  // namespace

namespace {

// A diffusers config's `_class_name` (the model type of a pipeline component), or "".
std::string class_name_of(const nlohmann::json& cfg, const fs::path& config_file) {
  auto it = cfg.find("_class_name");
  if (it == cfg.end()) return "";
  if (!it->is_string())
    throw Error("[config] " + config_file.string() + ": '_class_name' is not a string");
  return it->get<std::string>();
}

std::string model_type_of(const nlohmann::json& cfg, const fs::path& config_file,
                          const ModelRegistry* registry) {
  if (!cfg.is_object()) throw Error("[config] " + config_file.string() + ": not a JSON object");
  auto type_of = [&](const nlohmann::json& j) -> std::string {
    auto it = j.find("model_type");
    if (it == j.end()) return "";
    if (!it->is_string())
      throw Error("[config] " + config_file.string() + ": 'model_type' is not a string");
    return it->get<std::string>();
  };
  std::string top = type_of(cfg);
  // A diffusers component's config names its class instead (e.g. "UNet2DConditionModel").
  if (top.empty()) top = class_name_of(cfg, config_file);
  if (!registry || top.empty() || registry->contains(top)) {
    if (!top.empty()) return top;
  }
  auto tc = cfg.find("text_config");
  if (tc != cfg.end() && tc->is_object()) {
    std::string inner = type_of(*tc);
    if (!inner.empty() && (!registry || registry->contains(inner))) return inner;
  }
  if (top.empty())
    throw Error("[config] " + config_file.string() + ": no 'model_type' key (nor a diffusers '_class_name')");
  return top;  // unknown: the registry lookup reports near matches
}

}  // namespace

std::string config_model_type(const fs::path& config_file, const ModelRegistry* registry) {
  return model_type_of(read_json_file(config_file), config_file, registry);
}

std::vector<std::string> config_model_types(const fs::path& config_file) {
  nlohmann::json cfg = read_json_file(config_file);
  std::vector<std::string> out;
  auto add = [&](const nlohmann::json& j) {
    auto it = j.find("model_type");
    if (it != j.end() && it->is_string()) out.push_back(it->get<std::string>());
  };
  if (!cfg.is_object()) return out;
  add(cfg);
  if (out.empty()) {
    auto it = cfg.find("_class_name");
    if (it != cfg.end() && it->is_string()) out.push_back(it->get<std::string>());
  }
  auto tc = cfg.find("text_config");
  if (tc != cfg.end() && tc->is_object()) add(*tc);
  return out;
}

ModelPackage::ModelPackage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ModelPackage::ModelPackage(ModelPackage&&) noexcept = default;
ModelPackage& ModelPackage::operator=(ModelPackage&&) noexcept = default;
ModelPackage::~ModelPackage() = default;

const std::string& ModelPackage::model_type() const { return impl_->model_type; }
const std::string& ModelPackage::runtime() const { return impl_->layout.runtime; }
const std::string& ModelPackage::normalized_config() const { return impl_->normalized_config; }
size_t ModelPackage::node_count() const {
  return static_cast<size_t>(impl_->ctx->model.graph().node_size());
}
size_t ModelPackage::initializer_count() const { return impl_->ctx->plan.initializers().size(); }
uint64_t ModelPackage::weight_bytes() const {
  uint64_t n = 0;
  for (const auto& i : impl_->ctx->plan.initializers()) n += i.nbytes();
  return n;
}

void ModelPackage::save(const fs::path& out, const SaveOptions& opts) const { save_together({this}, out, opts); }

void ModelPackage::save_together(const std::vector<const ModelPackage*>& parts, const fs::path& out,
                                 const SaveOptions& opts) {
  std::vector<const Impl*> impls;
  for (const ModelPackage* p : parts) impls.push_back(p->impl_.get());
  try {
    save_packages(impls, out, opts);
  } catch (const Error& e) {
    // A plugin's weight transform failed while the weights were written.
    if (!plugin_fault(e) || impls.empty()) throw;
    const Impl& i = *impls.front();
    throw blame_plugin(e, describe_code(i.plugin, i.plugin_version, i.plugin_path),
                       "writing the weights of '" + i.model_type + "'");
  }
}

const std::string& ModelPackage::graph_file() const { return impl_->layout.graph; }

namespace {

// A context with the user's options, and the checkpoint opened when weights are wanted.
std::unique_ptr<ModelPackage::Impl> start(const std::string& model_type, const fs::path& dir,
                                          const BuildOptions& opts,
                                          std::optional<std::string> source_config,
                                          bool generates_text = true,
                                          const std::string& default_runtime = kRuntimeGenai,
                                          const std::string& graph_stem = "model") {
  auto impl = std::make_unique<ModelPackage::Impl>();
  impl->source_dir = dir;
  impl->model_type = model_type;
  impl->ctx = std::make_unique<mobius_context>();
  impl->weight_dtype = opts.dtype;
  impl->layout = output_layout(opts.runtime.empty() ? default_runtime : opts.runtime, opts.dtype, graph_stem);
  impl->source_repo = opts.source_repo;
  impl->source_revision = opts.source_revision;
  impl->source_commit = opts.source_commit;
  mobius_context& ctx = *impl->ctx;
  if (opts.ep != "cpu" && opts.ep != "cuda")
    throw Error("[options] unknown execution provider '" + opts.ep + "' (expected cpu or cuda)");
  if (opts.ops != "ort" && opts.ops != "standard")
    throw Error("[options] unknown operator set '" + opts.ops + "' (expected ort or standard)");
  if (!opts.positions.empty() && opts.positions != "input" && opts.positions != "slots")
    throw Error("[options] unknown position ids '" + opts.positions + "' (expected input or slots)");
  const auto [dtype, bits] = parse_dtype(opts.dtype, opts.ep);
  if (bits > 0 && opts.ops != "ort")
    throw Error("[options] --dtype " + opts.dtype +
                " stores MatMul weights for ONNX Runtime's MatMulNBits, which --ops standard "
                "excludes; use --ops ort (the default) or a float dtype");
  if (bits > 0 && (opts.block_size < 16 || opts.block_size > 256 ||
                   (opts.block_size & (opts.block_size - 1)) != 0))
    throw Error("[options] --block-size " + std::to_string(opts.block_size) +
                " is not a power of two from 16 to 256");
  if (opts.accuracy_level < -1 || opts.accuracy_level > 4)
    throw Error("[options] --accuracy-level " + std::to_string(opts.accuracy_level) +
                " is not one of 0 to 4");
  ctx.options.dtype = dtype;
  ctx.execution_provider = opts.ep;
  ctx.options.execution_provider = ctx.execution_provider.c_str();
  ctx.ops = opts.ops;
  ctx.options.ops = ctx.ops.c_str();
  ctx.options.weight_bits = bits;
  ctx.options.block_size = opts.block_size;
  ctx.options.symmetric = opts.symmetric ? 1 : 0;
  ctx.options.accuracy_level = opts.accuracy_level >= 0 ? opts.accuracy_level : opts.ep == "cuda" ? 0 : 4;
  ctx.options.expert_loop = opts.expert_loop ? 1 : 0;
  ctx.runtime = impl->layout.runtime;
  ctx.model_file = impl->layout.graph;
  ctx.options.runtime = ctx.runtime.c_str();
  ctx.options.model_file = ctx.model_file.c_str();
  ctx.options.runtime_is_default = opts.runtime.empty() ? 1 : 0;
  ctx.graph = opts.graph;
  ctx.options.graph = ctx.graph.empty() ? nullptr : ctx.graph.c_str();
  ctx.task = opts.task;
  ctx.options.task = ctx.task.empty() ? nullptr : ctx.task.c_str();
  ctx.positions = opts.positions;
  ctx.options.positions = ctx.positions.empty() ? nullptr : ctx.positions.c_str();
  ctx.source_dir = dir;
  if (!dir.empty() && !opts.quiet && generates_text) {
    // A runtime turns text into ids with the checkpoint's tokenizer; without one the model
    // still builds, but the folder is not ready to use.
    const ModelFolder folder(dir);
    bool tokenizer = false;
    for (const char* n : {"tokenizer.json", "tokenizer.model", "vocab.json"}) tokenizer |= folder.has(n);
    if (!tokenizer)
      std::cerr << "mobius: warning: " << dir.string()
                << " has no tokenizer (tokenizer.json, tokenizer.model or vocab.json); the output "
                   "folder will need one before a runtime can generate text\n";
  }
  ctx.source_config = std::move(source_config);
  ctx.options.no_weights = opts.no_weights ? 1 : 0;
  ctx.quiet = opts.quiet;
  if (!opts.no_weights && !dir.empty()) {
    // With config.json's quantization_config, so quantized weights read as float tensors.
    // A sentence-transformers folder's module weights (a Dense layer's) are read with the model's.
    impl->checkpoint =
        with_module_weights(open_checkpoint(dir, ctx.source_config ? &*ctx.source_config : nullptr), dir);
    ctx.checkpoint = impl->checkpoint.get();
  }
  ctx.model.mutable_graph()->set_name(model_type);
  return impl;
}

void finish(ModelPackage::Impl& impl) {
  if (impl.ctx->model.graph().output_size() == 0)
    throw Error("[build] " + impl.model_type + ": the graph has no outputs");
  // The default runtime: a model the plugin could not describe for GenAI (it said why) is laid
  // out for ONNX Runtime alone; the files are the same but for genai_config.json.
  if (impl.ctx->options.runtime_is_default && impl.layout.runtime == kRuntimeGenai &&
      std::none_of(impl.ctx->runtime_files.begin(), impl.ctx->runtime_files.end(),
                   [](const auto& f) { return f.first == "genai_config.json"; }))
    impl.layout.runtime = kRuntimeOrt;
  if (impl.checkpoint) impl.ctx->plan.preflight(*impl.checkpoint, impl.model_type);
}

}  // namespace

std::unique_ptr<ModelPackage::Impl> build_impl(const Registration& reg, const fs::path& dir,
                                               const std::string& config_text,
                                               const BuildOptions& opts, bool fallback) {
  if (reg.graphs.empty() && !opts.graph.empty())
    throw Error("[options] " + reg.model_type + " is one graph; there is no graph '" + opts.graph +
                "' to choose");
  if (!reg.graphs.empty() &&
      std::find(reg.graphs.begin(), reg.graphs.end(), opts.graph) == reg.graphs.end()) {
    std::string names;
    for (const auto& g : reg.graphs) names += (names.empty() ? "" : ", ") + g;
    throw Error("[options] " + reg.model_type + " becomes several graphs (" + names + "): " +
                (opts.graph.empty() ? "choose one" : "there is no graph '" + opts.graph + "'"));
  }
  if (!opts.task.empty() && std::find(reg.tasks.begin(), reg.tasks.end(), opts.task) == reg.tasks.end()) {
    std::string names;
    for (const auto& t : reg.tasks) names += (names.empty() ? "" : ", ") + t;
    throw Error("[options] --task " + quote_name(opts.task) + ": " + reg.model_type + " builds " +
                (reg.tasks.size() == 1 ? "one task, " : "the tasks ") + names);
  }
  // Only a model that generates text needs the tokenizer beside it (a pipeline keeps its own).
  const bool generates_text = reg.task == "text-generation" || reg.task == "text2text-generation" ||
                              reg.task == "speech-to-text";
  auto impl = start(reg.model_type, dir, opts, config_text, generates_text,
                    reg.default_runtime.empty() ? kRuntimeGenai : reg.default_runtime,
                    reg.graphs_in_one_folder ? opts.graph : "model");
  impl->plugin = reg.plugin;
  impl->plugin_version = reg.version;
  impl->plugin_path = reg.plugin_path;
  impl->ctx->options.fallback = fallback ? 1 : 0;
  impl->normalized_config = reg.parse_config(impl->ctx.get(), config_text);
  reg.build(impl->ctx.get(), impl->normalized_config);
  finish(*impl);
  return impl;
}

ModelPackage build_with(const std::string& model_type,
                        const std::function<void(mobius_context*)>& build_fn,
                        const BuildOptions& opts, const fs::path& checkpoint_dir,
                        const std::string& normalized_config) {
  auto impl = start(model_type, checkpoint_dir, opts,
                    checkpoint_dir.empty() ? std::nullopt : read_source_config(checkpoint_dir));
  impl->normalized_config = normalized_config;
  build_fn(impl->ctx.get());
  finish(*impl);
  return ModelPackage(std::move(impl));
}

ModelPackage build_with(const std::string& model_type, BuildCallback fn, void* user,
                        const BuildOptions& opts, const fs::path& checkpoint_dir,
                        const std::string& normalized_config) {
  if (!fn) throw Error("[build] build_with: the build callback is NULL");
  return build_with(
      model_type,
      [&](mobius_context* ctx) {
        ctx->plugin_error.clear();
        ctx->plugin_error_kind = 0;
        mobius_status st = MOBIUS_ERROR;
        try {
          st = fn(user, host_api(), ctx);
        } catch (...) {
          throw Error(ErrorKind::Internal,
                      "[build] the build callback of '" + model_type +
                          "' let an exception cross the C ABI");
        }
        if (st == MOBIUS_OK) return;
        if (ctx->plugin_error.empty())
          throw Error(ErrorKind::Plugin,
                      "[build] the build callback of '" + model_type + "' failed without a message");
        throw Error(error_kind_from_abi(ctx->plugin_error_kind), ctx->plugin_error);
      },
      opts, checkpoint_dir, normalized_config);
}

FolderConfig read_folder_config(const fs::path& dir, const ModelRegistry* registry) {
  if (!fs::is_directory(dir))
    throw Error("[source] '" + dir.string() + "' is not a folder holding config.json and weights");
  // The folder is resolved once (it may be reached through links, e.g. a cache snapshot's
  // refs); config.json and the checkpoint are then read relative to the resolved folder.
  const ModelFolder folder(dir);
  FolderConfig c;
  c.dir = folder.path();
  c.config_file = dir / "config.json";
  if (!folder.has("config.json")) throw Error("[source] " + c.config_file.string() + ": not found");
  c.text = read_config_text(folder, c.config_file);
  c.model_type = model_type_of(parse_config_text(c.text, c.config_file), c.config_file, registry);
  return c;
}

namespace {

// Up to `max` names, quoted, comma-separated: "'a', 'b', ... (12 in all)".
std::string some_names(const std::vector<std::string>& names, size_t max = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + quote_name(names[i]);
  if (names.size() > max) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

// Why a fallback registration's graph does not fit the checkpoint: the preflight's problems by
// kind (StreamingWeightPlan::Mismatch).
std::string fallback_refusal(const Registration& reg, const StreamingWeightPlan::Mismatch& m) {
  std::string why = "its checkpoint's tensors are not " + reg.model_type + "'s:";
  if (!m.unused.empty()) why += " it holds " + some_names(m.unused) + ", which " + reg.model_type + " does not read;";
  if (!m.missing.empty()) why += " it lacks " + some_names(m.missing) + ";";
  if (!m.other.empty())
    why += " " + std::string(m.other.size() == 1 ? "" : std::to_string(m.other.size()) + " more problems, the first: ") +
           m.other.front() + ";";
  why.pop_back();
  return why;
}

// A model type no plugin registers, built by a registration marked fallback (Registration::
// fallback) when the parser takes its config.json as that type's (every decoder field present)
// and the checkpoint holds exactly the tensors that type reads; otherwise the registry's
// "unknown model type" error, with why each fallback did not build it. Nothing is written either
// way: this only builds the package.
ModelPackage build_unknown(const FolderConfig& c, const BuildOptions& opts, const ModelRegistry& registry) {
  std::string why;
  for (const Registration* reg : registry.fallbacks()) {
    try {
      // The graph alone, quietly (the build's own warnings are for the build that is kept), then
      // its weight plan against the checkpoint's headers.
      BuildOptions attempt = opts;
      attempt.quiet = true;
      attempt.no_weights = true;
      auto probe = build_impl(*reg, c.dir, c.text, attempt, true);
      if (c.dir.empty()) throw Error("[source] no checkpoint to compare its tensors with");
      // A checkpoint that cannot be read is that error, whatever the model type.
      const auto checkpoint = open_checkpoint(c.dir, &c.text);
      StreamingWeightPlan::Mismatch mismatch;
      try {
        probe->ctx->plan.preflight(*checkpoint, reg->model_type, &mismatch);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Checkpoint) throw;
        why += "\n  not built as " + reg->model_type + ": " + fallback_refusal(*reg, mismatch);
        continue;
      }
      if (!opts.quiet)
        std::cerr << "mobius: note: " + c.config_file.string() + ": model type " + quote_name(c.model_type) +
                         " is not one mobius knows; its config has a decoder's fields and its checkpoint holds "
                         "exactly the tensors " + reg->model_type + " reads: building it as " + reg->model_type + "\n";
      return ModelPackage(build_impl(*reg, c.dir, c.text, opts, true));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Io || e.kind() == ErrorKind::Internal || e.kind() == ErrorKind::Checkpoint) throw;
      why += "\n  not built as " + reg->model_type + ": its config.json is not a " + reg->model_type +
             " decoder's: " + e.what();
    }
  }
  try {
    registry.get(c.model_type);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(e.what()) + why);
  }
  throw Error("[registry] no registration for model type " + quote_name(c.model_type));
}

}  // namespace

ModelPackage build(const std::string& source, const BuildOptions& opts,
                   const ModelRegistry& registry) {
  const FolderConfig c = read_folder_config(fs::path(source), &registry);
  if (!registry.contains(c.model_type) && !registry.claimed(c.model_type) && !registry.fallbacks().empty())
    return build_unknown(c, opts, registry);
  return build_folder(c, registry.get(c.model_type), opts);
}

ModelPackage build_folder(const FolderConfig& c, const Registration& reg, const BuildOptions& opts) {
  const fs::path& cfg = c.config_file;
  const std::string& model_type = c.model_type;
  try {
    return ModelPackage(build_impl(reg, c.dir, c.text, opts));
  } catch (const Error& e) {
    // Whose fault it is comes from the error's kind, which the plugin set across the ABI.
    if (plugin_fault(e))
      throw blame_plugin(e, describe_code(reg.plugin, reg.version, reg.plugin_path),
                         "building '" + model_type + "'");
    if (e.kind() != ErrorKind::Config) throw;
    std::string m = e.what();
    // A message naming a file of the folder already (config.json, or a file the plugin read
    // beside it) keeps it; one naming a file by its name in the folder ("modules.json: ...",
    // "1_Pooling/config.json: ...") gets the folder's path; any other is about config.json.
    if (m.find(cfg.string()) != std::string::npos || (!c.dir.empty() && m.find(c.dir.string() + "/") != std::string::npos))
      throw;
    if (m.rfind("[config] ", 0) == 0) m = m.substr(9);
    const size_t colon = m.find(": ");
    const std::string named = colon == std::string::npos ? "" : m.substr(0, colon);
    if (!named.empty() && named.size() <= 256 && named.find_first_of(" '\"") == std::string::npos &&
        named.find("..") == std::string::npos && named[0] != '/' && !c.dir.empty()) {
      std::error_code ec;
      if (fs::exists(c.dir / named, ec) || fs::is_symlink(c.dir / named, ec))
        throw Error(ErrorKind::Config, "[config] " + (c.dir / named).string() + m.substr(colon));
    }
    throw Error(ErrorKind::Config, "[config] " + cfg.string() + ": " + m);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::Internal, "[internal] out of memory building '" + model_type + "'");
  }
}

}  // namespace mobius
