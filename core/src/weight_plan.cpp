// weight_plan.cpp - declaring sources, header-only preflight, and one-at-a-time materialization.
#include "weight_plan.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <immintrin.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "mobius/error.hpp"
#include "mobius/half.h"

namespace mobius {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

uint64_t numel(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

bool is_float(int32_t dt) {
  return dt == MOBIUS_DTYPE_FLOAT || dt == MOBIUS_DTYPE_FLOAT16 || dt == MOBIUS_DTYPE_BFLOAT16 ||
         dt == MOBIUS_DTYPE_DOUBLE;
}

bool is_int(int32_t dt) {
  return dt == MOBIUS_DTYPE_INT8 || dt == MOBIUS_DTYPE_INT16 || dt == MOBIUS_DTYPE_INT32 ||
         dt == MOBIUS_DTYPE_INT64 || dt == MOBIUS_DTYPE_UINT8 || dt == MOBIUS_DTYPE_UINT16 ||
         dt == MOBIUS_DTYPE_UINT32 || dt == MOBIUS_DTYPE_UINT64 || dt == MOBIUS_DTYPE_BOOL;
}

// Which stored dtypes may feed which initializer dtypes: floats among floats, ints among ints.
bool castable(int32_t from, int32_t to) {
  return from == to || (is_float(from) && is_float(to)) || (is_int(from) && is_int(to));
}

double load(int32_t dt, const uint8_t* p) {
  switch (dt) {
    case MOBIUS_DTYPE_FLOAT: { float v; std::memcpy(&v, p, 4); return v; }
    case MOBIUS_DTYPE_DOUBLE: { double v; std::memcpy(&v, p, 8); return v; }
    case MOBIUS_DTYPE_FLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return mobius_f16_to_f32(v); }
    case MOBIUS_DTYPE_BFLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return mobius_bf16_to_f32(v); }
    case MOBIUS_DTYPE_INT64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case MOBIUS_DTYPE_INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case MOBIUS_DTYPE_INT16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case MOBIUS_DTYPE_INT8: return static_cast<int8_t>(*p);
    case MOBIUS_DTYPE_UINT8:
    case MOBIUS_DTYPE_BOOL: return *p;
    case MOBIUS_DTYPE_UINT16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case MOBIUS_DTYPE_UINT32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case MOBIUS_DTYPE_UINT64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    default: throw Error(std::string("[weights] cannot convert from ") + dtype_name(dt));
  }
}

void store(int32_t dt, uint8_t* p, double v) {
  switch (dt) {
    case MOBIUS_DTYPE_FLOAT: { auto f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case MOBIUS_DTYPE_DOUBLE: std::memcpy(p, &v, 8); return;
    case MOBIUS_DTYPE_FLOAT16: { uint16_t h = mobius_f32_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case MOBIUS_DTYPE_BFLOAT16: { uint16_t h = mobius_f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case MOBIUS_DTYPE_INT64: { auto i = static_cast<int64_t>(v); std::memcpy(p, &i, 8); return; }
    case MOBIUS_DTYPE_INT32: { auto i = static_cast<int32_t>(v); std::memcpy(p, &i, 4); return; }
    case MOBIUS_DTYPE_INT16: { auto i = static_cast<int16_t>(v); std::memcpy(p, &i, 2); return; }
    case MOBIUS_DTYPE_INT8: *p = static_cast<uint8_t>(static_cast<int8_t>(v)); return;
    case MOBIUS_DTYPE_UINT8:
    case MOBIUS_DTYPE_BOOL: *p = static_cast<uint8_t>(v); return;
    case MOBIUS_DTYPE_UINT16: { auto i = static_cast<uint16_t>(v); std::memcpy(p, &i, 2); return; }
    case MOBIUS_DTYPE_UINT32: { auto i = static_cast<uint32_t>(v); std::memcpy(p, &i, 4); return; }
    case MOBIUS_DTYPE_UINT64: { auto i = static_cast<uint64_t>(v); std::memcpy(p, &i, 8); return; }
    default: throw Error(std::string("[weights] cannot convert to ") + dtype_name(dt));
  }
}

}  // namespace

namespace {

// Floating-point casts go through float32 blocks; the half-precision conversions use the F16C
// instructions when the CPU has them (the f32 -> f16 build is otherwise bound by this loop).
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = mobius_f32_to_f16(in[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = mobius_f16_to_f32(in[i]);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint8_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(in[2 * i] | (in[2 * i + 1] << 8)) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

void to_f32(int32_t from, const uint8_t* s, float* out, size_t n) {
  switch (from) {
    case MOBIUS_DTYPE_FLOAT: std::memcpy(out, s, n * 4); return;
    case MOBIUS_DTYPE_BFLOAT16:
      if (has_avx2()) {
        bf16_to_f32_avx2(s, out, n);
        return;
      }
      for (size_t i = 0; i < n; ++i) {
        uint32_t u = static_cast<uint32_t>(s[2 * i] | (s[2 * i + 1] << 8)) << 16;
        std::memcpy(&out[i], &u, 4);
      }
      return;
    case MOBIUS_DTYPE_FLOAT16: {
      uint16_t h[4096];  // blocks are at most 4096 elements (convert_elements)
      for (size_t i = 0; i < n; i += 4096) {
        size_t k = std::min<size_t>(4096, n - i);
        std::memcpy(h, s + 2 * i, k * 2);
        if (has_f16c()) f16_to_f32_f16c(h, out + i, k);
        else for (size_t j = 0; j < k; ++j) out[i + j] = mobius_f16_to_f32(h[j]);
      }
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load(from, s + dtype_size(from) * i));
  }
}

void from_f32(int32_t to, const float* in, uint8_t* d, size_t n) {
  switch (to) {
    case MOBIUS_DTYPE_FLOAT: std::memcpy(d, in, n * 4); return;
    case MOBIUS_DTYPE_FLOAT16: {
      uint16_t h[4096];
      for (size_t i = 0; i < n; i += 4096) {
        size_t k = std::min<size_t>(4096, n - i);
        if (has_f16c()) f32_to_f16_f16c(in + i, h, k);
        else for (size_t j = 0; j < k; ++j) h[j] = mobius_f32_to_f16(in[i + j]);
        std::memcpy(d + 2 * i, h, k * 2);
      }
      return;
    }
    case MOBIUS_DTYPE_BFLOAT16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = mobius_f32_to_bf16(in[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    default:
      for (size_t i = 0; i < n; ++i) store(to, d + dtype_size(to) * i, in[i]);
  }
}

}  // namespace

void convert_elements(int32_t from, const void* src, int32_t to, void* dst, size_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  size_t fs = from == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(from);
  size_t ts = to == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(to);
  if (from == to) {
    std::memcpy(dst, src, n * fs);
    return;
  }
  bool floats = is_float(from) && is_float(to) && from != MOBIUS_DTYPE_DOUBLE && to != MOBIUS_DTYPE_DOUBLE;
  if (!floats) {
    for (size_t i = 0; i < n; ++i) store(to, d + ts * i, load(from, s + fs * i));
    return;
  }
  constexpr size_t kBlock = 4096;
  float block[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t k = std::min(kBlock, n - i);
    to_f32(from, s + i * fs, block, k);
    from_f32(to, block, d + i * ts, k);
  }
}

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative '*' matching with backtracking to the last star: linear in practice.
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

uint64_t PlannedInitializer::nbytes() const { return numel(shape) * dtype_size(dtype); }

StreamingWeightPlan::~StreamingWeightPlan() {
  for (auto& i : inits_)
    if (auto* t = std::get_if<StreamingTransformedWeightSource>(&i.source))
      if (i.has_source && t->release) {
        try {
          t->release(t->user);
        } catch (...) {
          // A plugin's release callback must not throw; nothing can be done about it here.
        }
      }
}

void StreamingWeightPlan::declare(const std::string& name, int32_t dtype,
                                  std::vector<int64_t> shape) {
  if (declared(name)) throw Error("[plan] initializer '" + name + "' declared twice");
  inits_.push_back(PlannedInitializer{name, dtype, std::move(shape), false, {}});
}

bool StreamingWeightPlan::declared(const std::string& name) const {
  return std::any_of(inits_.begin(), inits_.end(),
                     [&](const PlannedInitializer& i) { return i.name == name; });
}

void StreamingWeightPlan::set_source(const std::string& name, WeightSourceVariant src) {
  for (auto& i : inits_) {
    if (i.name != name) continue;
    if (i.has_source) throw Error("[plan] initializer '" + name + "' already has a source");
    i.source = std::move(src);
    i.has_source = true;
    return;
  }
  throw Error("[plan] no initializer '" + name + "' to plan (declare it in the graph first)");
}

void StreamingWeightPlan::preflight(const CheckpointReader& ckpt, const std::string& arch) const {
  std::vector<std::string> errors;
  std::set<std::string> used;
  auto need = [&](const std::string& init, const std::string& t) -> const TensorMeta* {
    used.insert(t);
    const TensorMeta* m = ckpt.find(t);
    if (!m) errors.push_back("initializer '" + init + "': checkpoint has no tensor '" + t + "'");
    return m;
  };
  for (const auto& i : inits_) {
    if (!i.has_source) {
      errors.push_back("initializer '" + i.name + "' has no weight source");
      continue;
    }
    if (auto* s = std::get_if<StreamingWeightSource>(&i.source)) {
      const TensorMeta* m = need(i.name, s->tensor);
      if (!m) continue;
      if (m->shape != i.shape)
        errors.push_back("tensor '" + s->tensor + "' has shape " + shape_str(m->shape) +
                         ", the graph expects " + shape_str(i.shape) + " for '" + i.name + "'");
      if (!castable(m->dtype, i.dtype))
        errors.push_back("tensor '" + s->tensor + "' is " + dtype_name(m->dtype) +
                         ", cannot become " + dtype_name(i.dtype) + " for '" + i.name + "'");
    } else if (auto* b = std::get_if<StreamingExpertBankSource>(&i.source)) {
      std::vector<int64_t> expect(i.shape.begin() + (i.shape.empty() ? 0 : 1), i.shape.end());
      if (i.shape.empty() || i.shape[0] != static_cast<int64_t>(b->tensors.size()))
        errors.push_back("expert bank '" + i.name + "' of shape " + shape_str(i.shape) +
                         " stacks " + std::to_string(b->tensors.size()) + " tensors");
      for (const auto& t : b->tensors) {
        const TensorMeta* m = need(i.name, t);
        if (!m) continue;
        if (m->shape != expect)
          errors.push_back("tensor '" + t + "' has shape " + shape_str(m->shape) +
                           ", expert bank '" + i.name + "' expects " + shape_str(expect));
        if (!castable(m->dtype, i.dtype))
          errors.push_back("tensor '" + t + "' is " + dtype_name(m->dtype) + ", cannot become " +
                           dtype_name(i.dtype));
      }
    } else if (auto* x = std::get_if<StreamingTransformedWeightSource>(&i.source)) {
      if (!is_float(i.dtype))
        errors.push_back("transformed initializer '" + i.name + "' must be floating point");
      for (const auto& t : x->tensors) {
        const TensorMeta* m = need(i.name, t);
        if (m && !is_float(m->dtype))
          errors.push_back("tensor '" + t + "' is " + dtype_name(m->dtype) +
                           "; transforms read floating-point tensors");
      }
    }
  }
  for (const auto& m : ckpt.tensors()) {
    if (used.count(m.name)) continue;
    bool ignored = std::any_of(ignore_.begin(), ignore_.end(),
                               [&](const std::string& g) { return glob_match(g, m.name); });
    if (!ignored)
      errors.push_back("checkpoint tensor '" + m.name + "' is not used by " + arch +
                       " and not in its ignore list");
  }
  if (errors.empty()) return;
  std::string msg = "[preflight] " + std::to_string(errors.size()) + " problem" +
                    (errors.size() == 1 ? "" : "s") + " with the checkpoint (" +
                    ckpt.describe() + ") for " + arch + ":";
  size_t shown = 0;
  for (const auto& e : errors) {
    if (++shown > 50) {
      msg += "\n  ... and " + std::to_string(errors.size() - 50) + " more";
      break;
    }
    msg += "\n  " + e;
  }
  throw Error(ErrorKind::Checkpoint, msg);
}

void StreamingWeightPlan::materialize(const PlannedInitializer& init, const CheckpointReader* cp,
                                      void* dst) const {
  auto meta = [&](const std::string& t) -> const TensorMeta& {
    if (!cp) throw Error("[weights] '" + init.name + "' reads '" + t + "' but there is no checkpoint");
    const TensorMeta* m = cp->find(t);
    if (!m) throw Error("[weights] checkpoint has no tensor '" + t + "'");
    return *m;
  };
  auto read_as = [&](const TensorMeta& m, int32_t dtype, void* out) {
    if (m.dtype == dtype) {
      cp->read(m, out);
      return;
    }
    std::vector<uint8_t> scratch(m.nbytes);
    cp->read(m, scratch.data());
    convert_elements(m.dtype, scratch.data(), dtype, out, numel(m.shape));
  };
  if (auto* s = std::get_if<StreamingWeightSource>(&init.source)) {
    read_as(meta(s->tensor), init.dtype, dst);
  } else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source)) {
    auto* out = static_cast<uint8_t*>(dst);
    uint64_t each = init.nbytes() / std::max<size_t>(1, b->tensors.size());
    for (size_t e = 0; e < b->tensors.size(); ++e) read_as(meta(b->tensors[e]), init.dtype, out + e * each);
  } else if (auto* x = std::get_if<StreamingTransformedWeightSource>(&init.source)) {
    std::vector<std::vector<float>> inputs;
    std::vector<std::vector<int64_t>> dims;
    std::vector<mobius_tensor_view> views;
    for (const auto& t : x->tensors) {
      const TensorMeta& m = meta(t);
      inputs.emplace_back(numel(m.shape));
      read_as(m, MOBIUS_DTYPE_FLOAT, inputs.back().data());
      dims.push_back(m.shape);
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      mobius_tensor_view v{};
      v.struct_size = sizeof(v);
      v.dtype = MOBIUS_DTYPE_FLOAT;
      v.rank = static_cast<int32_t>(dims[k].size());
      v.dims = dims[k].data();
      v.data = inputs[k].data();
      v.nbytes = inputs[k].size() * sizeof(float);
      views.push_back(v);
    }
    std::vector<const mobius_tensor_view*> ptrs;
    for (auto& v : views) ptrs.push_back(&v);
    std::vector<float> out(numel(init.shape));
    mobius_tensor_view ov{};
    ov.struct_size = sizeof(ov);
    ov.dtype = MOBIUS_DTYPE_FLOAT;
    ov.rank = static_cast<int32_t>(init.shape.size());
    ov.dims = init.shape.data();
    ov.data = out.data();
    ov.nbytes = out.size() * sizeof(float);
    char err[512] = {0};
    mobius_status st = MOBIUS_ERROR;
    try {
      st = x->fn(x->user, ptrs.data(), ptrs.size(), &ov, err, sizeof(err));
    } catch (...) {
      throw Error(ErrorKind::Internal, "[weights] transform of '" + init.name +
                                           "' let an exception cross the C ABI");
    }
    if (st != MOBIUS_OK)
      throw Error(ErrorKind::Plugin, "[weights] transform of '" + init.name + "' failed: " +
                                         (err[0] ? std::string(err) : "no reason given"));
    convert_elements(MOBIUS_DTYPE_FLOAT, out.data(), init.dtype, dst, out.size());
  } else {
    throw Error("[weights] initializer '" + init.name + "' has no source");
  }
}

}  // namespace mobius

namespace mobius {
namespace {

constexpr uint64_t kChunk = 16u << 20;        // cast/copy granularity: bounds memory per tensor
constexpr uint64_t kKernelChunk = 64u << 20;  // copy_file_range step between cancellation polls

[[noreturn]] void io_error(const std::string& what) {
  throw Error(ErrorKind::Io, "[save] " + what + ": " + std::strerror(errno));
}

void pwrite_all(int fd, const void* data, uint64_t n, uint64_t off) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error("writing model.onnx.data failed");
    }
    p += w;
    off += static_cast<uint64_t>(w);
    n -= static_cast<uint64_t>(w);
  }
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

// Starts writeback of what was just written, so the disk works while the next chunk is copied
// and the final fsync has little left to do (instead of all of it, as after a plain cp).
void start_writeback(int fd, uint64_t off, uint64_t n) {
  ::sync_file_range(fd, static_cast<off64_t>(off), static_cast<off64_t>(n), SYNC_FILE_RANGE_WRITE);
}

void poll(const std::function<bool()>& cancelled) {
  if (cancelled && cancelled()) throw Error("[save] interrupted");
}

// File to file; in the kernel (copy_file_range) unless the filesystems refuse.
void copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t n,
                const std::string& name, const std::function<bool()>& cancelled,
                std::atomic<uint64_t>* progress) {
  static std::atomic<bool> kernel_copy{true};
  thread_local std::vector<uint8_t> buf;
  while (n > 0) {
    poll(cancelled);
    uint64_t step = std::min(n, kernel_copy ? kKernelChunk : kChunk);
    if (kernel_copy) {
      loff_t a = static_cast<loff_t>(in_off), b = static_cast<loff_t>(out_off);
      ssize_t r = ::copy_file_range(in, &a, out, &b, step, 0);
      if (r > 0) {
        start_writeback(out, out_off, static_cast<uint64_t>(r));
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
    if (buf.size() < step) buf.resize(step);
    pread_all(in, buf.data(), step, in_off, name);
    pwrite_all(out, buf.data(), step, out_off);
    start_writeback(out, out_off, step);
    in_off += step;
    out_off += step;
    n -= step;
    if (progress) *progress += step;
  }
}

uint64_t elements(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

// One checkpoint tensor into [out_off, ...) as `to`, in bounded chunks.
void stream_tensor(const TensorMeta& m, const CheckpointReader& cp, int32_t to, int out,
                   uint64_t out_off, const std::function<bool()>& cancelled,
                   std::atomic<uint64_t>* progress) {
  const uint64_t n = elements(m.shape);
  const size_t fs = dtype_size(m.dtype), ts = dtype_size(to);
  auto ext = cp.extent(m);
  if (!ext) {
    // Not contiguous in a file (e.g. a strided pickle tensor): the reader gathers it whole.
    std::vector<uint8_t> src(m.nbytes), dst;
    cp.read(m, src.data());
    if (m.dtype != to) {
      dst.resize(n * ts);
      convert_elements(m.dtype, src.data(), to, dst.data(), n);
      src.swap(dst);
    }
    pwrite_all(out, src.data(), src.size(), out_off);
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
  thread_local std::vector<uint8_t> src, dst;
  if (src.size() < std::min(n, per) * fs) src.resize(std::min(n, per) * fs);
  if (dst.size() < std::min(n, per) * ts) dst.resize(std::min(n, per) * ts);
  for (uint64_t e = 0; e < n; e += per) {
    poll(cancelled);
    uint64_t k = std::min(per, n - e);
    pread_all(ext->fd, src.data(), k * fs, ext->offset + e * fs, m.name);
    convert_elements(m.dtype, src.data(), to, dst.data(), k);
    pwrite_all(out, dst.data(), k * ts, out_off + e * ts);
    start_writeback(out, out_off + e * ts, k * ts);
    if (progress) *progress += k * ts;
  }
}

}  // namespace

void StreamingWeightPlan::write(const PlannedInitializer& init, const CheckpointReader* cp,
                                int out_fd, uint64_t offset,
                                const std::function<bool()>& cancelled,
                                std::atomic<uint64_t>* progress) const {
  auto meta = [&](const std::string& t) -> const TensorMeta& {
    if (!cp) throw Error("[weights] '" + init.name + "' reads '" + t + "' but there is no checkpoint");
    const TensorMeta* m = cp->find(t);
    if (!m) throw Error("[weights] checkpoint has no tensor '" + t + "'");
    return *m;
  };
  if (auto* s = std::get_if<StreamingWeightSource>(&init.source)) {
    stream_tensor(meta(s->tensor), *cp, init.dtype, out_fd, offset, cancelled, progress);
  } else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source)) {
    uint64_t each = init.nbytes() / std::max<size_t>(1, b->tensors.size());
    for (size_t e = 0; e < b->tensors.size(); ++e)
      stream_tensor(meta(b->tensors[e]), *cp, init.dtype, out_fd, offset + e * each, cancelled, progress);
  } else {
    poll(cancelled);
    std::vector<uint8_t> buf(init.nbytes());
    materialize(init, cp, buf.data());
    pwrite_all(out_fd, buf.data(), buf.size(), offset);
    if (progress) *progress += buf.size();
  }
}

}  // namespace mobius
