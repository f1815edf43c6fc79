// save.cpp - ONNX serialization and the transactional save: temp folder, stream weights one at a
// time into external data, fsync, check, then swap into place.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <cstdio>
#include <cstring>
#include <vector>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.hpp"
#include "util/digest_cache.hpp"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "save/package.hpp"
#include "save/runtime_files.hpp"
#include "util/progress.hpp"
#include "util/digest.hpp"
#include "util/untrusted.hpp"

#ifndef MOBIUS_VERSION
#define MOBIUS_VERSION "0.0.0"
#endif

namespace mobius {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kIrVersion = 8;     // what Debian's onnx 1.12 checker accepts

// ONNX Runtime implements SimplifiedLayerNormalization (RMSNorm) in the ONNX domain itself, so
// its schema is not in onnx's registry: registered here as the runtime defines it (opset 1), the
// checker checks those nodes like any other instead of rejecting the model.
void register_runtime_schemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    onnx::OpSchema schema;
    schema.SetName("SimplifiedLayerNormalization")
        .SetDomain("")
        .SinceVersion(1)
        .SetDoc("ONNX Runtime's RMS normalization: x / sqrt(mean(x^2) + epsilon) * scale")
        .Attr("axis", "first normalized dimension", onnx::AttributeProto::INT, static_cast<int64_t>(-1))
        .Attr("epsilon", "added to the mean square", onnx::AttributeProto::FLOAT, 1e-5f)
        .Attr("stash_type", "type of the statistics (1: float32)", onnx::AttributeProto::INT,
              static_cast<int64_t>(1))
        .Input(0, "X", "input", "T")
        .Input(1, "scale", "scale", "V")
        .Output(0, "Y", "normalized", "V")
        .Output(1, "inv_std_var", "saved inverse standard deviation", "U",
                onnx::OpSchema::Optional)
        .TypeConstraint("T", {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"},
                        "input types")
        .TypeConstraint("U", {"tensor(float)", "tensor(double)"}, "statistics types")
        .TypeConstraint("V", {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"},
                        "scale and output types");
    onnx::OpSchemaRegistry::OpSchemaRegisterOnce r(schema);
  });
}
constexpr int64_t kOpsetVersion = 17;
constexpr uint64_t kAlign = 64;       // external data offsets are 64-byte aligned
const char* const kTempTag = ".mobius-tmp-";

std::string sys_error(const std::string& what, const fs::path& p) {
  return "[save] " + p.string() + ": " + what + ": " + std::strerror(errno);
}

class Fd {
 public:
  Fd(const fs::path& p, int flags, mode_t mode = 0644) : path_(p) {
    fd_ = ::open(p.c_str(), flags | O_CLOEXEC, mode);
    if (fd_ < 0) throw Error(sys_error("cannot open", p));
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void write_all(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(sys_error("write failed", path_));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  void sync() {
    if (::fsync(fd_) != 0) throw Error(sys_error("fsync failed", path_));
  }
  int get() const { return fd_; }
  void truncate(uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      throw Error(sys_error("ftruncate failed", path_));
  }
  // Blocks for [0, size) before anything is written: the writes then fill allocated (unwritten)
  // blocks, which costs ext4 a third less than delayed allocation does, and a disk without room
  // for the weights fails the build now. Skipped where the filesystem cannot do it.
  void allocate(uint64_t size) {
    if (size == 0) return;
    if (::fallocate(fd_, 0, 0, static_cast<off_t>(size)) == 0) return;
    if (errno != EOPNOTSUPP && errno != ENOSYS)
      throw Error(sys_error("cannot allocate " + std::to_string(size) + " bytes", path_));
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

void fsync_dir(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Removes temp folders of earlier runs that were killed (their process no longer exists).
void clean_stale_temps(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  std::string prefix = "." + name + kTempTag;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    std::string fn = e.path().filename().string();
    if (fn.rfind(prefix, 0) != 0) continue;
    // "<pid>" or "<pid>-<n>": the n-th save of that process. This process's own are saves in
    // progress on other threads.
    std::string pid_s = fn.substr(prefix.size());
    char* end = nullptr;
    long pid = std::strtol(pid_s.c_str(), &end, 10);
    if (!end || (*end && *end != '-') || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

class TempDir {
 public:
  explicit TempDir(fs::path p) : path_(std::move(p)) {}
  ~TempDir() {
    if (!committed_) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  void committed() { committed_ = true; }

 private:
  fs::path path_;
  bool committed_ = false;
};

// Renames value `from` to `to` in every node input of g and of its subgraphs (which see g's
// values by name).
void rename_uses(onnx::GraphProto& g, const std::string& from, const std::string& to) {
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input())
      if (in == from) in = to;
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_uses(*a.mutable_g(), from, to);
      for (auto& sub : *a.mutable_graphs()) rename_uses(sub, from, to);
    }
  }
}

// ONNX names a graph output by its value, so an SDK output of a value under another name is an
// Identity node, which a runtime runs as a copy on every call (a whole KV cache per step) unless
// it can eliminate it. Where the value is a node's output in this graph and no graph output
// already, the node's output takes the output's name instead and the Identity goes. Subgraphs
// (an If's branches, a Loop's or Scan's body) are folded the same way, each within itself.
void fold_output_identities(onnx::GraphProto& g) {
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) fold_output_identities(*a.mutable_g());
      for (auto& sub : *a.mutable_graphs()) fold_output_identities(sub);
    }
  std::set<std::string> outputs, inputs;
  for (const auto& o : g.output()) outputs.insert(o.name());
  for (const auto& i : g.input()) inputs.insert(i.name());
  std::map<std::string, std::pair<int, int>> producer;  // value -> (node, output index)
  for (int i = 0; i < g.node_size(); ++i)
    for (int k = 0; k < g.node(i).output_size(); ++k) producer[g.node(i).output(k)] = {i, k};
  std::set<int> dropped;
  std::set<std::string> claimed;  // values already renamed: one output each
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (n.op_type() != "Identity" || !n.domain().empty() || n.input_size() != 1 || n.output_size() != 1)
      continue;
    const std::string src = n.input(0), dst = n.output(0);
    auto p = producer.find(src);
    if (!outputs.count(dst) || outputs.count(src) || inputs.count(src) || p == producer.end() ||
        claimed.count(src) || dropped.count(p->second.first))
      continue;
    claimed.insert(src);
    dropped.insert(i);
    g.mutable_node(p->second.first)->set_output(p->second.second, dst);
    rename_uses(g, src, dst);
    for (auto& vi : *g.mutable_value_info())
      if (vi.name() == src) vi.set_name(dst);
  }
  if (dropped.empty()) return;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (int i = 0; i < g.node_size(); ++i)
    if (!dropped.count(i)) *kept.Add() = std::move(*g.mutable_node(i));
  g.mutable_node()->Swap(&kept);
}

void finalize(onnx::ModelProto& m, const std::set<std::string>& domains,
              const std::string& model_type) {
  if (m.graph().name().empty()) m.mutable_graph()->set_name(model_type.empty() ? "main" : model_type);
  fold_output_identities(*m.mutable_graph());
  m.set_ir_version(kIrVersion);
  m.set_producer_name("mobius");
  m.set_producer_version(MOBIUS_VERSION);
  m.clear_opset_import();
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(kOpsetVersion);
  for (const auto& d : domains) {
    auto* o = m.add_opset_import();
    o->set_domain(d);
    o->set_version(1);
  }
}

// OUT may hold an earlier model (replaced) or be an empty folder; anything else is refused. An
// earlier model is a folder this tool wrote (mobius_provenance.json) or one with model.onnx.
void check_replaceable(const fs::path& target) {
  if (!fs::is_directory(target))
    throw Error("[save] " + target.string() + " exists and is not a folder");
  if (!fs::is_empty(target) && !fs::exists(target / "mobius_provenance.json") &&
      !fs::exists(target / "model.onnx"))
    throw Error("[save] " + target.string() +
                " is a non-empty folder that holds no model built by mobius "
                "(no mobius_provenance.json or model.onnx); refusing to replace it");
}

// Moves the finished temporary folder to target: a plain rename when target is absent, else an
// atomic exchange with the folder there (then removed). Another build of the same OUT may put
// its model there between the check and the rename; that model is exchanged like an earlier one.
void put_in_place(const fs::path& tmp, const fs::path& target) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target, ec))) {
      if (::rename(tmp.c_str(), target.c_str()) == 0) return;
      if (errno != EEXIST && errno != ENOTEMPTY)
        throw Error(sys_error("cannot rename into place", target));
    }
    // Atomic swap: OUT is at every moment either the old complete model or the new one.
    check_replaceable(target);
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(tmp, ec);  // now holds the previous model
      return;
    }
    if (errno != ENOENT) throw Error(sys_error("cannot replace", target));
    // Removed between the check and the exchange: rename again.
  }
  throw Error("[save] " + target.string() + ": kept changing while the model was put in place");
}

}  // namespace

void check_output_folder(const fs::path& out, const fs::path& source) {
  if (source.empty() || out.empty()) return;
  fs::path target = fs::absolute(out).lexically_normal();
  if (target.filename().empty() && target.has_relative_path()) target = target.parent_path();
  struct stat out_st {};
  if (::stat(target.c_str(), &out_st) != 0) return;  // nothing there: it holds no checkpoint
  std::error_code ec;
  fs::path model = fs::canonical(source, ec);
  if (ec) model = fs::absolute(source).lexically_normal();
  const fs::path out_canon = fs::canonical(target, ec);
  // The model folder and each of its ancestors, by identity (device and inode: bind mounts,
  // hard-linked aliases and links all meet here) and by canonical path.
  for (fs::path p = model;; p = p.parent_path()) {
    struct stat st {};
    const bool same = (::stat(p.c_str(), &st) == 0 && st.st_dev == out_st.st_dev &&
                       st.st_ino == out_st.st_ino) ||
                      (!out_canon.empty() && out_canon == p);
    if (same) {
      if (p == model) {
        throw Error("[save] " + out.string() + " is the checkpoint folder " + model.string() +
                    "; refusing to write the model over the checkpoint (choose another output "
                    "folder)");
      }
      throw Error("[save] " + out.string() + " contains the checkpoint folder " + model.string() +
                  "; refusing to replace it (choose another output folder)");
    }
    if (p == p.parent_path() || p.empty()) break;
  }
}

namespace {

// Writes a whole small file and fsyncs it: every file of OUT is on disk before the rename.
void write_file_synced(const fs::path& p, const std::string& bytes, int flags = O_TRUNC) {
  Fd f(p, O_WRONLY | O_CREAT | flags);
  f.write_all(bytes.data(), bytes.size());
  f.sync();
}

// A checkpoint file as the provenance lists it. The sha256 is the digest of the file's bytes as
// mobius computed it: now, while the weights stream ("computed"), or earlier for this very file
// unchanged since ("digest-cache": an earlier build's hash, or the check of a hub download,
// which hashes every LFS blob before it enters the cache). A name or a record nobody verified
// (a cache blob's name, a local-dir download's .metadata) is never taken for it.
struct FileDigest {
  std::string name;
  uint64_t size = 0;
  std::string sha256;
  const char* source = "computed";  // or "digest-cache"
};

// A file the provenance lists, opened under the folder's rule before anything is written; its
// digest is complete unless `pending` (then hash_file computes it while the weights stream).
struct SourceFile {
  FileDigest digest;
  OpenedFile file;
  bool pending = false;
};

std::vector<SourceFile> open_source_files(const fs::path& dir,
                                          const std::vector<std::string>& names) {
  std::vector<SourceFile> out;
  if (dir.empty()) return out;
  const ModelFolder folder(dir);
  for (const auto& name : names) {
    SourceFile f;
    f.file = folder.open(name, name, "checkpoint");
    f.digest.name = name;
    f.digest.size = f.file.size;
    // An earlier digest of this very file, unchanged since (digest_cache.hpp).
    f.digest.sha256 = cached_sha256(f.file.fd.get(), dir / name);
    if (!f.digest.sha256.empty()) f.digest.source = "digest-cache";
    f.pending = f.digest.sha256.empty();
    out.push_back(std::move(f));
  }
  return out;
}

// The sha256 of a file's bytes, read in blocks that stay in the CPU's cache between the copy
// out of the page cache and the hash (with 4 MiB blocks the copy took 1.6 times as long); `stop`
// is polled between blocks.
void hash_file(SourceFile& f, const fs::path& dir, const std::function<bool()>& stop) {
  thread_local std::vector<char> buf(256u << 10);
  Sha256 h;
  uint64_t off = 0;
  struct stat before {};
  const bool stated = ::fstat(f.file.fd.get(), &before) == 0;
  for (;;) {
    if (stop && stop()) return;
    const ssize_t n = ::pread(f.file.fd.get(), buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(sys_error("cannot read", dir / f.digest.name));
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  f.digest.size = off;
  f.digest.sha256 = h.hex_digest();
  f.pending = false;
  if (stated) remember_sha256(f.file.fd.get(), dir / f.digest.name, before, f.digest.sha256);
}

// Streams every initializer into place (unless `weights` is false) with up to opts.threads
// tensors in flight, and hashes the `files` still pending for the provenance. The first error
// (or a cancellation) stops the others and is rethrown here.
//
// A file's hash is one task that cannot be split, so it is started first, largest file first.
// When the machine has cores that the writers leave idle, threads of their own hash the files
// (one per file, up to the idle cores) and the writers take the weights first; otherwise the
// writers take the hashes first and then the weights, so the longest tasks overlap the rest.
void write_weights(const mobius_context& ctx, const CheckpointReader* ckpt, bool weights,
                   const std::vector<WeightOutput>& outputs, const std::vector<uint64_t>& offsets,
                   uint64_t total, std::vector<SourceFile>& files, const fs::path& source_dir,
                   const SaveOptions& opts) {
  // Initializers made together (a quantization's parts) are one task; the longest first, so
  // that the last ones to finish are short.
  std::vector<std::vector<size_t>> groups = ctx.plan.write_groups();
  {
    std::vector<std::pair<uint64_t, size_t>> cost;
    for (size_t g = 0; g < groups.size(); ++g)
      cost.emplace_back(ctx.plan.write_cost(groups[g], ckpt), g);
    std::stable_sort(cost.begin(), cost.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::vector<size_t>> sorted;
    for (const auto& c : cost) sorted.push_back(std::move(groups[c.second]));
    groups = std::move(sorted);
  }
  const size_t weight_tasks = weights ? groups.size() : 0;
  std::vector<SourceFile*> hashes;
  for (auto& f : files)
    if (f.pending) hashes.push_back(&f);
  std::stable_sort(hashes.begin(), hashes.end(), [](const SourceFile* a, const SourceFile* b) {
    return a->file.size > b->file.size;
  });
  std::atomic<size_t> next_weight{0}, next_hash{0};
  std::atomic<uint64_t> progress{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto stop = [&] { return failed.load() || (opts.cancelled && opts.cancelled()); };
  auto run_weight = [&] {
    const size_t i = next_weight++;
    if (i >= weight_tasks) return false;
    ctx.plan.write_group(groups[i], ckpt, outputs, offsets, stop, &progress);
    return true;
  };
  auto run_hash = [&] {
    const size_t i = next_hash++;
    if (i >= hashes.size()) return false;
    hash_file(*hashes[i], source_dir, stop);
    return true;
  };
  std::atomic<size_t> finished{0};
  auto work = [&](bool writer, bool weights_first) {
    struct Done {
      std::atomic<size_t>& f;
      ~Done() { ++f; }
    } done{finished};
    try {
      while (!failed) {
        if (!writer) {
          if (!run_hash()) break;
        } else if (weights_first) {
          if (!run_weight() && !run_hash()) break;
        } else if (!run_hash() && !run_weight()) {
          break;
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  const size_t writers = std::min<size_t>(std::clamp(opts.threads, 1, 64),
                                          std::max<size_t>(1, weight_tasks + hashes.size()));
  cpu_set_t cpus;
  const size_t cores = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                           ? static_cast<size_t>(CPU_COUNT(&cpus))
                           : std::max(1u, std::thread::hardware_concurrency());
  const size_t hashers = std::min(hashes.size(), cores > writers ? cores - writers : 0);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t i = 0; i < hashers; ++i) pool.emplace_back(work, false, true);
  for (size_t i = 0; i < writers; ++i) pool.emplace_back(work, true, hashers > 0);
  const bool draw = opts.progress && !opts.on_progress && weights;
  if (draw || (opts.on_progress && weights)) {
    // The main thread draws (or reports); workers only count bytes.
    while (finished < pool.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (draw)
        draw_progress("weights", progress, total, secs, false);
      else
        opts.on_progress("weights", progress, total);
    }
  }
  for (auto& t : pool) t.join();
  if (error) {
    if (draw) std::fputc('\n', stderr);
    std::rethrow_exception(error);
  }
  if (opts.cancelled && opts.cancelled()) throw Error("[save] interrupted");
  if (draw) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    draw_progress("weights", progress, total, secs, true);
  } else if (opts.on_progress && weights) {
    opts.on_progress("weights", total, total);
  }
}

// Writes the runtime files into dir, fsynced: copies byte for byte, the others as given.
void write_runtime_files(const RuntimeFiles& files, const fs::path& dir) {
  std::vector<char> buf(1 << 20);
  for (const auto& [name, file] : files.copies) {
    Fd out(dir / name, O_WRONLY | O_CREAT | O_EXCL);
    for (uint64_t off = 0;;) {
      const ssize_t n = ::pread(file->fd.get(), buf.data(), buf.size(), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(sys_error("cannot copy", dir / name));
      if (n == 0) break;
      out.write_all(buf.data(), static_cast<size_t>(n));
      off += static_cast<uint64_t>(n);
    }
    out.sync();
  }
  for (const auto& [name, bytes] : files.written) write_file_synced(dir / name, bytes, O_EXCL);
}

// The checkpoint folder's files this build read (weights, their index, config.json) and
// copied, in name order: what the provenance hashes.
std::vector<std::string> source_files(const ModelPackage::Impl& pkg,
                                      const std::vector<std::pair<std::string, OpenedFile>>& copied) {
  std::set<std::string> names;
  for (const auto& c : copied) names.insert(c.first);
  if (pkg.checkpoint) {
    std::set<std::string> weights;
    for (const TensorMeta& t : pkg.checkpoint->tensors()) {
      // Relative to the folder: an index may keep its shards in a subfolder.
      const fs::path rel = t.file.lexically_relative(pkg.source_dir);
      weights.insert(rel.empty() || *rel.begin() == ".." ? t.file.filename().string() : rel.generic_string());
    }
    const ModelFolder folder(pkg.source_dir);
    // A sharded checkpoint's index: the weights came from files other than the single one.
    for (const CheckpointFormat& fmt : kWeightFormats) {
      const std::string ext = fs::path(fmt.single_name).extension().string();
      for (const auto& w : weights)
        if (w != fmt.single_name && fs::path(w).extension() == ext && folder.has(fmt.index_name)) {
          names.insert(fmt.index_name);
          break;
        }
    }
    names.insert(weights.begin(), weights.end());
  }
  return {names.begin(), names.end()};
}

// What built this folder: enough to reproduce it and to check the checkpoint it came from. No
// timestamps, so rebuilding the same input gives the same files. "files" is added by the save.
nlohmann::json provenance(const ModelPackage::Impl& pkg, const std::vector<std::string>& graphs) {
  nlohmann::json p = {{"producer", "mobius"},
                      {"producer_version", MOBIUS_VERSION},
                      {"model_type", pkg.model_type},
                      {"plugin", pkg.plugin},
                      {"plugin_version", pkg.plugin_version},
                      {"weight_dtype", pkg.weight_dtype},
                      {"runtime", pkg.layout.runtime},
                      {"graphs", graphs},
                      {"checkpoint", pkg.checkpoint ? pkg.checkpoint->describe() : "none"}};
  // The graph's target, and how the weights were quantized: what --ep, --ops, --block-size,
  // --symmetric and --accuracy-level chose.
  const mobius_build_options& o = pkg.ctx->options;
  p["execution_provider"] = pkg.ctx->execution_provider;
  p["ops"] = pkg.ctx->ops;
  if (o.weight_bits > 0)
    p["quantization"] = {{"operator", "MatMulNBits"},
                         {"bits", o.weight_bits},
                         {"block_size", o.block_size},
                         {"symmetric", o.symmetric != 0},
                         {"accuracy_level", o.accuracy_level},
                         {"method", "round to nearest (MLAS BlockwiseQuantizer rules)"}};
  if (!pkg.source_repo.empty()) {
    p["source"] = {{"repo", pkg.source_repo}, {"revision", pkg.source_revision},
                   {"commit", pkg.source_commit}};
  }
  return p;
}

void write_provenance(const ModelPackage::Impl& pkg, const std::vector<FileDigest>& files,
                      const std::vector<std::string>& graphs, const fs::path& dir) {
  nlohmann::json p = provenance(pkg, graphs);
  nlohmann::json fl = nlohmann::json::array();
  for (const auto& f : files)
    fl.push_back(
        {{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}, {"sha256_source", f.source}});
  p["files"] = fl;
  p["onnx_ir_version"] = kIrVersion;
  p["onnx_opset"] = kOpsetVersion;
  write_file_synced(dir / "mobius_provenance.json", p.dump(2) + "\n");
}

}  // namespace

std::string ModelPackage::provenance_json() const {
  nlohmann::json p = provenance(*impl_, {impl_->layout.graph});
  p["onnx_ir_version"] = kIrVersion;
  p["onnx_opset"] = kOpsetVersion;
  return p.dump(2);
}

onnx::ModelProto finalized_model(const ModelPackage::Impl& pkg) {
  onnx::ModelProto model = pkg.ctx->model;
  finalize(model, pkg.ctx->domains, pkg.model_type);
  return model;
}

namespace {

// One build's graph file and its external data, written into `tmp_path`; the `sources` still
// pending are hashed while the weights stream. Returns the number of data chunks.
size_t write_graph(const ModelPackage::Impl& pkg, const SaveOptions& opts, const OutputLayout& layout,
                   std::vector<SourceFile>& sources, const fs::path& tmp_path) {
  std::error_code ec;
  const fs::path graph_path = tmp_path / layout.graph;
  if (graph_path.parent_path() != tmp_path) {
    fs::create_directories(graph_path.parent_path(), ec);
    if (ec) throw Error("[save] cannot create " + graph_path.parent_path().string() + ": " + ec.message());
  }

  const mobius_context& ctx = *pkg.ctx;
  onnx::ModelProto model = finalized_model(pkg);
  std::unordered_map<std::string, onnx::TensorProto*> by_name;
  for (auto& t : *model.mutable_graph()->mutable_initializer()) by_name[t.name()] = &t;

  // Weights: every initializer's file and place in it is fixed first (graph order, aligned, a
  // new chunk when the layout's chunk size would be passed), so the bytes are the same whatever
  // the thread count; then each tensor streams into place.
  size_t chunks = 1;
  {
    const auto& inits = ctx.plan.initializers();
    std::vector<uint64_t> sizes;
    uint64_t total = 0;
    for (const auto& init : inits) {
      sizes.push_back(init.nbytes());
      total += init.nbytes();
    }
    const DataPlacement place = place_tensors(sizes, kAlign, layout.chunk_bytes);
    const std::vector<uint64_t>& offsets = place.offset;
    const std::vector<size_t>& chunk_of = place.chunk;
    const std::vector<uint64_t>& chunk_size = place.chunk_size;
    for (size_t i = 0; i < inits.size(); ++i) {
      onnx::TensorProto* t = by_name.at(inits[i].name);
      t->set_data_location(onnx::TensorProto::EXTERNAL);
      t->clear_external_data();
      auto add = [t](const std::string& k, const std::string& v) {
        auto* e = t->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      // The location is relative to the graph file: the data files lie beside it.
      add("location", fs::path(layout.data_file(chunk_of[i])).filename().string());
      add("offset", std::to_string(offsets[i]));
      add("length", std::to_string(inits[i].nbytes()));
    }
    chunks = chunk_size.size();
    std::vector<std::unique_ptr<Fd>> data;
    for (size_t c = 0; c < chunks; ++c) {
      data.push_back(std::make_unique<Fd>(tmp_path / layout.data_file(c), O_RDWR | O_CREAT | O_TRUNC));
      // The gaps are zeros; a graph-only build is all gaps (a sparse file, no disk blocks).
      data.back()->truncate(chunk_size[c]);
      if (!ctx.options.no_weights) data.back()->allocate(chunk_size[c]);
    }
    std::vector<std::mutex> turns(chunks);
    std::vector<WeightOutput> fds(inits.size());
    for (size_t i = 0; i < inits.size(); ++i) fds[i] = {data[chunk_of[i]]->get(), &turns[chunk_of[i]]};
    write_weights(ctx, pkg.checkpoint.get(), !ctx.options.no_weights, fds, offsets, total, sources,
                  pkg.source_dir, opts);
    for (auto& d : data) d->sync();
  }
  {
    std::string bytes;
    if (!model.SerializeToString(&bytes)) throw Error("[save] cannot serialize the model");
    Fd f(graph_path, O_WRONLY | O_CREAT | O_TRUNC);
    f.write_all(bytes.data(), bytes.size());
    f.sync();
    try {
      register_runtime_schemas();
      onnx::checker::check_model(graph_path.string());
    } catch (const std::exception& e) {
      throw Error(std::string("[onnx] the checker rejected the model: ") + e.what());
    }
  }
  fsync_dir(graph_path.parent_path());
  return chunks;
}

}  // namespace

void save_packages(const std::vector<const ModelPackage::Impl*>& parts, const fs::path& out,
                   const SaveOptions& opts) {
  if (parts.empty()) throw Error(ErrorKind::Internal, "[internal] save_packages: nothing to save");
  const ModelPackage::Impl& first = *parts.front();
  std::vector<const mobius_context*> builds;
  std::vector<std::string> graphs;
  for (const ModelPackage::Impl* p : parts) {
    if (p->source_dir != first.source_dir || p->layout.runtime != first.layout.runtime ||
        std::find(graphs.begin(), graphs.end(), p->layout.graph) != graphs.end())
      throw Error(ErrorKind::Internal, "[internal] the graphs of one folder must come from one checkpoint, be laid "
                                       "out for one runtime and have files of their own");
    builds.push_back(p->ctx.get());
    graphs.push_back(p->layout.graph);
  }
  // Before anything is written: the checkpoint is never replaced, nor a folder holding it, and
  // the runtime files to copy are opened (or refused) now.
  check_output_folder(out, first.source_dir);
  const auto opened = open_runtime_files(first.source_dir);
  RuntimeFiles files = runtime_files(opened, builds);
  save_folder(out, {first.source_dir}, [&](const fs::path& tmp_path) {
    // The checkpoint's files the provenance lists, opened now; those the cache does not give
    // the digest of are hashed while the first graph's weights stream.
    std::vector<SourceFile> sources = open_source_files(first.source_dir, source_files(first, opened));
    std::vector<std::pair<std::string, size_t>> chunks;
    for (const ModelPackage::Impl* p : parts)
      chunks.emplace_back(p->layout.graph, write_graph(*p, opts, p->layout, sources, tmp_path));
    if (first.layout.runtime == kRuntimeTransformersJs) add_transformers_js_config(files, first.layout.tjs_dtype, chunks);
    write_runtime_files(files, tmp_path);
    if (opts.cancelled && opts.cancelled()) throw Error("[save] interrupted");
    std::vector<FileDigest> digests;
    for (const auto& f : sources) digests.push_back(f.digest);
    write_provenance(first, digests, graphs, tmp_path);
  });
}

void save_package(const ModelPackage::Impl& pkg, const fs::path& out, const SaveOptions& opts) {
  save_packages({&pkg}, out, opts);
}

void write_synced_file(const fs::path& p, const std::string& bytes) { write_file_synced(p, bytes); }

void save_folder(const fs::path& out, const std::vector<fs::path>& sources,
                 const std::function<void(const fs::path& tmp)>& fill) {
  fs::path target = fs::absolute(out).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  const fs::path parent = target.parent_path();
  const std::string name = target.filename().string();
  for (const auto& s : sources) check_output_folder(target, s);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error("[save] cannot create " + parent.string() + ": " + ec.message());
  if (fs::exists(target)) check_replaceable(target);
  clean_stale_temps(parent, name);
  static std::atomic<unsigned> saves{0};
  TempDir tmp(parent / ("." + name + kTempTag + std::to_string(::getpid()) + "-" + std::to_string(saves++)));
  fs::remove_all(tmp.path(), ec);
  if (!fs::create_directory(tmp.path(), ec) || ec)
    throw Error("[save] cannot create " + tmp.path().string() + ": " + ec.message());
  fill(tmp.path());
  fsync_dir(tmp.path());
  put_in_place(tmp.path(), target);
  tmp.committed();
  fsync_dir(parent);
}

}  // namespace mobius
