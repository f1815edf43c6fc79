// test_conv.cpp - the SDK's convolutional parts (mobius/sdk/conv.hpp), its LayerNorm and
// activations, and diffusers' AutoencoderKL (plugins/diffusers/vae.cpp):
// - each part built alone into a graph over a small random checkpoint, run in ONNX Runtime, and
//   compared with a plain float64 restatement of torch's semantics written here (GroupNorm, Conv2d
//   with symmetric and asymmetric padding, nearest upsampling, average pooling, the resnet block
//   with a time embedding, the mid-block attention with one and two heads, under both spellings
//   of its linears), in float32 and float16;
// - AutoencoderKL's config refusals, --no-weights builds of the published Stable Diffusion 1.5
//   and 2.1 VAE configs (both graphs through the ONNX checker, their I/O and parameter counts);
// - both graphs of the golden diffusers cases (tests/golden-diffusers) against diffusers' own
//   outputs, f32 and f16, for both operator sets, and a checkpoint with the deprecated attention
//   names.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "mobius/build.hpp"
#include "mobius/plugins.hpp"
#include "mobius/sdk/conv.hpp"
#include "mobius/sdk/half.hpp"
#include "mobius/sdk/plugin.hpp"
#include "onnx/onnx_pb.h"
#include "test_util.hpp"

using namespace mobius::test;
using mobius::DType;
using mobius::Dim;
using mobius::TensorType;
using mobius::Value;

namespace {

// ---------------------------------------------------------------------------------------------
// Building one SDK part into a graph, in-process (as a plugin's build is called).

using GraphFn = std::function<void(mobius::BuildContext&)>;

mobius_status build_callback(void* user, const mobius_host_api* host, mobius_context* ctx) {
  const auto* fn = static_cast<const GraphFn*>(user);
  return mobius::detail::run_guarded(host, ctx, MOBIUS_ERROR_KIND_PLUGIN, [&] {
    mobius::BuildContext bc(host, ctx);
    (*fn)(bc);
  });
}

// A root module holding one part under `name`, so its parameters are named `name`.<param>.
template <class M>
struct Holder : mobius::nn::Module {
  template <class... A>
  explicit Holder(const std::string& name, A&&... a) : m(add<M>(name, std::forward<A>(a)...)) {}
  M& m;
};

struct Rng {
  std::mt19937 gen;
  explicit Rng(unsigned seed) : gen(seed) {}
  std::vector<float> normal(size_t n, double scale = 1.0, double mean = 0.0) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(mean + scale * d(gen));
    return v;
  }
};

size_t numel(const std::vector<int64_t>& dims) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n;
}

// A checkpoint folder of float32 tensors.
struct Ckpt {
  std::vector<StTensor> tensors;
  std::map<std::string, std::vector<float>> values;
  Rng* rng;
  explicit Ckpt(Rng& r) : rng(&r) {}
  const std::vector<float>& add(const std::string& name, std::vector<int64_t> dims, double scale,
                                double mean = 0.0) {
    auto v = rng->normal(numel(dims), scale, mean);
    tensors.push_back(f32_tensor(name, dims, v));
    return values[name] = v;
  }
  void write(const fs::path& dir) const {
    fs::create_directories(dir);
    write_text(dir / "config.json", "{}");
    write_safetensors(dir / "model.safetensors", tensors);
  }
};

// Builds `fn`'s graph over the checkpoint in `dir` (dtype "f32" or "f16"), runs it in ONNX
// Runtime on x [dims] (float32; the graph casts to its dtype) and returns output "y".
std::vector<float> run_part(const TempDir& t, const fs::path& ckpt, const std::string& dtype,
                            const std::vector<int64_t>& dims, const std::vector<float>& x,
                            const GraphFn& fn, std::vector<int64_t>* out_dims = nullptr) {
  mobius::BuildOptions opts;
  opts.dtype = dtype;
  opts.runtime = "onnxruntime";
  opts.quiet = true;
  const fs::path out = t / ("out-" + dtype);
  fs::remove_all(out);
  {
    mobius::ModelPackage pkg = mobius::build_with("conv_part", &build_callback,
                                                  const_cast<GraphFn*>(&fn), opts, ckpt);
    pkg.save(out);
  }
  nlohmann::json in = {{"x", {{"type", "float32"}, {"dims", dims}, {"data", x}}}};
  write_text(t / "in.json", in.dump());
  RunResult o = run("node " + quote(env_or_empty("MOBIUS_SOURCE_ROOT") + "/tests/ort_run.mjs") + " " +
                        quote((out / "model.onnx").string()) + " " + quote((t / "in.json").string()),
                    false);
  INFO(o.output.substr(0, 2000));
  REQUIRE(o.status == 0);
  auto j = nlohmann::json::parse(o.output)["y"];
  if (out_dims) *out_dims = j["dims"].get<std::vector<int64_t>>();
  return j["data"].get<std::vector<float>>();
}

// The part's graph: input x float32 [dims with symbolic spatial sizes], cast to the build's
// activation dtype, the part, cast back to float32 as y.
GraphFn part_graph(const std::vector<int64_t>& dims,
                   const std::function<Value(mobius::Graph&, Value)>& part) {
  return [dims, part](mobius::BuildContext& ctx) {
    mobius::Graph& g = ctx.graph();
    std::vector<Dim> d{Dim("batch_size"), Dim(dims[1])};
    for (size_t i = 2; i < dims.size(); ++i) d.emplace_back("s" + std::to_string(i));
    Value x = g.input("x", TensorType(DType::Float, d));
    Value y = part(g, mobius::op::Cast(x, mobius::nn::activation_dtype(ctx)));
    g.output(mobius::op::Cast(y, DType::Float), "y");
  };
}

// ---------------------------------------------------------------------------------------------
// torch's semantics, restated in float64 over NCHW arrays.

struct Img {
  int64_t n = 0, c = 0, h = 0, w = 0;
  std::vector<double> v;
  Img() = default;
  Img(int64_t n_, int64_t c_, int64_t h_, int64_t w_)
      : n(n_), c(c_), h(h_), w(w_), v(static_cast<size_t>(n_ * c_ * h_ * w_), 0.0) {}
  Img(int64_t n_, int64_t c_, int64_t h_, int64_t w_, const std::vector<float>& f)
      : n(n_), c(c_), h(h_), w(w_), v(f.begin(), f.end()) {
    REQUIRE(v.size() == static_cast<size_t>(n * c * h * w));
  }
  double& at(int64_t a, int64_t b, int64_t i, int64_t j) {
    return v[static_cast<size_t>(((a * c + b) * h + i) * w + j)];
  }
  double at(int64_t a, int64_t b, int64_t i, int64_t j) const {
    return v[static_cast<size_t>(((a * c + b) * h + i) * w + j)];
  }
};

Img group_norm_ref(const Img& x, int64_t groups, double eps, const std::vector<float>& wt,
                   const std::vector<float>& b) {
  Img y = x;
  const int64_t cg = x.c / groups;
  for (int64_t a = 0; a < x.n; ++a)
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0, sq = 0;
      const double cnt = static_cast<double>(cg * x.h * x.w);
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (int64_t i = 0; i < x.h; ++i)
          for (int64_t j = 0; j < x.w; ++j) sum += x.at(a, ch, i, j);
      const double mean = sum / cnt;
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (int64_t i = 0; i < x.h; ++i)
          for (int64_t j = 0; j < x.w; ++j) sq += (x.at(a, ch, i, j) - mean) * (x.at(a, ch, i, j) - mean);
      const double inv = 1.0 / std::sqrt(sq / cnt + eps);
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (int64_t i = 0; i < x.h; ++i)
          for (int64_t j = 0; j < x.w; ++j)
            y.at(a, ch, i, j) = (x.at(a, ch, i, j) - mean) * inv * wt[static_cast<size_t>(ch)] +
                                b[static_cast<size_t>(ch)];
    }
  return y;
}

// pads: top, left, bottom, right.
Img conv_ref(const Img& x, const std::vector<float>& wt, const std::vector<float>* b, int64_t out,
             int64_t k, int64_t stride, std::array<int64_t, 4> pads) {
  const int64_t oh = (x.h + pads[0] + pads[2] - k) / stride + 1;
  const int64_t ow = (x.w + pads[1] + pads[3] - k) / stride + 1;
  Img y(x.n, out, oh, ow);
  for (int64_t a = 0; a < x.n; ++a)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = b ? (*b)[static_cast<size_t>(o)] : 0.0;
          for (int64_t ci = 0; ci < x.c; ++ci)
            for (int64_t ki = 0; ki < k; ++ki)
              for (int64_t kj = 0; kj < k; ++kj) {
                const int64_t si = i * stride + ki - pads[0], sj = j * stride + kj - pads[1];
                if (si < 0 || sj < 0 || si >= x.h || sj >= x.w) continue;
                s += wt[static_cast<size_t>(((o * x.c + ci) * k + ki) * k + kj)] * x.at(a, ci, si, sj);
              }
          y.at(a, o, i, j) = s;
        }
  return y;
}

// F.interpolate(mode="nearest") to oh x ow: source index floor(dst * (in / out)) in float32.
Img nearest_ref(const Img& x, int64_t oh, int64_t ow) {
  Img y(x.n, x.c, oh, ow);
  const float sh = static_cast<float>(x.h) / static_cast<float>(oh);
  const float sw = static_cast<float>(x.w) / static_cast<float>(ow);
  for (int64_t a = 0; a < x.n; ++a)
    for (int64_t ch = 0; ch < x.c; ++ch)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          auto si = std::min(static_cast<int64_t>(std::floor(static_cast<float>(i) * sh)), x.h - 1);
          auto sj = std::min(static_cast<int64_t>(std::floor(static_cast<float>(j) * sw)), x.w - 1);
          y.at(a, ch, i, j) = x.at(a, ch, si, sj);
        }
  return y;
}

Img silu_ref(Img x) {
  for (double& e : x.v) e = e / (1.0 + std::exp(-e));
  return x;
}

Img add_ref(Img a, const Img& b) {
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] += b.v[i];
  return a;
}

// y = x W^T + b over [rows, in] -> [rows, out].
std::vector<double> linear_ref(const std::vector<double>& x, size_t rows, size_t in,
                               const std::vector<float>& w, const std::vector<float>& b, size_t out) {
  std::vector<double> y(rows * out);
  for (size_t r = 0; r < rows; ++r)
    for (size_t o = 0; o < out; ++o) {
      double s = b[o];
      for (size_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// The mid-block attention (AttnProcessor): group norm, q/k/v over the positions, softmax(q k^T
// / sqrt(d)) v per head, to_out, plus the input, divided by `rescale`.
Img attention_ref(const Img& x, int64_t heads, int64_t groups, double eps,
                  const std::map<std::string, std::vector<float>>& p, const std::string& pre,
                  double rescale) {
  const auto C = static_cast<size_t>(x.c), L = static_cast<size_t>(x.h * x.w);
  const size_t d = C / static_cast<size_t>(heads);
  Img h = group_norm_ref(x, groups, eps, p.at(pre + "group_norm.weight"), p.at(pre + "group_norm.bias"));
  Img y = x;
  for (int64_t a = 0; a < x.n; ++a) {
    std::vector<double> seq(L * C);
    for (size_t l = 0; l < L; ++l)
      for (size_t c = 0; c < C; ++c)
        seq[l * C + c] = h.v[static_cast<size_t>(a) * C * L + c * L + l];
    auto q = linear_ref(seq, L, C, p.at(pre + "to_q.weight"), p.at(pre + "to_q.bias"), C);
    auto k = linear_ref(seq, L, C, p.at(pre + "to_k.weight"), p.at(pre + "to_k.bias"), C);
    auto v = linear_ref(seq, L, C, p.at(pre + "to_v.weight"), p.at(pre + "to_v.bias"), C);
    std::vector<double> o(L * C, 0.0);
    for (size_t hd = 0; hd < static_cast<size_t>(heads); ++hd)
      for (size_t i = 0; i < L; ++i) {
        std::vector<double> s(L);
        double mx = -1e300;
        for (size_t j = 0; j < L; ++j) {
          double dot = 0;
          for (size_t e = 0; e < d; ++e) dot += q[i * C + hd * d + e] * k[j * C + hd * d + e];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (size_t j = 0; j < L; ++j)
          for (size_t e = 0; e < d; ++e) o[i * C + hd * d + e] += s[j] / z * v[j * C + hd * d + e];
      }
    auto out = linear_ref(o, L, C, p.at(pre + "to_out.0.weight"), p.at(pre + "to_out.0.bias"), C);
    for (size_t l = 0; l < L; ++l)
      for (size_t c = 0; c < C; ++c) {
        const size_t at = static_cast<size_t>(a) * C * L + c * L + l;
        y.v[at] = (out[l * C + c] + x.v[at]) / rescale;
      }
  }
  return y;
}

// Largest |got - want| / (atol + rtol * |want|) (<= 1 passes), checking the sizes agree.
double worst(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol) {
  REQUIRE(got.size() == want.size());
  double r = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    r = std::max(r, std::abs(got[i] - want[i]) / (atol + rtol * std::abs(want[i])));
  }
  return r;
}
double worst(const std::vector<float>& got, const Img& want, double atol, double rtol) {
  return worst(got, want.v, atol, rtol);
}

struct Tol {
  double atol, rtol;
};
Tol tol(const std::string& dtype) { return dtype == "f16" ? Tol{2e-2, 1e-2} : Tol{1e-5, 1e-4}; }

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("conv: GroupNorm computes torch's group statistics, far from zero mean too") {
  for (const std::string dtype : {"f32", "f16"}) {
    for (int64_t groups : {1, 2, 4}) {
      CAPTURE(dtype);
      CAPTURE(groups);
      TempDir t;
      Rng rng(11 + static_cast<unsigned>(groups));
      Ckpt ck(rng);
      const int64_t C = 8;
      auto& w = ck.add("gn.weight", {C}, 0.5, 1.0);
      auto& b = ck.add("gn.bias", {C}, 0.3);
      ck.write(t / "ckpt");
      const std::vector<int64_t> dims{2, C, 3, 5};
      // An offset of 20 (float16: 4) over a spread of 2: a one-pass variance would lose it.
      auto x = rng.normal(numel(dims), 2.0, dtype == "f16" ? 4.0 : 20.0);
      Holder<mobius::nn::GroupNorm> m("gn", C, groups, 1e-6);
      auto y = run_part(t, t / "ckpt", dtype, dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                          return m.m.forward(g, v);
                        }));
      Img xi(2, C, 3, 5, x);
      if (dtype == "f16")
        for (double& e : xi.v) e = static_cast<double>(mobius::f16_to_float(mobius::float_to_f16(static_cast<float>(e))));
      CHECK(worst(y, group_norm_ref(xi, groups, 1e-6, w, b), tol(dtype).atol, tol(dtype).rtol) <= 1.0);
    }
  }
}

TEST_CASE("layers: LayerNorm in float32 or the input's dtype, and every activation, as torch computes them") {
  for (const std::string dtype : {"f32", "f16"}) {
    for (auto compute : {mobius::nn::LayerNorm::Compute::Float32, mobius::nn::LayerNorm::Compute::InputDtype}) {
      CAPTURE(dtype);
      TempDir t;
      Rng rng(5);
      Ckpt ck(rng);
      const int64_t D = 16;
      auto& w = ck.add("ln.weight", {D}, 0.5, 1.0);
      auto& b = ck.add("ln.bias", {D}, 0.3);
      ck.write(t / "ckpt");
      const std::vector<int64_t> dims{2, 3, D};
      auto x = rng.normal(numel(dims), 2.0, 3.0);
      Holder<mobius::nn::LayerNorm> m("ln", D, 1e-5, compute);
      auto y = run_part(t, t / "ckpt", dtype, dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                          return m.m.forward(g, v);
                        }));
      std::vector<double> ref(x.size());
      for (size_t r = 0; r < x.size() / D; ++r) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < D; ++j) mean += x[r * D + j];
        mean /= D;
        for (int64_t j = 0; j < D; ++j) var += (x[r * D + j] - mean) * (x[r * D + j] - mean);
        var /= D;
        for (int64_t j = 0; j < D; ++j)
          ref[r * D + j] = (x[r * D + j] - mean) / std::sqrt(var + 1e-5) * w[j] + b[j];
      }
      CHECK(worst(y, ref, tol(dtype).atol, tol(dtype).rtol) <= 1.0);
    }
  }
  // transformers' ACT2FN, restated in float64.
  const std::vector<std::pair<std::string, std::function<double(double)>>> acts = {
      {"silu", [](double v) { return v / (1 + std::exp(-v)); }},
      {"relu", [](double v) { return std::max(v, 0.0); }},
      {"gelu", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"gelu_new", [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }},
      {"quick_gelu", [](double v) { return v / (1 + std::exp(-1.702 * v)); }},
      {"gelu_10", [](double v) { return std::clamp(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), -10.0, 10.0); }},
      {"relu6", [](double v) { return std::clamp(v, 0.0, 6.0); }},
      {"relu2", [](double v) { return v > 0 ? v * v : 0.0; }},
      {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"tanh", [](double v) { return std::tanh(v); }},
      {"linear", [](double v) { return v; }},
      {"mish", [](double v) { return v * std::tanh(std::log1p(std::exp(v))); }},
  };
  for (const auto& [name, f] : acts) {
    CAPTURE(name);
    TempDir t;
    Rng rng(7);
    Ckpt ck(rng);
    ck.write(t / "ckpt");
    const std::vector<int64_t> dims{2, 40};
    auto x = rng.normal(numel(dims), 6.0);  // wide enough to reach gelu_10's and relu6's clips
    auto y = run_part(t, t / "ckpt", "f32", dims, x, part_graph(dims, [&](mobius::Graph&, Value v) {
                        return mobius::nn::activation(name, v);
                      }));
    std::vector<double> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = f(x[i]);
    CHECK(worst(y, ref, 1e-5, 1e-4) <= 1.0);
  }
}

TEST_CASE("conv: Conv2d with same, strided, asymmetric and 1x1 windows; Downsample2D") {
  struct Case {
    const char* what;
    int64_t in, out, k, stride, h, w;
    std::array<int64_t, 4> pads;
    bool downsample;  // through Downsample2D(padding 0): the (0, 1, 0, 1) pad
  };
  const Case cases[] = {
      {"3x3 same", 3, 5, 3, 1, 6, 7, {1, 1, 1, 1}, false},
      {"1x1", 4, 6, 1, 1, 5, 3, {0, 0, 0, 0}, false},
      {"3x3 stride 2 padding 1", 4, 4, 3, 2, 7, 6, {1, 1, 1, 1}, false},
      {"Downsample2D padding 0 even", 4, 4, 3, 2, 8, 6, {0, 0, 1, 1}, true},
      {"Downsample2D padding 0 odd", 4, 4, 3, 2, 7, 9, {0, 0, 1, 1}, true},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    Rng rng(7);
    Ckpt ck(rng);
    const std::string prefix = c.downsample ? "down.conv." : "conv.";
    auto& w = ck.add(prefix + "weight", {c.out, c.in, c.k, c.k}, 0.3);
    auto& b = ck.add(prefix + "bias", {c.out}, 0.1);
    ck.write(t / "ckpt");
    const std::vector<int64_t> dims{2, c.in, c.h, c.w};
    auto x = rng.normal(numel(dims));
    Holder<mobius::nn::Conv2d> conv("conv", c.in, c.out, c.k, c.stride, c.pads[0]);
    Holder<mobius::nn::Downsample2D> down("down", c.in, true, 0, c.out);
    std::vector<int64_t> got_dims;
    auto y = run_part(t, t / "ckpt", "f32", dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                        return c.downsample ? down.m.forward(g, v) : conv.m.forward(g, v);
                      }),
                      &got_dims);
    Img want = conv_ref(Img(2, c.in, c.h, c.w, x), w, &b, c.out, c.k, c.stride, c.pads);
    CHECK(got_dims == std::vector<int64_t>{want.n, want.c, want.h, want.w});
    CHECK(worst(y, want, 1e-5, 1e-4) <= 1.0);
  }
}

TEST_CASE("conv: Upsample2D is torch's nearest 2x (and to a given size); AvgPool downsampling") {
  TempDir t;
  Rng rng(3);
  Ckpt ck(rng);
  auto& w = ck.add("up.conv.weight", {3, 2, 3, 3}, 0.3);
  auto& b = ck.add("up.conv.bias", {3}, 0.1);
  ck.write(t / "ckpt");
  const std::vector<int64_t> dims{1, 2, 3, 4};
  auto x = rng.normal(numel(dims));
  Img xi(1, 2, 3, 4, x);
  {
    // Without a conv: the copy is exact.
    Holder<mobius::nn::Upsample2D> up("plain", 2, false);
    TempDir e;
    Ckpt none(rng);
    none.write(e / "ckpt");
    std::vector<int64_t> got_dims;
    auto y = run_part(e, e / "ckpt", "f32", dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                        return up.m.forward(g, v);
                      }),
                      &got_dims);
    CHECK(got_dims == std::vector<int64_t>{1, 2, 6, 8});
    CHECK(worst(y, nearest_ref(xi, 6, 8), 0, 0) == 0.0);
    // diffusers' output_size: 7 x 9 from 3 x 4.
    auto z = run_part(e, e / "ckpt", "f32", dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                        return up.m.forward(g, v, mobius::op::Ints(g, {7, 9}));
                      }),
                      &got_dims);
    CHECK(got_dims == std::vector<int64_t>{1, 2, 7, 9});
    CHECK(worst(z, nearest_ref(xi, 7, 9), 0, 0) == 0.0);
    // Average pooling (Downsample2D without a conv).
    Holder<mobius::nn::Downsample2D> pool("pool", 2, false, 1);
    const std::vector<int64_t> pd{1, 2, 4, 6};
    auto px = rng.normal(numel(pd));
    auto p = run_part(e, e / "ckpt", "f32", pd, px, part_graph(pd, [&](mobius::Graph& g, Value v) {
                        return pool.m.forward(g, v);
                      }),
                      &got_dims);
    Img pi(1, 2, 4, 6, px), pw(1, 2, 2, 3);
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
          pw.at(0, c, i, j) = (pi.at(0, c, 2 * i, 2 * j) + pi.at(0, c, 2 * i + 1, 2 * j) +
                               pi.at(0, c, 2 * i, 2 * j + 1) + pi.at(0, c, 2 * i + 1, 2 * j + 1)) / 4;
    CHECK(got_dims == std::vector<int64_t>{1, 2, 2, 3});
    CHECK(worst(p, pw, 1e-6, 1e-6) <= 1.0);
  }
  for (const std::string dtype : {"f32", "f16"}) {
    CAPTURE(dtype);
    Holder<mobius::nn::Upsample2D> up("up", 2, true, 3);
    auto y = run_part(t, t / "ckpt", dtype, dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                        return up.m.forward(g, v);
                      }));
    Img want = conv_ref(nearest_ref(xi, 6, 8), w, &b, 3, 3, 1, {1, 1, 1, 1});
    CHECK(worst(y, want, tol(dtype).atol, tol(dtype).rtol) <= 1.0);
  }
}

TEST_CASE("conv: ResnetBlock2D with a channel change, a time embedding and output_scale_factor") {
  const int64_t in = 4, out = 8, temb_ch = 6, groups = 2;
  const double osf = 2.0;
  TempDir t;
  Rng rng(5);
  Ckpt ck(rng);
  auto& n1w = ck.add("res.norm1.weight", {in}, 0.2, 1.0);
  auto& n1b = ck.add("res.norm1.bias", {in}, 0.2);
  auto& c1w = ck.add("res.conv1.weight", {out, in, 3, 3}, 0.2);
  auto& c1b = ck.add("res.conv1.bias", {out}, 0.1);
  auto& tw = ck.add("res.time_emb_proj.weight", {out, temb_ch}, 0.3);
  auto& tb = ck.add("res.time_emb_proj.bias", {out}, 0.1);
  auto& n2w = ck.add("res.norm2.weight", {out}, 0.2, 1.0);
  auto& n2b = ck.add("res.norm2.bias", {out}, 0.2);
  auto& c2w = ck.add("res.conv2.weight", {out, out, 3, 3}, 0.2);
  auto& c2b = ck.add("res.conv2.bias", {out}, 0.1);
  auto& sw = ck.add("res.conv_shortcut.weight", {out, in, 1, 1}, 0.3);
  auto& sb = ck.add("res.conv_shortcut.bias", {out}, 0.1);
  ck.write(t / "ckpt");
  const std::vector<int64_t> dims{2, in, 5, 6};
  auto x = rng.normal(numel(dims));
  const std::vector<float> temb = rng.normal(2 * temb_ch);
  // The reference.
  Img xi(2, in, 5, 6, x);
  Img h = conv_ref(silu_ref(group_norm_ref(xi, groups, 1e-5, n1w, n1b)), c1w, &c1b, out, 3, 1, {1, 1, 1, 1});
  std::vector<double> st(temb.begin(), temb.end());
  for (double& e : st) e = e / (1.0 + std::exp(-e));
  auto tp = linear_ref(st, 2, temb_ch, tw, tb, out);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < out; ++c)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 6; ++j) h.at(a, c, i, j) += tp[static_cast<size_t>(a * out + c)];
  h = conv_ref(silu_ref(group_norm_ref(h, groups, 1e-5, n2w, n2b)), c2w, &c2b, out, 3, 1, {1, 1, 1, 1});
  Img want = add_ref(conv_ref(xi, sw, &sb, out, 1, 1, {0, 0, 0, 0}), h);
  for (double& e : want.v) e /= osf;
  for (const std::string dtype : {"f32", "f16"}) {
    CAPTURE(dtype);
    Holder<mobius::nn::ResnetBlock2D> res("res", in, out, temb_ch, groups, 1e-5, osf);
    auto y = run_part(t, t / "ckpt", dtype, dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                        std::vector<double> tv(temb.begin(), temb.end());
                        Value te = mobius::op::Constant(g, v.dtype(), {2, temb_ch}, tv, "temb");
                        return res.m.forward(g, v, te);
                      }));
    CHECK(worst(y, want, tol(dtype).atol, tol(dtype).rtol) <= 1.0);
  }
  // Without a time embedding the block refuses to be called with none.
  Holder<mobius::nn::ResnetBlock2D> needs("needs", in, out, temb_ch, groups, 1e-5);
  TempDir e;
  CHECK_THROWS(run_part(e, t / "ckpt", "f32", dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                          return needs.m.forward(g, v);
                        })));
}

TEST_CASE("conv: SpatialSelfAttention, one and two heads, both spellings of its linears") {
  const int64_t C = 8, groups = 2;
  for (int64_t heads : {1, 2}) {
    for (bool legacy : {false, true}) {
      CAPTURE(heads);
      CAPTURE(legacy);
      TempDir t;
      Rng rng(17 + static_cast<unsigned>(heads));
      Ckpt ck(rng);
      std::map<std::string, std::vector<float>> p;
      p["attn.group_norm.weight"] = ck.add("attn.group_norm.weight", {C}, 0.2, 1.0);
      p["attn.group_norm.bias"] = ck.add("attn.group_norm.bias", {C}, 0.2);
      const std::pair<const char*, const char*> names[] = {
          {"to_q", "query"}, {"to_k", "key"}, {"to_v", "value"}, {"to_out.0", "proj_attn"}};
      for (const auto& [cur, old] : names) {
        const std::string stored = std::string("attn.") + (legacy ? old : cur);
        p[std::string("attn.") + cur + ".weight"] = ck.add(stored + ".weight", {C, C}, 0.4);
        p[std::string("attn.") + cur + ".bias"] = ck.add(stored + ".bias", {C}, 0.2);
      }
      ck.write(t / "ckpt");
      const std::vector<int64_t> dims{2, C, 3, 4};
      auto x = rng.normal(numel(dims));
      Img want = attention_ref(Img(2, C, 3, 4, x), heads, groups, 1e-6, p, "attn.", 1.5);
      for (const std::string dtype : {"f32", "f16"}) {
        CAPTURE(dtype);
        Holder<mobius::nn::SpatialSelfAttention> attn("attn", C, heads, groups, 1e-6, 1.5);
        auto y = run_part(t, t / "ckpt", dtype, dims, x, part_graph(dims, [&](mobius::Graph& g, Value v) {
                            return attn.m.forward(g, v);
                          }));
        CHECK(worst(y, want, tol(dtype).atol, tol(dtype).rtol) <= 1.0);
      }
    }
  }
}

TEST_CASE("conv: the parts name their faults") {
  CHECK_THROWS_WITH_AS(mobius::nn::GroupNorm(10, 4, 1e-6), doctest::Contains("4 groups"), mobius::sdk::Error);
  CHECK_THROWS_WITH_AS(mobius::nn::SpatialSelfAttention(10, 3, 2, 1e-6), doctest::Contains("3 heads"),
                       mobius::sdk::Error);
  CHECK_THROWS_AS(mobius::nn::Conv2d(0, 4, 3), mobius::sdk::Error);
  CHECK_THROWS_AS(mobius::nn::Upsample2D(4, false, 8), mobius::sdk::Error);
}

// ---------------------------------------------------------------------------------------------
// AutoencoderKL through the diffusers plugin.

namespace {

const char* const kSd15VaeConfig = R"({
  "_class_name": "AutoencoderKL",
  "_diffusers_version": "0.6.0",
  "act_fn": "silu",
  "block_out_channels": [128, 256, 512, 512],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "in_channels": 3,
  "latent_channels": 4,
  "layers_per_block": 2,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 512,
  "scaling_factor": 0.18215,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]
})";

const char* const kSd21VaeConfig = R"({
  "_class_name": "AutoencoderKL",
  "_diffusers_version": "0.10.0.dev0",
  "act_fn": "silu",
  "block_out_channels": [128, 256, 512, 512],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "in_channels": 3,
  "latent_channels": 4,
  "layers_per_block": 2,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 768,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]
})";

fs::path golden_diffusers(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-diffusers" / c;
}

// The build tree's plugins, loaded once (only the diffusers plugin is asked for).
struct Plugins {
  mobius::ModelRegistry registry;
  mobius::PluginHost host;
  Plugins() {
    std::vector<mobius::PluginSearchDir> dirs;
    for (const auto& p : mobius::default_plugin_dirs()) dirs.push_back({p, mobius::kPriorityDefault, "default"});
    host.load(dirs, registry, {"AutoencoderKL"});
  }
};
Plugins& plugins() {
  static Plugins p;
  return p;
}

struct VaeBuild {
  std::string dtype = "f32";
  std::string ops = "ort";
  std::string runtime = "onnxruntime";
  bool no_weights = false;
};

// Builds graph `graph` of the AutoencoderKL in `dir` into `out`; the failure's message, or "".
std::string build_vae(const fs::path& dir, const std::string& graph, const fs::path& out,
                      const VaeBuild& b = {}) {
  mobius::BuildOptions opts;
  opts.dtype = b.dtype;
  opts.ops = b.ops;
  opts.runtime = b.runtime;
  opts.graph = graph;
  opts.no_weights = b.no_weights;
  opts.quiet = true;
  REQUIRE(plugins().registry.contains("AutoencoderKL"));
  try {
    mobius::ModelPackage pkg = mobius::build(dir.string(), opts, plugins().registry);
    pkg.save(out);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A VAE folder with `config` (JSON text) and no weights.
fs::path config_only(const TempDir& t, const std::string& name, const std::string& config) {
  fs::path d = t / name;
  fs::create_directories(d);
  write_text(d / "config.json", config);
  return d;
}

onnx::ModelProto load(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream in(p, std::ios::binary);
  REQUIRE(m.ParseFromIstream(&in));
  return m;
}

std::vector<std::string> dims_of(const onnx::ValueInfoProto& v) {
  std::vector<std::string> d;
  for (const auto& x : v.type().tensor_type().shape().dim())
    d.push_back(x.has_dim_param() ? x.dim_param() : std::to_string(x.dim_value()));
  return d;
}

int64_t initializer_numel(const onnx::ModelProto& m, const std::string& prefix) {
  int64_t total = 0;
  for (const auto& i : m.graph().initializer()) {
    // Parameters keep their checkpoint names; the graph's own constants are named by scope.
    if (i.name().rfind(prefix, 0) != 0 || i.name().find('/') != std::string::npos) continue;
    int64_t n = 1;
    for (int64_t d : i.dims()) n *= d;
    total += n;
  }
  return total;
}

// Runs `model` on the reference input `<graph>.<input>` of the case and compares its output with
// `<graph>.<output>`: prints {"max_abs", "worst" (|diff| / (atol + rtol |expected|)), "bad"}.
const char* kVaeParity = R"JS(
import { createRequire } from 'module';
import fs from 'fs';
import path from 'path';
const require = createRequire(path.join(process.cwd(), 'noop.js'));
const ort = require(path.join(process.cwd(), 'node_modules', 'onnxruntime-node'));
const [model, ref, graph, input, output, atol, rtol] = process.argv.slice(2);
const b = fs.readFileSync(ref);
const n = Number(b.readBigUInt64LE(0));
const header = JSON.parse(b.subarray(8, 8 + n).toString());
const tensor = (name) => {
  const h = header[name];
  const [s, e] = h.data_offsets;
  const bytes = b.subarray(8 + n + s, 8 + n + e);
  return { dims: h.shape, data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)) };
};
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
const toHalf = (v) => {  // round to nearest even
  f32[0] = v;
  const x = u32[0], sign = (x >>> 16) & 0x8000, exp = (x >>> 23) & 0xff, mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = mant | 0x800000, shift = 14 - e;
    let h = m >>> shift;
    const rem = m & ((1 << shift) - 1), half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h += 1;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h += 1;
  return sign | h;
};
const fromHalf = (h) => {
  const s = h & 0x8000 ? -1 : 1, e = (h >>> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
};
const session = await ort.InferenceSession.create(model, { logSeverityLevel: 3 });
const meta = session.inputMetadata.find((m) => m.name === input);
const x = tensor(graph + '.' + input);
const feed = meta.type === 'float16'
  ? new ort.Tensor('float16', Uint16Array.from(x.data, toHalf), x.dims)
  : new ort.Tensor('float32', x.data, x.dims);
const out = (await session.run({ [input]: feed }))[output];
const want = tensor(graph + '.' + output);
if (JSON.stringify(out.dims) !== JSON.stringify(want.dims)) {
  console.log(JSON.stringify({ error: 'dims ' + JSON.stringify(out.dims) + ' != ' + JSON.stringify(want.dims) }));
  process.exit(0);
}
const got = out.type === 'float16' ? Array.from(out.data, fromHalf) : out.data;
let maxAbs = 0, worst = 0, bad = 0;
for (let i = 0; i < got.length; ++i) {
  const d = Math.abs(got[i] - want.data[i]);
  const r = d / (Number(atol) + Number(rtol) * Math.abs(want.data[i]));
  if (!(d <= 1e30)) { worst = Infinity; bad += 1; continue; }
  maxAbs = Math.max(maxAbs, d);
  worst = Math.max(worst, r);
  if (r > 1) bad += 1;
}
console.log(JSON.stringify({ max_abs: maxAbs, worst, bad, type: out.type }));
)JS";

nlohmann::json vae_parity(const TempDir& t, const fs::path& model, const std::string& c,
                          const std::string& graph, const std::string& dtype) {
  write_text(t / "vae_parity.mjs", kVaeParity);
  const bool enc = graph == "vae_encoder";
  const Tol tl = dtype == "f16" ? Tol{2e-2, 1e-2} : Tol{1e-4, 1e-3};
  RunResult r = run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node " +
                        quote((t / "vae_parity.mjs").string()) + " " + quote(model.string()) + " " +
                        quote((golden_diffusers(c) / "reference.safetensors").string()) + " " + graph +
                        " " + (enc ? "sample latent_dist" : "latent_sample sample") + " " +
                        std::to_string(tl.atol) + " " + std::to_string(tl.rtol),
                    false);
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.status == 0);
  auto j = nlohmann::json::parse(r.output);
  MESSAGE(c << " " << graph << " " << dtype << ": " << j.dump());
  return j;
}

}  // namespace

TEST_CASE("vae: configs AutoencoderKL cannot be built are refused naming the key") {
  TempDir t;
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json c = nlohmann::json::parse(kSd15VaeConfig);
    if (value.is_null()) c.erase(key);
    else c[key] = value;
    return c.dump();
  };
  struct Case {
    std::string config, graph, reason;
  };
  const std::vector<Case> cases = {
      {with("act_fn", "gelu"), "decoder", "'act_fn' is 'gelu'; AutoencoderKL is built with silu only"},
      {with("down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D", "AttnDownEncoderBlock2D",
                                 "DownEncoderBlock2D"}),
       "encoder", "'down_block_types' holds 'AttnDownEncoderBlock2D'"},
      {with("up_block_types", {"UpDecoderBlock2D"}), "decoder", "'up_block_types' has 1 entries"},
      {with("norm_num_groups", 24), "encoder", "'norm_num_groups' (24) must divide"},
      {with("block_out_channels", nlohmann::json::array()), "encoder", "'block_out_channels' has 0 entries"},
      {with("block_out_channels", {128, 256, -512, 512}), "decoder", "'block_out_channels' is -512"},
      {with("layers_per_block", 0), "decoder", "'layers_per_block' is 0"},
      {with("latent_channels", 1e9), "decoder", "'latent_channels' is 1000000000"},
      {with("use_quant_conv", "yes"), "encoder", "'use_quant_conv' must be true or false"},
      {with("norm_type", "spatial"), "decoder", "'norm_type' is 'spatial'"},
  };
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.reason);
    fs::path d = config_only(t, "c" + std::to_string(i++), c.config);
    std::string err = build_vae(d, c.graph, t / "out", {"f32", "ort", "onnxruntime", true});
    CHECK(err.find("[config]") != std::string::npos);
    CHECK(err.find(c.reason) != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
  }
  // Runtimes that cannot run it, when asked for; the default runtime lays the folder out for
  // ONNX Runtime.
  fs::path d = config_only(t, "sd15", kSd15VaeConfig);
  std::string genai = build_vae(d, "decoder", t / "out", {"f32", "ort", "ort-genai", true});
  CHECK(genai.find("AutoencoderKL is a Stable Diffusion VAE (task image-vae), which ONNX Runtime GenAI does not run") != std::string::npos);
  std::string tjs = build_vae(d, "decoder", t / "out", {"f32", "ort", "transformers.js", true});
  CHECK(tjs.find("AutoencoderKL is a Stable Diffusion VAE (task image-vae), which transformers.js does not run") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
  CHECK(build_vae(d, "decoder", t / "default", {"f32", "ort", "", true}) == "");
  CHECK(fs::exists(t / "default" / "model.onnx"));
  CHECK_FALSE(fs::exists(t / "default" / "genai_config.json"));
  // A graph it does not have.
  CHECK(build_vae(d, "unet", t / "out", {"f32", "ort", "onnxruntime", true}).find("encoder, decoder") !=
        std::string::npos);
}

TEST_CASE("vae: Stable Diffusion 1.5's and 2.1's VAE configs build both graphs (--no-weights)") {
  struct Case {
    const char* name;
    const char* config;
  };
  for (const Case& c : {Case{"sd15", kSd15VaeConfig}, Case{"sd21", kSd21VaeConfig}}) {
    CAPTURE(c.name);
    TempDir t;
    fs::path d = config_only(t, c.name, c.config);
    int64_t params = 0;
    for (const std::string graph : {"encoder", "decoder"}) {
      CAPTURE(graph);
      for (const std::string dtype : {"f32", "f16"}) {
        CAPTURE(dtype);
        const fs::path out = t / (graph + "-" + dtype);
        // save() runs the ONNX checker on the graph.
        REQUIRE(build_vae(d, graph, out, {dtype, "ort", "onnxruntime", true}) == "");
        onnx::ModelProto m = load(out / "model.onnx");
        const auto& g = m.graph();
        REQUIRE(g.input_size() == 1);
        REQUIRE(g.output_size() == 1);
        const int32_t et = dtype == "f16" ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
        CHECK(g.input(0).type().tensor_type().elem_type() == et);
        CHECK(g.output(0).type().tensor_type().elem_type() == et);
        int convs = 0, resizes = 0;
        for (const auto& n : g.node()) {
          convs += n.op_type() == "Conv";
          resizes += n.op_type() == "Resize";
          CHECK(n.domain().empty());  // standard operators only
        }
        if (graph == "encoder") {
          CHECK(g.input(0).name() == "sample");
          CHECK(dims_of(g.input(0)) == std::vector<std::string>{"batch_size", "3", "height", "width"});
          CHECK(g.output(0).name() == "latent_dist");
          CHECK(dims_of(g.output(0)) == std::vector<std::string>{"batch_size", "8", "latent_height", "latent_width"});
          // conv_in, 4 blocks of 2 resnets (2 convs, and a shortcut where the channels grow: 128
          // -> 256 -> 512), 3 downsamplers, the mid block's 2 resnets, conv_out, quant_conv.
          CHECK(convs == 1 + 16 + 2 + 3 + 4 + 1 + 1);
          CHECK(resizes == 0);
          CHECK(initializer_numel(m, "decoder.") == 0);
          if (dtype == "f32") params += initializer_numel(m, "encoder.") + initializer_numel(m, "quant_conv.");
        } else {
          CHECK(g.input(0).name() == "latent_sample");
          CHECK(dims_of(g.input(0)) == std::vector<std::string>{"batch_size", "4", "latent_height", "latent_width"});
          CHECK(g.output(0).name() == "sample");
          CHECK(dims_of(g.output(0)) == std::vector<std::string>{"batch_size", "3", "height", "width"});
          // post_quant_conv, conv_in, mid block's 4, 4 blocks of 3 resnets (24 convs, shortcuts
          // where the channels shrink: 512 -> 256 -> 128), 3 upsamplers, conv_out.
          CHECK(convs == 1 + 1 + 4 + 24 + 2 + 3 + 1);
          CHECK(resizes == 3);
          CHECK(initializer_numel(m, "encoder.") == 0);
          if (dtype == "f32") params += initializer_numel(m, "decoder.") + initializer_numel(m, "post_quant_conv.");
        }
      }
    }
    // diffusers' AutoencoderKL of these configs: 83,653,863 parameters.
    CHECK(params == 83653863);
  }
}

TEST_CASE("vae: both graphs of the golden diffusers cases match diffusers (f32, f16; both op sets)") {
  for (const std::string c : {"sd15-tiny", "sd2-tiny-linear-proj"}) {
    for (const std::string ops : {"ort", "standard"}) {
      for (const std::string dtype : {"f32", "f16"}) {
        CAPTURE(c);
        CAPTURE(ops);
        CAPTURE(dtype);
        TempDir t;
        for (const std::string graph : {"encoder", "decoder"}) {
          CAPTURE(graph);
          const fs::path out = t / graph;
          std::string err = build_vae(golden_diffusers(c) / "vae", graph, out, {dtype, ops, "onnxruntime", false});
          INFO(err);
          REQUIRE(err.empty());
          auto j = vae_parity(t, out / "model.onnx", c, "vae_" + graph, dtype);
          REQUIRE_FALSE(j.contains("error"));
          CHECK(j["bad"] == 0);
          CHECK(j["worst"].get<double>() <= 1.0);
          CHECK(j["type"] == (dtype == "f16" ? "float16" : "float32"));
        }
      }
    }
  }
}

TEST_CASE("vae: a checkpoint with the deprecated attention names (query/key/value/proj_attn)") {
  TempDir t;
  const fs::path src = golden_diffusers("sd15-tiny") / "vae";
  fs::create_directories(t / "vae");
  fs::copy_file(src / "config.json", t / "vae" / "config.json");
  // The same weights under the old names.
  std::ifstream in(src / "diffusion_pytorch_model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::vector<StTensor> ts;
  int renamed = 0;
  for (auto& [name, h] : header.items()) {
    if (name == "__metadata__") continue;
    std::string nn = name;
    for (const auto& [cur, old] : std::vector<std::pair<std::string, std::string>>{
             {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}})
      if (auto p = nn.find(cur); p != std::string::npos) {
        nn.replace(p, cur.size(), old);
        ++renamed;
      }
    const auto s = h["data_offsets"][0].get<size_t>(), e = h["data_offsets"][1].get<size_t>();
    ts.push_back({nn, h["dtype"].get<std::string>(), h["shape"].get<std::vector<int64_t>>(),
                  std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(8 + n + s),
                                       bytes.begin() + static_cast<std::ptrdiff_t>(8 + n + e))});
  }
  CHECK(renamed == 16);  // 4 linears x weight and bias x encoder and decoder
  write_safetensors(t / "vae" / "diffusion_pytorch_model.safetensors", ts);
  for (const std::string graph : {"encoder", "decoder"}) {
    CAPTURE(graph);
    std::string err = build_vae(t / "vae", graph, t / graph);
    INFO(err);
    REQUIRE(err.empty());
    auto j = vae_parity(t, t / graph / "model.onnx", "sd15-tiny", "vae_" + graph, "f32");
    CHECK(j["bad"] == 0);
  }
}

TEST_CASE("vae: int8 quantizes the attention linears only and stays close") {
  TempDir t;
  for (const std::string graph : {"encoder", "decoder"}) {
    CAPTURE(graph);
    std::string err = build_vae(golden_diffusers("sd15-tiny") / "vae", graph, t / graph, {"int8", "ort", "onnxruntime", false});
    INFO(err);
    REQUIRE(err.empty());
    onnx::ModelProto m = load(t / graph / "model.onnx");
    int nbits = 0, matmul = 0;
    for (const auto& node : m.graph().node()) {
      nbits += node.op_type() == "MatMulNBits";
      matmul += node.op_type() == "MatMul";
    }
    CHECK(nbits == 2);   // the packed q/k/v and to_out
    CHECK(matmul == 2);  // q k^T and probs v
    auto j = vae_parity(t, t / graph / "model.onnx", "sd15-tiny", "vae_" + graph, "f32");
    CHECK(j["max_abs"].get<double>() < 0.05);
  }
  // Standard ONNX has no MatMulNBits.
  std::string err = build_vae(golden_diffusers("sd15-tiny") / "vae", "decoder", t / "std", {"int4", "standard", "onnxruntime", false});
  CHECK(err.find("MatMulNBits") != std::string::npos);
}

TEST_CASE("vae: the CLI builds a VAE folder into encoder/ and decoder/, laid out for ONNX Runtime") {
  // No --runtime: the default cannot be ONNX Runtime GenAI for a VAE, so the folder is for ONNX
  // Runtime alone (no genai_config.json).
  TempDir t;
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " +
                    quote((golden_diffusers("sd15-tiny") / "vae").string()) + " " + quote((t / "out").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const std::string graph : {"encoder", "decoder"}) {
    CAPTURE(graph);
    REQUIRE(fs::exists(t / "out" / graph / "model.onnx"));
    CHECK_FALSE(fs::exists(t / "out" / graph / "genai_config.json"));
    auto j = vae_parity(t, t / "out" / graph / "model.onnx", "sd15-tiny", "vae_" + graph, "f32");
    CHECK(j["bad"] == 0);
  }
  // Asked for explicitly, GenAI is refused and nothing is written.
  RunResult g = run(quote(env_or_empty("MOBIUS_CLI")) + " build -q --runtime ort-genai --model " +
                    quote((golden_diffusers("sd15-tiny") / "vae").string()) + " " + quote((t / "genai").string()));
  CHECK(g.status != 0);
  CHECK(g.output.find("AutoencoderKL is a Stable Diffusion VAE (task image-vae), which ONNX Runtime GenAI does not run") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "genai"));
}
