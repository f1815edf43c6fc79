// module_weights.cpp - a sentence-transformers folder's module weights (module_weights.hpp).
#include "checkpoint/module_weights.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.hpp"
#include "util/untrusted.hpp"

namespace mobius {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kModulesMax = 1u << 20;  // modules.json: a few hundred bytes in practice

// One reader over the model's tensors and each module's, the latter renamed "<folder>/<name>".
class ModuleWeights : public CheckpointReader {
 public:
  ModuleWeights(std::unique_ptr<CheckpointReader> base, std::vector<std::pair<std::string, std::unique_ptr<CheckpointReader>>> modules)
      : base_(std::move(base)), modules_(std::move(modules)) {
    for (const TensorMeta& m : base_->tensors()) add(m, base_.get(), &m, m.name);
    for (const auto& [folder, reader] : modules_)
      for (const TensorMeta& m : reader->tensors()) add(m, reader.get(), &m, folder + "/" + m.name);
    std::vector<size_t> order(all_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all_[a].name < all_[b].name; });
    std::vector<TensorMeta> sorted;
    std::vector<Source> sources;
    for (size_t i : order) {
      sorted.push_back(all_[i]);
      sources.push_back(sources_[i]);
    }
    all_ = std::move(sorted);
    sources_ = std::move(sources);
    for (size_t i = 0; i < all_.size(); ++i)
      if (!index_.emplace(all_[i].name, i).second)
        throw Error("[checkpoint] the tensor '" + all_[i].name + "' is named twice");
  }
  const std::vector<TensorMeta>& tensors() const override { return all_; }
  const TensorMeta* find(std::string_view name) const override {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &all_[it->second];
  }
  void read(const TensorMeta& meta, void* dst) const override {
    const Source& s = source(meta);
    s.reader->read(*s.meta, dst);
  }
  std::optional<FileExtent> extent(const TensorMeta& meta) const override {
    const Source& s = source(meta);
    return s.reader->extent(*s.meta);
  }
  void read_range(const TensorMeta& meta, uint64_t first, uint64_t count, void* dst) const override {
    const Source& s = source(meta);
    s.reader->read_range(*s.meta, first, count, dst);
  }
  bool reads_ranges(const TensorMeta& meta) const override {
    const Source& s = source(meta);
    return s.reader->reads_ranges(*s.meta);
  }
  std::string describe() const override {
    return base_->describe() + " and " + std::to_string(modules_.size()) + " sentence-transformers module(s)";
  }

 private:
  struct Source {
    const CheckpointReader* reader;
    const TensorMeta* meta;
  };
  void add(const TensorMeta& m, const CheckpointReader* r, const TensorMeta* original, std::string name) {
    TensorMeta copy = m;
    copy.name = std::move(name);
    all_.push_back(std::move(copy));
    sources_.push_back({r, original});
  }
  const Source& source(const TensorMeta& meta) const {
    auto it = index_.find(meta.name);
    if (it == index_.end()) throw Error("[checkpoint] no tensor '" + meta.name + "'");
    return sources_[it->second];
  }
  std::unique_ptr<CheckpointReader> base_;
  std::vector<std::pair<std::string, std::unique_ptr<CheckpointReader>>> modules_;
  std::vector<TensorMeta> all_;
  std::vector<Source> sources_;
  std::map<std::string, size_t> index_;
};

}  // namespace

std::unique_ptr<CheckpointReader> with_module_weights(std::unique_ptr<CheckpointReader> base, const fs::path& dir) {
  std::vector<std::pair<std::string, std::unique_ptr<CheckpointReader>>> modules;
  nlohmann::json list;
  try {
    const ModelFolder folder(dir);
    if (!folder.has("modules.json")) return base;
    list = parse_json_limited(folder.read_text("modules.json", (dir / "modules.json").string(), "checkpoint", kModulesMax),
                              "modules.json", kConfigLimits);
  } catch (const std::exception&) {
    return base;  // the plugin reading modules.json says what is wrong with it
  }
  if (!list.is_array()) return base;
  for (const nlohmann::json& m : list) {
    const auto path = m.is_object() ? m.find("path") : m.end();
    if (!m.is_object() || path == m.end() || !path->is_string() || !is_component_name(path->get<std::string>())) continue;
    const std::string name = path->get<std::string>();
    struct stat st {};
    if (::lstat((dir / name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // a link is never followed
    bool has = false;
    for (const CheckpointFormat& f : kWeightFormats) has = has || has_checkpoint(dir / name, f);
    if (has) modules.emplace_back(name, open_checkpoint(dir / name));
  }
  if (modules.empty()) return base;
  return std::make_unique<ModuleWeights>(std::move(base), std::move(modules));
}

}  // namespace mobius
