// checkpoint_files.cpp - safe opening of checkpoint files, shard indexes and the shard rules
// shared by the safetensors and pytorch_model.bin readers.
#include "checkpoint/checkpoint_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_map>

#include "checkpoint/json_sax.hpp"

namespace mobius {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxIndexBytes = kWeightIndexMax;

}  // namespace

bool path_within(const fs::path& root, const fs::path& p) {
  if (root.is_absolute() != p.is_absolute() || root.root_name() != p.root_name()) return false;
  // A trailing separator would add an empty last element that matches nothing.
  const fs::path base =
      root.has_filename() || !root.has_relative_path() ? root : root.parent_path();
  return std::mismatch(base.begin(), base.end(), p.begin(), p.end()).first == base.end();
}

void CheckpointFormat::fail(const std::string& file, const std::string& reason) const {
  throw Error(ErrorKind::Checkpoint, "[" + std::string(tag) + "] " + file + ": " + reason);
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

namespace {

constexpr int kMaxLinks = 40;  // as the kernel's own limit for one path

int open_at(int dirfd, const char* name, int flags) {
  int fd;
  do {
    fd = ::openat(dirfd, name, flags | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The text of the link `name` in dirfd, as readlink gives it; nullopt with errno set on failure.
std::optional<std::string> read_link_at(int dirfd, const std::string& name) {
  std::string text(256, '\0');
  for (;;) {
    const ssize_t n = ::readlinkat(dirfd, name.c_str(), text.data(), text.size());
    if (n < 0) return std::nullopt;
    if (static_cast<size_t>(n) < text.size()) {
      text.resize(static_cast<size_t>(n));
      return text;
    }
    if (text.size() >= (size_t{1} << 16)) {
      errno = ENAMETOOLONG;
      return std::nullopt;
    }
    text.resize(text.size() * 2);
  }
}

// The components of a relative name or a link's text, in order ('/' separates; empty ones
// dropped). "." and ".." are kept: they are resolved against the open folders.
std::vector<std::string> components(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t stop = s.find('/', start);
    if (stop == std::string_view::npos) stop = s.size();
    if (stop > start) out.emplace_back(s.substr(start, stop - start));
    start = stop + 1;
  }
  return out;
}

// The opened file when fd is a regular file; else NotRegular (fd is closed either way on error).
FolderResult finish_open(int fd, FolderResult r) {
  OwnedFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    r.error = FolderError::Io;
    r.err = errno;
    return r;
  }
  if (!S_ISREG(st.st_mode)) {
    r.error = FolderError::NotRegular;
    return r;
  }
  // Regular-file reads ignore O_NONBLOCK; clear it anyway so the descriptor is ordinary.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  r.file.fd = std::move(owned);
  r.file.size = static_cast<uint64_t>(st.st_size);
  r.error = FolderError::None;
  return r;
}

}  // namespace

std::string FolderResult::reason() const {
  const std::string via = link.empty() ? "" : " (" + link + ")";
  switch (error) {
    case FolderError::None: return "";
    case FolderError::Missing: return "cannot open: " + errno_text(ENOENT) + via;
    case FolderError::Outside:
      if (link.empty()) return "resolves outside the checkpoint folder";
      return "not a regular file: " + link + ", which resolves outside the checkpoint folder" +
             (hub ? " and this repository's blobs folder" : "");
    case FolderError::BlobIsLink:
      return "not a regular file: " + link + ", a blob that is itself a symbolic link";
    case FolderError::NotRegular: return "not a regular file" + via;
    case FolderError::Loop: return "cannot open: " + errno_text(ELOOP) + via;
    case FolderError::Io: return "cannot open: " + errno_text(err) + via;
  }
  return "";
}

ModelFolder::ModelFolder(const fs::path& dir) {
  char* real = ::realpath(dir.c_str(), nullptr);
  if (!real) {
    const int err = errno;
    throw Error("[checkpoint] " + dir.string() + ": cannot resolve: " + errno_text(err));
  }
  path_ = real;
  std::free(real);
  const int fd = open_at(AT_FDCWD, path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    throw Error("[checkpoint] " + dir.string() + ": cannot open the folder: " + errno_text(err));
  }
  dir_ = OwnedFd(fd);
  // A folder swapped after realpath would make path_ name another folder than the descriptor:
  // when /proc can tell, they must agree.
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  if (auto opened = read_link_at(AT_FDCWD, proc); opened && fs::path(*opened) != path_) {
    throw Error("[checkpoint] " + dir.string() + ": the folder changed while it was opened");
  }

  // A cache snapshot: the nearest ancestor (or the folder itself) that is
  // models--<org>--<name>/snapshots/<commit>.
  size_t ups = 0;
  for (fs::path p = path_; p.has_relative_path(); p = p.parent_path(), ++ups) {
    const fs::path snapshots = p.parent_path();
    const std::string repo_name = snapshots.parent_path().filename().string();
    if (snapshots.filename() == "snapshots" && repo_name.size() > 8 &&
        repo_name.compare(0, 8, "models--") == 0) {
      repo_ = snapshots.parent_path();
      ups += 2;
      break;
    }
  }
  if (repo_.empty()) return;
  // The repository is reached from the snapshot's own descriptor ("..", never a path), so it is
  // the folder this snapshot really lies in.
  OwnedFd up(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  for (size_t i = 0; i < ups && up.get() >= 0; ++i) {
    up = OwnedFd(open_at(up.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  }
  struct stat by_fd {}, by_path {};
  if (up.get() < 0 || ::fstat(up.get(), &by_fd) != 0 || ::stat(repo_.c_str(), &by_path) != 0 ||
      !same_file(by_fd, by_path)) {
    repo_.clear();
    return;
  }
  blobs_ = OwnedFd(open_at(up.get(), "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
}

bool ModelFolder::has(std::string_view name) const {
  struct stat st {};
  return ::fstatat(dir_.get(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

FolderResult ModelFolder::try_open(std::string_view name) const {
  FolderResult r;
  r.hub = !repo_.empty();
  auto failed = [&](FolderError e, int err = 0) {
    r.error = e;
    r.err = err;
    return std::move(r);
  };
  // The folders below the root on the way, each opened O_NOFOLLOW from the one before, and
  // their names: ".." pops one, and popping the root means leaving the folder.
  std::vector<OwnedFd> open_dirs;
  std::vector<std::string> names;
  const auto here = [&] { return open_dirs.empty() ? dir_.get() : open_dirs.back().get(); };
  const auto rel_name = [&](const std::string& last) {
    fs::path p;
    for (const auto& n : names) p /= n;
    return (p / last).string();
  };
  std::vector<std::string> todo_init = components(name);
  std::deque<std::string> todo(todo_init.begin(), todo_init.end());
  int links = 0;
  while (!todo.empty()) {
    const std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == "." || c == "..") {
      if (c == "..") {
        if (open_dirs.empty()) return failed(FolderError::Outside);
        open_dirs.pop_back();
        names.pop_back();
      }
      continue;
    }
    const bool last = todo.empty();
    const int flags = O_RDONLY | O_NOFOLLOW | (last ? O_NONBLOCK | O_NOCTTY : O_DIRECTORY);
    const int fd = open_at(here(), c.c_str(), flags);
    if (fd >= 0) {
      if (last) return finish_open(fd, std::move(r));
      open_dirs.emplace_back(fd);
      names.push_back(c);
      continue;
    }
    const int err = errno;
    struct stat st {};
    if (::fstatat(here(), c.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode)) {
      if (err == ENOENT) return failed(FolderError::Missing);
      if (err == ENOTDIR && last) return failed(FolderError::NotRegular);
      return failed(FolderError::Io, err);
    }
    // A symbolic link: read its text, then decide where it may lead.
    const std::optional<std::string> text = read_link_at(here(), c);
    if (!text) return failed(FolderError::Io, errno);
    r.link = quote_name(rel_name(c)) + " is a symbolic link to " + quote_name(*text);
    if (++links > kMaxLinks) return failed(FolderError::Loop);
    const fs::path target(*text);

    // A cache snapshot's file: a link to a blob of this same repository. The decision compares
    // the identity of the folder the text names with the blobs folder's; the blob is then opened
    // from the blobs descriptor, without following a link.
    if (last && blobs_.get() >= 0) {
      fs::path base = path_;
      for (const auto& n : names) base /= n;
      const fs::path full = target.is_absolute() ? target : base / target;
      const fs::path blob = full.filename();
      struct stat blobs_st {}, named_st {};
      // Only a text naming "<folder>/blobs/<name>" is looked at (stat, never open).
      if (!blob.empty() && blob != "." && blob != ".." &&
          full.parent_path().filename() == "blobs" && ::fstat(blobs_.get(), &blobs_st) == 0 &&
          ::stat(full.parent_path().c_str(), &named_st) == 0 && same_file(blobs_st, named_st)) {
        const int bfd = open_at(blobs_.get(), blob.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
                                                                O_NOCTTY);
        if (bfd >= 0) return finish_open(bfd, std::move(r));
        const int berr = errno;
        struct stat bst {};
        if (::fstatat(blobs_.get(), blob.c_str(), &bst, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(bst.st_mode)) {
          return failed(FolderError::BlobIsLink);
        }
        if (berr == ENOENT) return failed(FolderError::Missing);
        return failed(FolderError::Io, berr);
      }
    }

    // Otherwise the link is followed only inside the folder: an absolute text must start with
    // the folder's own path, and its components (".." included) are resolved like the name's.
    std::vector<std::string> next;
    if (target.is_absolute()) {
      if (!path_within(path_, target)) return failed(FolderError::Outside);
      open_dirs.clear();
      names.clear();
      // The raw remainder after the folder's path, so every ".." in it is resolved against the
      // open folders rather than lexically.
      auto it = target.begin();
      for (auto r_it = path_.begin(); r_it != path_.end(); ++r_it) ++it;
      for (; it != target.end(); ++it) {
        if (!it->empty()) next.push_back(it->string());
      }
    } else {
      next = components(*text);
    }
    todo.insert(todo.begin(), next.begin(), next.end());
  }
  // The name (or a link) ends at a folder: the checkpoint folder itself, or one inside it.
  return failed(open_dirs.empty() ? FolderError::Outside : FolderError::NotRegular);
}

namespace {
// Whose file a failure is about, by the tag its message carries: a config file's, or the
// checkpoint's (weights, their index, anything else of the folder).
ErrorKind kind_of(const char* tag) {
  return std::string_view(tag) == "config" ? ErrorKind::Config : ErrorKind::Checkpoint;
}
}  // namespace

OpenedFile ModelFolder::open(std::string_view name, const std::string& display,
                             const char* tag) const {
  FolderResult r = try_open(name);
  if (r.error != FolderError::None) {
    throw Error(kind_of(tag), "[" + std::string(tag) + "] " + display + ": " + r.reason());
  }
  return std::move(r.file);
}

std::string ModelFolder::read_text(std::string_view name, const std::string& display,
                                   const char* tag, uint64_t max_bytes) const {
  const OpenedFile file = open(name, display, tag);
  const std::string where = "[" + std::string(tag) + "] " + display + ": ";
  if (file.size > max_bytes) {
    throw Error(kind_of(tag), where + "larger than " + std::to_string(max_bytes >> 20) + " MiB");
  }
  std::string text(static_cast<size_t>(file.size), '\0');
  const int res = pread_exact(file.fd.get(), text.data(), file.size, 0);
  if (res == -1) throw Error(kind_of(tag), where + "unexpected end of file");
  if (res != 0) throw Error(ErrorKind::Io, where + "read error: " + errno_text(res));
  return text;
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
  throw Error(ErrorKind::Checkpoint, "[checkpoint] " + dir.string() + ": no " + fmt.single_name + " or " + fmt.index_name);
}

bool has_checkpoint(const fs::path& dir, const CheckpointFormat& fmt) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(dir / fmt.single_name, ec)) ||
         fs::exists(fs::symlink_status(dir / fmt.index_name, ec));
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

ShardIndex read_shard_index(const ModelFolder& folder, const CheckpointFormat& fmt) {
  const std::string name = fmt.index_name;
  ShardIndex index;
  {
    const OpenedFile file = folder.open(name, name, fmt.tag);
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
    const fs::path& dir, const ModelFolder& folder, const ShardIndex& index,
    const CheckpointFormat& fmt,
    const std::function<void(size_t, const fs::path&, const std::string&, OpenedFile)>& load) {
  for (const auto& [name, id] : index.shard_ids) {
    const std::string display = printable(name);
    FolderResult r = folder.try_open(name);
    const std::string via = r.link.empty() ? "" : ": " + r.link;
    switch (r.error) {
      case FolderError::None: break;
      case FolderError::Missing:
        fmt.fail(fmt.index_name, "shard " + quote_name(name) + " does not exist" + via);
      case FolderError::Outside:
        fmt.fail(fmt.index_name, "shard " + quote_name(name) +
                                     " resolves outside the checkpoint folder" + via);
      case FolderError::NotRegular:
      case FolderError::BlobIsLink: fmt.fail(display, r.reason());
      case FolderError::Loop:
      case FolderError::Io:
        fmt.fail(fmt.index_name, "shard " + quote_name(name) + " cannot be resolved: " +
                                     errno_text(r.error == FolderError::Loop ? ELOOP : r.err) +
                                     via);
    }
    load(id, dir / name, display, std::move(r.file));
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
