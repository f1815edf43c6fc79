// decoder.cpp - the decoder spec's layer and models, and the text-generation task (decoder.hpp).
#include "mobius/sdk/decoder.hpp"

#include <algorithm>
#include <climits>
#include <iterator>
#include <set>
#include <tuple>

namespace mobius::nn {

using namespace mobius::op;

namespace {

// Multi-token-prediction layers a checkpoint keeps after the decoder's (num_nextn_predict_layers).
int64_t mtp_layers(const ArchitectureConfig& cfg) {
  return std::clamp<int64_t>(cfg.num_nextn_predict_layers, 0, 1 << 20);
}

}  // namespace

MixerFactory attention_mixer(bool output_gate) {
  return [output_gate](const ArchitectureConfig& cfg, int64_t layer, const DecoderSpec& spec) {
    return std::make_unique<Attention>(cfg, layer, spec.norm_factory(), spec.names.attention,
                                       output_gate);
  };
}

MixerFactory mixer_by_layer_type(std::map<std::string, MixerFactory> by_type) {
  return [by_type = std::move(by_type)](const ArchitectureConfig& cfg, int64_t layer,
                                        const DecoderSpec& spec) {
    const auto i = static_cast<size_t>(layer);
    const std::string type = i < cfg.layer_types.size() ? cfg.layer_types[i] : "full_attention";
    auto it = by_type.find(type);
    if (it == by_type.end())
      throw Error("[config] 'layer_types' has '" + type + "' for layer " + std::to_string(layer) +
                  ", which " + cfg.model_type + " does not build");
    return it->second(cfg, layer, spec);
  };
}

FeedForwardFactory plain_mlp() {
  return [](const ArchitectureConfig& cfg, int64_t, const DecoderSpec& spec) {
    return std::make_unique<MLP>(cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias, cfg.hidden_act,
                                 spec.names.mlp);
  };
}

FeedForwardFactory gated_mlp() {
  return [](const ArchitectureConfig& cfg, int64_t, const DecoderSpec& spec) {
    return std::make_unique<GatedMLP>(cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias,
                                      cfg.hidden_act, spec.names.mlp);
  };
}

// ---------------------------------------------------------------------------------------------
// The layer

DecoderLayer::DecoderLayer(const ArchitectureConfig& cfg, int64_t layer, const DecoderSpec& spec)
    : placement(spec.placement),
      shared_norm(spec.placement == NormPlacement::Parallel && spec.parallel_shared_norm),
      residual_from_norm(spec.residual_from_norm && spec.placement == NormPlacement::Pre),
      residual_multiplier(cfg.residual_multiplier) {
  const TensorNames& n = spec.names;
  const NormFactory make_norm = spec.norm_factory();
  auto norm = [&](const std::string& name) {
    auto m = make_norm(cfg.hidden_size, cfg.rms_norm_eps);
    const Norm* p = m.get();
    attach(name, std::move(m));
    return p;
  };
  if (placement != NormPlacement::Post) input_layernorm = norm(n.input_norm);
  auto mx = spec.mixer ? spec.mixer(cfg, layer, spec) : attention_mixer()(cfg, layer, spec);
  mixer = mx.get();
  const auto i = static_cast<size_t>(layer);
  auto renamed = i < cfg.layer_types.size() ? n.mixer_by_layer_type.find(cfg.layer_types[i])
                                            : n.mixer_by_layer_type.end();
  attach(renamed != n.mixer_by_layer_type.end() ? renamed->second : n.mixer, std::move(mx));
  if (!shared_norm) post_attention_layernorm = norm(n.post_attention_norm);
  if (placement == NormPlacement::Sandwich) pre_feedforward_layernorm = norm(n.pre_feedforward_norm);
  auto ff = spec.feed_forward ? spec.feed_forward(cfg, layer, spec) : gated_mlp()(cfg, layer, spec);
  feed_forward = ff.get();
  attach(n.feed_forward, std::move(ff));
  if (placement == NormPlacement::Post || placement == NormPlacement::Sandwich)
    post_feedforward_layernorm = norm(n.post_feedforward_norm);
}

std::vector<CacheEntry> DecoderLayer::cache_entries(DType act) const {
  return mixer->cache_entries(act);
}

bool DecoderLayer::reads_position_ids(const BuildContext& ctx) const {
  return mixer->reads_position_ids(ctx);
}

Value Residual::sum() const { return branch ? Add(h, branch) : h; }

Residual DecoderLayerBase::forward_residual(Graph& g, const Residual& r, SharedInputs& shared,
                                            const CacheMap& past, CacheMap& present) const {
  return {forward(g, r.sum(), shared, past, present), Value()};
}

Value DecoderLayer::forward(Graph& g, Value h, SharedInputs& shared, const CacheMap& past,
                            CacheMap& present) const {
  return forward_residual(g, {h, Value()}, shared, past, present).sum();
}

Residual DecoderLayer::forward_residual(Graph& g, const Residual& r, SharedInputs& shared,
                                        const CacheMap& past, CacheMap& present) const {
  ScopeGuard s(g, path());
  auto scaled = [&](Value v) {
    return residual_multiplier == 1.0 ? v : Mul(v, ScalarLike(v, residual_multiplier));
  };
  auto maybe = [&](const Norm* n, Value v) { return n ? n->forward(g, v) : v; };
  if (placement == NormPlacement::PostResidual) {
    // OPT's post-norm: each norm after its residual add; nothing pending.
    Value h = r.sum();
    h = input_layernorm->forward_skip(g, scaled(mixer->forward(g, h, shared, past, present)), h).first;
    h = post_attention_layernorm->forward_skip(g, scaled(feed_forward->forward(g, h)), h).first;
    return {h, Value()};
  }
  if (placement == NormPlacement::Parallel) {
    // Both branches read the stream as it enters the layer; their sum is the pending branch.
    Value h, x;
    if (r.branch) std::tie(x, h) = input_layernorm->forward_skip(g, r.branch, r.h);
    else {
      h = r.h;
      x = input_layernorm->forward(g, h);
    }
    Value a = mixer->forward(g, x, shared, past, present);
    Value m = feed_forward->forward(g, shared_norm ? x : post_attention_layernorm->forward(g, h));
    return {h, scaled(Add(a, m))};
  }
  if (residual_from_norm) {
    // BLOOM's apply_residual_connection_post_layernorm: each residual is its norm's output.
    Value x = input_layernorm->forward(g, r.sum());
    Value h = Add(x, scaled(mixer->forward(g, x, shared, past, present)));
    Value y = post_attention_layernorm->forward(g, h);
    return {y, scaled(feed_forward->forward(g, y))};
  }
  const bool pre = placement == NormPlacement::Pre;
  // Each residual add and the norm after it are one step (one SkipSimplifiedLayerNormalization
  // with ONNX Runtime's operators): the previous layer's pending branch with the input norm,
  // the mixer's branch with the norm before the feed-forward. Pre: that norm is
  // post_attention_layernorm (transformers' name); Sandwich: pre_feedforward_layernorm; Post:
  // none.
  Value h, x;
  if (input_layernorm && r.branch) {
    std::tie(x, h) = input_layernorm->forward_skip(g, r.branch, r.h);
  } else {
    h = r.sum();
    x = maybe(input_layernorm, h);
  }
  Value a = mixer->forward(g, x, shared, past, present);
  const Norm* ff_norm = pre ? post_attention_layernorm : pre_feedforward_layernorm;
  Value branch = scaled(pre ? a : post_attention_layernorm->forward(g, a));
  Value ff_in;
  if (ff_norm) {
    std::tie(ff_in, h) = ff_norm->forward_skip(g, branch, h);
  } else {
    h = Add(h, branch);
    ff_in = h;
  }
  Value m = feed_forward->forward(g, ff_in);
  return {h, scaled(maybe(post_feedforward_layernorm, m))};
}

// ---------------------------------------------------------------------------------------------
// Models

TextModel::TextModel(const ArchitectureConfig& c, const DecoderSpec& spec)
    : TextModel(c, spec, [&spec](const ArchitectureConfig& lc, int64_t i) {
        return std::make_unique<DecoderLayer>(lc, i, spec);
      }) {}

TextModel::TextModel(const ArchitectureConfig& c, const DecoderSpec& spec, const LayerFactory& make_layer)
    : cfg(c) {
  const TensorNames& n = spec.names;
  layer_prefix = n.layers + ".";
  const int64_t width = cfg.embedding_dim > 0 ? cfg.embedding_dim : cfg.hidden_size;
  embed_tokens = &add<Embedding>(n.embed, cfg.vocab_size, width);
  if (width != cfg.hidden_size) {
    project_in = &add<Linear>(n.project_in, width, cfg.hidden_size, false);
    project_out = &add<Linear>(n.project_out, cfg.hidden_size, width, false);
  }
  if (cfg.position_embedding == "learned")
    embed_positions = &add<Embedding>(n.positions, cfg.max_position_embeddings + cfg.position_offset,
                                      cfg.hidden_size);
  sinusoidal_padding_idx = spec.sinusoidal_padding_idx;
  if (!n.embed_norm.empty()) {
    auto en = spec.norm_factory()(cfg.hidden_size, cfg.rms_norm_eps);
    embed_norm = en.get();
    attach(n.embed_norm, std::move(en));
  }
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    auto l = make_layer(cfg, i);
    layers.push_back(l.get());
    attach(n.layers + "." + std::to_string(i), std::move(l));
  }
  if (spec.final_norm) {
    auto fn = spec.norm_factory()(cfg.hidden_size, cfg.rms_norm_eps);
    norm = fn.get();
    attach(n.final_norm, std::move(fn));
  }
}

bool TextModel::reads_position_ids() const {
  return cfg.position_embedding == "learned" || cfg.position_embedding == "sinusoidal";
}

Value TextModel::embed(Graph& g, SharedInputs& shared) const {
  Value e = embed_tokens->forward(g, shared.input_ids, shared.act);
  if (cfg.embedding_multiplier != 1.0) e = Mul(e, ScalarLike(e, cfg.embedding_multiplier));
  if (project_in) e = project_in->forward(g, e);
  if (embed_positions || cfg.position_embedding == "sinusoidal") {
    ScopeGuard s(g, full_name("positions"));
    Value idx = Add(shared.positions(), Int(g, cfg.position_offset));
    if (embed_positions) {
      e = Add(e, embed_positions->forward(g, idx, shared.act));
    } else {
      // XGLM's table, computed at the positions: [sin(p f) | cos(p f)] with f_i =
      // exp(-i ln(10000) / (half - 1)), zeros at the padding row, a zero column for an odd width.
      const int64_t d = cfg.hidden_size, half = d / 2;
      std::vector<double> freq;
      const double step = std::log(10000.0) / static_cast<double>(std::max<int64_t>(half - 1, 1));
      for (int64_t i = 0; i < half; ++i) freq.push_back(std::exp(-static_cast<double>(i) * step));
      Value p = Unsqueeze(Cast(idx, DType::Float), {-1});
      Value ang = Mul(p, Constant(g, DType::Float, {half}, freq, "inv_freq"));
      std::vector<Value> parts{Sin(ang), Cos(ang)};
      if (d % 2) parts.push_back(Mul(p, Scalar(g, DType::Float, 0.0)));
      Value table = Concat(parts, -1);
      if (sinusoidal_padding_idx >= 0) {
        Value pad = Unsqueeze(Equal(idx, Int(g, sinusoidal_padding_idx)), {-1});
        table = Where(pad, Scalar(g, DType::Float, 0.0), table);
      }
      e = Add(e, Cast(table, e.dtype()));
    }
  }
  if (embed_norm) e = embed_norm->forward(g, e);
  return e;
}

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
  auto tensor = [&](int64_t i) { return full_name(layer_prefix + std::to_string(i)) + "." + probe; };
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
                full_name(layer_prefix + "0") + " to " +
                full_name(layer_prefix + std::to_string(lo - 1)) + ")");
  }
  const int64_t trailing = mtp_layers(cfg);  // stored after the decoder's layers
  if (exists(n + trailing))
    throw Error("[config] 'num_hidden_layers' is " + std::to_string(n) +
                ", but the checkpoint has more layers: it holds '" + tensor(n + trailing) + "'");
}

Value TextModel::forward(Graph& g, SharedInputs& shared,
                         const std::vector<std::map<std::string, Value>>& past,
                         std::vector<std::map<std::string, Value>>& present) const {
  check_checkpoint(g.context());
  Residual r{embed(g, shared), Value()};
  present.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    r = layers[i]->forward_residual(g, r, shared, past.at(i), present[i]);
  Value h;
  if (!norm) h = r.sum();
  else if (r.branch) h = norm->forward_skip(g, r.branch, r.h).first;
  else h = norm->forward(g, r.h);
  return project_out ? project_out->forward(g, h) : h;
}

CausalLMModel::CausalLMModel(const ArchitectureConfig& c, const DecoderSpec& s)
    : CausalLMModel(c, s, [this](const ArchitectureConfig& lc, int64_t i) {
        return std::make_unique<DecoderLayer>(lc, i, spec);
      }) {}

CausalLMModel::CausalLMModel(const ArchitectureConfig& c, const DecoderSpec& s,
                             const LayerFactory& layers)
    : cfg(c), spec(s) {
  auto m = std::make_unique<TextModel>(cfg, spec, layers);
  model = m.get();
  attach(spec.names.text_path, std::move(m));
  auto& head = add<Linear>(spec.names.lm_head, cfg.embedding_dim > 0 ? cfg.embedding_dim : cfg.hidden_size,
                           cfg.vocab_size, cfg.lm_head_bias);
  if (cfg.tie_word_embeddings) head.tie("weight", model->embed_tokens->full_name("weight"));
  lm_head = &head;
}

std::vector<std::string> CausalLMModel::ignored_tensors() const {
  std::vector<std::string> out{"*.rotary_emb.inv_freq"};
  if (cfg.tie_word_embeddings) out.push_back(lm_head->full_name("weight"));
  // Multi-token-prediction layers (DeepSeek-V3's layer 61) follow the decoder's layers in the
  // checkpoint; transformers does not load them and neither does the exported graph.
  for (int64_t i = cfg.num_hidden_layers; i < cfg.num_hidden_layers + mtp_layers(cfg); ++i)
    out.push_back(model->full_name(spec.names.layers + "." + std::to_string(i)) + ".*");
  out.insert(out.end(), spec.ignored.begin(), spec.ignored.end());
  return out;
}

bool CausalLMModel::reads_position_ids(const BuildContext& ctx) const {
  if (model->reads_position_ids()) return true;
  for (const auto* l : model->layers)
    if (l->reads_position_ids(ctx)) return true;
  return false;
}

bool CausalLMModel::packed_key_value(const std::string& runtime) const {
  return runtime == "transformers.js" && spec.packed_key_value_for_transformers_js;
}

int CausalLMModel::position_id_rows(const std::string& runtime) const {
  return spec.position_id_rows ? spec.position_id_rows(runtime) : 1;
}

std::vector<std::vector<CacheEntry>> CausalLMModel::cache_layout(DType act) const {
  std::vector<std::vector<CacheEntry>> out;
  for (const auto* l : model->layers) out.push_back(l->cache_entries(act));
  return out;
}

TextGenOutputs CausalLMModel::forward(Graph& g, const TextGenInputs& in) const {
  SharedInputs shared(g, in.input_ids, in.attention_mask, in.position_ids,
                      activation_dtype(g.context()));
  shared.max_positions = cfg.max_position_embeddings;
  // A checkpoint that stores its own lm_head is read as stored, tied or not (transformers ties
  // only a head the checkpoint lacks). A tied head reads the embedding table itself, so the
  // lookup is told before the graph is built (it may read the head's quantized blocks).
  const std::string head = lm_head->full_name("weight");
  if (cfg.tie_word_embeddings && lm_head->source_tensor("weight") != head && g.context().query_tensor(head))
    const_cast<Linear*>(lm_head)->tie("weight", head);
  const bool tied = lm_head->source_tensor("weight") == model->embed_tokens->full_name("weight");
  const_cast<Embedding*>(model->embed_tokens)->tied_head = tied;
  TextGenOutputs out;
  Value h = model->forward(g, shared, in.past, out.present);
  ScopeGuard s(g, "lm_head");
  Value logits;
  if (tied) {
    logits = model->embed_tokens->tied_logits(g, h);
    if (lm_head->has_bias) logits = Add(logits, lm_head->param(g, "bias", logits.dtype()));
  } else {
    logits = lm_head->forward(g, h);
  }
  logits = Cast(logits, DType::Float);
  if (cfg.logits_scaling != 1.0) logits = Div(logits, Scalar(g, DType::Float, cfg.logits_scaling));
  if (cfg.logits_multiplier != 1.0) logits = Mul(logits, Scalar(g, DType::Float, cfg.logits_multiplier));
  if (cfg.final_logit_softcapping > 0) {
    Value cap = Scalar(g, DType::Float, cfg.final_logit_softcapping);
    logits = Mul(Tanh(Div(logits, cap)), cap);
  }
  out.logits = logits;
  return out;
}

// ---------------------------------------------------------------------------------------------
// The text-generation task

CacheIoNames cache_io_names(const std::string& runtime, size_t layer, const std::string& kind) {
  const std::string n = std::to_string(layer);
  if (runtime == "transformers.js") {
    // transformers.js (configs.js getCacheNames, modeling_utils.js getPastKeyValues) turns
    // present_conv / present_recurrent / present_ssm / present into past_conv / past_recurrent /
    // past_ssm / past_key_values, and takes the past length from the first past_key_values.*
    // tensor's second-to-last axis.
    if (kind == "conv_state") return {"past_conv." + n, "present_conv." + n};
    if (kind == "recurrent_state") return {"past_recurrent." + n, "present_recurrent." + n};
    if (kind == "ssm_state") return {"past_ssm." + n, "present_ssm." + n};
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
  if (rows == 1 && !model.reads_position_ids(ctx)) {
    // No input: SharedInputs::positions() would say so if a layer read it after all.
  } else if (rows == 1) {
    in.position_ids = g.input("position_ids", TensorType(DType::Int64, {"batch_size", "sequence_length"}));
  } else {
    Value pos = g.input("position_ids", TensorType(DType::Int64, {int64_t{rows}, "batch_size", "sequence_length"}));
    in.position_ids = Squeeze(Slice(pos, {0}, {1}, {0}), {0});  // the temporal row
  }
  auto layout = model.cache_layout(act);
  const bool packed = model.packed_key_value(runtime);
  for (size_t i = 0; i < layout.size(); ++i) {
    auto& m = in.past.emplace_back();
    if (packed) {
      // One [batch, past, 2 kv_heads head_dim] input, unpacked into the layer's key and value.
      if (layout[i].size() != 2 || layout[i][0].name != "key" || layout[i][1].name != "value")
        throw Error("[text-generation] a packed key_value cache needs a layer's key and value only");
      const std::vector<Dim>& d = layout[i][0].dims;  // [batch, kv_heads, past, head_dim]
      const int64_t kv = d[1].size, hd = d[3].size;
      Value kvp = g.input(cache_io_names(runtime, i, "key_value").past,
                          TensorType(layout[i][0].dtype, {d[0], d[2], Dim(2 * kv * hd)}));
      auto halves = Split(kvp, {kv * hd, kv * hd}, -1);
      m["key"] = Transpose(Reshape(halves[0], {0, 0, kv, hd}), {0, 2, 1, 3});
      m["value"] = Transpose(Reshape(halves[1], {0, 0, kv, hd}), {0, 2, 1, 3});
      continue;
    }
    for (const auto& e : layout[i])
      m[e.name] = g.input(cache_io_names(runtime, i, e.name).past, TensorType(e.dtype, e.dims));
  }
  TextGenOutputs out = model.forward(g, in);
  g.output(out.logits, "logits");
  if (out.present.size() != layout.size())
    throw Error("[text-generation] the model returned " + std::to_string(out.present.size()) +
                " cache layers for " + std::to_string(layout.size()));
  for (size_t i = 0; i < layout.size(); ++i) {
    for (const auto& e : layout[i])
      if (out.present[i].find(e.name) == out.present[i].end())
        throw Error("[text-generation] layer " + std::to_string(i) + " returned no present '" + e.name + "'");
    if (packed) {
      const std::vector<Dim>& d = layout[i][0].dims;
      const int64_t kv = d[1].size, hd = d[3].size;
      auto flat = [&](Value t) { return Reshape(Transpose(t, {0, 2, 1, 3}), {0, 0, kv * hd}); };
      g.output(Concat({flat(out.present[i].at("key")), flat(out.present[i].at("value"))}, -1),
               cache_io_names(runtime, i, "key_value").present);
      continue;
    }
    for (const auto& e : layout[i]) g.output(out.present[i].at(e.name), cache_io_names(runtime, i, e.name).present);
  }
}

}  // namespace mobius::nn
