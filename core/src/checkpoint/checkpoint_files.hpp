// checkpoint_files.hpp - the files of a checkpoint folder, shared by every checkpoint reader:
// opening a file safely, reading a shard index (*.index.json) and opening the shards it names,
// checking the shards against it, the folder-containment rule, and the message helpers.
//
// Checkpoints come from strangers: names and bytes are untrusted until checked, and no file is
// opened from a model folder except through ModelFolder, the one rule for what may be opened.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "util/untrusted.hpp"  // printable, quote_name

namespace mobius {

// ---------------------------------------------------------------------------------------------
// Containment

// True when p is root itself or lies below it. Both should be canonical (fs::canonical): the
// test is lexical, component by component, so "/a/bc" is not inside "/a/b".
bool path_within(const std::filesystem::path& root, const std::filesystem::path& p);

// True when a relative name has a ".." component; backslashes count as separators too.
bool has_parent_component(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Formats and messages

// The file names of one checkpoint format and the tag of its messages.
struct CheckpointFormat {
  const char* tag;          // messages read "[<tag>] <file>: <reason>"
  const char* single_name;  // the whole checkpoint in one file
  const char* index_name;   // the index of a sharded checkpoint
  [[noreturn]] void fail(const std::string& file, const std::string& reason) const;
};

inline constexpr CheckpointFormat kSafetensorsFormat{"safetensors", "model.safetensors",
                                                     "model.safetensors.index.json"};
inline constexpr CheckpointFormat kPytorchFormat{"pytorch", "pytorch_model.bin",
                                                 "pytorch_model.bin.index.json"};
// Every name a folder's weights may have, in the order they are looked for: diffusers' and
// transformers' safetensors names, then the legacy pickle files (read only when no safetensors
// file is there, through the restricted unpickler).
inline constexpr CheckpointFormat kWeightFormats[] = {
    {"safetensors", "diffusion_pytorch_model.safetensors",
     "diffusion_pytorch_model.safetensors.index.json"},
    {"safetensors", "pytorch_model.safetensors", "pytorch_model.safetensors.index.json"},
    kSafetensorsFormat,
    {"pytorch", "diffusion_pytorch_model.bin", "diffusion_pytorch_model.bin.index.json"},
    kPytorchFormat,
    {"pytorch", "model.bin", "model.bin.index.json"},
};

std::string errno_text(int err);
std::string dims_text(const std::vector<int64_t>& dims);  // "[2, 3]", cut after 8 dimensions
std::string range_text(uint64_t begin, uint64_t end);     // "[begin, end)"

inline uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t le64(const uint8_t* p) {
  return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

// ---------------------------------------------------------------------------------------------
// Files

// An owned file descriptor.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { reset(); }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  void reset();
  int fd_ = -1;
};

// The small files a runtime needs beside the model, taken from a checkpoint folder when it has
// them (copied into the output folder, fetched from the hub): config.json first, the generation
// config, the tokenizer in each format a runtime reads (tokenizer.json; SentencePiece models: T5's
// spiece.model, Marian's source.spm and target.spm, mBART's and M2M's sentencepiece.bpe.model;
// Whisper's normalizer.json), chat templates, and the preprocessor config of audio and image
// models.
inline const std::vector<std::string>& runtime_file_names() {
  static const std::vector<std::string> v = {
      "config.json",           "generation_config.json",  "tokenizer.json",  "tokenizer_config.json",
      "special_tokens_map.json", "tokenizer.model",         "vocab.json",      "merges.txt",
      "added_tokens.json",     "chat_template.jinja",     "chat_template.json", "preprocessor_config.json",
      "spiece.model",          "source.spm",              "target.spm",      "sentencepiece.bpe.model",
      "normalizer.json"};
  return v;
}

struct OpenedFile {
  OwnedFd fd;
  uint64_t size = 0;
};

// Reads exactly n bytes at offset off. Returns 0 on success, -1 when the file ends first (it
// shrank since it was validated), or an errno value. Safe to call from several threads at once.
int pread_exact(int fd, char* dst, uint64_t n, uint64_t off);

// Turns the result of pread_exact (or of a reader with the same convention) into an error about
// reading `what` from `display`; eof_hint is appended to the end-of-file message.
void check_read(int result, const CheckpointFormat& fmt, const std::string& display,
                const std::string& what, const char* eof_hint = "");

// ---------------------------------------------------------------------------------------------
// The model folder

// Why a name inside a model folder was not opened.
enum class FolderError {
  None,
  Missing,     // nothing by that name (or a link to nothing)
  Outside,     // it, or a link on the way, leads outside the folder (and outside the blobs)
  BlobIsLink,  // a cache snapshot's link leads to a blob that is itself a link
  NotRegular,  // a folder, device, FIFO or socket
  Loop,        // too many links in a row
  Io           // another error of the system (errno in FolderResult::err)
};

struct FolderResult {
  OpenedFile file;                         // open when error == None
  FolderError error = FolderError::None;
  int err = 0;                             // errno for Io
  // The last link followed, "'<link>' is a symbolic link to '<text>'": the link's name inside
  // the folder and its text as readlink gives it, both quoted; empty when no link was met.
  std::string link;
  bool hub = false;                        // the folder is a cache snapshot
  // The reason, for a message "<file>: <reason>": e.g. "not a regular file: 'config.json' is a
  // symbolic link to '/etc/passwd', which resolves outside the checkpoint folder".
  std::string reason() const;
};

// A model folder, resolved once with realpath and held open. Every file mobius reads from a
// model folder (config.json, the weights, index files and shards, the runtime files copied
// beside the model) is opened through it, under one rule:
//
//  - a file is read when it is a regular file inside the folder, reached through real folders;
//  - a symbolic link inside the folder is followed one step at a time while every step stays
//    inside the folder;
//  - when the folder is a Hugging Face cache snapshot, <cache>/models--<org>--<name>/snapshots/
//    <commit>/ (or a folder below one), a link may also lead into that same repository's blobs/
//    folder (huggingface_hub writes "../../blobs/<hash>"), to a blob that is a regular file;
//  - nothing else is opened: a link leading anywhere else (another repository's blobs, /etc,
//    /proc, /dev) is refused before anything is opened; a device, FIFO, socket or folder is
//    refused by fstat after an O_NONBLOCK open, so it cannot block or be read.
//
// The kernel never follows a link on the way: each component is opened with O_NOFOLLOW relative
// to the descriptor of the folder it is in (a blob relative to the descriptor of the repository's
// blobs/, found from the snapshot's own descriptor), and each link's text is read with readlinkat
// and checked before it is followed. A file or folder swapped between a check and an open
// therefore fails to open instead of leading elsewhere. Messages name the link and its text,
// never anything read from a target.
class ModelFolder {
 public:
  // Resolves dir (which may itself be reached through links) with realpath and opens it. Throws
  // "[checkpoint] <dir>: cannot resolve: <reason>".
  explicit ModelFolder(const std::filesystem::path& dir);
  ModelFolder(ModelFolder&&) noexcept = default;
  ModelFolder& operator=(ModelFolder&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }  // canonical

  // True when an entry of any kind (a dangling link too) has this single-component name. Looks
  // at the entry itself; follows nothing and opens nothing.
  bool has(std::string_view name) const;

  // Opens `name`, a relative path with '/' separators, under the rule above.
  FolderResult try_open(std::string_view name) const;
  // The same, throwing "[<tag>] <display>: <reason>" on failure.
  OpenedFile open(std::string_view name, const std::string& display, const char* tag) const;
  // The whole text of a file of at most max_bytes, read through open(); throws
  // "[<tag>] <display>: larger than <limit>" for a larger one.
  std::string read_text(std::string_view name, const std::string& display, const char* tag,
                        uint64_t max_bytes) const;

 private:
  std::filesystem::path path_;
  OwnedFd dir_;
  std::filesystem::path repo_;
  OwnedFd blobs_;  // <repo>/blobs of a cache snapshot, when it exists
};

// ---------------------------------------------------------------------------------------------
// Layout and shards

enum class CheckpointLayout { Single, Sharded };

// Which layout dir holds in fmt: the single file when its name exists at all (a link is then
// opened under ModelFolder's rule or refused, never silently skipped), else the index. Throws
// "[checkpoint] <dir>: no <single> or <index>" when neither exists.
CheckpointLayout checkpoint_layout(const std::filesystem::path& dir, const CheckpointFormat& fmt);

// True when dir has an entry named like the single file or the index of fmt (a link counts,
// wherever it leads: opening it decides).
bool has_checkpoint(const std::filesystem::path& dir, const CheckpointFormat& fmt);

// The validated weight_map of an index: the file is at most 100 MiB of JSON, parsed without a
// DOM so duplicate keys are seen; it lists at least one tensor, none twice; every shard name is
// a relative path with no '..' component (checked before anything outside could be touched).
struct ShardIndex {
  std::vector<std::pair<std::string, std::string>> weights;  // (tensor, shard), by tensor
  std::map<std::string, size_t> shard_ids;  // shard name -> shard number, in name order
  // The shard the index maps tensor to, or nullptr when it is not listed.
  const std::string* shard_of(std::string_view tensor) const;
};

ShardIndex read_shard_index(const ModelFolder& folder, const CheckpointFormat& fmt);

// Opens every shard the index names, in shard-number order, through folder.try_open (its rule
// decides; a shard leading outside reads "shard '<name>' resolves outside the checkpoint
// folder: <link>"). load(number, path, display, file) reads each shard before the next one is
// opened; path is dir / name (for TensorMeta::file), display the printable name.
void open_shards(const std::filesystem::path& dir, const ModelFolder& folder,
                 const ShardIndex& index, const CheckpointFormat& fmt,
                 const std::function<void(size_t, const std::filesystem::path&, const std::string&,
                                          OpenedFile)>& load);

// Checks the shards' contents against the index: each tensor stored exactly once, in the shard
// the index names, every indexed tensor present, and no shard of a numbered series
// ("<prefix>-00002-of-00002<ext>") lying in the folder without the index naming it.
// names[s] lists the tensors of shard number s, displays[s] its printable name.
void check_shards_against_index(const std::filesystem::path& dir, const ShardIndex& index,
                                const std::vector<std::vector<std::string_view>>& names,
                                const std::vector<std::string>& displays,
                                const CheckpointFormat& fmt);

// "<tag> (1 file)" or "<tag> (N shard(s))", the readers' describe().
std::string checkpoint_description(const CheckpointFormat& fmt, CheckpointLayout layout,
                                   size_t shards);

// ---------------------------------------------------------------------------------------------
// The readers' common base

// A reader's table: every tensor sorted by name with where its bytes are (Loc, which has a
// member `size_t shard`), the shards' display names, lookups, and the checks a request must
// pass. Immutable after construction, so concurrent reads are safe.
// The tensor named `name` in `tensors`, sorted by name; nullptr when there is none.
inline const TensorMeta* find_sorted(const std::vector<TensorMeta>& tensors, std::string_view name) {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name, [](const TensorMeta& t, std::string_view n) {
    return std::string_view(t.name) < n;
  });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

template <typename Loc>
class TableReader : public CheckpointReader {
 public:
  const std::vector<TensorMeta>& tensors() const override { return tensors_; }

  const TensorMeta* find(std::string_view name) const override { return find_sorted(tensors_, name); }

  std::string describe() const override { return description_; }

 protected:
  TableReader(const CheckpointFormat& fmt, std::vector<TensorMeta> tensors, std::vector<Loc> locs,
              std::vector<std::string> shard_displays, std::string description)
      : fmt_(fmt),
        shard_displays_(std::move(shard_displays)),
        description_(std::move(description)) {
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors[a].name < tensors[b].name; });
    tensors_.reserve(order.size());
    locs_.reserve(order.size());
    for (size_t i : order) {
      tensors_.push_back(std::move(tensors[i]));
      locs_.push_back(std::move(locs[i]));
    }
  }

  // Where the tensor meta names lies, or nullptr when the request does not match it exactly.
  const Loc* locate(const TensorMeta& meta) const {
    const TensorMeta* mine = find(meta.name);
    if (!mine || mine->nbytes != meta.nbytes) return nullptr;
    return &locs_[static_cast<size_t>(mine - tensors_.data())];
  }

  // The same for a read: meta may be a copy, but the caller's nbytes sized the destination, so
  // it must be the stored size. Throws naming the checkpoint or the shard.
  const Loc& locate_for_read(const TensorMeta& meta) const {
    const TensorMeta* mine = find(meta.name);
    if (!mine) {
      throw Error("[" + std::string(fmt_.tag) + "] " + description_ + ": no tensor " +
                  quote_name(meta.name));
    }
    const Loc& loc = locs_[static_cast<size_t>(mine - tensors_.data())];
    if (mine->nbytes != meta.nbytes) {
      fmt_.fail(shard_display(loc),
                "tensor " + quote_name(meta.name) + " is " + std::to_string(mine->nbytes) +
                    " bytes, but the request is for " + std::to_string(meta.nbytes));
    }
    return loc;
  }

  const std::string& shard_display(const Loc& loc) const { return shard_displays_[loc.shard]; }

 private:
  const CheckpointFormat& fmt_;
  std::vector<TensorMeta> tensors_;  // sorted by name
  std::vector<Loc> locs_;            // parallel to tensors_
  std::vector<std::string> shard_displays_;
  std::string description_;
};

}  // namespace mobius
