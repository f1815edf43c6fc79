// text_tower.cpp - CLIP's and SigLIP's text towers (text_tower.hpp).
#include "text_tower.hpp"

#include <cfloat>
#include <string>

namespace clip {

using mobius::BuildContext;
using mobius::ConfigReader;
using mobius::Dim;
using mobius::DType;
using mobius::Graph;
using mobius::ScopeGuard;
using mobius::TensorType;
using mobius::Value;
using nlohmann::json;
namespace op = mobius::op;
namespace nn = mobius::nn;

namespace {

// The keys both towers read, over the family's defaults in `c`.
void read_common(ConfigReader& r, TextConfig& c) {
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.hidden_size = r.get_int("hidden_size", c.hidden_size);
  c.intermediate_size = r.get_int("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", c.num_attention_heads);
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
}

void check_sizes(ConfigReader& r, const TextConfig& c) {
  nn::check_encoder_config(r, c.model_type,
                           {c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                            c.num_attention_heads, c.max_position_embeddings, c.layer_norm_eps, c.hidden_act});
}

}  // namespace

TextConfig read_clip_text(const json& raw, const std::string& where) {
  if (!raw.is_object()) throw mobius::Error("[config] " + where + " must be a JSON object");
  ConfigReader r(raw, where);
  TextConfig c;
  read_common(r, c);
  // An explicit null is not the default: transformers compares input_ids with None and fails.
  if (raw.contains("eos_token_id") && raw["eos_token_id"].is_null())
    r.fail("eos_token_id", "is null; the pooled output is read at the eos token, so it must be an integer");
  c.eos_token_id = r.get_int("eos_token_id", c.eos_token_id);
  c.pooling = c.eos_token_id == 2 ? "argmax" : "first_eos";
  check_sizes(r, c);
  return c;
}

TextConfig read_siglip_text(const json& raw, const std::string& where) {
  if (!raw.is_object()) throw mobius::Error("[config] " + where + " must be a JSON object");
  ConfigReader r(raw, where);
  // SiglipTextConfig's defaults.
  TextConfig c;
  c.model_type = "siglip_text_model";
  c.vocab_size = 32000;
  c.hidden_size = 768;
  c.intermediate_size = 3072;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.max_position_embeddings = 64;
  c.hidden_act = "gelu_pytorch_tanh";
  c.layer_norm_eps = 1e-6;
  read_common(r, c);
  c.pooling = "last";
  c.causal = false;
  c.eos_token_id = -1;
  // SiglipTextConfig: projection_size defaults to hidden_size.
  c.projection_size = raw.contains("projection_size") && !raw["projection_size"].is_null()
                          ? r.get_int("projection_size", c.hidden_size)
                          : c.hidden_size;
  if (c.projection_size <= 0 || c.projection_size > (1 << 20))
    r.fail("projection_size", "is " + std::to_string(c.projection_size) + "; it must be from 1 to 2^20");
  check_sizes(r, c);
  return c;
}

// CLIPAttention's eager path: softmax(q k^T * head_dim^-0.5 + bias) v, every head its own keys,
// q/k/v biased and packed into one MatMul.
class ClipAttention : public nn::Module {
 public:
  explicit ClipAttention(const TextConfig& c) : heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads) {
    const int64_t h = c.hidden_size;
    q_proj = &add<nn::Linear>("q_proj", h, h, true);
    k_proj = &add<nn::Linear>("k_proj", h, h, true);
    v_proj = &add<nn::Linear>("v_proj", h, h, true);
    out_proj = &add<nn::Linear>("out_proj", h, h, true);
  }
  // x [batch, seq, hidden]; `bias` float32, broadcast to the scores (the causal rule and the
  // padding), or, invalid, `mask` for bidirectional attention over padding.
  Value forward(Graph& g, Value x, Value bias, const nn::PaddedAttention* mask) const {
    ScopeGuard s(g, path());
    auto qkv = nn::packed_linears(g, x, {q_proj, k_proj, v_proj}, full_name("qkv_proj"));
    Value o = bias.valid() ? nn::encoder_attention(g, qkv[0], qkv[1], qkv[2], heads, head_dim, bias)
                           : nn::padded_attention(g, qkv[0], qkv[1], qkv[2], heads, head_dim, *mask);
    return out_proj->forward(g, o);
  }
  int64_t heads, head_dim;
  const nn::Linear *q_proj, *k_proj, *v_proj, *out_proj;
};

class ClipMLP : public nn::Module {
 public:
  explicit ClipMLP(const TextConfig& c) : act(c.hidden_act) {
    fc1 = &add<nn::Linear>("fc1", c.hidden_size, c.intermediate_size, true);
    fc2 = &add<nn::Linear>("fc2", c.intermediate_size, c.hidden_size, true);
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    return fc2->forward(g, nn::activation_f32(act, fc1->forward(g, x)));
  }
  std::string act;
  const nn::Linear *fc1, *fc2;
};

class TextTransformer::Layer : public nn::Module {
 public:
  explicit Layer(const TextConfig& c) {
    layer_norm1 = &add<nn::LayerNorm>("layer_norm1", c.hidden_size, c.layer_norm_eps);
    self_attn = &add<ClipAttention>("self_attn", c);
    layer_norm2 = &add<nn::LayerNorm>("layer_norm2", c.hidden_size, c.layer_norm_eps);
    mlp = &add<ClipMLP>("mlp", c);
  }
  Value forward(Graph& g, Value h, Value bias, const nn::PaddedAttention* mask) const {
    ScopeGuard s(g, path());
    h = op::Add(h, self_attn->forward(g, layer_norm1->forward(g, h), bias, mask));
    return op::Add(h, mlp->forward(g, layer_norm2->forward(g, h)));
  }
  const nn::LayerNorm* layer_norm1;
  const ClipAttention* self_attn;
  const nn::LayerNorm* layer_norm2;
  const ClipMLP* mlp;
};

TextTransformer::TextTransformer(const TextConfig& c) : cfg(c) {
  token_embedding = &add<nn::Embedding>("embeddings.token_embedding", c.vocab_size, c.hidden_size);
  position_embedding = &add<nn::Embedding>("embeddings.position_embedding", c.max_position_embeddings, c.hidden_size);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.push_back(&add<Layer>("encoder.layers." + std::to_string(i), c));
  final_layer_norm = &add<nn::LayerNorm>("final_layer_norm", c.hidden_size, c.layer_norm_eps);
  if (c.projection_size > 0) head = &add<nn::Linear>("head", c.hidden_size, c.projection_size, true);
}

TextOutputs TextTransformer::forward(Graph& g, Value input_ids, Value attention_mask, DType act) const {
  Value seq = op::DimOf(input_ids, 1);  // int64 [1]
  Value h;
  {
    ScopeGuard s(g, full_name("embeddings"));
    Value tokens = token_embedding->forward(g, input_ids, act);  // [b, s, hidden]
    // position_ids = arange(seq): the table's first seq rows.
    Value rows = op::Slice(position_embedding->param(g, "weight"), op::Ints(g, {0}), seq, {0});
    h = op::Add(tokens, op::Cast(rows, act));
  }
  Value bias;
  std::optional<nn::PaddedAttention> padded;
  if (cfg.causal) {
    // The causal rule: key j is hidden from query i when j > i; with an attention_mask, keys at
    // padding too. Added to the float32 scores as finfo(float32).min, so no row is ever fully
    // masked.
    ScopeGuard s(g, "causal_mask");
    Value pos = op::Range(op::Int(g, 0), op::Squeeze(seq, {0}), op::Int(g, 1));  // [s]
    Value hidden = op::Greater(op::Unsqueeze(pos, {0}), op::Unsqueeze(pos, {1}));  // [s_q, s_k]
    if (attention_mask.valid())
      hidden = op::Or(hidden, op::Unsqueeze(op::Equal(attention_mask, op::Int(g, 0)), {1, 2}));  // [b, 1, s_q, s_k]
    bias = op::Where(hidden, op::Scalar(g, DType::Float, -FLT_MAX), op::Scalar(g, DType::Float, 0.0));
  } else {
    // Bidirectional: every key but padding (all of them without an attention_mask).
    padded.emplace(attention_mask);
  }
  for (const Layer* l : layers) h = l->forward(g, h, bias, padded ? &*padded : nullptr);
  TextOutputs out;
  out.last_hidden_state = final_layer_norm->forward(g, h);

  ScopeGuard s(g, "pooler");
  const int64_t width = head ? cfg.projection_size : cfg.hidden_size;
  if (cfg.pooling == "last") {
    Value last = op::Squeeze(op::Slice(out.last_hidden_state, op::Ints(g, {-1}), op::Ints(g, {INT64_MAX}), {1}), {1});
    out.pooler_output = head ? head->forward(g, last) : last;
    return out;
  }
  // transformers casts the ids to int32 before its argmax (for ONNX's ArgMax of opset 14).
  Value keys = cfg.pooling == "argmax" ? op::Cast(input_ids, DType::Int32)
                                       : op::Cast(op::Equal(input_ids, op::Int(g, cfg.eos_token_id)), DType::Int32);
  // The first maximum of each row (select_last_index 0), as torch.argmax returns.
  Value index = g.node("ArgMax", {keys}, {TensorType(DType::Int64, {Dim("batch_size"), Dim(1)})},
                       {mobius::Attr("axis", int64_t{1}), mobius::Attr("keepdims", int64_t{1})})[0];
  out.pooler_output = g.node("GatherND", {out.last_hidden_state, index},
                             {TensorType(act, {Dim("batch_size"), Dim(width)})}, {mobius::Attr("batch_dims", int64_t{1})})[0];
  return out;
}

namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

void check_text_checkpoint(const BuildContext& ctx, const TextConfig& c, const std::string& prefix,
                           const std::string& where) {
  const std::string tok = prefix + "embeddings.token_embedding.weight";
  const std::string pos = prefix + "embeddings.position_embedding.weight";
  auto t = ctx.query_tensor(tok);
  if (!t) return;  // no checkpoint (or another layout, which the weight plan reports)
  const std::string in = where == "config.json" ? "" : where + ": ";
  auto mismatch = [&](const std::string& key, int64_t v, const std::string& tensor, const std::vector<int64_t>& dims,
                      const std::string& what) {
    throw mobius::Error("[config] " + in + "'" + key + "' is " + std::to_string(v) + ", but the checkpoint's '" + tensor +
                        "' has " + what + " (shape " + shape_text(dims) + ")");
  };
  if (t->dims.size() == 2) {
    if (t->dims[0] != c.vocab_size) mismatch("vocab_size", c.vocab_size, tok, t->dims, std::to_string(t->dims[0]) + " rows");
    if (t->dims[1] != c.hidden_size) mismatch("hidden_size", c.hidden_size, tok, t->dims, std::to_string(t->dims[1]) + " columns");
  }
  if (auto p = ctx.query_tensor(pos); p && p->dims.size() == 2 && p->dims[0] != c.max_position_embeddings)
    mismatch("max_position_embeddings", c.max_position_embeddings, pos, p->dims, std::to_string(p->dims[0]) + " rows");
  auto layer = [&](int64_t i) { return prefix + "encoder.layers." + std::to_string(i) + ".layer_norm1.weight"; };
  if (!ctx.query_tensor(layer(0))) return;
  const int64_t n = c.num_hidden_layers;
  if (!ctx.query_tensor(layer(n - 1))) {
    int64_t held = 1;
    while (held < n && ctx.query_tensor(layer(held))) ++held;
    throw mobius::Error("[config] " + in + "'num_hidden_layers' is " + std::to_string(n) +
                        ", but the checkpoint has no tensor '" + layer(n - 1) + "': it holds " + std::to_string(held) +
                        (held == 1 ? " layer" : " layers"));
  }
  if (ctx.query_tensor(layer(n)))
    throw mobius::Error("[config] " + in + "'num_hidden_layers' is " + std::to_string(n) +
                        ", but the checkpoint has more layers: it holds '" + layer(n) + "'");
}

}  // namespace clip
