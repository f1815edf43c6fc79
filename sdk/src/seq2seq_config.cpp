// seq2seq_config.cpp - config.json of an encoder-decoder row, read and checked, then checked
// against the checkpoint's layers and Whisper's preprocessor_config.json
// (mobius/sdk/seq2seq.hpp), and the row's registration.
#include <cmath>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/seq2seq.hpp"

namespace mobius::nn {

namespace {

int64_t positive(const ConfigReader& r, const std::string& key, std::optional<int64_t> def = std::nullopt) {
  const int64_t v = r.get_int(key, def);
  if (v <= 0) r.fail(key, "must be positive, got " + std::to_string(v));
  return v;
}

// T5Config / UMT5Config: d_model, d_kv, d_ff, num_layers, num_decoder_layers (num_layers when
// absent), num_heads, feed_forward_proj ("relu", "gated-gelu" (gelu_new), "[gated-]<act>"), the
// relative buckets; the head rescaled by d_model^-0.5 unless tie_word_embeddings is false
// (T5Config.scale_decoder_outputs).
void read_t5(const ConfigReader& r, Seq2SeqConfig& c) {
  c.vocab_size = positive(r, "vocab_size", 32128);
  c.d_model = positive(r, "d_model", 512);
  c.head_dim = positive(r, "d_kv", 64);
  c.decoder_head_dim = c.head_dim;
  c.encoder_ffn = c.decoder_ffn = positive(r, "d_ff", 2048);
  c.encoder_layers = positive(r, "num_layers", 6);
  c.decoder_layers = r.has("num_decoder_layers") ? positive(r, "num_decoder_layers") : c.encoder_layers;
  c.encoder_heads = c.decoder_heads = positive(r, "num_heads", 8);
  c.relative_buckets = positive(r, "relative_attention_num_buckets", 32);
  c.relative_max_distance = positive(r, "relative_attention_max_distance", 128);
  if (c.relative_buckets < 4) r.fail("relative_attention_num_buckets", "must be at least 4");
  if (c.relative_max_distance <= c.relative_buckets / 4)
    r.fail("relative_attention_max_distance", "must exceed a quarter of relative_attention_num_buckets");
  c.eps = r.get_double("layer_norm_epsilon", 1e-6);
  const std::string proj = r.get_string("feed_forward_proj", std::string("relu"));
  const size_t dash = proj.find('-');
  if (dash != std::string::npos && (proj.substr(0, dash) != "gated" || proj.find('-', dash + 1) != std::string::npos))
    r.fail("feed_forward_proj", "'" + proj + "' is not '<act>' or 'gated-<act>'");
  c.gated = dash != std::string::npos;
  c.act = proj == "gated-gelu" ? "gelu_new" : proj.substr(dash == std::string::npos ? 0 : dash + 1);
  check_activation(r, "feed_forward_proj", c.act);
  c.scale_logits = !(r.has("tie_word_embeddings") && !r.get_bool("tie_word_embeddings"));
  c.tied_head = c.scale_logits;
  c.pad_token_id = r.get_int("pad_token_id", 0);
  c.decoder_start_token_id = r.get_int("decoder_start_token_id", c.pad_token_id);
  c.max_positions = 0;
}

// BartConfig and its kin: d_model, encoder_/decoder_ layers, attention_heads, ffn_dim,
// activation_function, max_position_embeddings, scale_embedding (sqrt(d_model)); Whisper's
// num_mel_bins, max_source_positions and max_target_positions (the decoder's table).
void read_bart(const Seq2SeqSpec& s, const ConfigReader& r, Seq2SeqConfig& c) {
  c.vocab_size = positive(r, "vocab_size");
  c.d_model = positive(r, "d_model");
  c.encoder_layers = positive(r, "encoder_layers");
  c.decoder_layers = positive(r, "decoder_layers");
  c.encoder_heads = positive(r, "encoder_attention_heads");
  c.decoder_heads = positive(r, "decoder_attention_heads");
  c.encoder_ffn = positive(r, "encoder_ffn_dim");
  c.decoder_ffn = positive(r, "decoder_ffn_dim");
  if (c.d_model % c.encoder_heads) r.fail("encoder_attention_heads", "must divide d_model " + std::to_string(c.d_model));
  if (c.d_model % c.decoder_heads) r.fail("decoder_attention_heads", "must divide d_model " + std::to_string(c.d_model));
  c.head_dim = c.d_model / c.encoder_heads;
  c.decoder_head_dim = c.d_model / c.decoder_heads;
  c.act = r.get_string("activation_function", std::string("gelu"));
  check_activation(r, "activation_function", c.act);
  c.eps = 1e-5;  // torch.nn.LayerNorm's default: no config key
  c.embed_scale = r.get_bool("scale_embedding", false) ? std::sqrt(static_cast<double>(c.d_model)) : 1.0;
  c.pad_token_id = r.get_int("pad_token_id", 1);
  c.decoder_start_token_id = r.get_int("decoder_start_token_id", 2);
  c.tied_head = !r.has("tie_word_embeddings") || r.get_bool("tie_word_embeddings");
  if (s.audio) {
    c.num_mel_bins = positive(r, "num_mel_bins", 80);
    c.max_source_positions = positive(r, "max_source_positions", 1500);
    c.max_positions = positive(r, "max_target_positions", 448);
  } else {
    c.max_positions = positive(r, "max_position_embeddings", 1024);
    if (r.has("decoder_vocab_size") && r.get_int("decoder_vocab_size") != c.vocab_size)
      r.fail("decoder_vocab_size", "differs from vocab_size; a decoder vocabulary of its own is not built yet");
    if (r.has("share_encoder_decoder_embeddings") && !r.get_bool("share_encoder_decoder_embeddings"))
      r.fail("share_encoder_decoder_embeddings", "is false; separate encoder and decoder embeddings are not built yet");
  }
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size)
    r.fail("pad_token_id", "must be a token id below vocab_size " + std::to_string(c.vocab_size));
}

}  // namespace

Seq2SeqConfig read_seq2seq_config(const Seq2SeqSpec& spec, const nlohmann::json& config_json) {
  const ConfigReader r(config_json);
  Seq2SeqConfig c;
  c.model_type = spec.model_type;
  if (r.has("is_encoder_decoder") && !r.get_bool("is_encoder_decoder"))
    r.fail("is_encoder_decoder", "is false; " + spec.model_type + " is built as an encoder-decoder");
  if (spec.style == Seq2SeqSpec::Style::T5) read_t5(r, c);
  else read_bart(spec, r, c);
  EncoderSizes sizes{c.vocab_size, c.d_model, std::max(c.encoder_ffn, c.decoder_ffn),
                     c.encoder_layers + c.decoder_layers, c.encoder_heads,
                     std::max<int64_t>(c.max_positions, 1), c.eps, c.act};
  sizes.hidden_key = "d_model";
  sizes.heads_key = spec.style == Seq2SeqSpec::Style::T5 ? "num_heads" : "encoder_attention_heads";
  sizes.intermediate_key = spec.style == Seq2SeqSpec::Style::T5 ? "d_ff" : "encoder_ffn_dim";
  sizes.act_key = spec.style == Seq2SeqSpec::Style::T5 ? "feed_forward_proj" : "activation_function";
  sizes.eps_key = "layer_norm_epsilon";
  if (spec.style == Seq2SeqSpec::Style::T5) sizes.hidden_size = c.encoder_heads * c.head_dim;  // inner dim
  check_encoder_config(r, spec.model_type, sizes);
  return c;
}

namespace {

[[noreturn]] void config_fail(const std::string& file, const std::string& key, const std::string& why) {
  throw Error("[config] " + file + ": '" + key + "' " + why);
}

// One side's layer count against the checkpoint: layer `count - 1` must exist and layer `count`
// must not, probed by the self-attention's query weight. Nothing is checked when the checkpoint
// has no layer 0 under that name (no checkpoint, or another layout, which the weight plan reports).
void check_layer_count(const BuildContext& ctx, const Seq2SeqSpec& spec, const std::string& side, const std::string& key,
                       int64_t count) {
  const bool t5 = spec.style == Seq2SeqSpec::Style::T5;
  auto tensor = [&](int64_t i) {
    return spec.prefix + side + (t5 ? ".block." : ".layers.") + std::to_string(i) +
           (t5 ? ".layer.0.SelfAttention.q.weight" : ".self_attn.q_proj.weight");
  };
  auto exists = [&](int64_t i) { return ctx.query_tensor(tensor(i)).has_value(); };
  if (!exists(0)) return;
  if (!exists(count - 1)) {
    int64_t lo = 1, hi = count - 1;  // layer lo - 1 exists, layer hi does not: bisect for the count held
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (exists(mid)) lo = mid + 1;
      else hi = mid;
    }
    config_fail("config.json", key, "is " + std::to_string(count) + " but the checkpoint has " + std::to_string(lo) +
                                        " " + side + (lo == 1 ? " layer" : " layers") + " (no tensor " +
                                        tensor(count - 1) + ")");
  }
  if (exists(count))
    config_fail("config.json", key, "is " + std::to_string(count) + " but the checkpoint has more " + side +
                                        " layers (tensor " + tensor(count) + ")");
}

}  // namespace

void check_seq2seq_checkpoint(BuildContext& ctx, const Seq2SeqSpec& spec, const Seq2SeqConfig& cfg) {
  const bool t5 = spec.style == Seq2SeqSpec::Style::T5;
  // T5 without num_decoder_layers has as many decoder layers as num_layers says.
  std::string decoder_key = t5 ? "num_decoder_layers" : "decoder_layers";
  if (t5) {
    const std::optional<std::string> text = ctx.source_config();
    if (!text || !parse_config_text(*text, "config.json").contains("num_decoder_layers")) decoder_key = "num_layers";
  }
  check_layer_count(ctx, spec, "encoder", t5 ? "num_layers" : "encoder_layers", cfg.encoder_layers);
  check_layer_count(ctx, spec, "decoder", decoder_key, cfg.decoder_layers);
  if (!spec.audio) return;
  // Whisper's front end: conv1 [d_model, num_mel_bins, 3], and the feature extractor's
  // preprocessor_config.json (feature_size mel bins from n_fft-point frames hop_length apart, at
  // sampling_rate, padded to chunk_length seconds).
  const std::string conv1 = spec.prefix + "encoder.conv1.weight";
  const auto conv = ctx.query_tensor(conv1);
  const bool has_conv = conv && conv->dims.size() == 3;
  if (has_conv && conv->dims[1] != cfg.num_mel_bins)
    config_fail("config.json", "num_mel_bins", "is " + std::to_string(cfg.num_mel_bins) +
                                                   " but the checkpoint's conv1 takes " + std::to_string(conv->dims[1]) +
                                                   " input channels (tensor " + conv1 + ", shape " +
                                                   shape_text(conv->dims) + ")");
  const std::optional<std::string> text = ctx.read_source_file("preprocessor_config.json");
  if (!text) return;
  const nlohmann::json j = parse_config_text(*text, "preprocessor_config.json");
  const ConfigReader r(j, "preprocessor_config.json");
  for (const char* key : {"n_fft", "hop_length", "sampling_rate", "chunk_length"})
    if (r.has(key) && !(j.at(key).is_number() && j.at(key).get<double>() > 0))
      r.fail(key, std::string(j.at(key).is_number() ? "must be positive" : "must be a positive number") + ", got " +
                      describe_value(j.at(key)));
  if (r.has("feature_size") && r.get_int("feature_size") != cfg.num_mel_bins)
    r.fail("feature_size", "is " + std::to_string(r.get_int("feature_size")) + " but config.json's 'num_mel_bins' is " +
                               std::to_string(cfg.num_mel_bins) +
                               (has_conv ? " and the checkpoint's conv1 takes " + std::to_string(conv->dims[1]) +
                                               " input channels (tensor " + conv1 + ")"
                                         : std::string()));
}

void register_seq2seq(PluginRegistrar& r, const Seq2SeqSpec& spec) {
  const Seq2SeqSpec* s = &spec;
  r.add(
      spec.model_type, spec.audio ? "speech-to-text" : "text2text-generation",
      [s](const nlohmann::json& raw) { return nlohmann::json(read_seq2seq_config(*s, raw)); },
      [s](BuildContext& ctx, const nlohmann::json& cfg) { build_seq2seq(ctx, *s, cfg.get<Seq2SeqConfig>()); });
}

}  // namespace mobius::nn
