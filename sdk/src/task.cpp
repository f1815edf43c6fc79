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
  static const std::vector<TaskRow> rows = [] {
    std::vector<TaskRow> t;
    {
      TaskRow r;
      r.name = "text-generation";
      r.what = "a text decoder";
      r.runtimes = {"ort-genai", "onnxruntime", "transformers.js"};
      r.outputs = {"logits"};
      r.runtime_files = &text_generation_files;
      r.needs_tokenizer = true;
      t.push_back(r);
    }
    {
      TaskRow r;
      r.name = "text-encoding";
      r.what = "a text encoder";
      r.runtimes = {"onnxruntime"};
      r.why_not = {{"ort-genai", kGenaiOnlyDecoders},
                   {"transformers.js", "mobius lays transformers.js folders out for text generation only so far"}};
      r.inputs = {"input_ids"};
      r.outputs = {"last_hidden_state", "pooler_output"};
      t.push_back(r);
    }
    {
      TaskRow r;
      r.name = "image-unet";
      r.what = "a diffusion UNet";
      r.runtimes = {"onnxruntime"};
      r.why_not = {{"ort-genai", kGenaiOnlyDecoders}, {"transformers.js", "it has no diffusion models"}};
      r.inputs = {"sample", "timestep", "encoder_hidden_states"};
      r.outputs = {"out_sample"};
      t.push_back(r);
    }
    {
      TaskRow r;
      r.name = "image-vae";
      r.what = "a Stable Diffusion VAE";
      r.runtimes = {"onnxruntime"};
      r.why_not = {{"ort-genai", kGenaiOnlyDecoders}, {"transformers.js", "it has no diffusion models"}};
      t.push_back(r);
    }
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
