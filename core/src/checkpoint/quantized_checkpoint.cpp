// quantized_checkpoint.cpp - FP8 block and MXFP4 checkpoints dequantized while they are read.
//
// The semantics are transformers' (dequantize=True): FineGrainedDequantize for fp8 (float32
// e4m3 value times float32 scale of its block, ragged edge blocks included) and
// convert_moe_packed_tensors for mxfp4 (e2m1 lookup, low nibble first, torch.ldexp by the e8m0
// exponent, then the transpose of the last two dimensions). Everything here reads untrusted
// shapes and bytes: sizes are checked before any product is formed, and no value read from the
// checkpoint can crash the decoding (NaN codes and infinite scales just propagate).
#include "checkpoint/quantized_checkpoint.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.hpp"
#include "mobius/half.h"
#include "mobius/plugin.h"
#include "util/untrusted.hpp"

namespace mobius {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kScaleInv = "_scale_inv";
constexpr std::string_view kBlocks = "_blocks";
constexpr std::string_view kScales = "_scales";
// transformers' FineGrainedFP8Config default when the config gives no weight_block_size.
constexpr int64_t kDefaultBlock = 128;
// Elements decoded per read of the source: bounds the scratch memory of one read_range call.
constexpr uint64_t kChunk = uint64_t{1} << 20;
// MXFP4 packs 32 values (16 bytes) per shared exponent.
constexpr uint64_t kMxBlockBytes = 16;
constexpr uint64_t kMxBlockValues = 32;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// ---------------------------------------------------------------------------------------------
// quantization_config

enum class Method { Fp8, Mxfp4 };

struct QuantConfig {
  Method method = Method::Fp8;
  int64_t block_rows = kDefaultBlock;  // weight_block_size [bo, bi]
  int64_t block_cols = kDefaultBlock;
  std::vector<std::string> not_converted;  // modules_to_not_convert
};

[[noreturn]] void config_error(const std::string& what) {
  throw Error(ErrorKind::Config, "[config] quantization_config" + what);
}

// A config value for a message: its JSON text, made printable and cut.
std::string shown(const json& v) { return printable(v.dump(), 80); }

std::optional<std::string> config_string(const json& q, const char* key) {
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) config_error(std::string(".") + key + " " + shown(*it) + " is not a string");
  return it->get<std::string>();
}

int64_t positive_int(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u > 0 && u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? static_cast<int64_t>(u)
               : 0;
  }
  if (v.is_number_integer()) return std::max<int64_t>(0, v.get<int64_t>());
  return 0;  // floats, booleans, strings: not a block size
}

std::vector<std::string> string_list(const json& q, const char* key) {
  std::vector<std::string> out;
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return out;
  if (!it->is_array()) config_error(std::string(".") + key + " is not a list of module names");
  for (const json& v : *it) {
    if (!v.is_string())
      config_error(std::string(".") + key + " holds " + shown(v) + ", which is not a string");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The quantization_config of a parsed config.json, or nothing when it has none.
std::optional<QuantConfig> parse_quant_config(const json& cfg) {
  if (!cfg.is_object()) return std::nullopt;  // the build reports that itself
  auto it = cfg.find("quantization_config");
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) config_error(" " + shown(*it) + " is not an object");
  const json& q = *it;

  QuantConfig c;
  const std::optional<std::string> method = config_string(q, "quant_method");
  if (!method) config_error(" has no quant_method");
  if (*method == "fp8") {
    c.method = Method::Fp8;
  } else if (*method == "mxfp4") {
    c.method = Method::Mxfp4;
    return c;  // its other keys (modules_to_not_convert, dequantize) change nothing read here
  } else {
    config_error(".quant_method " + quote_name(*method) +
                 " is not supported: mobius dequantizes 'fp8' (block FP8 e4m3) and 'mxfp4' "
                 "checkpoints");
  }

  // fp8. transformers' own configs omit fmt; DeepSeek's and Qwen's say "e4m3".
  if (const auto fmt = config_string(q, "fmt"); fmt && *fmt != "e4m3")
    config_error(".fmt " + quote_name(*fmt) + " is not supported: FP8 block weights are e4m3");
  // Activations are not quantized in a float model, but a static scheme ships per-layer
  // activation scales that nothing here would read.
  if (const auto act = config_string(q, "activation_scheme"); act && *act != "dynamic")
    config_error(".activation_scheme " + quote_name(*act) + " is not supported (only 'dynamic')");
  // ue8m0 scales are powers of two stored as F32, BF16 or F16: multiplied the same way.
  if (const auto sf = config_string(q, "scale_fmt"); sf && *sf != "float" && *sf != "ue8m0")
    config_error(".scale_fmt " + quote_name(*sf) + " is not supported ('float' or 'ue8m0')");
  if (auto bs = q.find("weight_block_size"); bs != q.end()) {
    const int64_t bo = bs->is_array() && bs->size() == 2 ? positive_int((*bs)[0]) : 0;
    const int64_t bi = bs->is_array() && bs->size() == 2 ? positive_int((*bs)[1]) : 0;
    if (bo == 0 || bi == 0)
      config_error(".weight_block_size " + shown(*bs) + " is not two positive integers");
    c.block_rows = bo;
    c.block_cols = bi;
  }
  c.not_converted = string_list(q, "modules_to_not_convert");
  // transformers reads vLLM's name for the same list when the usual one is absent.
  if (q.find("modules_to_not_convert") == q.end()) c.not_converted = string_list(q, "ignored_layers");
  return c;
}

// Whether a pattern of modules_to_not_convert names `module`, as transformers'
// should_convert_module decides: re.match(pattern, module) or module.endswith(pattern). The
// regular expressions are the subset such lists use ('.', '*', '+', '?', '\' escapes; anything
// else literal), simulated state by state so no pattern can take exponential time.
bool names_module(std::string_view pattern, std::string_view module) {
  if (ends_with(module, pattern)) return true;
  struct Tok {
    bool any;
    char c;
    bool star;  // zero or more
    bool opt;   // zero or one
  };
  std::vector<Tok> toks;
  for (size_t i = 0; i < pattern.size(); ++i) {
    Tok t{pattern[i] == '.', pattern[i], false, false};
    if (pattern[i] == '\\' && i + 1 < pattern.size()) t = Tok{false, pattern[++i], false, false};
    if (i + 1 < pattern.size() && (pattern[i + 1] == '*' || pattern[i + 1] == '?')) {
      (pattern[i + 1] == '*' ? t.star : t.opt) = true;
      ++i;
    } else if (i + 1 < pattern.size() && pattern[i + 1] == '+') {
      toks.push_back(t);  // x+ is x x*
      t.star = true;
      ++i;
    }
    toks.push_back(t);
  }
  const size_t m = toks.size();
  std::vector<char> cur(m + 1, 0), next(m + 1, 0);
  const auto close = [&](std::vector<char>& s) {
    for (size_t j = 0; j < m; ++j)
      if (s[j] && (toks[j].star || toks[j].opt)) s[j + 1] = 1;
  };
  cur[0] = 1;
  close(cur);
  for (char ch : module) {
    if (cur[m]) return true;  // re.match: a prefix of the name is enough
    std::fill(next.begin(), next.end(), 0);
    bool alive = false;
    for (size_t j = 0; j < m; ++j) {
      if (!cur[j] || !(toks[j].any || toks[j].c == ch)) continue;
      next[toks[j].star ? j : j + 1] = 1;
      alive = true;
    }
    if (!alive) return false;
    close(next);
    cur.swap(next);
  }
  return cur[m] != 0;
}

// ---------------------------------------------------------------------------------------------
// Number formats

// float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) {
      const int exp = (b >> 3) & 15, man = b & 7;
      float v;
      if (exp == 15 && man == 7)
        v = std::numeric_limits<float>::quiet_NaN();
      else if (exp == 0)
        v = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
      else
        v = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + man/8) * 2^(exp-7)
      t[static_cast<size_t>(b)] = (b & 0x80) ? -v : v;
    }
    return t;
  }();
  return table;
}

// Every MXFP4 value: e2m1 code n under e8m0 exponent byte s. torch.ldexp(x, e) is x * pow(2.0, e)
// with the power in float32, so s = 255 multiplies by +inf (zero codes then give NaN) and s = 0
// by the subnormal 2^-127; the products are exact otherwise, as in transformers' bfloat16.
const std::array<float, 256 * 16>& mxfp4_table() {
  static const std::array<float, 256 * 16> table = [] {
    static constexpr float kE2m1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    std::array<float, 256 * 16> t{};
    for (int s = 0; s < 256; ++s) {
      const float pow2 = s == 255 ? std::numeric_limits<float>::infinity()
                                  : std::ldexp(1.0f, s - 127);
      for (int n = 0; n < 16; ++n) t[static_cast<size_t>(s * 16 + n)] = kE2m1[n] * pow2;
    }
    return t;
  }();
  return table;
}

float bf16_to_float(const uint8_t* p) {
  const uint32_t bits = static_cast<uint32_t>(le16(p)) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void store(uint8_t* dst, float v) { std::memcpy(dst, &v, 4); }

// ---------------------------------------------------------------------------------------------
// The reader

enum class Kind : uint8_t { Stored, Fp8, Mxfp4 };

// Where a listed tensor's values come from.
struct Source {
  Kind kind = Kind::Stored;
  const TensorMeta* data = nullptr;   // the stored tensor, the F8 weight or the mxfp4 blocks
  const TensorMeta* scale = nullptr;  // weight_scale_inv or the mxfp4 scales
  // fp8: the weight is rows x cols in blocks of bo x bi, its scales rows of scols.
  // mxfp4: rows x groups (of 32 values) packed per expert; listed as [experts, groups*32, rows].
  uint64_t rows = 0, cols = 0, bo = 1, bi = 1, scols = 0;
  uint64_t groups = 0;
};

// One expert's packed MXFP4 bytes, kept per thread between calls: a writer reading the
// transposed tensor a few rows at a time then reads each expert's bytes once, not once per call.
// Dropped when a read reaches the expert's end, so at most one expert's bytes stay per thread.
struct PackedExpert {
  uint64_t reader = 0;  // reader id; 0: empty
  size_t source = 0;
  uint64_t expert = 0;
  std::vector<uint8_t> blocks, scales;
};
thread_local PackedExpert t_packed;

std::atomic<uint64_t> g_next_reader_id{1};

class DequantizingReader final : public CheckpointReader {
 public:
  DequantizingReader(std::unique_ptr<CheckpointReader> base, std::vector<TensorMeta> tensors,
                     std::vector<Source> sources, std::string suffix)
      : base_(std::move(base)), id_(g_next_reader_id++), description_(base_->describe() + suffix) {
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors[a].name < tensors[b].name; });
    for (size_t i : order) {
      tensors_.push_back(std::move(tensors[i]));
      sources_.push_back(sources[i]);
    }
  }

  const std::vector<TensorMeta>& tensors() const override { return tensors_; }

  const TensorMeta* find(std::string_view name) const override { return find_sorted(tensors_, name); }

  void read(const TensorMeta& meta, void* dst) const override {
    const size_t i = locate_for_read(meta);
    const Source& s = sources_[i];
    if (s.kind == Kind::Stored) return base_->read(*s.data, dst);
    read_range(meta, 0, tensors_[i].nbytes / 4, dst);
  }

  std::optional<FileExtent> extent(const TensorMeta& meta) const override {
    const TensorMeta* mine = find(meta.name);
    if (!mine || mine->nbytes != meta.nbytes) return std::nullopt;
    const Source& s = sources_[static_cast<size_t>(mine - tensors_.data())];
    if (s.kind != Kind::Stored) return std::nullopt;  // computed, in no file
    return base_->extent(*s.data);
  }

  bool reads_ranges(const TensorMeta& meta) const override {
    const TensorMeta* mine = find(meta.name);
    if (!mine || mine->nbytes != meta.nbytes) return false;
    const Source& s = sources_[static_cast<size_t>(mine - tensors_.data())];
    return s.kind != Kind::Stored || base_->reads_ranges(*s.data);
  }

  void read_range(const TensorMeta& meta, uint64_t first, uint64_t count,
                  void* dst) const override {
    const size_t i = locate_for_read(meta);
    const Source& s = sources_[i];
    if (s.kind == Kind::Stored) return base_->read_range(*s.data, first, count, dst);
    const uint64_t n = tensors_[i].nbytes / 4;
    if (first > n || count > n - first)
      throw Error(ErrorKind::Checkpoint,
                  "[checkpoint] " + description_ + ": tensor " + quote_name(meta.name) +
                      ": elements from " + std::to_string(first) + ", " + std::to_string(count) +
                      " of them, requested of " + std::to_string(n));
    if (count == 0) return;
    auto* out = static_cast<uint8_t*>(dst);
    if (s.kind == Kind::Fp8)
      fp8_range(s, first, count, out);
    else
      mxfp4_range(i, s, first, count, out);
  }

  std::string describe() const override { return description_; }

 private:
  size_t locate_for_read(const TensorMeta& meta) const {
    const TensorMeta* mine = find(meta.name);
    if (!mine)
      throw Error(ErrorKind::Checkpoint,
                  "[checkpoint] " + description_ + ": no tensor " + quote_name(meta.name));
    if (mine->nbytes != meta.nbytes)
      throw Error(ErrorKind::Checkpoint,
                  "[checkpoint] " + description_ + ": tensor " + quote_name(meta.name) + " is " +
                      std::to_string(mine->nbytes) + " bytes, but the request is for " +
                      std::to_string(meta.nbytes));
    return static_cast<size_t>(mine - tensors_.data());
  }

  // Scales [first, first + count) of an fp8 scale tensor as float32.
  void read_scales(const TensorMeta& scale, uint64_t first, uint64_t count,
                   std::vector<float>& out) const {
    out.resize(count);
    if (scale.dtype == MOBIUS_DTYPE_FLOAT) {
      base_->read_range(scale, first, count, out.data());
      return;
    }
    std::vector<uint8_t> raw(count * 2);
    base_->read_range(scale, first, count, raw.data());
    if (scale.dtype == MOBIUS_DTYPE_FLOAT16) {
      for (uint64_t k = 0; k < count; ++k) out[k] = mobius_f16_to_f32(le16(raw.data() + 2 * k));
      return;
    }
    for (uint64_t k = 0; k < count; ++k) out[k] = bf16_to_float(raw.data() + 2 * k);
  }

  // Elements [first, first + count) of a dequantized fp8 weight, a piece at a time: a run of
  // whole rows (when a row fits the chunk), else a part of one row. Each piece reads its q bytes
  // and the scales of the block rows and columns it covers, nothing else.
  void fp8_range(const Source& s, uint64_t first, uint64_t count, uint8_t* out) const {
    const std::array<float, 256>& e4m3 = e4m3_table();
    std::vector<uint8_t> q;
    std::vector<float> sc;
    const uint64_t end = first + count;
    uint64_t pos = first;
    while (pos < end) {
      const uint64_t r0 = pos / s.cols, c0 = pos % s.cols;
      uint64_t nr = 1, c1;
      if (c0 == 0 && s.cols <= kChunk && end - pos >= s.cols) {
        nr = std::min((end - pos) / s.cols, kChunk / s.cols);
        c1 = s.cols;
      } else {
        c1 = c0 + std::min({end - pos, kChunk, s.cols - c0});
      }
      const uint64_t n = nr == 1 ? c1 - c0 : nr * s.cols;
      q.resize(n);
      base_->read_range(*s.data, pos, n, q.data());
      // One scale row when the piece is in one row; whole scale rows (sc0 = 0) for a run.
      const uint64_t sr0 = r0 / s.bo, sr1 = (r0 + nr - 1) / s.bo;
      const uint64_t sc0 = c0 / s.bi, width = (c1 - 1) / s.bi - sc0 + 1;
      read_scales(*s.scale, sr0 * s.scols + sc0, (sr1 - sr0) * s.scols + width, sc);
      const uint64_t stride = sr1 > sr0 ? s.scols : width;
      const uint8_t* qp = q.data();
      uint8_t* op = out + (pos - first) * 4;
      for (uint64_t r = r0; r < r0 + nr; ++r) {
        const float* srow = sc.data() + (r / s.bo - sr0) * stride;
        for (uint64_t c = c0; c < c1;) {
          const uint64_t b = c / s.bi;
          const uint64_t stop = std::min(c1 - c, s.bi - c % s.bi) + c;  // this block's end
          const float scale = srow[b - sc0];
          for (; c < stop; ++c, ++qp, op += 4) store(op, e4m3[*qp] * scale);
        }
      }
      pos += n;
    }
  }

  // The packed bytes of one expert, from this thread's cache or read now.
  const PackedExpert& packed(size_t index, const Source& s, uint64_t e) const {
    PackedExpert& p = t_packed;
    if (p.reader == id_ && p.source == index && p.expert == e) return p;
    p.reader = 0;  // invalid until both reads succeed
    const uint64_t per = s.rows * s.groups;
    p.blocks.resize(per * kMxBlockBytes);
    p.scales.resize(per);
    base_->read_range(*s.data, e * per * kMxBlockBytes, per * kMxBlockBytes, p.blocks.data());
    base_->read_range(*s.scale, e * per, per, p.scales.data());
    p.reader = id_;
    p.source = index;
    p.expert = e;
    return p;
  }

  // Elements [first, first + count) of a dequantized mxfp4 tensor [E, K, R] (K = groups * 32):
  // element (e, k, r) is value k of the expert's source row r.
  void mxfp4_range(size_t index, const Source& s, uint64_t first, uint64_t count,
                   uint8_t* out) const {
    const std::array<float, 256 * 16>& table = mxfp4_table();
    const uint64_t k_total = s.groups * kMxBlockValues;
    const uint64_t per_expert = k_total * s.rows;
    const uint64_t end = first + count;
    uint64_t pos = first;
    uint8_t* op = out;
    while (pos < end) {
      const uint64_t e = pos / per_expert, start = pos % per_expert;
      const uint64_t stop = start + std::min(end - pos, per_expert - start);
      uint64_t at = start;
      const PackedExpert& p = packed(index, s, e);
      while (at < stop) {
        const uint64_t k = at / s.rows, r0 = at % s.rows;
        const uint64_t r1 = std::min(s.rows, r0 + (stop - at));
        const uint64_t g = k / kMxBlockValues, byte = (k % kMxBlockValues) / 2;
        const unsigned shift = (k & 1) ? 4 : 0;  // even values in the low nibble
        for (uint64_t r = r0; r < r1; ++r, op += 4) {
          const uint64_t at_group = r * s.groups + g;
          const unsigned code = (p.blocks[at_group * kMxBlockBytes + byte] >> shift) & 15u;
          store(op, table[p.scales[at_group] * 16u + code]);
        }
        at += r1 - r0;
      }
      pos += stop - start;
      // A reader that finished the expert moves on: its bytes are not kept.
      if (stop == per_expert) t_packed = PackedExpert{};
    }
  }

  std::unique_ptr<CheckpointReader> base_;
  uint64_t id_;
  std::vector<TensorMeta> tensors_;  // sorted by name
  std::vector<Source> sources_;      // parallel to tensors_
  std::string description_;
};

// ---------------------------------------------------------------------------------------------
// Building the table

class Builder {
 public:
  Builder(const CheckpointReader& base, const fs::path& dir) : base_(base), dir_(dir) {}

  std::vector<TensorMeta> tensors;
  std::vector<Source> sources;
  bool converted = false;

  void stored(const TensorMeta& m) {
    tensors.push_back(m);
    sources.push_back(Source{Kind::Stored, &m});
  }

  void fp8(const QuantConfig& c) {
    for (const TensorMeta& m : base_.tensors()) {
      if (ends_with(m.name, kScaleInv)) {
        // A scale is read with its weight; alone it means the weight is missing or not FP8.
        const std::string_view wname(m.name.data(), m.name.size() - kScaleInv.size());
        const TensorMeta* w = base_.find(wname);
        if (!w)
          fail(m, "tensor " + quote_name(m.name) + " is an FP8 block scale, but the checkpoint has "
                  "no tensor " + quote_name(wname) + " for it to scale");
        if (w->dtype != kDtypeFloat8E4M3FN)
          fail(m, "tensor " + quote_name(m.name) + " scales " + quote_name(wname) + ", which is " +
                      dtype_name(w->dtype) + ", not F8_E4M3 (float8_e4m3fn)");
        continue;
      }
      if (m.dtype != kDtypeFloat8E4M3FN) {
        stored(m);
        continue;
      }
      const std::string sname = m.name + std::string(kScaleInv);
      const TensorMeta* sc = base_.find(sname);
      if (!sc) {
        const std::string module = module_of(m.name);
        for (const std::string& p : c.not_converted)
          if (names_module(p, module))
            fail(m, "tensor " + quote_name(m.name) + " is F8_E4M3, but its module " +
                        quote_name(module) + " is in quantization_config.modules_to_not_convert (" +
                        quote_name(p) + "), which says it is stored unquantized; and it has no " +
                        quote_name(sname) + " to dequantize it with");
        fail(m, "tensor " + quote_name(m.name) + " is F8_E4M3 but the checkpoint has no " +
                    quote_name(sname) + " to dequantize it with");
      }
      if (m.shape.size() != 2)
        fail(m, "tensor " + quote_name(m.name) + " is F8_E4M3 of shape " + dims_text(m.shape) +
                    "; FP8 block weights are matrices [out, in]");
      if (sc->dtype != MOBIUS_DTYPE_FLOAT && sc->dtype != MOBIUS_DTYPE_BFLOAT16 &&
          sc->dtype != MOBIUS_DTYPE_FLOAT16)
        fail(*sc, "tensor " + quote_name(sname) + " is " + dtype_name(sc->dtype) +
                      "; FP8 block scales are F32, BF16 or F16");
      Source s{Kind::Fp8, &m, sc};
      s.rows = static_cast<uint64_t>(m.shape[0]);
      s.cols = static_cast<uint64_t>(m.shape[1]);
      s.bo = static_cast<uint64_t>(c.block_rows);
      s.bi = static_cast<uint64_t>(c.block_cols);
      s.scols = ceil_div(s.cols, s.bi);
      const std::vector<int64_t> want = {static_cast<int64_t>(ceil_div(s.rows, s.bo)),
                                         static_cast<int64_t>(s.scols)};
      if (sc->shape != want)
        fail(*sc, "tensor " + quote_name(sname) + " has shape " + dims_text(sc->shape) + "; for " +
                      quote_name(m.name) + " " + dims_text(m.shape) + " in blocks of " +
                      std::to_string(s.bo) + "x" + std::to_string(s.bi) +
                      " (quantization_config.weight_block_size) it must be " + dims_text(want));
      virtual_tensor(m, m.name, {m.shape[0], m.shape[1]}, s);
    }
  }

  void mxfp4() {
    for (const TensorMeta& m : base_.tensors()) {
      if (ends_with(m.name, kScales)) {
        const std::string_view p(m.name.data(), m.name.size() - kScales.size());
        if (!base_.find(std::string(p) + std::string(kBlocks)))
          fail(m, "tensor " + quote_name(m.name) + " is an MXFP4 scale, but the checkpoint has no " +
                      quote_name(std::string(p) + std::string(kBlocks)) + " for it to scale");
        continue;
      }
      if (!ends_with(m.name, kBlocks)) {
        no_f8(m, "'mxfp4'");
        stored(m);
        continue;
      }
      const std::string p = m.name.substr(0, m.name.size() - kBlocks.size());
      const std::string sname = p + std::string(kScales);
      const TensorMeta* sc = base_.find(sname);
      if (!sc)
        fail(m, "tensor " + quote_name(m.name) + " holds MXFP4 blocks, but the checkpoint has no " +
                    quote_name(sname) + " for them");
      if (base_.find(p))
        fail(m, "tensor " + quote_name(p) + " is stored both as it is and as MXFP4 " +
                    quote_name(m.name) + " + " + quote_name(sname));
      if (m.dtype != MOBIUS_DTYPE_UINT8 || sc->dtype != MOBIUS_DTYPE_UINT8)
        fail(m, "MXFP4 " + quote_name(m.name) + " is " + dtype_name(m.dtype) + " and " +
                    quote_name(sname) + " is " + dtype_name(sc->dtype) + "; both must be U8");
      const std::vector<int64_t>& b = m.shape;
      if (b.size() != 4 || b[3] != static_cast<int64_t>(kMxBlockBytes))
        fail(m, "MXFP4 blocks " + quote_name(m.name) + " have shape " + dims_text(b) +
                    "; they must be [experts, rows, groups, 16]");
      if (sc->shape != std::vector<int64_t>(b.begin(), b.begin() + 3))
        fail(*sc, "MXFP4 scales " + quote_name(sname) + " have shape " + dims_text(sc->shape) +
                      "; for blocks " + quote_name(m.name) + " " + dims_text(b) + " they must be " +
                      dims_text(std::vector<int64_t>(b.begin(), b.begin() + 3)));
      Source s{Kind::Mxfp4, &m, sc};
      s.rows = static_cast<uint64_t>(b[1]);
      s.groups = static_cast<uint64_t>(b[2]);
      int64_t k = 0;
      if (__builtin_mul_overflow(b[2], static_cast<int64_t>(kMxBlockValues), &k))
        fail(m, "MXFP4 blocks " + quote_name(m.name) + " " + dims_text(b) + " are too large");
      virtual_tensor(m, p, {b[0], k, b[1]}, s);
    }
  }

  // With no fp8 quantization_config, nothing says how to read an F8_E4M3 tensor.
  void no_f8(const TensorMeta& m, const std::string& method) const {
    if (m.dtype != kDtypeFloat8E4M3FN) return;
    fail(m, "tensor " + quote_name(m.name) + " is F8_E4M3, but " +
                (method.empty() ? "config.json has no quantization_config"
                                : "quantization_config.quant_method is " + method) +
                ", so nothing says how to dequantize it (FP8 block checkpoints say 'fp8')");
  }

 private:
  [[noreturn]] void fail(const TensorMeta& m, const std::string& why) const {
    throw Error(ErrorKind::Checkpoint, "[checkpoint] " + printable(display(m)) + ": " + why);
  }

  // The file holding m, relative to the checkpoint folder as the readers name shards.
  std::string display(const TensorMeta& m) const {
    const fs::path rel = m.file.lexically_relative(dir_);
    if (rel.empty() || *rel.begin() == "..") return m.file.filename().string();
    return rel.generic_string();
  }

  // The module a weight belongs to: its name without the last component ("...q_proj.weight").
  static std::string module_of(const std::string& name) {
    const size_t dot = name.rfind('.');
    return dot == std::string::npos ? name : name.substr(0, dot);
  }

  void virtual_tensor(const TensorMeta& from, const std::string& name, std::vector<int64_t> shape,
                      const Source& s) {
    uint64_t n = 1;
    for (int64_t d : shape)
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
        fail(from, "tensor " + quote_name(name) + " dequantized to " + dims_text(shape) +
                       " has too many elements");
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(n, uint64_t{4}, &nbytes) ||
        nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(from, "tensor " + quote_name(name) + " dequantized to float32 " + dims_text(shape) +
                     " has too many bytes");
    tensors.push_back(TensorMeta{name, MOBIUS_DTYPE_FLOAT, std::move(shape), from.file, nbytes});
    sources.push_back(s);
    converted = true;
  }

  const CheckpointReader& base_;
  const fs::path& dir_;
};

}  // namespace

std::unique_ptr<CheckpointReader> dequantizing_checkpoint(std::unique_ptr<CheckpointReader> base,
                                                          const std::filesystem::path& dir,
                                                          const std::string& config_text) {
  json cfg;
  try {
    cfg = parse_json_limited(config_text, "config.json", kConfigLimits);
  } catch (const Error&) {
    // Not within the limits: whoever reads config.json reports it (a CLI build already has; an
    // in-process build does not read it). What it says about quantization is then unknown, and
    // the weight plan refuses F8 tensors as a dtype it cannot convert.
    return base;
  }
  const std::optional<QuantConfig> config = parse_quant_config(cfg);
  Builder b(*base, dir);
  if (!config) {
    for (const TensorMeta& m : base->tensors()) b.no_f8(m, "");
    return base;
  }
  std::string suffix;
  if (config->method == Method::Fp8) {
    b.fp8(*config);
    suffix = ", fp8 e4m3 blocks " + std::to_string(config->block_rows) + "x" +
             std::to_string(config->block_cols) + " dequantized";
  } else {
    b.mxfp4();
    suffix = ", mxfp4 experts dequantized";
  }
  if (!b.converted) return base;  // already stored unquantized: nothing to say or to do
  return std::make_unique<DequantizingReader>(std::move(base), std::move(b.tensors),
                                              std::move(b.sources), suffix);
}

}  // namespace mobius
