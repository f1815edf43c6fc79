// bert.cpp - the bert plugin: transformers' BertModel and the families built of the same layers,
// each a row of kFamilies (its model type, config key spellings, tensor names, heads' prefix and
// position numbering): BERT, RoBERTa, XLM-RoBERTa, CamemBERT, Data2VecText, DistilBERT. Task
// "feature-extraction".
//
// Semantics follow transformers' models/bert/modeling_bert.py (BertEmbeddings, BertSelfAttention's
// eager path, BertSelfOutput, BertIntermediate, BertOutput, BertPooler), modeling_roberta.py
// (create_position_ids_from_input_ids) and modeling_distilbert.py (Embeddings, TransformerBlock):
//   h = LayerNorm(word(input_ids) + position(ids) + token_type(token_type_ids))
//   every layer: a = LayerNorm(h + out(attention(h)))      bidirectional, padding masked
//                h = LayerNorm(a + ffn_out(act(ffn_in(a))))
//   last_hidden_state = h;  pooler_output = tanh(pooler(h[:, 0])) where the family has a pooler
// Positions are 0 .. seq-1, except for RoBERTa's rows, numbered from the padding index:
//   position = cumsum(input_ids != pad) * (input_ids != pad) + pad
// The padding mask adds finfo(float32).min to the scores of keys whose attention_mask is 0, as
// transformers' bidirectional mask does for eager attention. Weights are read under the
// checkpoint's own prefix: none for the base model, the family's for the checkpoints of its heads.
//
// Numerics: layer norms and the attention softmax in float32, as the SDK's other encoders; with
// float16 weights the activation function also runs in float32 and is rounded once.
#include <cfloat>
#include <cmath>
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

constexpr const char* kTask = "feature-extraction";

// How a family spells its config keys (nullptr: the family has no such key; its default holds).
struct Keys {
  const char* hidden = "hidden_size";
  const char* layers = "num_hidden_layers";
  const char* heads = "num_attention_heads";
  const char* intermediate = "intermediate_size";
  const char* act = "hidden_act";
  const char* eps = "layer_norm_eps";
  const char* type_vocab = "type_vocab_size";
};

// What a family calls its tensors, from the model's root (embeddings) or a layer's (the rest);
// "" for a part the family does not have.
struct Names {
  const char* word = "embeddings.word_embeddings";
  const char* position = "embeddings.position_embeddings";
  const char* token_type = "embeddings.token_type_embeddings";
  const char* embed_norm = "embeddings.LayerNorm";
  const char* layer = "encoder.layer.";
  const char* query = "attention.self.query";
  const char* key = "attention.self.key";
  const char* value = "attention.self.value";
  const char* attn_out = "attention.output.dense";
  const char* attn_norm = "attention.output.LayerNorm";
  const char* ffn_in = "intermediate.dense";
  const char* ffn_out = "output.dense";
  const char* ffn_norm = "output.LayerNorm";
  const char* pooler = "pooler.dense";
};

constexpr Keys kDistilKeys{"dim", "n_layers", "n_heads", "hidden_dim", "activation", nullptr, nullptr};
constexpr Names kDistilNames{"embeddings.word_embeddings", "embeddings.position_embeddings", "",
                             "embeddings.LayerNorm", "transformer.layer.", "attention.q_lin",
                             "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm",
                             "ffn.lin1", "ffn.lin2", "output_layer_norm", ""};

// A family: its model type, the prefix of its tensors in the checkpoints of its heads, how it
// numbers positions, its config keys and its tensor names.
struct Family {
  const char* model_type;
  const char* head_prefix;
  bool positions_from_padding;  // RoBERTa's create_position_ids_from_input_ids
  Keys keys;
  Names names;
};
const Family kFamilies[] = {
    {"bert", "bert.", false, {}, {}},
    {"roberta", "roberta.", true, {}, {}},
    {"xlm-roberta", "roberta.", true, {}, {}},
    {"camembert", "roberta.", true, {}, {}},
    {"data2vec-text", "data2vec_text.", true, {}, {}},
    {"distilbert", "distilbert.", false, kDistilKeys, kDistilNames},
};

const Family& family_of(const std::string& model_type) {
  for (const Family& f : kFamilies)
    if (model_type == f.model_type) return f;
  throw mobius::Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] bert: no family row for '" + model_type + "'");
}

struct BertConfig {
  std::string model_type = "bert";
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;  // RoBERTa's padding index, where its positions start
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(BertConfig, model_type, pad_token_id, vocab_size, hidden_size,
                                                num_hidden_layers, num_attention_heads, intermediate_size,
                                                hidden_act, max_position_embeddings, type_vocab_size,
                                                layer_norm_eps)

json parse(const std::string& model_type, const json& raw) {
  if (!raw.is_object()) throw mobius::Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  const Family& fam = family_of(model_type);
  const Keys& k = fam.keys;
  BertConfig c;
  c.model_type = model_type;
  c.pad_token_id = r.get_int("pad_token_id", fam.positions_from_padding ? 1 : 0);
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.hidden_size = r.get_int(k.hidden, c.hidden_size);
  c.num_hidden_layers = r.get_int(k.layers, c.num_hidden_layers);
  c.num_attention_heads = r.get_int(k.heads, c.num_attention_heads);
  c.intermediate_size = r.get_int(k.intermediate, c.intermediate_size);
  c.hidden_act = r.get_string(k.act, c.hidden_act);
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.type_vocab_size = k.type_vocab ? r.get_int(k.type_vocab, c.type_vocab_size) : 0;
  if (k.eps) c.layer_norm_eps = r.get_double(k.eps, c.layer_norm_eps);
  const std::string pos = r.get_string("position_embedding_type", "absolute");
  if (pos != "absolute")
    r.fail("position_embedding_type", "is " + mobius::quote_value(pos) +
                                          "; BertModel's relative position schemes are not built yet (known: absolute)");
  if (c.type_vocab_size < 0) r.fail(k.type_vocab, "must not be negative");
  if (fam.positions_from_padding && (c.pad_token_id < 0 || c.pad_token_id + 1 >= c.max_position_embeddings))
    r.fail("pad_token_id", "(" + std::to_string(c.pad_token_id) + ") leaves no position in the " +
                               std::to_string(c.max_position_embeddings) +
                               " of 'max_position_embeddings': " + model_type + " numbers positions from it");
  nn::EncoderSizes sizes{c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                         c.num_attention_heads, c.max_position_embeddings, c.layer_norm_eps, c.hidden_act};
  sizes.hidden_key = k.hidden;
  sizes.intermediate_key = k.intermediate;
  sizes.heads_key = k.heads;
  sizes.act_key = k.act;
  nn::check_encoder_config(r, model_type, sizes);
  return json(c);
}

// One layer: a = LayerNorm(h + out(attention(h))), then LayerNorm(a + ffn_out(act(ffn_in(a)))),
// the attention eager (softmax(q k^T / sqrt(d) + mask) v) with q/k/v biased and packed into one
// MatMul.
class BertLayer : public nn::Module {
 public:
  BertLayer(const BertConfig& c, const Names& n)
      : act(c.hidden_act), heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads) {
    query = &add<nn::Linear>(n.query, c.hidden_size, c.hidden_size, true);
    key = &add<nn::Linear>(n.key, c.hidden_size, c.hidden_size, true);
    value = &add<nn::Linear>(n.value, c.hidden_size, c.hidden_size, true);
    attn_out = &add<nn::Linear>(n.attn_out, c.hidden_size, c.hidden_size, true);
    attn_norm = &add<nn::LayerNorm>(n.attn_norm, c.hidden_size, c.layer_norm_eps);
    ffn_in = &add<nn::Linear>(n.ffn_in, c.hidden_size, c.intermediate_size, true);
    ffn_out = &add<nn::Linear>(n.ffn_out, c.intermediate_size, c.hidden_size, true);
    ffn_norm = &add<nn::LayerNorm>(n.ffn_norm, c.hidden_size, c.layer_norm_eps);
  }
  Value forward(Graph& g, Value h, Value mask_bias) const {
    ScopeGuard s(g, path());
    auto qkv = nn::packed_linears(g, h, {query, key, value}, full_name("qkv"));
    Value o = nn::encoder_attention(g, qkv[0], qkv[1], qkv[2], heads, head_dim, mask_bias);
    Value a = attn_norm->forward(g, op::Add(attn_out->forward(g, o), h));
    Value y = ffn_out->forward(g, nn::activation_f32(act, ffn_in->forward(g, a)));
    return ffn_norm->forward(g, op::Add(y, a));
  }
  std::string act;
  int64_t heads, head_dim;
  const nn::Linear *query, *key, *value, *attn_out, *ffn_in, *ffn_out;
  const nn::LayerNorm *attn_norm, *ffn_norm;
};

struct BertOutputs {
  Value last_hidden_state, pooler_output;  // pooler_output: not valid without a pooler
};

// The encoder of a family, its tensors under `prefix` ("" or the family's head prefix).
class BertModel : public nn::Module {
 public:
  BertModel(const BertConfig& c, const Family& fam, const std::string& prefix) : cfg(c), family(fam) {
    const Names& n = fam.names;
    word = &add<nn::Embedding>(prefix + n.word, c.vocab_size, c.hidden_size);
    position = &add<nn::Embedding>(prefix + n.position, c.max_position_embeddings, c.hidden_size);
    if (c.type_vocab_size > 0 && *n.token_type)
      token_type = &add<nn::Embedding>(prefix + n.token_type, c.type_vocab_size, c.hidden_size);
    embed_norm = &add<nn::LayerNorm>(prefix + n.embed_norm, c.hidden_size, c.layer_norm_eps);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<BertLayer>(prefix + n.layer + std::to_string(i), c, n));
    if (*n.pooler) pooler = &add<nn::Linear>(prefix + n.pooler, c.hidden_size, c.hidden_size, true);
  }

  BertOutputs forward(Graph& g, Value input_ids, Value attention_mask, Value token_type_ids, DType act) const {
    Value seq = op::DimOf(input_ids, 1);  // int64 [1]
    Value h;
    {
      ScopeGuard s(g, "embeddings");
      h = word->forward(g, input_ids, act);  // [b, s, hidden]
      if (family.positions_from_padding) {
        Value real = op::Cast(op::Not(op::Equal(input_ids, op::Int(g, cfg.pad_token_id))), DType::Int64);
        Value pos = op::Add(op::Mul(op::CumSum(real, 1), real), op::Int(g, cfg.pad_token_id));
        h = op::Add(h, position->forward(g, pos, act));
      } else {
        // position_ids = arange(seq): the table's first seq rows.
        Value rows = op::Slice(position->param(g, "weight"), op::Ints(g, {0}), seq, {0});
        h = op::Add(h, op::Cast(rows, act));
      }
      if (token_type) h = op::Add(h, token_type->forward(g, token_type_ids, act));
      h = embed_norm->forward(g, h);
    }
    Value mask_bias;
    {
      // Keys whose attention_mask is 0 get finfo(float32).min added to their scores.
      ScopeGuard s(g, "padding_mask");
      Value masked = op::Equal(attention_mask, op::Int(g, 0));                  // [b, s]
      Value bias = op::Where(masked, op::Scalar(g, DType::Float, -FLT_MAX), op::Scalar(g, DType::Float, 0.0));
      mask_bias = op::Unsqueeze(bias, {1, 2});                                   // [b, 1, 1, s]
    }
    for (const BertLayer* l : layers) h = l->forward(g, h, mask_bias);
    BertOutputs out;
    out.last_hidden_state = h;
    if (!pooler) return out;
    ScopeGuard s(g, "pooler");
    Value first = op::Squeeze(op::Slice(h, op::Ints(g, {0}), op::Ints(g, {1}), {1}), {1});  // [b, hidden]
    out.pooler_output = op::Cast(op::Tanh(op::Cast(pooler->forward(g, first), DType::Float)), act);
    return out;
  }

  BertConfig cfg;
  const Family& family;
  const nn::Embedding *word, *position, *token_type = nullptr;
  const nn::LayerNorm* embed_norm;
  std::vector<const BertLayer*> layers;
  const nn::Linear* pooler = nullptr;
};

void build(BuildContext& ctx, const json& j) {
  const BertConfig cfg = j.get<BertConfig>();
  const Family& fam = family_of(cfg.model_type);
  const std::string head = fam.head_prefix;
  const std::string prefix = ctx.query_tensor(head + fam.names.word + ".weight") ? head : "";
  // Buffers the embeddings may save (arange of the positions, and the zero token types).
  ctx.ignore_tensors(prefix + "embeddings.position_ids");
  ctx.ignore_tensors(prefix + "embeddings.token_type_ids");
  BertModel model(cfg, fam, prefix);
  Graph& g = ctx.graph();
  const DType act = nn::activation_dtype(ctx);
  const TensorType ids_t(DType::Int64, {Dim("batch_size"), Dim("sequence_length")});
  Value ids = g.input("input_ids", ids_t);
  Value mask = g.input("attention_mask", ids_t);
  Value types = model.token_type ? g.input("token_type_ids", ids_t) : Value();
  BertOutputs out = model.forward(g, ids, mask, types, act);
  g.output(out.last_hidden_state, "last_hidden_state");
  if (out.pooler_output.valid()) g.output(out.pooler_output, "pooler_output");
}

void register_all(mobius::PluginRegistrar& r) {
  std::vector<std::string> types;
  for (const Family& f : kFamilies) types.push_back(f.model_type);
  r.add_each(types, kTask, parse, build);
}

}  // namespace

MOBIUS_PLUGIN("bert", "0.1.0", "mobius", register_all)
