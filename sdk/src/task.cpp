// task.cpp - the task table (mobius/sdk/task.hpp).
#include "mobius/sdk/task.hpp"

#include "mobius/sdk/plugin.hpp"

namespace mobius {
namespace {

const char* runtime_title(const std::string& runtime) {
  if (runtime == "ort-genai") return "ONNX Runtime GenAI";
  if (runtime == "transformers.js") return "transformers.js";
  if (runtime == "onnxruntime") return "ONNX Runtime";
  return nullptr;
}

void text_generation_files(BuildContext& ctx, const std::string& model_type, const nlohmann::json& cfg) {
  detail::add_text_generation_files(ctx, model_type, cfg);
}

const std::string kGenaiOnlyDecoders = "it runs text-generation decoders only";

}  // namespace

const std::vector<TaskRow>& task_table() {
  using Strings = std::vector<std::string>;
  using Reasons = std::vector<std::pair<std::string, std::string>>;
  auto row = [](std::string name, std::string what, Strings runtimes, Reasons why_not, Strings inputs,
                Strings outputs) {
    TaskRow r;
    r.name = std::move(name);
    r.what = std::move(what);
    r.runtimes = std::move(runtimes);
    r.why_not = std::move(why_not);
    r.inputs = std::move(inputs);
    r.outputs = std::move(outputs);
    return r;
  };
  static const std::vector<TaskRow> rows = [&] {
    const Reasons diffusion = {{"ort-genai", kGenaiOnlyDecoders}, {"transformers.js", "it has no diffusion models"}};
    std::vector<TaskRow> t;
    TaskRow gen = row("text-generation", "a text decoder", {"ort-genai", "onnxruntime", "transformers.js"}, {}, {},
                      {"logits"});
    gen.runtime_files = &text_generation_files;
    t.push_back(std::move(gen));
    t.push_back(row("text-encoding", "a text encoder", {"onnxruntime"},
                    {{"ort-genai", kGenaiOnlyDecoders},
                     {"transformers.js", "mobius lays transformers.js folders out for text generation only so far"}},
                    {"input_ids"}, {"last_hidden_state", "pooler_output"}));
    t.push_back(row("feature-extraction", "a text encoder", {"transformers.js", "onnxruntime"},
                    {{"ort-genai", kGenaiOnlyDecoders}}, {"input_ids", "attention_mask"}, {"last_hidden_state"}));
    t.push_back(row("image-unet", "a diffusion UNet", {"onnxruntime"}, diffusion,
                    {"sample", "timestep", "encoder_hidden_states"}, {"out_sample"}));
    t.push_back(row("image-vae", "a Stable Diffusion VAE", {"onnxruntime"}, diffusion, {}, {}));
    return t;
  }();
  return rows;
}

const TaskRow* find_task(const std::string& name) {
  for (const TaskRow& r : task_table())
    if (r.name == name) return &r;
  return nullptr;
}

namespace detail {

void check_task_runtime(const BuildContext& ctx, const TaskRow& task, const std::string& model_type) {
  const std::string rt = ctx.runtime();
  for (const std::string& r : task.runtimes)
    if (r == rt) return;
  if (ctx.runtime_is_default()) return;  // an older host's default: laid out for ONNX Runtime
  std::string why = "it cannot";
  for (const auto& [r, reason] : task.why_not)
    if (r == rt) why = reason;
  std::string can;
  for (const std::string& r : task.runtimes) {
    if (!can.empty()) can += ", ";
    can += "--runtime " + r;
  }
  const char* title = runtime_title(rt);
  throw Error(MOBIUS_ERROR_KIND_CONFIG,
              "[config] " + model_type + " is " + task.what + " (task " + task.name + "), which " +
                  (title ? title : rt.c_str()) + " does not run: " + why + "; " + can +
                  (task.runtimes.size() == 1 ? " lays its folder out for " + std::string(runtime_title(task.runtimes[0]))
                                             : " lays its folder out for a runtime that does"));
}

void check_task_graph(BuildContext& ctx, const TaskRow& task, const std::string& model_type) {
  Graph& g = ctx.graph();
  for (const std::string& n : task.inputs)
    if (!g.input_type(n))
      throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + model_type + " (task " + task.name +
                                                "): the graph has no input '" + n + "', which the task promises");
  for (const std::string& n : task.outputs)
    if (!g.output_type(n))
      throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + model_type + " (task " + task.name +
                                                "): the graph has no output '" + n + "', which the task promises");
}

}  // namespace detail
}  // namespace mobius
