// checkpoint_files.cpp - safe opening of checkpoint files, shard indexes and the shard rules
// shared by the safetensors and pytorch_model.bin readers.
#include "checkpoint_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_map>

#include "json_sax.hpp"

namespace mobius {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxIndexBytes = uint64_t{100} << 20;

}  // namespace

bool path_within(const fs::path& root, const fs::path& p) {
  if (root.is_absolute() != p.is_absolute() || root.root_name() != p.root_name()) return false;
  // A trailing separator would add an empty last element that matches nothing.
  const fs::path base =
      root.has_filename() || !root.has_relative_path() ? root : root.parent_path();
  return std::mismatch(base.begin(), base.end(), p.begin(), p.end()).first == base.end();
}

void CheckpointFormat::fail(const std::string& file, const std::string& reason) const {
  throw Error("[" + std::string(tag) + "] " + file + ": " + reason);
}


std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    if (i == 8) {
      s += "...";
      break;
    }
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

bool has_parent_component(std::string_view name) {
  size_t start = 0;
  while (start <= name.size()) {
    // Backslashes count as separators too, for checkpoints meant to be portable to Windows.
    size_t stop = name.find_first_of("/\\", start);
    if (stop == std::string_view::npos) stop = name.size();
    if (name.substr(start, stop - start) == "..") return true;
    start = stop + 1;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Files

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void OwnedFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

OpenedFile open_regular_file(const fs::path& path, const std::string& display, bool no_follow,
                             const CheckpointFormat& fmt) {
  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (no_follow) flags |= O_NOFOLLOW;
  int raw;
  do {
    raw = ::open(path.c_str(), flags);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) {
    const int err = errno;
    fmt.fail(display, "cannot open: " + errno_text(err));
  }
  OpenedFile file{OwnedFd(raw), 0};
  struct stat st {};
  if (::fstat(raw, &st) != 0) {
    const int err = errno;
    fmt.fail(display, "cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) fmt.fail(display, "not a regular file");
  // Regular-file reads ignore O_NONBLOCK; clear it anyway so the descriptor is ordinary.
  const int fl = ::fcntl(raw, F_GETFL);
  if (fl >= 0) ::fcntl(raw, F_SETFL, fl & ~O_NONBLOCK);
  file.size = static_cast<uint64_t>(st.st_size);
  return file;
}

int pread_exact(int fd, char* dst, uint64_t n, uint64_t off) {
  // Linux transfers at most ~2 GiB per call; smaller requests also keep other threads moving.
  constexpr uint64_t kChunk = uint64_t{1} << 30;
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min(n, kChunk));
    const ssize_t got = ::pread(fd, dst, want, static_cast<off_t>(off));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return -1;
    dst += got;
    n -= static_cast<uint64_t>(got);
    off += static_cast<uint64_t>(got);
  }
  return 0;
}

void check_read(int result, const CheckpointFormat& fmt, const std::string& display,
                const std::string& what, const char* eof_hint) {
  if (result == -1) fmt.fail(display, "unexpected end of file reading " + what + eof_hint);
  if (result != 0) fmt.fail(display, "read error on " + what + ": " + errno_text(result));
}

// ---------------------------------------------------------------------------------------------
// Layout

CheckpointLayout checkpoint_layout(const fs::path& dir, const CheckpointFormat& fmt) {
  std::error_code ec;
  // symlink_status, not exists(): a dangling link under the single file's name is reported as
  // such rather than silently falling back to the index.
  if (fs::exists(fs::symlink_status(dir / fmt.single_name, ec))) return CheckpointLayout::Single;
  if (fs::exists(fs::symlink_status(dir / fmt.index_name, ec))) return CheckpointLayout::Sharded;
  throw Error("[checkpoint] " + dir.string() + ": no " + fmt.single_name + " or " + fmt.index_name);
}

bool has_checkpoint(const fs::path& dir, const CheckpointFormat& fmt) {
  return fs::exists(dir / fmt.single_name) || fs::exists(dir / fmt.index_name);
}

std::string checkpoint_description(const CheckpointFormat& fmt, CheckpointLayout layout,
                                   size_t shards) {
  if (layout == CheckpointLayout::Single) return std::string(fmt.tag) + " (1 file)";
  return std::string(fmt.tag) + " (" + std::to_string(shards) +
         (shards == 1 ? " shard)" : " shards)");
}

// ---------------------------------------------------------------------------------------------
// Index

namespace {

// Parses {"metadata": {...}, "weight_map": {tensor: shard}}; other top-level keys are ignored.
enum class IndexExpect { Root, Key, Metadata, WeightMap, Shard, Ignored, End };

class IndexSax : public SaxHandler<IndexSax, IndexExpect> {
 public:
  IndexSax() : SaxHandler("index") {}
  std::vector<std::pair<std::string, std::string>> weights;  // tensor name, shard name
  bool has_weight_map = false;

  bool number_integer(json::number_integer_t) { return scalar(); }
  bool number_unsigned(json::number_unsigned_t) { return scalar(); }

  bool string(json::string_t& s) {
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    if (expect_ == Expect::Shard) {
      weights.back().second = std::move(s);
      return done();
    }
    return wrong_type();
  }

  bool start_object(std::size_t) {
    if (skipping()) return skip_open();
    switch (expect_) {
      case Expect::Ignored:
      case Expect::Metadata:  // its contents (e.g. total_size) are not needed
        begin_skip();
        return true;
      case Expect::Root: in_ = In::Top; return done();
      case Expect::WeightMap: in_ = In::WeightMap; return done();
      default: return wrong_type();
    }
  }

  bool key(json::string_t& k) {
    if (skipping()) return true;
    if (in_ == In::Top) {
      if (k == "weight_map") {
        if (has_weight_map) return reject("duplicate key 'weight_map'");
        has_weight_map = true;
        expect_ = Expect::WeightMap;
      } else if (k == "metadata") {
        if (seen_metadata_) return reject("duplicate key 'metadata'");
        seen_metadata_ = true;
        expect_ = Expect::Metadata;
      } else {
        expect_ = Expect::Ignored;
      }
      return true;
    }
    weights.emplace_back(std::move(k), std::string());
    expect_ = Expect::Shard;
    return true;
  }

  bool end_object() {
    if (skipping()) return skip_close() ? done() : true;
    if (in_ == In::WeightMap) {
      in_ = In::Top;
      return done();
    }
    expect_ = Expect::End;
    return true;
  }

  bool start_array(std::size_t) {
    if (skipping()) return skip_open();
    if (expect_ == Expect::Ignored) {
      begin_skip();
      return true;
    }
    return wrong_type();
  }

  bool end_array() {
    if (skipping()) return skip_close() ? done() : true;
    return wrong_type();
  }

 private:
  friend class SaxHandler<IndexSax, IndexExpect>;
  using Expect = IndexExpect;
  enum class In { None, Top, WeightMap };

  bool wrong_type() {
    switch (expect_) {
      case Expect::Root: return reject("index is not a JSON object");
      case Expect::Metadata: return reject("metadata is not an object");
      case Expect::WeightMap: return reject("weight_map is not an object");
      case Expect::Shard:
        return reject("weight_map entry for tensor " + quote_name(weights.back().first) +
                      " is not a string");
      default: return reject("index has an unexpected JSON structure");
    }
  }

  In in_ = In::None;
  bool seen_metadata_ = false;
};

// Why a shard name from the index is unacceptable, or "" when it is fine. Names are checked
// lexically first so that no path outside the folder is ever touched.
std::string bad_shard_name(const std::string& name) {
  if (name.empty()) return "empty shard name";
  if (name.find('\0') != std::string::npos) return "shard " + quote_name(name) + " contains NUL";
  if (name[0] == '/' || name[0] == '\\' || fs::path(name).is_absolute() ||
      fs::path(name).has_root_name()) {
    return "shard " + quote_name(name) + " is an absolute path";
  }
  if (has_parent_component(name)) return "shard " + quote_name(name) + " has a '..' component";
  return "";
}

}  // namespace

const std::string* ShardIndex::shard_of(std::string_view tensor) const {
  auto it = std::lower_bound(
      weights.begin(), weights.end(), tensor,
      [](const std::pair<std::string, std::string>& w, std::string_view n) { return w.first < n; });
  return it != weights.end() && it->first == tensor ? &it->second : nullptr;
}

ShardIndex read_shard_index(const fs::path& dir, const CheckpointFormat& fmt) {
  const std::string name = fmt.index_name;
  ShardIndex index;
  {
    const OpenedFile file = open_regular_file(dir / name, name, /*no_follow=*/false, fmt);
    if (file.size > kMaxIndexBytes) {
      fmt.fail(name, "file is " + std::to_string(file.size) + " bytes, over the 100 MiB limit");
    }
    std::string text(static_cast<size_t>(file.size), '\0');
    check_read(pread_exact(file.fd.get(), text.data(), file.size, 0), fmt, name, "the index");
    IndexSax sax;
    run_sax(text, sax, fmt, name, "index");
    if (!sax.has_weight_map) fmt.fail(name, "no weight_map");
    index.weights = std::move(sax.weights);
  }
  std::vector<std::pair<std::string, std::string>>& weights = index.weights;
  if (weights.empty()) fmt.fail(name, "weight_map lists no tensors");
  std::sort(weights.begin(), weights.end());
  for (size_t i = 1; i < weights.size(); ++i) {
    if (weights[i].first == weights[i - 1].first) {
      fmt.fail(name, "tensor " + quote_name(weights[i].first) + " is listed twice in weight_map");
    }
  }
  // Shards in name order: numbers are stable and messages deterministic.
  for (const auto& w : weights) index.shard_ids.emplace(w.second, 0);
  size_t number = 0;
  for (auto& [shard, id] : index.shard_ids) {
    const std::string reason = bad_shard_name(shard);
    if (!reason.empty()) fmt.fail(name, reason);
    id = number++;
  }
  return index;
}

void open_shards(
    const fs::path& dir, const ShardIndex& index, const CheckpointFormat& fmt,
    const std::function<void(size_t, const fs::path&, const std::string&, OpenedFile)>& load) {
  std::error_code ec;
  const fs::path canon_dir = fs::canonical(dir, ec);
  if (ec) throw Error("[checkpoint] " + dir.string() + ": cannot resolve: " + ec.message());
  for (const auto& [name, id] : index.shard_ids) {
    const fs::path path = dir / name;
    // Symlinks are followed only if they stay inside the folder: the canonical path is checked,
    // then that exact path is opened without following a final symlink.
    const fs::path canon = fs::canonical(path, ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) {
        fmt.fail(fmt.index_name, "shard " + quote_name(name) + " does not exist");
      }
      fmt.fail(fmt.index_name,
               "shard " + quote_name(name) + " cannot be resolved: " + ec.message());
    }
    // The shard must lie strictly below the folder (a name of "." is the folder itself).
    if (canon == canon_dir || !path_within(canon_dir, canon)) {
      fmt.fail(fmt.index_name,
               "shard " + quote_name(name) + " resolves outside the checkpoint folder");
    }
    const std::string display = printable(name);
    load(id, path, display, open_regular_file(canon, display, /*no_follow=*/true, fmt));
  }
}

// ---------------------------------------------------------------------------------------------
// Shards against the index

namespace {

// A file name of a numbered shard series, "<prefix>-<k>-of-<n><ext>" (e.g.
// model-00001-of-00002.safetensors), split into what identifies the series: prefix, n and ext.
std::optional<std::string> series_of(std::string_view name) {
  if (name.find_first_of("/\\") != std::string_view::npos) return std::nullopt;
  const size_t of = name.rfind("-of-");
  if (of == std::string_view::npos) return std::nullopt;
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  size_t end = of + 4;  // the total's digits, then the extension
  while (end < name.size() && digit(name[end])) ++end;
  if (end == of + 4 || end == name.size() || name[end] != '.') return std::nullopt;
  size_t begin = of;  // the shard number's digits, after "<prefix>-"
  while (begin > 0 && digit(name[begin - 1])) --begin;
  if (begin == of || begin < 2 || name[begin - 1] != '-') return std::nullopt;
  return std::string(name.substr(0, begin)) + '\n' + std::string(name.substr(of));
}

// A file of a numbered series the index uses, lying in the folder but never named by the
// index, makes the checkpoint ambiguous (a leftover of another save, or a shard the index lost).
void check_numbered_series(const fs::path& dir, const ShardIndex& index,
                           const CheckpointFormat& fmt) {
  std::set<std::string> series;
  for (const auto& [name, id] : index.shard_ids) {
    if (auto s = series_of(name)) series.insert(std::move(*s));
  }
  if (series.empty()) return;
  std::vector<std::string> strays;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    const auto s = series_of(name);
    if (s && series.count(*s) && !index.shard_ids.count(name)) strays.push_back(std::move(name));
  }
  if (strays.empty()) return;
  std::sort(strays.begin(), strays.end());
  fmt.fail(printable(strays.front()),
           std::string("shard of the numbered series is not named by ") + fmt.index_name);
}

}  // namespace

void check_shards_against_index(const fs::path& dir, const ShardIndex& index,
                                const std::vector<std::vector<std::string_view>>& names,
                                const std::vector<std::string>& displays,
                                const CheckpointFormat& fmt) {
  std::unordered_map<std::string_view, size_t> found;  // tensor name -> shard number
  for (size_t s = 0; s < names.size(); ++s) {
    for (std::string_view tensor : names[s]) {
      auto [it, inserted] = found.emplace(tensor, s);
      if (!inserted) {
        fmt.fail(displays[s], "tensor " + quote_name(tensor) + " is in two shards, '" +
                                  displays[it->second] + "' and '" + displays[s] + "'");
      }
    }
  }
  for (size_t s = 0; s < names.size(); ++s) {
    for (std::string_view tensor : names[s]) {
      const std::string* mapped = index.shard_of(tensor);
      if (!mapped) {
        fmt.fail(displays[s],
                 "tensor " + quote_name(tensor) + " is not listed in " + fmt.index_name);
      }
      if (index.shard_ids.at(*mapped) != s) {
        fmt.fail(displays[s], "tensor " + quote_name(tensor) + " is listed in " + fmt.index_name +
                                  " under shard " + quote_name(*mapped));
      }
    }
  }
  for (const auto& [tensor, shard] : index.weights) {
    if (!found.count(tensor)) {
      fmt.fail(fmt.index_name, "tensor " + quote_name(tensor) + " is mapped to shard " +
                                   quote_name(shard) + ", which does not contain it");
    }
  }
  check_numbered_series(dir, index, fmt);
}

}  // namespace mobius
