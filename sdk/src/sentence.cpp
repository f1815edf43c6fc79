// sentence.cpp - a sentence-transformers folder's Pooling and Normalize modules
// (mobius/sdk/sentence.hpp).
#include "mobius/sdk/sentence.hpp"

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/module.hpp"
#include "mobius/sdk/ops.hpp"

namespace mobius::nn {
namespace {

using namespace mobius::op;

constexpr size_t kMaxModules = 32;  // released folders have 2 to 5

[[noreturn]] void refuse(const std::string& file, const std::string& why) {
  throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] " + file + ": " + why);
}

// The class a module's type names, when it is one of sentence_transformers' own
// ("sentence_transformers.models.Pooling", "sentence_transformers.sentence_transformer.modules.
// pooling.Pooling"): its last component; "" for anything else (custom code).
std::string own_class(const std::string& type) {
  if (type.rfind("sentence_transformers.", 0) != 0) return "";
  return type.substr(type.rfind('.') + 1);
}

// A module's folder: one name inside the checkpoint folder (the host's file rule refuses a link
// leading out of it when the module's config is read).
void check_module_path(const std::string& path, const std::string& where) {
  if (path.empty()) refuse("modules.json", where + "'path' is empty; only the Transformer module sits at the folder's root");
  if (path[0] == '/' || path.find("..") != std::string::npos || path.find('/') != std::string::npos ||
      path.find('\\') != std::string::npos || path[0] == '.' || path.size() > 128 ||
      path.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    refuse("modules.json", where + "'path' is " + quote_value(path) +
                               ", not one folder inside the checkpoint folder (absolute paths, '..', '/' and names "
                               "starting with '.' are refused)");
}

SentencePooling read_pooling(const nlohmann::json& j, const std::string& file, int64_t hidden) {
  if (!j.is_object()) refuse(file, "must be a JSON object");
  ConfigReader r(j, file);
  SentencePooling p;
  // sentence-transformers 5 and later: embedding_dimension and pooling_mode (a name or a list);
  // earlier: word_embedding_dimension and one pooling_mode_*_tokens flag per mode.
  const std::string dim_key = r.has("embedding_dimension") ? "embedding_dimension" : "word_embedding_dimension";
  if (!r.has(dim_key)) r.fail("embedding_dimension", "is missing (the transformer's output size)");
  const int64_t dim = r.get_int(dim_key);
  if (dim != hidden)
    r.fail(dim_key, "(" + std::to_string(dim) + ") is not the transformer's hidden size (" + std::to_string(hidden) + ")");
  if (r.has("pooling_mode")) {
    const nlohmann::json& m = j.at("pooling_mode");
    std::vector<std::string> modes;
    if (m.is_string()) modes.push_back(m.get<std::string>());
    else modes = r.get_strings("pooling_mode");
    for (const std::string& mode : modes) {
      if (mode == "cls") p.cls = true;
      else if (mode == "max") p.max = true;
      else if (mode == "mean") p.mean = true;
      else if (mode == "mean_sqrt_len_tokens") p.mean_sqrt_len = true;
      else if (mode == "weightedmean") p.weightedmean = true;
      else if (mode == "lasttoken") p.lasttoken = true;
      else
        r.fail("pooling_mode", "names " + quote_value(mode) +
                                   ", which is not a pooling mode (cls, max, mean, mean_sqrt_len_tokens, "
                                   "weightedmean, lasttoken)");
    }
  } else {
    p.cls = r.get_bool("pooling_mode_cls_token", false);
    p.max = r.get_bool("pooling_mode_max_tokens", false);
    p.mean = r.get_bool("pooling_mode_mean_tokens", false);
    p.mean_sqrt_len = r.get_bool("pooling_mode_mean_sqrt_len_tokens", false);
    p.weightedmean = r.get_bool("pooling_mode_weightedmean_tokens", false);
    p.lasttoken = r.get_bool("pooling_mode_lasttoken", false);
  }
  if (p.modes() == 0) refuse(file, "turns on no pooling mode ('pooling_mode' or a 'pooling_mode_*' flag)");
  return p;
}

// A Dense module's config and weights ("<folder>/linear.weight" [out, in], "<folder>/linear.bias").
SentenceDense read_dense(const BuildContext& ctx, const nlohmann::json& j, const std::string& file,
                         const std::string& folder, int64_t width) {
  if (!j.is_object()) refuse(file, "must be a JSON object");
  ConfigReader r(j, file);
  SentenceDense d;
  d.folder = folder;
  if (!r.has("in_features") || !r.has("out_features")) r.fail("in_features", "and 'out_features' are required");
  d.in = r.get_int("in_features");
  d.out = r.get_int("out_features");
  if (d.in != width)
    r.fail("in_features", "(" + std::to_string(d.in) + ") is not the width of the embedding it takes (" +
                              std::to_string(width) + ")");
  if (d.out < 1 || d.out > (1 << 17)) r.fail("out_features", "must be from 1 to 131072");
  d.bias = r.get_bool("bias", true);
  const std::string fn = r.get_string("activation_function", "torch.nn.modules.activation.Tanh");
  static const std::pair<const char*, const char*> kTorch[] = {
      {"torch.nn.modules.activation.Tanh", "tanh"},       {"torch.nn.modules.linear.Identity", "linear"},
      {"torch.nn.modules.activation.ReLU", "relu"},       {"torch.nn.modules.activation.GELU", "gelu"},
      {"torch.nn.modules.activation.Sigmoid", "sigmoid"}, {"torch.nn.modules.activation.SiLU", "silu"}};
  for (const auto& [torch_name, name] : kTorch)
    if (fn == torch_name) d.activation = name;
  if (d.activation.empty())
    r.fail("activation_function", "is " + quote_value(fn) +
                                      ", which mobius does not build (Tanh, Identity, ReLU, GELU, Sigmoid, SiLU of "
                                      "torch.nn; it never runs a module's own code)");
  if (ctx.no_weights()) return d;
  const std::string w = folder + "/linear.weight", b = folder + "/linear.bias";
  const auto wt = ctx.query_tensor(w);
  if (!wt) refuse(folder, "has no weights for its Dense layer (linear.weight in model.safetensors or pytorch_model.bin)");
  if (wt->dims != std::vector<int64_t>{d.out, d.in})
    refuse(folder + "/model.safetensors", "linear.weight is " + shape_text(wt->dims) + ", not [" + std::to_string(d.out) +
                                              ", " + std::to_string(d.in) + "] as config.json's in_features and "
                                              "out_features say");
  if (d.bias) {
    const auto bt = ctx.query_tensor(b);
    if (!bt || bt->dims != std::vector<int64_t>{d.out})
      refuse(folder + "/model.safetensors", "linear.bias is missing or not [" + std::to_string(d.out) + "]");
  }
  return d;
}

// A Dense layer's parameters, float32 whatever the build's dtype (the embedding computes in it).
class DenseLayer : public Module {
 public:
  explicit DenseLayer(const SentenceDense& d) : d(d) {
    declare("weight", {d.out, d.in}, DType::Float);
    if (d.bias) declare("bias", {d.out}, DType::Float);
  }
  Value forward(Graph& g, Value x) const {
    Value y = MatMul(x, Transpose(param(g, "weight"), {1, 0}));
    if (d.bias) y = Add(y, param(g, "bias"));
    return activation(d.activation, y);
  }
  SentenceDense d;
};

}  // namespace

std::optional<SentenceModules> read_sentence_modules(BuildContext& ctx, int64_t hidden, const std::string& task) {
  if (task != "feature-extraction") {
    ctx.ignore_tensors("*/*");  // module folders' weights ("2_Dense/linear.weight"); the model's have no '/'
    return std::nullopt;
  }
  const std::optional<std::string> text = ctx.read_source_file("modules.json");
  if (!text) return std::nullopt;
  const nlohmann::json list = parse_config_text(*text, "modules.json");
  if (!list.is_array() || list.empty() || list.size() > kMaxModules)
    refuse("modules.json", "must be a list of 1 to " + std::to_string(kMaxModules) + " modules");
  SentenceModules out;
  bool pooled = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    const std::string where = "module " + std::to_string(i) + ": ";
    if (!m.is_object()) refuse("modules.json", where + "must be an object with 'type' and 'path'");
    for (const char* key : {"type", "path"})
      if (!m.contains(key) || !m.at(key).is_string())
        refuse("modules.json", where + "'" + key + "' must be a string");
    const std::string type = m.at("type").get<std::string>(), path = m.at("path").get<std::string>();
    const std::string cls = own_class(type);
    if (i == 0) {
      if (cls != "Transformer")
        refuse("modules.json", where + "'type' is " + quote_value(type) +
                                   "; the first module must be sentence_transformers' Transformer (the checkpoint "
                                   "beside modules.json)");
      if (!path.empty()) refuse("modules.json", where + "'path' is " + quote_value(path) + "; the Transformer module is the folder's root (\"\")");
      continue;
    }
    check_module_path(path, where);
    // Every module's config is read, so a folder leading out of the checkpoint is refused here.
    const std::string file = path + "/config.json";
    const std::optional<std::string> config = ctx.read_source_file(file);
    if (cls == "Pooling") {
      if (pooled) refuse("modules.json", where + "a second Pooling module");
      if (!config) refuse(file, "is missing (the Pooling module's modes)");
      out.pooling = read_pooling(parse_config_text(*config, file), file, hidden);
      pooled = true;
    } else if (cls == "Normalize") {
      if (!pooled || out.normalize) refuse("modules.json", where + "Normalize must follow the Pooling module, once");
      if (config) parse_config_text(*config, file);
      out.normalize = true;
    } else if (cls == "Dense") {
      if (!pooled || out.normalize) refuse("modules.json", where + "a Dense module must follow Pooling and precede Normalize");
      if (!config) refuse(file, "is missing (the Dense module's sizes)");
      const int64_t width = out.dense.empty() ? hidden * out.pooling.modes() : out.dense.back().out;
      out.dense.push_back(read_dense(ctx, parse_config_text(*config, file), file, path, width));
    } else {
      refuse("modules.json", where + "'type' is " + quote_value(type) +
                                 ", a module mobius does not build (it builds sentence_transformers' Transformer, "
                                 "Pooling and Normalize; it never runs a module's own code)");
    }
  }
  return out;
}

Value sentence_embedding(Graph& g, const SentenceModules& m, Value h, Value attention_mask, DType act) {
  ScopeGuard s(g, "sentence_embedding");
  const SentencePooling& p = m.pooling;
  Value x = Cast(h, DType::Float);                                            // [b, s, d]
  Value mask = Cast(attention_mask, DType::Float);                            // [b, s]
  Value mask3 = Unsqueeze(mask, {2});                                         // [b, s, 1]
  Value positions = Range(Int(g, 0), Squeeze(DimOf(attention_mask, 1), {0}), Int(g, 1));  // [s] int64
  std::vector<Value> parts;
  if (p.cls) parts.push_back(Squeeze(Slice(x, Ints(g, {0}), Ints(g, {1}), {1}), {1}));
  if (p.max) {
    Value filled = Where(Equal(mask3, Scalar(g, DType::Float, 0.0)), Scalar(g, DType::Float, -1e9), x);
    parts.push_back(ReduceMax(filled, {1}, false));
  }
  auto masked_sum = [&](Value weights3) {  // (sum(x * w), max(sum(w), 1e-9))
    Value sum = ReduceSum(Mul(x, weights3), {1}, false);
    Value count = Max(ReduceSum(weights3, {1}, false), Scalar(g, DType::Float, 1e-9));
    return std::make_pair(sum, count);
  };
  if (p.mean || p.mean_sqrt_len) {
    auto [sum, count] = masked_sum(mask3);
    if (p.mean) parts.push_back(Div(sum, count));
    if (p.mean_sqrt_len) parts.push_back(Div(sum, Sqrt(count)));
  }
  if (p.weightedmean) {
    Value w = Add(Cast(positions, DType::Float), Scalar(g, DType::Float, 1.0));  // 1 .. s
    auto [sum, count] = masked_sum(Mul(mask3, Unsqueeze(w, {1})));
    parts.push_back(Div(sum, count));
  }
  if (p.lasttoken) {
    // The last position whose mask is 1: max(position * mask); 0 when there is none.
    Value last = ReduceMax(Mul(Unsqueeze(positions, {0}), attention_mask), {1}, true);  // [b, 1]
    Value pick = Cast(Equal(Unsqueeze(positions, {0}), last), DType::Float);             // [b, s]
    parts.push_back(ReduceSum(Mul(x, Unsqueeze(pick, {2})), {1}, false));
  }
  Value e = parts.size() == 1 ? parts.front() : Concat(parts, 1);
  for (const SentenceDense& d : m.dense) {
    struct Root : Module {
      explicit Root(const SentenceDense& d) { layer = &add<DenseLayer>(d.folder + "/linear", d); }
      const DenseLayer* layer;
    } root(d);
    e = root.layer->forward(g, e);
  }
  if (m.normalize) {
    Value norm = Sqrt(ReduceSum(Mul(e, e), {1}, true));
    e = Div(e, Max(norm, Scalar(g, DType::Float, 1e-12)));
  }
  return Cast(e, act);
}

}  // namespace mobius::nn
