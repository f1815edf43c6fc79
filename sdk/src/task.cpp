// task.cpp - the task table (mobius/sdk/task.hpp).
#include "mobius/sdk/task.hpp"

#include <algorithm>

#include "mobius/sdk/config.hpp"
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

// transformers.js runs an encoder-decoder by the class its model_type names (UMT5's and Pegasus's
// folders name the type whose class runs them: detail::transformers_js_config).
void text2text_files(BuildContext& ctx, const std::string& model_type, const nlohmann::json&) {
  if (ctx.runtime() != "transformers.js") return;
  if (auto c = detail::transformers_js_config(ctx, model_type)) ctx.add_runtime_file("config.json", *c);
}

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
    gen.class_suffixes = {"ForCausalLM", "LMHeadModel"};
    t.push_back(std::move(gen));
    t.push_back(row("text-encoding", "a text encoder", {"onnxruntime"},
                    {{"ort-genai", kGenaiOnlyDecoders},
                     {"transformers.js", "mobius lays transformers.js folders out for text generation only so far"}},
                    {"input_ids"}, {"last_hidden_state", "pooler_output"}));
    // Encoders: the base model and its heads, each what transformers' AutoModel / AutoModelFor*
    // class of the task computes (logits before any softmax).
    const Reasons encoder = {{"ort-genai", kGenaiOnlyDecoders}};
    const Strings text_in = {"input_ids", "attention_mask"};
    auto encoder_row = [&](std::string name, std::string what, Strings outputs, Strings suffixes) {
      TaskRow r = row(std::move(name), std::move(what), {"transformers.js", "onnxruntime"}, encoder, text_in,
                      std::move(outputs));
      r.class_suffixes = std::move(suffixes);
      return r;
    };
    t.push_back(encoder_row("feature-extraction", "a text encoder", {"last_hidden_state"}, {"Model"}));
    t.push_back(encoder_row("sequence-classification", "a text classifier", {"logits"}, {"ForSequenceClassification"}));
    t.push_back(encoder_row("token-classification", "a token classifier", {"logits"}, {"ForTokenClassification"}));
    t.push_back(encoder_row("fill-mask", "a masked language model", {"logits"}, {"ForMaskedLM", "WithLMHeadModel"}));
    // Speech: a CTC encoder (Wav2Vec2ForCTC and its kin), one graph from the raw waveform.
    TaskRow ctc = row("ctc", "a speech recognizer (CTC)", {"transformers.js", "onnxruntime"},
                      {{"ort-genai", kGenaiOnlyDecoders}}, {"input_values"}, {"logits"});
    ctc.class_suffixes = {"ForCTC"};
    t.push_back(std::move(ctc));
    // Vision: a ViT-like tower (vision.hpp) and its heads over pixel_values, float32
    // [batch_size, num_channels, height, width] for every dtype, as transformers' AutoModel and
    // AutoModelForImageClassification compute them (logits before any softmax). DeiT's distilled
    // checkpoints name DeiTForImageClassificationWithTeacher.
    const Reasons vision = {{"ort-genai", kGenaiOnlyDecoders}};
    TaskRow imgcls = row("image-classification", "an image classifier", {"transformers.js", "onnxruntime"}, vision,
                         {"pixel_values"}, {"logits"});
    imgcls.class_suffixes = {"ForImageClassification", "ForImageClassificationWithTeacher"};
    t.push_back(std::move(imgcls));
    TaskRow imgfe = row("image-feature-extraction", "an image encoder", {"transformers.js", "onnxruntime"}, vision,
                        {"pixel_values"}, {"last_hidden_state"});
    imgfe.class_suffixes = {"Model", "ModelWithProjection"};  // CLIPVisionModelWithProjection: image_embeds
    t.push_back(std::move(imgfe));
    // Zero-shot image classification (CLIPModel, SiglipModel): three graphs of one folder, each
    // tower with its projection (transformers.js's text_model and vision_model) and `model`, both
    // towers and the logits of every image against every text; the row's inputs and outputs are
    // `model`'s.
    TaskRow zero_shot = row("zero-shot-image-classification", "an image-text model (zero-shot classification)",
                            {"transformers.js", "onnxruntime"}, vision, {"pixel_values", "input_ids"},
                            {"logits_per_image", "text_embeds", "image_embeds"});
    zero_shot.graphs = {"text_model", "vision_model", "model"};
    t.push_back(std::move(zero_shot));
    // Encoder-decoders: two graphs in one folder, the encoder and a decoder whose cache holds the
    // self-attention keys and values and the cross-attention ones computed on its first step.
    // The graphs' inputs and outputs are checked per graph by the family (the row's are the
    // decoder's, the graph every generation step runs).
    TaskRow t2t = row("text2text-generation", "an encoder-decoder text generator", {"transformers.js", "onnxruntime"},
                      {{"ort-genai", "it runs decoder-only text generation and Whisper only"}}, {}, {"logits"});
    t2t.class_suffixes = {"ForConditionalGeneration", "MTModel"};
    t2t.graphs = {"encoder_model", "decoder_model_merged"};
    t2t.runtime_files = &text2text_files;
    t.push_back(std::move(t2t));
    TaskRow s2t = row("speech-to-text", "a speech recognizer (encoder-decoder)",
                      {"ort-genai", "transformers.js", "onnxruntime"}, {}, {}, {"logits"});
    s2t.class_suffixes = {"ForConditionalGeneration"};
    s2t.graphs = {"encoder_model", "decoder_model_merged"};
    t.push_back(std::move(s2t));
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
  if (!task.graphs.empty() && ctx.graph_name() != task.graphs.back()) return;
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

std::string choose_task(const std::string& model_type, const std::vector<std::string>& tasks,
                        const std::string& chosen, const nlohmann::json& config_json) {
  auto list = [&] {
    std::string s;
    for (const auto& t : tasks) s += (s.empty() ? "" : ", ") + t;
    return s;
  };
  if (!chosen.empty()) {
    if (std::find(tasks.begin(), tasks.end(), chosen) == tasks.end())
      throw Error(MOBIUS_ERROR_KIND_CONFIG,
                  "[config] --task '" + chosen + "': " + model_type + " builds the tasks " + list());
    return chosen;
  }
  const auto archs = config_json.is_object() ? config_json.find("architectures") : config_json.end();
  if (archs == config_json.end() || !archs->is_array() || archs->empty() || !archs->front().is_string())
    return tasks.front();
  const std::string cls = archs->front().get<std::string>();
  // The longest suffix decides; rows that share it (a text encoder's and an image encoder's
  // "Model") go to the one the model type builds.
  auto builds = [&](const TaskRow& r) { return std::find(tasks.begin(), tasks.end(), r.name) != tasks.end(); };
  const TaskRow* best = nullptr;
  size_t best_len = 0;
  for (const TaskRow& r : task_table())
    for (const std::string& suffix : r.class_suffixes)
      if ((suffix.size() > best_len || (suffix.size() == best_len && best && !builds(*best) && builds(r))) &&
          cls.size() > suffix.size() && cls.compare(cls.size() - suffix.size(), suffix.size(), suffix) == 0) {
        best = &r;
        best_len = suffix.size();
      }
  if (best && builds(*best)) return best->name;
  // The class names a head: one of another task, or one no task row describes.
  const size_t for_at = cls.find("For");
  const std::string head = best ? "task " + best->name
                                : (for_at != std::string::npos ? "head " + cls.substr(for_at + 3) : "class");
  const bool base = tasks.front() == "feature-extraction" || tasks.front() == "image-feature-extraction";
  throw Error(MOBIUS_ERROR_KIND_CONFIG,
              "[config] config.json: 'architectures' names " + quote_value(cls) + ", whose " + head +
                  " mobius does not build for " + model_type + " (it builds " + list() + "); --task " +
                  tasks.front() + " builds its " + (base ? "base model" : "first task"));
}

}  // namespace detail
}  // namespace mobius
