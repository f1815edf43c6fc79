// nn.cpp - the decoder components of nn.hpp, written to transformers' eager semantics.
#include "mobius/sdk/nn.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <iterator>
#include <set>

namespace mobius::nn {

using namespace mobius::op;

DType activation_dtype(BuildContext& ctx) {
  DType w = ctx.weight_dtype();
  return w == DType::BFloat16 ? DType::Float : w;
}

// ---------------------------------------------------------------------------------------------
// Shared inputs: masks and rope tables, built once per graph.

SharedInputs::SharedInputs(Graph& g, Value ids, Value mask, Value pos, DType a)
    : input_ids(ids), attention_mask(mask), position_ids(pos), act(a), g_(g) {}

Value SharedInputs::visible(int64_t window) {
  std::string key = "visible/" + std::to_string(window);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value total = DimOf(attention_mask, 1);  // [1]
  Value seq = DimOf(input_ids, 1);         // [1]
  Value past = Sub(total, seq);
  Value t0 = Squeeze(total, {0});
  Value kpos = Range(Int(g_, 0), t0, Int(g_, 1));                    // key slots [total]
  Value qpos = Range(Squeeze(past, {0}), t0, Int(g_, 1));            // query slots [seq]
  Value k2 = Unsqueeze(kpos, {0});                                   // [1, total]
  Value q2 = Unsqueeze(qpos, {1});                                   // [seq, 1]
  Value allowed = LessOrEqual(k2, q2);                               // causal
  if (window > 0) allowed = And(allowed, Greater(k2, Sub(q2, Int(g_, window))));
  Value real_keys = Unsqueeze(Cast(attention_mask, DType::Bool), {1, 2});  // [batch, 1, 1, total]
  Value v = And(Unsqueeze(allowed, {0, 1}), real_keys);              // [batch, 1, seq, total]
  cache_[key] = v;
  return v;
}

Value SharedInputs::attention_bias(int64_t window, int64_t rep) {
  std::string key = "bias/" + std::to_string(window) + "/" + std::to_string(rep);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value vis = visible(window);
  ScopeGuard s(g_, "mask");
  // transformers adds finfo(float32).min at hidden slots (not -inf), so fully padded query rows
  // stay finite.
  Value bias = Where(vis, Scalar(g_, DType::Float, 0.0), Scalar(g_, DType::Float, -FLT_MAX));
  if (rep > 1) {
    TensorType t = bias.type();
    if (t.rank_known) t.dims[2] = Dim();
    bias = Tile(bias, Ints(g_, {1, 1, rep, 1}), t);
  }
  cache_[key] = bias;
  return bias;
}

Value SharedInputs::query_is_real() {
  std::string key = "query_is_real";
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value seq = DimOf(input_ids, 1);
  Value m = Slice(attention_mask, Neg(seq), Ints(g_, {INT64_MAX}), {1});  // last seq columns
  Value v = Cast(m, DType::Bool);
  cache_[key] = v;
  return v;
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t dim, double* attention_scaling) {
  // Computed in float32 arithmetic, the way transformers' float32 tensors compute it.
  const auto n = static_cast<size_t>(dim / 2);
  std::vector<float> inv(n);
  const auto base = static_cast<float>(rope.theta);
  for (size_t i = 0; i < n; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(base, e);
  }
  double scaling = 1.0;
  if (rope.type == "linear") {
    for (float& f : inv) f /= static_cast<float>(rope.factor);
  } else if (rope.type == "llama3") {
    const auto factor = static_cast<float>(rope.factor);
    const auto low = static_cast<float>(rope.low_freq_factor);
    const auto high = static_cast<float>(rope.high_freq_factor);
    const auto old_ctx = static_cast<float>(rope.original_max_position_embeddings);
    const float low_wavelen = old_ctx / low;
    const float high_wavelen = old_ctx / high;
    const auto two_pi = static_cast<float>(2 * M_PI);
    const auto span = static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
    for (float& f : inv) {
      float wavelen = two_pi / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      float smooth = (old_ctx / wavelen - low) / span;
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
  } else if (rope.type == "yarn") {
    auto get_mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    double factor = rope.factor;
    if (rope.attention_factor > 0) {
      scaling = rope.attention_factor;
    } else if (rope.mscale != 0 && rope.mscale_all_dim != 0) {
      scaling = get_mscale(factor, rope.mscale) / get_mscale(factor, rope.mscale_all_dim);
    } else {
      scaling = get_mscale(factor, 1.0);
    }
    double max_pos = static_cast<double>(rope.original_max_position_embeddings);
    auto correction_dim = [&](double rot) {
      return (static_cast<double>(dim) * std::log(max_pos / (rot * 2 * M_PI))) / (2 * std::log(rope.theta));
    };
    double lo = correction_dim(rope.beta_fast), hi = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(dim - 1));
    if (lo == hi) hi += 0.001;
    for (size_t i = 0; i < n; ++i) {
      float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
      float extrap = 1.0f / pos_freq;
      float interp = 1.0f / (static_cast<float>(factor) * pos_freq);
      auto ramp = static_cast<float>(std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0));
      float extrap_factor = 1.0f - ramp;
      inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
  }
  // "dynamic" (NTK) equals the default inside max_position_embeddings, which the exported
  // graph assumes; "default" needs nothing more.
  if (attention_scaling) *attention_scaling = scaling;
  return inv;
}

std::pair<Value, Value> SharedInputs::rope(const RopeConfig& rope, int64_t head_dim) {
  auto rot = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  rot -= rot % 2;
  nlohmann::json j = rope;
  std::string key = "rope/" + j.dump() + "/" + std::to_string(rot);
  if (auto it = cache_.find(key + "/cos"); it != cache_.end()) return {it->second, cache_.at(key + "/sin")};
  ScopeGuard s(g_, "rope");
  double scaling = 1.0;
  std::vector<float> inv = rope_inv_freq(rope, rot, &scaling);
  std::vector<double> invd(inv.begin(), inv.end());
  Value inv_v = Constant(g_, DType::Float, {static_cast<int64_t>(inv.size())}, invd, "inv_freq");
  Value pos = Unsqueeze(Cast(position_ids, DType::Float), {2});  // [batch, seq, 1]
  Value freqs = Mul(pos, inv_v);                                   // [batch, seq, rot/2]
  Value emb = rope.interleaved ? freqs : Concat({freqs, freqs}, -1);
  Value cos = Cos(emb), sin = Sin(emb);
  if (scaling != 1.0) {
    cos = Mul(cos, Scalar(g_, DType::Float, scaling));
    sin = Mul(sin, Scalar(g_, DType::Float, scaling));
  }
  cos = Unsqueeze(Cast(cos, act), {1});  // [batch, 1, seq, rot]
  sin = Unsqueeze(Cast(sin, act), {1});
  cache_[key + "/cos"] = cos;
  cache_[key + "/sin"] = sin;
  return {cos, sin};
}

Value apply_rope(Value x, Value cos, Value sin, bool interleaved) {
  const Dim& rd = cos.dim(-1);
  const Dim& xd = x.dim(-1);
  if (!rd.is_static() || !xd.is_static()) throw Error("[rope] head and rotary dims must be static");
  // An interleaved table holds one angle per rotated pair, so it is half the rotary width.
  int64_t rot = interleaved ? 2 * rd.size : rd.size, d = xd.size;
  Value xr = rot < d ? Slice(x, {0}, {rot}, {-1}) : x;
  Value out;
  if (!interleaved) {
    Value x1 = Slice(xr, {0}, {rot / 2}, {-1});
    Value x2 = Slice(xr, {rot / 2}, {rot}, {-1});
    out = Add(Mul(xr, cos), Mul(Concat({Neg(x2), x1}, -1), sin));
  } else {
    // Adjacent pairs (x0, x1) rotate together; cos/sin hold one angle per pair.
    Value pairs = Reshape(xr, {0, 0, 0, rot / 2, 2});
    auto parts = Split(pairs, {1, 1}, -1);
    Value a = Squeeze(parts[0], {-1}), b = Squeeze(parts[1], {-1});
    Value ra = Sub(Mul(a, cos), Mul(b, sin));
    Value rb = Add(Mul(b, cos), Mul(a, sin));
    out = Reshape(Concat({Unsqueeze(ra, {-1}), Unsqueeze(rb, {-1})}, -1), {0, 0, 0, rot});
  }
  if (rot < d) out = Concat({out, Slice(x, {rot}, {d}, {-1})}, -1);
  return out;
}

namespace {
const char* const kActivations[] = {"silu", "swish", "relu", "gelu", "gelu_pytorch_tanh",
                                    "gelu_new", "gelu_fast", "gelu_tanh"};
}  // namespace

void check_activation(const ConfigReader& r, const std::string& key, const std::string& name) {
  for (const char* a : kActivations)
    if (name == a) return;
  std::string known;
  for (const char* a : kActivations) known += std::string(known.empty() ? "" : ", ") + a;
  r.fail(key, "has unknown activation '" + name + "' (known: " + known + ")");
}

Value activation(const std::string& name, Value x) {
  if (name == "silu" || name == "swish") return Mul(x, Sigmoid(x));
  if (name == "relu") return Relu(x);
  if (name == "gelu") {
    Value inner = Erf(Mul(x, ScalarLike(x, M_SQRT1_2)));
    return Mul(Mul(x, ScalarLike(x, 0.5)), Add(inner, ScalarLike(x, 1.0)));
  }
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast" ||
      name == "gelu_tanh") {
    Value x3 = Mul(Mul(x, x), x);
    Value inner = Mul(ScalarLike(x, std::sqrt(2.0 / M_PI)), Add(x, Mul(ScalarLike(x, 0.044715), x3)));
    return Mul(Mul(x, ScalarLike(x, 0.5)), Add(Tanh(inner), ScalarLike(x, 1.0)));
  }
  throw Error("[activation] unknown hidden_act '" + name +
              "' (known: silu, swish, relu, gelu, gelu_pytorch_tanh, gelu_new, gelu_fast)");
}

// ---------------------------------------------------------------------------------------------
// Layers

Linear::Linear(int64_t in, int64_t out, bool bias) : in_features(in), out_features(out), has_bias(bias) {
  declare("weight", {out, in});
  if (bias) declare("bias", {out});
}

Value Linear::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value w = Cast(param(g, "weight"), x.dtype());
  Value y = MatMul(x, Transpose(w, {1, 0}));
  if (has_bias) y = Add(y, Cast(param(g, "bias"), x.dtype()));
  return y;
}

Embedding::Embedding(int64_t v, int64_t d) : vocab(v), dim(d) { declare("weight", {v, d}); }

Value Embedding::forward(Graph& g, Value ids, DType act) const {
  ScopeGuard s(g, path());
  return Cast(Gather(param(g, "weight"), ids, 0), act);
}

RMSNorm::RMSNorm(int64_t d, double e) : dim(d), eps(e) { declare("weight", {d}); }

Value RMSNorm::normalized_f32(Graph& g, Value x) const {
  (void)g;
  Value xf = Cast(x, DType::Float);
  Value var = ReduceMean(Mul(xf, xf), {-1}, true);
  return Mul(xf, Reciprocal(Sqrt(Add(var, Scalar(x.graph(), DType::Float, eps)))));
}

Value RMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value n = Cast(normalized_f32(g, x), x.dtype());
  return Mul(Cast(param(g, "weight"), x.dtype()), n);
}

Value OffsetRMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value n = normalized_f32(g, x);
  Value w = Add(Cast(param(g, "weight"), DType::Float), Scalar(g, DType::Float, 1.0));
  return Cast(Mul(n, w), x.dtype());
}

NormFactory rms_norm_factory() {
  return [](int64_t d, double e) { return std::make_unique<RMSNorm>(d, e); };
}
NormFactory offset_rms_norm_factory() {
  return [](int64_t d, double e) { return std::make_unique<OffsetRMSNorm>(d, e); };
}

Attention::Attention(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm)
    : heads(cfg.num_attention_heads),
      kv_heads(cfg.num_key_value_heads),
      head_dim(cfg.head_dim),
      hidden(cfg.hidden_size),
      window(cfg.is_sliding(layer) ? cfg.sliding_window : 0),
      scale(cfg.attention_multiplier > 0 ? cfg.attention_multiplier
                                         : 1.0 / std::sqrt(static_cast<double>(cfg.head_dim))),
      softcap(cfg.attn_logit_softcapping),
      qk_norm(cfg.qk_norm),
      rope(cfg.has_sliding_rope && cfg.is_sliding(layer) ? cfg.sliding_rope : cfg.rope) {
  q_proj = &add<Linear>("q_proj", hidden, heads * head_dim, cfg.qkv_bias);
  k_proj = &add<Linear>("k_proj", hidden, kv_heads * head_dim, cfg.qkv_bias);
  v_proj = &add<Linear>("v_proj", hidden, kv_heads * head_dim, cfg.qkv_bias);
  o_proj = &add<Linear>("o_proj", heads * head_dim, hidden, cfg.o_bias);
  if (qk_norm == "head" || qk_norm == "full") {
    bool full = qk_norm == "full";
    auto qn = norm(full ? heads * head_dim : head_dim, cfg.rms_norm_eps);
    auto kn = norm(full ? kv_heads * head_dim : head_dim, cfg.rms_norm_eps);
    q_norm = qn.get();
    k_norm = kn.get();
    attach("q_norm", std::move(qn));
    attach("k_norm", std::move(kn));
  } else if (qk_norm != "none") {
    throw Error("[attention] unknown qk_norm '" + qk_norm + "'");
  }
}

std::vector<CacheEntry> Attention::cache_entries(DType act) const {
  std::vector<Dim> dims{Dim("batch_size"), Dim(kv_heads), Dim("past_sequence_length"), Dim(head_dim)};
  return {{"key", act, dims}, {"value", act, dims}};
}

Value Attention::forward(Graph& g, Value x, SharedInputs& shared,
                         const std::map<std::string, Value>& past,
                         std::map<std::string, Value>& present) const {
  ScopeGuard s(g, path());
  Value q = q_proj->forward(g, x), k = k_proj->forward(g, x), v = v_proj->forward(g, x);
  if (qk_norm == "full") {
    q = q_norm->forward(g, q);
    k = k_norm->forward(g, k);
  }
  q = Reshape(q, {0, 0, heads, head_dim});
  k = Reshape(k, {0, 0, kv_heads, head_dim});
  v = Reshape(v, {0, 0, kv_heads, head_dim});
  if (qk_norm == "head") {
    q = q_norm->forward(g, q);
    k = k_norm->forward(g, k);
  }
  q = Transpose(q, {0, 2, 1, 3});  // [batch, heads, seq, head_dim]
  k = Transpose(k, {0, 2, 1, 3});
  v = Transpose(v, {0, 2, 1, 3});
  auto [cos, sin] = shared.rope(rope, head_dim);
  q = apply_rope(q, cos, sin, rope.interleaved);
  k = apply_rope(k, cos, sin, rope.interleaved);
  k = Concat({past.at("key"), k}, 2);  // [batch, kv_heads, total, head_dim]
  v = Concat({past.at("value"), v}, 2);
  present["key"] = k;
  present["value"] = v;

  // Grouped queries: the `rep` query heads of one kv head become rows of one matmul, so K and V
  // are never repeated ([batch, kv_heads, rep*seq, head_dim]).
  const int64_t rep = heads / kv_heads;
  Value qg = rep > 1 ? Reshape(q, {0, kv_heads, -1, head_dim}) : q;
  Value scores = Mul(MatMul(qg, Transpose(k, {0, 1, 3, 2})), ScalarLike(qg, scale));
  scores = Cast(scores, DType::Float);
  if (softcap > 0) scores = Mul(Tanh(Div(scores, Scalar(g, DType::Float, softcap))), Scalar(g, DType::Float, softcap));
  scores = Add(scores, shared.attention_bias(window, rep));
  Value probs = Cast(Softmax(scores, -1), x.dtype());
  Value o = MatMul(probs, v);  // [batch, kv_heads, rep*seq, head_dim]
  if (rep > 1) o = Reshape(o, {0, heads, -1, head_dim});
  o = Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});
  return o_proj->forward(g, o);
}

GatedMLP::GatedMLP(int64_t hidden, int64_t inter, bool bias, std::string a) : act(std::move(a)) {
  gate_proj = &add<Linear>("gate_proj", hidden, inter, bias);
  up_proj = &add<Linear>("up_proj", hidden, inter, bias);
  down_proj = &add<Linear>("down_proj", inter, hidden, bias);
}

Value GatedMLP::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value h = Mul(activation(act, gate_proj->forward(g, x)), up_proj->forward(g, x));
  return down_proj->forward(g, h);
}

DecoderLayer::DecoderLayer(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm) {
  auto in = norm(cfg.hidden_size, cfg.rms_norm_eps);
  input_layernorm = in.get();
  attach("input_layernorm", std::move(in));
  self_attn = &add<Attention>("self_attn", cfg, layer, norm);
  auto post = norm(cfg.hidden_size, cfg.rms_norm_eps);
  post_attention_layernorm = post.get();
  attach("post_attention_layernorm", std::move(post));
  mlp = &add<GatedMLP>("mlp", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias, cfg.hidden_act);
}

std::vector<CacheEntry> DecoderLayer::cache_entries(DType act) const {
  return self_attn->cache_entries(act);
}

Value DecoderLayer::forward(Graph& g, Value h, SharedInputs& shared,
                            const std::map<std::string, Value>& past,
                            std::map<std::string, Value>& present) const {
  ScopeGuard s(g, path());
  auto scaled = [&](Value v) {
    return residual_multiplier == 1.0 ? v : Mul(v, ScalarLike(v, residual_multiplier));
  };
  Value a = self_attn->forward(g, input_layernorm->forward(g, h), shared, past, present);
  h = Add(h, scaled(a));
  Value m = mlp->forward(g, post_attention_layernorm->forward(g, h));
  return Add(h, scaled(m));
}

GraniteDecoderLayer::GraniteDecoderLayer(const ArchitectureConfig& cfg, int64_t layer)
    : DecoderLayer(cfg, layer) {
  residual_multiplier = cfg.residual_multiplier;
}

PostNormDecoderLayer::PostNormDecoderLayer(const ArchitectureConfig& cfg, int64_t layer) {
  self_attn = &add<Attention>("self_attn", cfg, layer, rms_norm_factory());
  post_attention_layernorm = &add<RMSNorm>("post_attention_layernorm", cfg.hidden_size, cfg.rms_norm_eps);
  mlp = &add<GatedMLP>("mlp", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias, cfg.hidden_act);
  post_feedforward_layernorm = &add<RMSNorm>("post_feedforward_layernorm", cfg.hidden_size, cfg.rms_norm_eps);
}

std::vector<CacheEntry> PostNormDecoderLayer::cache_entries(DType act) const {
  return self_attn->cache_entries(act);
}

Value PostNormDecoderLayer::forward(Graph& g, Value h, SharedInputs& shared,
                                    const std::map<std::string, Value>& past,
                                    std::map<std::string, Value>& present) const {
  ScopeGuard s(g, path());
  h = Add(h, post_attention_layernorm->forward(g, self_attn->forward(g, h, shared, past, present)));
  return Add(h, post_feedforward_layernorm->forward(g, mlp->forward(g, h)));
}

SandwichDecoderLayer::SandwichDecoderLayer(const ArchitectureConfig& cfg, int64_t layer,
                                           const NormFactory& norm) {
  auto add_norm = [&](const char* name) {
    auto n = norm(cfg.hidden_size, cfg.rms_norm_eps);
    const RMSNorm* p = n.get();
    attach(name, std::move(n));
    return p;
  };
  input_layernorm = add_norm("input_layernorm");
  self_attn = &add<Attention>("self_attn", cfg, layer, norm);
  post_attention_layernorm = add_norm("post_attention_layernorm");
  pre_feedforward_layernorm = add_norm("pre_feedforward_layernorm");
  mlp = &add<GatedMLP>("mlp", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias, cfg.hidden_act);
  post_feedforward_layernorm = add_norm("post_feedforward_layernorm");
}

std::vector<CacheEntry> SandwichDecoderLayer::cache_entries(DType act) const {
  return self_attn->cache_entries(act);
}

Value SandwichDecoderLayer::forward(Graph& g, Value h, SharedInputs& shared,
                                    const std::map<std::string, Value>& past,
                                    std::map<std::string, Value>& present) const {
  ScopeGuard s(g, path());
  Value a = self_attn->forward(g, input_layernorm->forward(g, h), shared, past, present);
  h = Add(h, post_attention_layernorm->forward(g, a));
  Value m = mlp->forward(g, pre_feedforward_layernorm->forward(g, h));
  return Add(h, post_feedforward_layernorm->forward(g, m));
}

// ---------------------------------------------------------------------------------------------
// Models

TextModel::TextModel(const ArchitectureConfig& c, const LayerFactory& make_layer, const NormFactory& nf)
    : cfg(c) {
  embed_tokens = &add<Embedding>("embed_tokens", cfg.vocab_size, cfg.hidden_size);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    auto l = make_layer(cfg, i);
    layers.push_back(l.get());
    attach("layers." + std::to_string(i), std::move(l));
  }
  auto n = nf(cfg.hidden_size, cfg.rms_norm_eps);
  norm = n.get();
  attach("norm", std::move(n));
}

Value TextModel::embed(Graph& g, SharedInputs& shared) const {
  Value e = embed_tokens->forward(g, shared.input_ids, shared.act);
  if (cfg.embedding_multiplier != 1.0) e = Mul(e, ScalarLike(e, cfg.embedding_multiplier));
  return e;
}

namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

void TextModel::check_checkpoint(BuildContext& ctx) const {
  const std::string emb = embed_tokens->full_name("weight");
  if (auto e = ctx.query_tensor(emb); e && e->dims.size() == 2) {
    if (e->dims[0] != embed_tokens->vocab)
      throw Error("[config] 'vocab_size' is " + std::to_string(embed_tokens->vocab) +
                  ", but the checkpoint's '" + emb + "' has " + std::to_string(e->dims[0]) +
                  " rows (shape " + shape_text(e->dims) + ")");
    if (e->dims[1] != embed_tokens->dim)
      throw Error("[config] 'hidden_size' is " + std::to_string(embed_tokens->dim) +
                  ", but the checkpoint's '" + emb + "' has " + std::to_string(e->dims[1]) +
                  " columns (shape " + shape_text(e->dims) + ")");
  }
  if (layers.empty()) return;
  // The parameter names (below the layer) that every layer declares: layers may differ (dense
  // and MoE MLPs, linear and full attention, with or without an input norm).
  std::set<std::string> common;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string prefix = layers[i]->path() + ".";
    std::set<std::string> mine;
    for (const auto& [full, spec] : layers[i]->parameters())
      if (spec.source.empty() && full.rfind(prefix, 0) == 0) mine.insert(full.substr(prefix.size()));
    if (i == 0) {
      common = std::move(mine);
    } else {
      for (auto it = common.begin(); it != common.end();)
        it = mine.count(*it) ? std::next(it) : common.erase(it);
    }
    if (common.empty()) return;
  }
  // The first of them that layer 0 has in the checkpoint; none when there is no checkpoint
  // (or its layers are stored under other names, which the weight plan reports).
  std::string probe;
  for (const auto& rel : common)
    if (ctx.query_tensor(layers.front()->path() + "." + rel)) {
      probe = rel;
      break;
    }
  if (probe.empty()) return;
  auto tensor = [&](int64_t i) { return full_name("layers." + std::to_string(i)) + "." + probe; };
  auto exists = [&](int64_t i) { return ctx.query_tensor(tensor(i)).has_value(); };
  const auto n = static_cast<int64_t>(layers.size());
  if (!exists(n - 1)) {
    // How many layers the checkpoint holds: the first missing one, by bisection.
    int64_t lo = 1, hi = n - 1;  // layer lo - 1 exists, layer hi does not
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (exists(mid)) lo = mid + 1;
      else hi = mid;
    }
    throw Error("[config] 'num_hidden_layers' is " + std::to_string(n) +
                ", but the checkpoint has no tensor '" + tensor(n - 1) + "': it holds " +
                std::to_string(lo) + (lo == 1 ? " layer" : " layers") + " (" +
                full_name("layers.0") + " to " +
                full_name("layers." + std::to_string(lo - 1)) + ")");
  }
  int64_t trailing = 0;  // multi-token-prediction layers stored after the decoder's
  if (auto it = cfg.extra.find("num_nextn_predict_layers");
      it != cfg.extra.end() && it->is_number_integer())
    trailing = std::clamp<int64_t>(it->get<int64_t>(), 0, 1 << 20);
  if (exists(n + trailing))
    throw Error("[config] 'num_hidden_layers' is " + std::to_string(n) +
                ", but the checkpoint has more layers: it holds '" + tensor(n + trailing) + "'");
}

Value TextModel::forward(Graph& g, SharedInputs& shared,
                         const std::vector<std::map<std::string, Value>>& past,
                         std::vector<std::map<std::string, Value>>& present) const {
  check_checkpoint(g.context());
  Value h = embed(g, shared);
  present.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) h = layers[i]->forward(g, h, shared, past.at(i), present[i]);
  return norm->forward(g, h);
}

CausalLMModel::CausalLMModel(const ArchitectureConfig& c, const LayerFactory& layers, const NormFactory& nf)
    : CausalLMModel(c, std::make_unique<TextModel>(c, layers, nf)) {}

CausalLMModel::CausalLMModel(const ArchitectureConfig& c, std::unique_ptr<TextModel> m) : cfg(c) {
  model = m.get();
  attach("model", std::move(m));
  auto& head = add<Linear>("lm_head", cfg.hidden_size, cfg.vocab_size, false);
  if (cfg.tie_word_embeddings) head.tie("weight", model->embed_tokens->full_name("weight"));
  lm_head = &head;
}

std::vector<std::string> CausalLMModel::ignored_tensors() const {
  std::vector<std::string> out{"*.rotary_emb.inv_freq"};
  if (cfg.tie_word_embeddings) out.push_back(lm_head->full_name("weight"));
  return out;
}

std::vector<std::vector<CacheEntry>> CausalLMModel::cache_layout(DType act) const {
  std::vector<std::vector<CacheEntry>> out;
  for (const auto* l : model->layers) out.push_back(l->cache_entries(act));
  return out;
}

TextGenOutputs CausalLMModel::forward(Graph& g, const TextGenInputs& in) const {
  SharedInputs shared(g, in.input_ids, in.attention_mask, in.position_ids,
                      activation_dtype(g.context()));
  TextGenOutputs out;
  Value h = model->forward(g, shared, in.past, out.present);
  ScopeGuard s(g, "lm_head");
  Value logits = Cast(lm_head->forward(g, h), DType::Float);
  if (cfg.logits_scaling != 1.0) logits = Div(logits, Scalar(g, DType::Float, cfg.logits_scaling));
  if (cfg.final_logit_softcapping > 0) {
    Value cap = Scalar(g, DType::Float, cfg.final_logit_softcapping);
    logits = Mul(Tanh(Div(logits, cap)), cap);
  }
  out.logits = logits;
  return out;
}

CacheIoNames cache_io_names(const std::string& runtime, size_t layer, const std::string& kind) {
  const std::string n = std::to_string(layer);
  if (runtime == "transformers.js") {
    // transformers.js (configs.js getCacheNames, modeling_utils.js getPastKeyValues) turns
    // present_conv / present_recurrent / present into past_conv / past_recurrent /
    // past_key_values, and takes the past length from the first past_key_values.* tensor's
    // second-to-last axis.
    if (kind == "conv_state") return {"past_conv." + n, "present_conv." + n};
    if (kind == "recurrent_state") return {"past_recurrent." + n, "present_recurrent." + n};
    if (kind == "latent") return {"past_key_values." + n + ".key", "present." + n + ".key"};
  }
  return {"past_key_values." + n + "." + kind, "present." + n + "." + kind};
}

void build_text_generation(BuildContext& ctx, const CausalLM& model) {
  for (const auto& glob : model.ignored_tensors()) ctx.ignore_tensors(glob);
  Graph& g = ctx.graph();
  DType act = activation_dtype(ctx);
  const std::string runtime = ctx.runtime();
  TextGenInputs in;
  in.input_ids = g.input("input_ids", TensorType(DType::Int64, {"batch_size", "sequence_length"}));
  in.attention_mask =
      g.input("attention_mask", TensorType(DType::Int64, {"batch_size", "total_sequence_length"}));
  const int rows = model.position_id_rows(runtime);
  if (rows == 1) {
    in.position_ids = g.input("position_ids", TensorType(DType::Int64, {"batch_size", "sequence_length"}));
  } else {
    Value pos = g.input("position_ids", TensorType(DType::Int64, {int64_t{rows}, "batch_size", "sequence_length"}));
    in.position_ids = Squeeze(Slice(pos, {0}, {1}, {0}), {0});  // the temporal row
  }
  auto layout = model.cache_layout(act);
  for (size_t i = 0; i < layout.size(); ++i) {
    auto& m = in.past.emplace_back();
    for (const auto& e : layout[i])
      m[e.name] = g.input(cache_io_names(runtime, i, e.name).past, TensorType(e.dtype, e.dims));
  }
  TextGenOutputs out = model.forward(g, in);
  g.output(out.logits, "logits");
  if (out.present.size() != layout.size())
    throw Error("[text-generation] the model returned " + std::to_string(out.present.size()) +
                " cache layers for " + std::to_string(layout.size()));
  for (size_t i = 0; i < layout.size(); ++i)
    for (const auto& e : layout[i]) {
      auto it = out.present[i].find(e.name);
      if (it == out.present[i].end())
        throw Error("[text-generation] layer " + std::to_string(i) + " returned no present '" + e.name + "'");
      g.output(it->second, cache_io_names(runtime, i, e.name).present);
    }
}

}  // namespace mobius::nn
