// weight_plan.hpp - StreamingWeightPlan: every initializer's one source, checked before any data moves.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"

namespace mobius {

// One checkpoint tensor, cast to the initializer's dtype if they differ.
struct StreamingWeightSource {
  std::string tensor;
};
// Per-expert tensors of equal shape, stacked along a new leading axis.
struct StreamingExpertBankSource {
  std::vector<std::string> tensors;
};
// A plugin transform of one or more tensors into a different layout (float32 in, float32 out).
struct StreamingTransformedWeightSource {
  std::vector<std::string> tensors;
  mobius_transform_fn fn = nullptr;
  void* user = nullptr;
  void (*release)(void*) = nullptr;
};
// Rank-2 tensors with equal column counts, concatenated along their first dimension into one
// [N, K] matrix (read as float32) and laid out as `layout` says: transposed to [K, N], or one
// part of its MatMulNBits block quantization (plan_layout in mobius/plugin.h).
struct StreamingLayoutSource {
  std::vector<std::string> tensors;
  mobius_weight_layout layout{};
};

using WeightSourceVariant = std::variant<StreamingWeightSource, StreamingExpertBankSource,
                                         StreamingTransformedWeightSource, StreamingLayoutSource>;

struct PlannedInitializer {
  std::string name;
  int32_t dtype = 0;
  std::vector<int64_t> shape;
  bool has_source = false;
  WeightSourceVariant source;
  uint64_t nbytes() const;
};

// The file write() puts an initializer's bytes in, which threads writing other initializers
// may share. A filesystem runs buffered writes to one file one at a time anyway (ext4 holds the
// file's lock for each), and a thread waiting for that lock in the kernel spins on its CPU; so
// with `lock`, the writers take turns here instead, and a thread that waits sleeps, leaving the
// CPU to threads with work to do.
struct WeightOutput {
  int fd = -1;
  std::mutex* lock = nullptr;
};

class StreamingWeightPlan {
 public:
  StreamingWeightPlan() = default;
  StreamingWeightPlan(const StreamingWeightPlan&) = delete;
  StreamingWeightPlan& operator=(const StreamingWeightPlan&) = delete;
  StreamingWeightPlan(StreamingWeightPlan&&) = default;
  StreamingWeightPlan& operator=(StreamingWeightPlan&&) = default;
  ~StreamingWeightPlan();

  void declare(const std::string& name, int32_t dtype, std::vector<int64_t> shape);
  bool declared(const std::string& name) const;
  // Throws mobius::Error when the initializer is unknown or already has a source, and for a
  // layout source that names no tensor, is not a valid layout, or cannot produce the
  // initializer's dtype and rank (the plugin's mistakes, found before any checkpoint is read).
  void set_source(const std::string& name, WeightSourceVariant src);
  void ignore(const std::string& glob) { ignore_.push_back(glob); }
  const std::vector<std::string>& ignored() const { return ignore_; }

  const std::vector<PlannedInitializer>& initializers() const { return inits_; }

  // Header-only validation against the checkpoint: every initializer has a source, every
  // source exists with a compatible shape and dtype, every checkpoint tensor is used or
  // ignored. Throws one mobius::Error listing every problem found.
  // `mismatch`, when given, receives the problems by kind before the throw: the tensors the plan
  // reads and the checkpoint lacks, the checkpoint's tensors nothing reads, and every other
  // problem's message (a shape or dtype that does not fit, an initializer without a source).
  struct Mismatch {
    std::vector<std::string> missing, unused, other;
  };
  void preflight(const CheckpointReader& ckpt, const std::string& arch, Mismatch* mismatch = nullptr) const;

  // Writes the initializer's bytes (its dtype) into `out_fd` at `offset`, streaming: a tensor
  // stored in the same dtype is copied file to file (in the kernel where it can be), a cast
  // runs chunk by chunk, a layout tile by tile (transposed) or band by band (quantized), so
  // memory stays bounded whatever the tensor's size. Polls `cancelled` between chunks (throws
  // "[save] interrupted") and adds written bytes to `progress`.
  void write(const PlannedInitializer& init, const CheckpointReader* ckpt, const WeightOutput& out,
             uint64_t offset, const std::function<bool()>& cancelled,
             std::atomic<uint64_t>* progress) const;
  void write(const PlannedInitializer& init, const CheckpointReader* ckpt, int out_fd,
             uint64_t offset, const std::function<bool()>& cancelled,
             std::atomic<uint64_t>* progress) const {
    write(init, ckpt, WeightOutput{out_fd, nullptr}, offset, cancelled, progress);
  }

  // The initializers write_group() makes in one pass over their tensors: the parts of one block
  // quantization (its data, scales and zero points read the same tensors and share each block's
  // range), and every other initializer alone. Indices into initializers(), each in one group.
  std::vector<std::vector<size_t>> write_groups() const;
  // What writing a group costs, roughly: the bytes it reads from the checkpoint plus the bytes it
  // writes. For scheduling the longest first.
  uint64_t write_cost(const std::vector<size_t>& group, const CheckpointReader* ckpt) const;
  // Writes the initializers of a group of write_groups() as write() writes each: initializer i
  // into out[i] at offset[i].
  void write_group(const std::vector<size_t>& group, const CheckpointReader* ckpt,
                   const std::vector<WeightOutput>& out, const std::vector<uint64_t>& offset,
                   const std::function<bool()>& cancelled, std::atomic<uint64_t>* progress) const;

  // Fills `dst` (init.nbytes() bytes, the initializer's dtype) from its source. `ckpt` may be
  // null when no source reads the checkpoint (generated weights).
  void materialize(const PlannedInitializer& init, const CheckpointReader* ckpt, void* dst) const;

 private:
  // The dtype the scales of a block-quantized part's quantization are stored in: the declared
  // dtype of its SCALES part (planned from the same tensors with the same bits, block and
  // symmetry), float32 when the plan has none. The data is quantized against the scales as
  // stored, so dequantizing reproduces what the data was quantized against.
  int32_t scale_dtype(const PlannedInitializer& part) const;

  std::vector<PlannedInitializer> inits_;
  std::vector<std::string> ignore_;
  // The SCALES parts planned, by what the parts of a quantization share: name and dtype.
  std::map<std::string, std::pair<std::string, int32_t>> scales_;
};

// Why initializer `dtype` of rank `rank` cannot come from `layout`: an invalid kind, bit width,
// block size or part, or a dtype or rank the layout does not produce. Empty when it can.
std::string layout_problem(const mobius_weight_layout& layout, int32_t dtype, size_t rank);
// The shape a valid `layout` gives an [n, k] matrix.
std::vector<int64_t> layout_shape(const mobius_weight_layout& layout, int64_t n, int64_t k);

// For tests: tiny tiles so that small tensors span many (`side` source rows and columns per
// transposed tile, side^2 source elements per quantized band; 0 restores the sizes made for
// throughput), and whether the layouts may use the AVX2 kernels (false: the portable ones).
void set_layout_tile_for_testing(size_t side);
void set_layout_simd_for_testing(bool allowed);

bool glob_match(const std::string& pattern, const std::string& text);
// Converts n elements between numeric dtypes (floating types via float32, exactly for widening).
void convert_elements(int32_t from, const void* src, int32_t to, void* dst, size_t n);

}  // namespace mobius
