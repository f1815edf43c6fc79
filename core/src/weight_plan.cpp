// weight_plan.cpp - declaring sources, header-only preflight, and one-at-a-time materialization.
#include "weight_plan.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "mobius/error.hpp"
#include "mobius/sdk/half.hpp"

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
    case MOBIUS_DTYPE_FLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_float(v); }
    case MOBIUS_DTYPE_BFLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
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
    case MOBIUS_DTYPE_FLOAT16: { uint16_t h = float_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case MOBIUS_DTYPE_BFLOAT16: { uint16_t h = float_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
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

void convert_elements(int32_t from, const void* src, int32_t to, void* dst, size_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  size_t fs = from == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(from);
  size_t ts = to == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(to);
  if (from == to) {
    std::memcpy(dst, src, n * fs);
    return;
  }
  // Fast paths for the casts every build makes.
  if (from == MOBIUS_DTYPE_FLOAT && to == MOBIUS_DTYPE_FLOAT16) {
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, s + 4 * i, 4);
      uint16_t h = float_to_f16(f);
      std::memcpy(d + 2 * i, &h, 2);
    }
    return;
  }
  if (from == MOBIUS_DTYPE_BFLOAT16 && to == MOBIUS_DTYPE_FLOAT) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      float f = bf16_to_float(h);
      std::memcpy(d + 4 * i, &f, 4);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) store(to, d + ts * i, load(from, s + fs * i));
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
      if (i.has_source && t->release) t->release(t->user);
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
  throw Error(msg);
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
    if (x->fn(x->user, ptrs.data(), ptrs.size(), &ov, err, sizeof(err)) != MOBIUS_OK)
      throw Error("[weights] transform of '" + init.name + "' failed: " +
                  (err[0] ? std::string(err) : "no reason given"));
    convert_elements(MOBIUS_DTYPE_FLOAT, out.data(), init.dtype, dst, out.size());
  } else {
    throw Error("[weights] initializer '" + init.name + "' has no source");
  }
}

}  // namespace mobius
