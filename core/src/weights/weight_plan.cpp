// weight_plan.cpp - declaring sources and the header-only preflight of the weight plan, and
// making an initializer's bytes whole in memory (materialize). Streaming them into a file is
// weight_write.cpp; the layouts' kernels are layout_kernels.cpp.
#include "weights/weight_plan.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "mobius/error.hpp"
#include "weights/convert.hpp"
#include "weights/layout_input.hpp"
#include "weights/layout_kernels.hpp"

namespace mobius {
namespace weights {

uint64_t numel(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

std::string quantization_key(const StreamingLayoutSource& src) {
  std::string key = std::to_string(src.layout.bits) + "/" + std::to_string(src.layout.block_size) +
                    "/" + std::to_string(src.layout.symmetric) + "/" +
                    std::to_string(std::max(1, src.layout.interleave));
  for (const auto& t : src.tensors) key += '\0' + t;
  return key;
}

}  // namespace weights

using weights::BlockQuantizer;
using weights::castable;
using weights::is_float;
using weights::layout_input;
using weights::LayoutInput;
using weights::numel;
using weights::quantization_key;
using weights::transpose_convert;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// E.g. "scales of a 4-bit asymmetric quantization in blocks of 32".
std::string describe_part(const mobius_weight_layout& l) {
  static const char* const parts[] = {"data", "scales", "zero points"};
  return std::string(parts[l.part]) + " of a " + std::to_string(l.bits) + "-bit " +
         (l.symmetric ? "symmetric" : "asymmetric") + " quantization in blocks of " +
         std::to_string(l.block_size);
}

// A block quantization's part declared with another shape for the same bytes, as an operator
// that gathers whole rows reads it (GatherBlockQuantized: data [E, N/E, K*bits/8] for N rows of
// E stacked matrices): the same element count, the rows split over leading dimensions and the
// row cut into equal trailing parts, so that no declared row straddles two of the layout's.
bool same_rows(const mobius_weight_layout& l, const std::vector<int64_t>& expect,
               const std::vector<int64_t>& declared) {
  if (l.kind != MOBIUS_LAYOUT_BLOCK_QUANTIZED || declared.empty()) return false;
  int64_t count = 1, want = 1, row = 1;
  for (int64_t d : declared) {
    if (d <= 0) return false;
    count *= d;
  }
  for (int64_t d : expect) want *= d;
  for (size_t i = 1; i < expect.size(); ++i) row *= expect[i];
  return count == want && row % declared.back() == 0;
}

// Checks a layout source's tensors (rank 2, floating point, equal column counts) and the
// initializer's shape against what the layout makes of them, adding one message per problem.
// `find` returns nullptr for an absent tensor (and reports it itself).
LayoutInput check_layout_input(const PlannedInitializer& init, const StreamingLayoutSource& src,
                               const std::function<const TensorMeta*(const std::string&)>& find,
                               std::vector<std::string>& problems) {
  LayoutInput in;
  bool complete = true;
  for (const auto& t : src.tensors) {
    const TensorMeta* m = find(t);
    if (!m) {
      complete = false;
    } else if (m->shape.size() != 2) {
      problems.push_back("tensor '" + t + "' has shape " + shape_str(m->shape) + "; '" + init.name +
                         "' is laid out from rank-2 tensors");
      complete = false;
    } else if (!is_float(m->dtype)) {
      problems.push_back("tensor '" + t + "' is " + dtype_name(m->dtype) + "; '" + init.name +
                         "' is laid out from floating-point tensors");
      complete = false;
    } else if (!in.tensors.empty() && m->shape[1] != in.tensors.front()->shape[1]) {
      problems.push_back("tensor '" + t + "' has shape " + shape_str(m->shape) + " and '" +
                         in.tensors.front()->name + "' " + shape_str(in.tensors.front()->shape) +
                         "; '" + init.name + "' concatenates tensors with equal column counts");
      complete = false;
    } else {
      in.tensors.push_back(m);
      in.n += static_cast<uint64_t>(m->shape[0]);
    }
  }
  if (!complete || in.tensors.empty()) return in;
  // Interleaved rows: whole groups of tensors with equal row counts.
  const size_t group = static_cast<size_t>(std::max(1, src.layout.interleave));
  if (group > 1) {
    if (in.tensors.size() % group != 0) {
      problems.push_back("'" + init.name + "' interleaves the rows of " + std::to_string(group) +
                         " tensors at a time, and has " + std::to_string(in.tensors.size()));
      return in;
    }
    for (size_t t = 0; t < in.tensors.size(); ++t) {
      const TensorMeta* first = in.tensors[t - t % group];
      if (in.tensors[t]->shape[0] != first->shape[0]) {
        problems.push_back("tensor '" + in.tensors[t]->name + "' has shape " +
                           shape_str(in.tensors[t]->shape) + " and '" + first->name + "' " +
                           shape_str(first->shape) + "; '" + init.name +
                           "' interleaves the rows of tensors with equal row counts");
        return in;
      }
    }
  }
  in.group = group;
  in.k = static_cast<uint64_t>(in.tensors.front()->shape[1]);
  const std::vector<int64_t> matrix{static_cast<int64_t>(in.n), static_cast<int64_t>(in.k)};
  const std::vector<int64_t> expect = layout_shape(src.layout, matrix[0], matrix[1]);
  if (expect != init.shape && !same_rows(src.layout, expect, init.shape)) {
    // As a direct source's message: the tensors' shape, then what the graph expects.
    std::string what = src.tensors.size() == 1 ? "tensor " : "tensors ";
    for (size_t t = 0; t < src.tensors.size(); ++t)
      what += (t ? ", '" : "'") + src.tensors[t] + "'";
    what += src.tensors.size() == 1 ? " has shape " : " concatenated have shape ";
    if (src.layout.kind == MOBIUS_LAYOUT_TRANSPOSED)
      problems.push_back(what + shape_str(matrix) + ", the graph expects " +
                         shape_str({init.shape[1], init.shape[0]}) + " for '" + init.name +
                         "' (stored transposed as " + shape_str(init.shape) + ")");
    else
      problems.push_back(what + shape_str(matrix) + "; as the " + describe_part(src.layout) +
                         " it is " + shape_str(expect) + ", the graph expects " +
                         shape_str(init.shape) + " for '" + init.name + "'");
  }
  return in;
}

}  // namespace

// A layout source's input when its bytes are made; preflight has reported any problem before.
LayoutInput weights::layout_input(const PlannedInitializer& init, const StreamingLayoutSource& src,
                                  const CheckpointReader* cp) {
  if (!cp)
    throw Error("[weights] '" + init.name + "' reads '" + src.tensors.front() +
                "' but there is no checkpoint");
  std::vector<std::string> problems;
  auto find = [&](const std::string& t) {
    const TensorMeta* m = cp->find(t);
    if (!m) problems.push_back("checkpoint has no tensor '" + t + "'");
    return m;
  };
  LayoutInput in = check_layout_input(init, src, find, problems);
  if (!problems.empty()) throw Error("[weights] " + problems.front());
  return in;
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
    if (auto* l = std::get_if<StreamingLayoutSource>(&src)) {
      if (l->tensors.empty())
        throw Error("[plan] initializer '" + name + "' is laid out from no tensor");
      const std::string problem = layout_problem(l->layout, i.dtype, i.shape.size());
      if (!problem.empty()) throw Error("[plan] initializer '" + name + "': " + problem);
      // One quantization has one scale dtype: its data is quantized against it.
      if (l->layout.kind == MOBIUS_LAYOUT_BLOCK_QUANTIZED &&
          l->layout.part == MOBIUS_QUANT_PART_SCALES) {
        const auto [at, added] = scales_.emplace(quantization_key(*l), std::make_pair(name, i.dtype));
        if (!added && at->second.second != i.dtype)
          throw Error("[plan] initializer '" + name + "' (" + dtype_name(i.dtype) + ") and '" +
                      at->second.first + "' (" + dtype_name(at->second.second) +
                      ") are scales of the same quantization: its data is quantized against "
                      "scales of one dtype");
      }
    }
    i.source = std::move(src);
    i.has_source = true;
    return;
  }
  throw Error("[plan] no initializer '" + name + "' to plan (declare it in the graph first)");
}

int32_t StreamingWeightPlan::scale_dtype(const PlannedInitializer& part) const {
  const auto& src = std::get<StreamingLayoutSource>(part.source);
  if (src.layout.part == MOBIUS_QUANT_PART_SCALES) return part.dtype;
  auto it = scales_.find(quantization_key(src));
  return it == scales_.end() ? MOBIUS_DTYPE_FLOAT : it->second.second;
}

void StreamingWeightPlan::preflight(const CheckpointReader& ckpt, const std::string& arch,
                                    Mismatch* mismatch) const {
  Mismatch kinds;
  std::set<size_t> sorted;  // the errors kinds.missing and kinds.unused hold
  std::vector<std::string> errors;
  std::set<std::string> used;
  auto need = [&](const std::string& init, const std::string& t) -> const TensorMeta* {
    used.insert(t);
    const TensorMeta* m = ckpt.find(t);
    if (!m) {
      sorted.insert(errors.size());
      errors.push_back("initializer '" + init + "': checkpoint has no tensor '" + t + "'");
      kinds.missing.push_back(t);
    }
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
    } else if (auto* l = std::get_if<StreamingLayoutSource>(&i.source)) {
      check_layout_input(i, *l, [&](const std::string& t) { return need(i.name, t); }, errors);
    }
  }
  for (const auto& m : ckpt.tensors()) {
    if (used.count(m.name)) continue;
    bool ignored = std::any_of(ignore_.begin(), ignore_.end(),
                               [&](const std::string& g) { return glob_match(g, m.name); });
    if (!ignored) {
      sorted.insert(errors.size());
      errors.push_back("checkpoint tensor '" + m.name + "' is not used by " + arch +
                       " and not in its ignore list");
      kinds.unused.push_back(m.name);
    }
  }
  if (errors.empty()) return;
  if (mismatch) {
    for (size_t i = 0; i < errors.size(); ++i)
      if (!sorted.count(i)) kinds.other.push_back(errors[i]);
    *mismatch = std::move(kinds);
  }
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
  } else if (auto* l = std::get_if<StreamingLayoutSource>(&init.source)) {
    // Whole tensors through the kernels write() runs tile by tile: the same bytes.
    const LayoutInput in = layout_input(init, *l, cp);
    auto* out = static_cast<uint8_t*>(dst);
    std::optional<BlockQuantizer> q;
    if (l->layout.kind == MOBIUS_LAYOUT_BLOCK_QUANTIZED)
      q.emplace(l->layout, in.k, scale_dtype(init));
    std::vector<uint8_t> whole;
    uint64_t row0 = 0;  // the tensor's first row in the concatenated matrix
    // Interleaved rows (in.group g > 1): row r of tensor t of a group lands at g * r + t.
    const uint64_t group = std::max<uint64_t>(1, in.group);
    for (size_t t = 0; t < in.tensors.size(); ++t) {
      const TensorMeta* m = in.tensors[t];
      whole.resize(m->nbytes);
      cp->read(*m, whole.data());
      const uint64_t rows = static_cast<uint64_t>(m->shape[0]);
      const uint64_t stride = in.k * dtype_size(m->dtype);
      if (q) {
        const uint64_t first = group > 1 ? row0 - (t % group) * rows + t % group : row0;
        for (uint64_t r = 0; r < rows; ++r)
          q->row(whole.data() + r * stride, m->dtype, out + (first + r * group) * q->row_bytes());
      } else {
        const size_t ts = dtype_size(init.dtype);
        transpose_convert(whole.data(), stride, m->dtype, out + row0 * ts, in.n * ts, init.dtype,
                          rows, in.k);
      }
      row0 += rows;
    }
  } else {
    throw Error("[weights] initializer '" + init.name + "' has no source");
  }
}

}  // namespace mobius
