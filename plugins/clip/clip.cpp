// clip.cpp - the clip plugin: transformers' CLIPTextModel, the text encoder of Stable Diffusion
// 1.x (openai/clip-vit-large-patch14) and 2.x (OpenCLIP ViT-H, converted), task "text-encoding".
//
// Semantics follow transformers' models/clip/modeling_clip.py (CLIPTextEmbeddings, CLIPAttention's
// eager path, CLIPMLP, CLIPEncoderLayer, CLIPTextTransformer) and configuration_clip.py
// (CLIPTextConfig's defaults):
//   h = token_embedding(input_ids) + position_embedding(0 .. seq-1)
//   every layer: h = h + out_proj(attention(layer_norm1(h)))   causal mask, no padding mask
//                h = h + fc2(act(fc1(layer_norm2(h))))
//   last_hidden_state = final_layer_norm(h)
//   pooler_output = last_hidden_state[row, index]: index = argmax(input_ids) when the config's
//     eos_token_id is 2 (the legacy rule, kept for configs written before transformers PR
//     #24773), else the first position holding eos_token_id (0 when a row holds none, as
//     argmax of an all-zero row gives).
// The graph takes input_ids [batch_size, sequence_length] alone: Stable Diffusion pipelines call
// the text encoder without an attention mask. Outputs are in the activation dtype (float16 for
// --dtype f16, as a float16 UNet consumes them).
//
// Numerics: layer norms compute in float32 (LayerNormalization, stash_type 1, on a float32 copy
// of the input) and the attention softmax in float32, as the SDK's decoders do; with float16
// weights the activation function also runs in float32 and is rounded once.
//
// Parts the SDK does not have yet live here: the CLIP attention (biased q/k/v packed into one
// MatMul with nn::packed_linears, a causal mask without a KV cache).
#include <cfloat>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

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

constexpr const char* kModelType = "clip_text_model";
constexpr const char* kTask = "text-encoding";

// The normalized config: CLIPTextConfig's keys the graph reads, defaults filled in, and the
// pooling rule the config selects.
struct ClipTextConfig {
  std::string model_type = kModelType;
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";
  double layer_norm_eps = 1e-5;
  int64_t eos_token_id = 49407;
  std::string pooling = "first_eos";  // "argmax" (eos_token_id == 2) or "first_eos"
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ClipTextConfig, model_type, vocab_size, hidden_size,
                                                intermediate_size, num_hidden_layers,
                                                num_attention_heads, max_position_embeddings,
                                                hidden_act, layer_norm_eps, eos_token_id, pooling)

json parse(const json& raw) {
  if (!raw.is_object()) throw mobius::Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  ClipTextConfig c;
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.hidden_size = r.get_int("hidden_size", c.hidden_size);
  c.intermediate_size = r.get_int("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", c.num_attention_heads);
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  // An explicit null is not the default: transformers compares input_ids with None and fails.
  if (raw.contains("eos_token_id") && raw["eos_token_id"].is_null())
    r.fail("eos_token_id", "is null; the pooled output is read at the eos token, so it must be an integer");
  c.eos_token_id = r.get_int("eos_token_id", c.eos_token_id);
  c.pooling = c.eos_token_id == 2 ? "argmax" : "first_eos";

  nn::check_encoder_config(r, kModelType,
                           {c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                            c.num_attention_heads, c.max_position_embeddings, c.layer_norm_eps, c.hidden_act});
  return json(c);
}

// ---------------------------------------------------------------------------------------------
// Modules. Parameter paths equal the checkpoint's tensor names.

// nn.LayerNorm in float32, cast back to x's dtype (the weight and bias stored in float32).
using LayerNorm = nn::LayerNorm;

// CLIPAttention's eager path: softmax(q k^T * head_dim^-0.5 + causal) v, every head its own
// keys (no grouping), q/k/v biased and packed into one MatMul.
class ClipAttention : public nn::Module {
 public:
  explicit ClipAttention(const ClipTextConfig& c)
      : heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads) {
    const int64_t h = c.hidden_size;
    q_proj = &add<nn::Linear>("q_proj", h, h, true);
    k_proj = &add<nn::Linear>("k_proj", h, h, true);
    v_proj = &add<nn::Linear>("v_proj", h, h, true);
    out_proj = &add<nn::Linear>("out_proj", h, h, true);
  }
  // x [batch, seq, hidden]; causal_bias float32 [seq, seq] (0 or -FLT_MAX).
  Value forward(Graph& g, Value x, Value causal_bias) const {
    ScopeGuard s(g, path());
    auto qkv = nn::packed_linears(g, x, {q_proj, k_proj, v_proj}, full_name("qkv_proj"));
    Value o = nn::encoder_attention(g, qkv[0], qkv[1], qkv[2], heads, head_dim, causal_bias);
    return out_proj->forward(g, o);
  }
  int64_t heads, head_dim;
  const nn::Linear *q_proj, *k_proj, *v_proj, *out_proj;
};

class ClipMLP : public nn::Module {
 public:
  explicit ClipMLP(const ClipTextConfig& c) : act(c.hidden_act) {
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

class ClipEncoderLayer : public nn::Module {
 public:
  explicit ClipEncoderLayer(const ClipTextConfig& c) {
    layer_norm1 = &add<LayerNorm>("layer_norm1", c.hidden_size, c.layer_norm_eps);
    self_attn = &add<ClipAttention>("self_attn", c);
    layer_norm2 = &add<LayerNorm>("layer_norm2", c.hidden_size, c.layer_norm_eps);
    mlp = &add<ClipMLP>("mlp", c);
  }
  Value forward(Graph& g, Value h, Value causal_bias) const {
    ScopeGuard s(g, path());
    h = op::Add(h, self_attn->forward(g, layer_norm1->forward(g, h), causal_bias));
    return op::Add(h, mlp->forward(g, layer_norm2->forward(g, h)));
  }
  const LayerNorm* layer_norm1;
  const ClipAttention* self_attn;
  const LayerNorm* layer_norm2;
  const ClipMLP* mlp;
};

struct ClipOutputs {
  Value last_hidden_state, pooler_output;
};

// CLIPTextTransformer, at "text_model" under the root of CLIPTextModel's checkpoint.
class ClipTextTransformer : public nn::Module {
 public:
  explicit ClipTextTransformer(const ClipTextConfig& c) : cfg(c) {
    token_embedding = &add<nn::Embedding>("embeddings.token_embedding", c.vocab_size, c.hidden_size);
    position_embedding =
        &add<nn::Embedding>("embeddings.position_embedding", c.max_position_embeddings, c.hidden_size);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<ClipEncoderLayer>("encoder.layers." + std::to_string(i), c));
    final_layer_norm = &add<LayerNorm>("final_layer_norm", c.hidden_size, c.layer_norm_eps);
  }

  ClipOutputs forward(Graph& g, Value input_ids, DType act) const {
    Value seq = op::DimOf(input_ids, 1);  // int64 [1]
    Value h;
    {
      ScopeGuard s(g, full_name("embeddings"));
      Value tokens = token_embedding->forward(g, input_ids, act);  // [b, s, hidden]
      // position_ids = arange(seq): the table's first seq rows.
      Value rows = op::Slice(position_embedding->param(g, "weight"), op::Ints(g, {0}), seq, {0});
      h = op::Add(tokens, op::Cast(rows, act));
    }
    Value causal;
    {
      // _create_4d_causal_attention_mask: key j is hidden from query i when j > i. Added to the
      // float32 scores as finfo(float32).min, so no row is ever fully masked.
      ScopeGuard s(g, "causal_mask");
      Value pos = op::Range(op::Int(g, 0), op::Squeeze(seq, {0}), op::Int(g, 1));  // [s]
      Value future = op::Greater(op::Unsqueeze(pos, {0}), op::Unsqueeze(pos, {1}));  // [s_q, s_k]
      causal = op::Where(future, op::Scalar(g, DType::Float, -FLT_MAX), op::Scalar(g, DType::Float, 0.0));
    }
    for (const ClipEncoderLayer* l : layers) h = l->forward(g, h, causal);
    ClipOutputs out;
    out.last_hidden_state = final_layer_norm->forward(g, h);

    ScopeGuard s(g, "pooler");
    // transformers casts the ids to int32 before its argmax (for ONNX's ArgMax of opset 14).
    Value keys = cfg.pooling == "argmax"
                     ? op::Cast(input_ids, DType::Int32)
                     : op::Cast(op::Equal(input_ids, op::Int(g, cfg.eos_token_id)), DType::Int32);
    // The first maximum of each row (select_last_index 0), as torch.argmax returns.
    Value index = g.node("ArgMax", {keys}, {TensorType(DType::Int64, {Dim("batch_size"), Dim(1)})},
                         {mobius::Attr("axis", int64_t{1}), mobius::Attr("keepdims", int64_t{1})})[0];
    out.pooler_output =
        g.node("GatherND", {out.last_hidden_state, index},
               {TensorType(act, {Dim("batch_size"), Dim(cfg.hidden_size)})},
               {mobius::Attr("batch_dims", int64_t{1})})[0];
    return out;
  }

  ClipTextConfig cfg;
  const nn::Embedding* token_embedding;
  const nn::Embedding* position_embedding;
  std::vector<const ClipEncoderLayer*> layers;
  const LayerNorm* final_layer_norm;
};

class ClipTextModel : public nn::Module {
 public:
  explicit ClipTextModel(const ClipTextConfig& c) { text_model = &add<ClipTextTransformer>("text_model", c); }
  const ClipTextTransformer* text_model;
};

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// The config against the checkpoint's headers, when the build reads one: the embedding tables'
// shapes and the layer count, each mismatch named by its config key.
void check_checkpoint(const BuildContext& ctx, const ClipTextConfig& c) {
  const std::string tok = "text_model.embeddings.token_embedding.weight";
  const std::string pos = "text_model.embeddings.position_embedding.weight";
  auto t = ctx.query_tensor(tok);
  if (!t) return;  // no checkpoint (or another layout, which the weight plan reports)
  auto mismatch = [](const std::string& key, int64_t v, const std::string& tensor,
                     const std::vector<int64_t>& dims, const std::string& what) {
    throw mobius::Error("[config] '" + key + "' is " + std::to_string(v) + ", but the checkpoint's '" +
                        tensor + "' has " + what + " (shape " + shape_text(dims) + ")");
  };
  if (t->dims.size() == 2) {
    if (t->dims[0] != c.vocab_size) mismatch("vocab_size", c.vocab_size, tok, t->dims, std::to_string(t->dims[0]) + " rows");
    if (t->dims[1] != c.hidden_size) mismatch("hidden_size", c.hidden_size, tok, t->dims, std::to_string(t->dims[1]) + " columns");
  }
  if (auto p = ctx.query_tensor(pos); p && p->dims.size() == 2 && p->dims[0] != c.max_position_embeddings)
    mismatch("max_position_embeddings", c.max_position_embeddings, pos, p->dims, std::to_string(p->dims[0]) + " rows");
  auto layer = [&](int64_t i) {
    return "text_model.encoder.layers." + std::to_string(i) + ".layer_norm1.weight";
  };
  if (!ctx.query_tensor(layer(0))) return;
  const int64_t n = c.num_hidden_layers;
  if (!ctx.query_tensor(layer(n - 1))) {
    int64_t held = 1;
    while (held < n && ctx.query_tensor(layer(held))) ++held;
    throw mobius::Error("[config] 'num_hidden_layers' is " + std::to_string(n) +
                        ", but the checkpoint has no tensor '" + layer(n - 1) + "': it holds " +
                        std::to_string(held) + (held == 1 ? " layer" : " layers"));
  }
  if (ctx.query_tensor(layer(n)))
    throw mobius::Error("[config] 'num_hidden_layers' is " + std::to_string(n) +
                        ", but the checkpoint has more layers: it holds '" + layer(n) + "'");
}

void build(BuildContext& ctx, const json& j) {
  const ClipTextConfig cfg = j.get<ClipTextConfig>();
  check_checkpoint(ctx, cfg);
  // An unused buffer SD 1.5's checkpoint carries (arange(max_position_embeddings)).
  ctx.ignore_tensors("text_model.embeddings.position_ids");
  // CLIPTextModelWithProjection's projection: CLIPTextModel does not read it either.
  if (ctx.query_tensor("text_projection.weight")) {
    ctx.ignore_tensors("text_projection.weight");
    ctx.log(MOBIUS_LOG_WARNING,
            "the checkpoint's text_projection.weight (CLIPTextModelWithProjection) is not part of "
            "the graph: it outputs last_hidden_state and pooler_output, as CLIPTextModel does");
  }
  ClipTextModel model(cfg);
  Graph& g = ctx.graph();
  const DType act = nn::activation_dtype(ctx);
  Value ids = g.input("input_ids", TensorType(DType::Int64, {Dim("batch_size"), Dim("sequence_length")}));
  ClipOutputs out = model.text_model->forward(g, ids, act);
  g.output(out.last_hidden_state, "last_hidden_state");
  g.output(out.pooler_output, "pooler_output");
}

void register_all(mobius::PluginRegistrar& r) { r.add(kModelType, kTask, parse, build); }

}  // namespace

MOBIUS_PLUGIN("clip", "0.1.0", "mobius", register_all)
