// runtime_files.cpp - the runtime files of an output folder (save/runtime_files.hpp).
#include "save/runtime_files.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "mobius/error.hpp"
#include "plugins/context.hpp"
#include "util/untrusted.hpp"

namespace mobius {
namespace fs = std::filesystem;

std::vector<std::pair<std::string, OpenedFile>> open_runtime_files(const fs::path& src) {
  std::vector<std::pair<std::string, OpenedFile>> files;
  if (src.empty()) return files;
  const ModelFolder folder(src);
  for (const std::string& name : runtime_file_names()) {
    if (!folder.has(name)) continue;
    files.emplace_back(name, folder.open(name, name, "checkpoint"));
  }
  return files;
}

RuntimeFiles runtime_files(const std::vector<std::pair<std::string, OpenedFile>>& opened,
                           const std::vector<const mobius_context*>& builds) {
  RuntimeFiles r;
  for (const mobius_context* ctx : builds)
    for (const auto& f : ctx->runtime_files) {
      bool replaced = false;
      for (auto& w : r.written)
        if (w.first == f.first) {
          w.second = f.second;
          replaced = true;
        }
      if (!replaced) r.written.push_back(f);
    }
  auto added = [&](const std::string& n) {
    for (const auto& f : r.written)
      if (f.first == n) return true;
    return false;
  };
  for (const auto& [name, file] : opened)
    if (!added(name)) r.copies.emplace_back(name, &file);
  return r;
}

std::string read_opened(const OpenedFile& file, const std::string& name, uint64_t limit) {
  std::string out;
  std::vector<char> buf(1 << 16);
  for (uint64_t off = 0;;) {
    const ssize_t n = ::pread(file.fd.get(), buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("[save] " + name + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
    if (out.size() > limit) throw Error("[save] " + name + ": larger than " + std::to_string(limit) + " bytes");
  }
  return out;
}

void add_transformers_js_config(RuntimeFiles& files, const std::string& tjs_dtype,
                                const std::vector<std::pair<std::string, size_t>>& graphs) {
  std::string text;
  bool found = false;
  for (auto it = files.written.begin(); it != files.written.end(); ++it)
    if (it->first == "config.json") {
      text = it->second;
      files.written.erase(it);
      found = true;
      break;
    }
  for (auto it = files.copies.begin(); !found && it != files.copies.end(); ++it)
    if (it->first == "config.json") {
      text = read_opened(*it->second, "config.json", kConfigLimits.max_bytes);
      files.copies.erase(it);
      found = true;
      break;
    }
  if (!found)
    throw Error("[save] transformers.js needs config.json beside the model, and the checkpoint "
                "has none");
  nlohmann::json cfg = parse_json_limited(text, "config.json", kConfigLimits);
  if (!cfg.is_object()) throw Error("[save] config.json is not a JSON object");
  nlohmann::json chunks = nlohmann::json::object();
  for (const auto& [graph, n] : graphs) chunks[fs::path(graph).filename().string()] = n;
  cfg["transformers.js_config"] = {{"dtype", tjs_dtype}, {"use_external_data_format", chunks}};
  files.written.emplace_back("config.json", cfg.dump(2) + "\n");
}

}  // namespace mobius
