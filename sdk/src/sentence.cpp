// sentence.cpp - a sentence-transformers folder's Pooling and Normalize modules
// (mobius/sdk/sentence.hpp).
#include "mobius/sdk/sentence.hpp"

#include "mobius/sdk/config.hpp"
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

}  // namespace

std::optional<SentenceModules> read_sentence_modules(const BuildContext& ctx, int64_t hidden) {
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
      refuse("modules.json", where + "'type' is " + quote_value(type) +
                                 ": mobius does not build sentence-transformers' Dense modules yet (it builds "
                                 "Transformer, Pooling and Normalize)");
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
  if (m.normalize) {
    Value norm = Sqrt(ReduceSum(Mul(e, e), {1}, true));
    e = Div(e, Max(norm, Scalar(g, DType::Float, 1e-12)));
  }
  return Cast(e, act);
}

}  // namespace mobius::nn
