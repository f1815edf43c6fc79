// weight_write.cpp - streaming an initializer's bytes into the output file: copied file to file,
// cast chunk by chunk, transposed tile by tile or block-quantized band by band, so memory stays
// bounded whatever the tensor's size; and grouping the parts of one quantization into one pass.
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>

#include "mobius/error.hpp"
#include "weights/layout_input.hpp"
#include "weights/layout_kernels.hpp"
#include "weights/weight_plan.hpp"

namespace mobius {

using weights::BlockQuantizer;
using weights::layout_input;
using weights::LayoutInput;
using weights::numel;
using weights::quantization_key;
using weights::quantized_band;
using weights::Tile;
using weights::transpose_convert;
using weights::transposed_tile;

namespace {

constexpr uint64_t kChunk = 16u << 20;        // cast/copy granularity: bounds memory per tensor
constexpr uint64_t kKernelChunk = 64u << 20;  // copy_file_range step between cancellation polls

// A thread's scratch memory, kept across tensors (fresh memory costs a page fault per 4 KiB on
// first touch) and never cleared: every byte used is written first.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }

  // At least n bytes; what it held is not kept when it grows.
  uint8_t* get(size_t n) {
    if (n > size_) {
      std::free(data_);
      data_ = static_cast<uint8_t*>(std::malloc(std::max<size_t>(n, 1)));
      size_ = data_ ? n : 0;
      if (!data_) throw std::bad_alloc();
    }
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

[[noreturn]] void io_error(const std::string& what) {
  throw Error(ErrorKind::Io, "[save] " + what + ": " + std::strerror(errno));
}

// The most one write call takes. The page cache gives a write folios of about its size, and a
// large folio must come from a large free block; in a virtual machine whose free memory is handed
// back to the host (virtio-balloon free page reporting), those are the blocks handed back, and
// each of their pages then costs a fault in the host when first written: there, writing 1 GiB in
// 1 MiB calls took two to four times as long as in 256 KiB calls. The extra calls cost about
// 10 ms per GiB.
constexpr size_t kWriteCap = 256u << 10;

// The pieces one after another from `off`, in calls of at most kWriteCap bytes.
void pwritev_all(int fd, const iovec* iov, size_t count, uint64_t off) {
  constexpr size_t kPieces = 256;
  iovec call[kPieces];
  size_t i = 0, done = 0;  // the next byte: `done` bytes into piece i
  while (i < count) {
    size_t n = 0, bytes = 0;
    for (size_t j = i, from = done; j < count && n < kPieces && bytes < kWriteCap;
         ++j, from = 0) {
      const size_t len = std::min(iov[j].iov_len - from, kWriteCap - bytes);
      if (len == 0) continue;
      call[n++] = {static_cast<uint8_t*>(iov[j].iov_base) + from, len};
      bytes += len;
    }
    if (n == 0) break;  // only empty pieces left
    const ssize_t w = ::pwritev(fd, call, static_cast<int>(n), static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error("writing model.onnx.data failed");
    }
    if (w == 0) throw Error(ErrorKind::Io, "[save] writing model.onnx.data failed: nothing written");
    off += static_cast<uint64_t>(w);
    for (auto left = static_cast<size_t>(w); left > 0;) {
      const size_t take = std::min(left, iov[i].iov_len - done);
      left -= take;
      done += take;
      if (done == iov[i].iov_len) {
        ++i;
        done = 0;
      }
    }
    while (i < count && iov[i].iov_len == 0) ++i;
  }
}

void pwrite_all(int fd, const void* data, uint64_t n, uint64_t off) {
  const iovec one{const_cast<void*>(data), static_cast<size_t>(n)};
  pwritev_all(fd, &one, 1, off);
}

void pread_all(int fd, void* data, uint64_t n, uint64_t off, const std::string& name) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      io_error("reading tensor '" + name + "' failed");
    }
    if (r == 0)
      throw Error(ErrorKind::Io, "[save] unexpected end of file reading tensor '" + name + "'");
    p += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
}

// The output file; each write (or run of writes making one tile) takes the writers' turn
// (WeightOutput::lock) for as long as it lasts.
class Output {
 public:
  explicit Output(const WeightOutput& o) : fd_(o.fd), lock_(o.lock) {}
  int fd() const { return fd_; }

  class Turn {
   public:
    explicit Turn(const Output& o) : m_(o.lock_) {
      if (m_) m_->lock();
    }
    ~Turn() {
      if (m_) m_->unlock();
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    std::mutex* m_;
  };

  void write(const void* data, uint64_t n, uint64_t off) const {
    Turn turn(*this);
    pwrite_all(fd_, data, n, off);
  }

 private:
  int fd_;
  std::mutex* lock_;
};

// Starts writeback of what was just written, so the disk works while the next chunk is copied
// and the final fsync has little left to do (instead of all of it, as after a plain cp).
void start_writeback(int fd, uint64_t off, uint64_t n) {
  ::sync_file_range(fd, static_cast<off64_t>(off), static_cast<off64_t>(n), SYNC_FILE_RANGE_WRITE);
}

void poll(const std::function<bool()>& cancelled) {
  if (cancelled && cancelled()) throw Error("[save] interrupted");
}

// File to file; in the kernel (copy_file_range) unless the filesystems refuse.
void copy_range(int in, uint64_t in_off, const Output& out, uint64_t out_off, uint64_t n,
                const std::string& name, const std::function<bool()>& cancelled,
                std::atomic<uint64_t>* progress) {
  static std::atomic<bool> kernel_copy{true};
  thread_local Scratch buf;
  while (n > 0) {
    poll(cancelled);
    uint64_t step = std::min(n, kernel_copy ? kKernelChunk : kChunk);
    if (kernel_copy) {
      loff_t a = static_cast<loff_t>(in_off), b = static_cast<loff_t>(out_off);
      ssize_t r;
      {
        Output::Turn turn(out);
        r = ::copy_file_range(in, &a, out.fd(), &b, step, 0);
      }
      if (r > 0) {
        start_writeback(out.fd(), out_off, static_cast<uint64_t>(r));
        in_off += static_cast<uint64_t>(r);
        out_off += static_cast<uint64_t>(r);
        n -= static_cast<uint64_t>(r);
        if (progress) *progress += static_cast<uint64_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0)
        throw Error(ErrorKind::Io, "[save] unexpected end of file reading tensor '" + name + "'");
      if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP &&
          errno != EBADF && errno != EPERM)
        io_error("copying tensor '" + name + "' failed");
      kernel_copy = false;  // fall back to read + write from here on
      continue;
    }
    uint8_t* b = buf.get(step);
    pread_all(in, b, step, in_off, name);
    out.write(b, step, out_off);
    start_writeback(out.fd(), out_off, step);
    in_off += step;
    out_off += step;
    n -= step;
    if (progress) *progress += step;
  }
}

// One checkpoint tensor into [out_off, ...) as `to`, in bounded chunks.
void stream_tensor(const TensorMeta& m, const CheckpointReader& cp, int32_t to, const Output& out,
                   uint64_t out_off, const std::function<bool()>& cancelled,
                   std::atomic<uint64_t>* progress) {
  const uint64_t n = numel(m.shape);
  const size_t fs = dtype_size(m.dtype), ts = dtype_size(to);
  auto ext = cp.extent(m);
  if (!ext && cp.reads_ranges(m)) {
    // Computed piece by piece (a dequantized FP8 or MXFP4 tensor): read a chunk at a time.
    const uint64_t per = std::max<uint64_t>(1, kChunk / std::max(fs, ts));
    thread_local Scratch src_buf, dst_buf;
    uint8_t* src = src_buf.get(std::min(n, per) * fs);
    uint8_t* dst = m.dtype == to ? src : dst_buf.get(std::min(n, per) * ts);
    for (uint64_t e = 0; e < n; e += per) {
      poll(cancelled);
      const uint64_t k = std::min(per, n - e);
      cp.read_range(m, e, k, src);
      if (m.dtype != to) convert_elements(m.dtype, src, to, dst, k);
      out.write(dst, k * ts, out_off + e * ts);
      start_writeback(out.fd(), out_off + e * ts, k * ts);
      if (progress) *progress += k * ts;
    }
    return;
  }
  if (!ext) {
    // Not contiguous in a file (e.g. a strided pickle tensor): the reader gathers it whole.
    std::vector<uint8_t> src(m.nbytes), dst;
    cp.read(m, src.data());
    if (m.dtype != to) {
      dst.resize(n * ts);
      convert_elements(m.dtype, src.data(), to, dst.data(), n);
      src.swap(dst);
    }
    out.write(src.data(), src.size(), out_off);
    if (progress) *progress += src.size();
    return;
  }
  if (m.dtype == to) {
    copy_range(ext->fd, ext->offset, out, out_off, m.nbytes, m.name, cancelled, progress);
    return;
  }
  const uint64_t per = std::max<uint64_t>(1, kChunk / std::max(fs, ts));
  // Per-thread scratch, reused across tensors: fresh buffers would cost a page fault per 4 KiB
  // of every chunk of every tensor.
  thread_local Scratch src_buf, dst_buf;
  uint8_t* src = src_buf.get(std::min(n, per) * fs);
  uint8_t* dst = dst_buf.get(std::min(n, per) * ts);
  for (uint64_t e = 0; e < n; e += per) {
    poll(cancelled);
    uint64_t k = std::min(per, n - e);
    pread_all(ext->fd, src, k * fs, ext->offset + e * fs, m.name);
    convert_elements(m.dtype, src, to, dst, k);
    out.write(dst, k * ts, out_off + e * ts);
    start_writeback(out.fd(), out_off + e * ts, k * ts);
    if (progress) *progress += k * ts;
  }
}

// A layout source's tensor as the writers read it: blocks of rows and columns read from its file,
// or computed by the reader range by range (a dequantized tensor), or, when the reader can do
// neither (a strided pickle tensor), gathered whole once.
class TensorRows {
 public:
  TensorRows(const TensorMeta& m, const CheckpointReader& cp, uint64_t cols)
      : m_(m), cp_(cp), ext_(cp.extent(m)), ranges_(!ext_ && cp.reads_ranges(m)),
        es_(dtype_size(m.dtype)), cols_(cols) {
    if (!ext_ && !ranges_) {
      whole_.resize(m.nbytes);
      cp.read(m, whole_.data());
    }
  }

  const TensorMeta& meta() const { return m_; }

  // Rows [r0, r0 + rows) x columns [c0, c0 + n) as a pointer to the first element; sets
  // `stride` to the bytes between rows. Read into `scratch` when from the file: whole rows in
  // one read, parts of rows one read each.
  const uint8_t* block(uint64_t r0, uint64_t rows, uint64_t c0, uint64_t n, Scratch& scratch,
                       uint64_t& stride) const {
    if (!ext_ && !ranges_) {
      stride = cols_ * es_;
      return whole_.data() + r0 * stride + c0 * es_;
    }
    stride = n * es_;
    uint8_t* dst = scratch.get(rows * stride);
    if (ranges_) {
      if (n == cols_) {
        cp_.read_range(m_, r0 * cols_, rows * cols_, dst);
      } else {
        for (uint64_t i = 0; i < rows; ++i)
          cp_.read_range(m_, (r0 + i) * cols_ + c0, n, dst + i * stride);
      }
    } else if (n == cols_) {
      pread_all(ext_->fd, dst, rows * stride, ext_->offset + r0 * stride, m_.name);
    } else {
      for (uint64_t i = 0; i < rows; ++i)
        pread_all(ext_->fd, dst + i * stride, stride,
                  ext_->offset + ((r0 + i) * cols_ + c0) * es_, m_.name);
    }
    return dst;
  }

  // Rows about to be read a block of columns at a time: the kernel reads them ahead in one go.
  void will_need(uint64_t r0, uint64_t rows) const {
    if (ext_)
      ::posix_fadvise(ext_->fd, static_cast<off_t>(ext_->offset + r0 * cols_ * es_),
                      static_cast<off_t>(rows * cols_ * es_), POSIX_FADV_WILLNEED);
  }

 private:
  const TensorMeta& m_;
  const CheckpointReader& cp_;
  std::optional<CheckpointReader::FileExtent> ext_;
  bool ranges_;
  size_t es_;
  uint64_t cols_;
  std::vector<uint8_t> whole_;
};

// The transposed layout, [k, n] of `to`, one tile at a time (transposed_tile): a tile of B rows
// of the concatenated source matrix by C columns becomes B consecutive elements of C output
// rows; when B is all n rows, those C output rows are consecutive in the file and go out in one
// write. The tile is read and transposed a few source rows (256 KiB) at a time, so the source
// stays in the cache, into rows padded by 64 bytes, so the rows of an 8x8 block do not compete
// for the same cache sets.
void write_transposed(int32_t to, const LayoutInput& in, const CheckpointReader& cp,
                      const Output& out, uint64_t out_off, const std::function<bool()>& cancelled,
                      std::atomic<uint64_t>* progress) {
  const size_t ts = dtype_size(to);
  std::vector<std::unique_ptr<TensorRows>> parts;
  std::vector<uint64_t> first;  // each tensor's first row in the concatenated matrix
  size_t in_size = 8;
  uint64_t row = 0;
  for (const TensorMeta* m : in.tensors) {
    parts.push_back(std::make_unique<TensorRows>(*m, cp, in.k));
    first.push_back(row);
    row += static_cast<uint64_t>(m->shape[0]);
    in_size = std::min(in_size, dtype_size(m->dtype));
  }
  const Tile t = transposed_tile(in.n, in.k, in_size, ts);
  const uint64_t ld = t.rows * ts + 64;
  thread_local Scratch src, tile_buf;
  thread_local std::vector<iovec> iov;
  uint8_t* const tile = tile_buf.get(ld * t.cols);
  for (uint64_t r0 = 0; r0 < in.n; r0 += t.rows) {
    const uint64_t b = std::min(t.rows, in.n - r0);
    // The part of tensor p in rows [r0, r0 + b): its rows [lo, hi).
    auto span = [&](size_t p, uint64_t& lo, uint64_t& hi) {
      const uint64_t count = static_cast<uint64_t>(parts[p]->meta().shape[0]);
      lo = std::max(r0, first[p]) - first[p];
      hi = std::min(r0 + b, first[p] + count);
      hi = hi > first[p] ? hi - first[p] : 0;
      return lo < hi;
    };
    if (t.cols < in.k)
      for (size_t p = 0; p < parts.size(); ++p) {
        uint64_t lo, hi;
        if (span(p, lo, hi)) parts[p]->will_need(lo, hi - lo);
      }
    for (uint64_t c0 = 0; c0 < in.k; c0 += t.cols) {
      poll(cancelled);
      const uint64_t c = std::min(t.cols, in.k - c0);
      for (size_t p = 0; p < parts.size(); ++p) {
        uint64_t lo, hi;
        if (!span(p, lo, hi)) continue;
        const TensorMeta& m = parts[p]->meta();
        const uint64_t step =
            std::max<uint64_t>(8, (256u << 10) / (c * dtype_size(m.dtype))) & ~uint64_t{7};
        for (uint64_t i = lo; i < hi; i += step) {
          const uint64_t n = std::min(step, hi - i);
          uint64_t stride = 0;
          const uint8_t* s = parts[p]->block(i, n, c0, c, src, stride);
          transpose_convert(s, stride, m.dtype, tile + (first[p] + i - r0) * ts, ld, to, n, c);
        }
      }
      if (b == in.n) {
        // Output rows [c0, c0 + c), whole: consecutive bytes of the file.
        iov.resize(c);
        for (uint64_t j = 0; j < c; ++j) iov[j] = {tile + j * ld, b * ts};
        const uint64_t at = out_off + c0 * in.n * ts;
        {
          Output::Turn turn(out);
          pwritev_all(out.fd(), iov.data(), iov.size(), at);
        }
        start_writeback(out.fd(), at, c * b * ts);
      } else {
        Output::Turn turn(out);
        for (uint64_t j = 0; j < c; ++j)
          pwrite_all(out.fd(), tile + j * ld, b * ts, out_off + ((c0 + j) * in.n + r0) * ts);
      }
      if (progress) *progress += b * c * ts;
    }
  }
  // Every output row is complete only now.
  if (t.rows < in.n) start_writeback(out.fd(), out_off, in.n * in.k * ts);
}

// Where write_quantized puts one part of a quantization.
struct QuantizedPart {
  int part;  // MOBIUS_QUANT_PART_*
  Output out;
  uint64_t offset;
};

// Parts of one block quantization, a band of whole rows at a time (quantized_band), all from
// one read of the band and one pass over its blocks: a band's output rows are contiguous in
// each part. With interleaved rows (LayoutInput::group g > 1) a band is the same rows of the g
// tensors of a group, quantized into their alternating places: g times the rows, still
// contiguous.
void write_quantized(const BlockQuantizer& q, const std::vector<QuantizedPart>& parts,
                     const LayoutInput& in, const CheckpointReader& cp,
                     const std::function<bool()>& cancelled, std::atomic<uint64_t>* progress) {
  thread_local Scratch src, dst[3];
  const size_t group = std::max<size_t>(1, in.group);
  uint64_t row0 = 0;
  for (size_t g0 = 0; g0 < in.tensors.size(); g0 += group) {
    std::vector<std::unique_ptr<TensorRows>> rows;
    for (size_t t = 0; t < group; ++t)
      rows.push_back(std::make_unique<TensorRows>(*in.tensors[g0 + t], cp, in.k));
    const uint64_t count = static_cast<uint64_t>(in.tensors[g0]->shape[0]);
    const uint64_t band = quantized_band(in.k);
    for (uint64_t r0 = 0; r0 < count; r0 += band) {
      poll(cancelled);
      const uint64_t b = std::min(band, count - r0);
      uint8_t* out[3];
      for (size_t j = 0; j < parts.size(); ++j)
        out[j] = dst[j].get(group * b * q.row_bytes(parts[j].part));
      for (size_t t = 0; t < group; ++t) {
        uint64_t stride = 0;
        const uint8_t* p = rows[t]->block(r0, b, 0, in.k, src, stride);
        const int32_t dtype = rows[t]->meta().dtype;
        for (uint64_t i = 0; i < b; ++i) {
          BlockQuantizer::Parts at;
          for (size_t j = 0; j < parts.size(); ++j)
            at[parts[j].part] = out[j] + (i * group + t) * q.row_bytes(parts[j].part);
          q.row(p + i * stride, dtype, at);
        }
      }
      for (size_t j = 0; j < parts.size(); ++j) {
        const uint64_t row_bytes = q.row_bytes(parts[j].part);
        const uint64_t bytes = group * b * row_bytes;
        const uint64_t at = parts[j].offset + (row0 + group * r0) * row_bytes;
        parts[j].out.write(out[j], bytes, at);
        start_writeback(parts[j].out.fd(), at, bytes);
        if (progress) *progress += bytes;
      }
    }
    row0 += group * count;
  }
}

}  // namespace

void StreamingWeightPlan::write(const PlannedInitializer& init, const CheckpointReader* cp,
                                const WeightOutput& out_file, uint64_t offset,
                                const std::function<bool()>& cancelled,
                                std::atomic<uint64_t>* progress) const {
  const Output out(out_file);
  auto meta = [&](const std::string& t) -> const TensorMeta& {
    if (!cp) throw Error("[weights] '" + init.name + "' reads '" + t + "' but there is no checkpoint");
    const TensorMeta* m = cp->find(t);
    if (!m) throw Error("[weights] checkpoint has no tensor '" + t + "'");
    return *m;
  };
  if (auto* s = std::get_if<StreamingWeightSource>(&init.source)) {
    stream_tensor(meta(s->tensor), *cp, init.dtype, out, offset, cancelled, progress);
  } else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source)) {
    uint64_t each = init.nbytes() / std::max<size_t>(1, b->tensors.size());
    for (size_t e = 0; e < b->tensors.size(); ++e)
      stream_tensor(meta(b->tensors[e]), *cp, init.dtype, out, offset + e * each, cancelled, progress);
  } else if (auto* l = std::get_if<StreamingLayoutSource>(&init.source)) {
    const LayoutInput in = layout_input(init, *l, cp);
    if (init.nbytes() == 0) return;
    if (l->layout.kind == MOBIUS_LAYOUT_TRANSPOSED)
      write_transposed(init.dtype, in, *cp, out, offset, cancelled, progress);
    else
      write_quantized(BlockQuantizer(l->layout, in.k, scale_dtype(init)),
                      {{l->layout.part, out, offset}}, in, *cp, cancelled, progress);
  } else {
    poll(cancelled);
    std::vector<uint8_t> buf(init.nbytes());
    materialize(init, cp, buf.data());
    out.write(buf.data(), buf.size(), offset);
    if (progress) *progress += buf.size();
  }
}

std::vector<std::vector<size_t>> StreamingWeightPlan::write_groups() const {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> open;  // quantization -> its group still missing parts
  for (size_t i = 0; i < inits_.size(); ++i) {
    const auto* l = inits_[i].has_source ? std::get_if<StreamingLayoutSource>(&inits_[i].source)
                                         : nullptr;
    if (!l || l->layout.kind != MOBIUS_LAYOUT_BLOCK_QUANTIZED) {
      groups.push_back({i});
      continue;
    }
    const std::string key = quantization_key(*l);
    auto it = open.find(key);
    const bool joins =
        it != open.end() && std::none_of(groups[it->second].begin(), groups[it->second].end(),
                                         [&](size_t j) {
                                           return std::get<StreamingLayoutSource>(inits_[j].source)
                                                      .layout.part == l->layout.part;
                                         });
    if (joins) {
      groups[it->second].push_back(i);
    } else {
      open[key] = groups.size();
      groups.push_back({i});
    }
  }
  return groups;
}

void StreamingWeightPlan::write_group(const std::vector<size_t>& group, const CheckpointReader* cp,
                                     const std::vector<WeightOutput>& out,
                                     const std::vector<uint64_t>& offset,
                                     const std::function<bool()>& cancelled,
                                     std::atomic<uint64_t>* progress) const {
  if (group.size() == 1) {
    write(inits_[group[0]], cp, out[group[0]], offset[group[0]], cancelled, progress);
    return;
  }
  // The parts of one quantization (write_groups): the same tensors, bits, block and symmetry,
  // hence the same scale dtype (scale_dtype) and the same blocks. Each part's shape is checked
  // as write() checks it.
  const PlannedInitializer& first = inits_[group[0]];
  const auto& src = std::get<StreamingLayoutSource>(first.source);
  std::vector<QuantizedPart> parts;
  for (size_t i : group) {
    const auto& part = std::get<StreamingLayoutSource>(inits_[i].source);
    layout_input(inits_[i], part, cp);
    parts.push_back({part.layout.part, Output(out[i]), offset[i]});
  }
  const LayoutInput in = layout_input(first, src, cp);
  if (first.nbytes() == 0) return;
  write_quantized(BlockQuantizer(src.layout, in.k, scale_dtype(first)), parts, in, *cp, cancelled,
                  progress);
}

uint64_t StreamingWeightPlan::write_cost(const std::vector<size_t>& group,
                                         const CheckpointReader* cp) const {
  uint64_t cost = 0;
  std::set<std::string> read;  // the parts of a quantization read their tensors once
  for (size_t i : group) {
    const PlannedInitializer& init = inits_[i];
    cost += init.nbytes();
    std::vector<std::string> tensors;
    if (auto* s = std::get_if<StreamingWeightSource>(&init.source))
      tensors = {s->tensor};
    else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source))
      tensors = b->tensors;
    else if (auto* x = std::get_if<StreamingTransformedWeightSource>(&init.source))
      tensors = x->tensors;
    else if (auto* l = std::get_if<StreamingLayoutSource>(&init.source))
      tensors = l->tensors;
    for (const auto& t : tensors)
      if (const TensorMeta* m = cp ? cp->find(t) : nullptr; m && read.insert(t).second)
        cost += m->nbytes;
  }
  return cost;
}

}  // namespace mobius
