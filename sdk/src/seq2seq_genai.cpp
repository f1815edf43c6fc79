// seq2seq_genai.cpp - the files ONNX Runtime GenAI's Whisper runner reads beside the two graphs:
// genai_config.json of type "whisper" (onnxruntime-genai's src/config.cpp Encoder_Element and
// Decoder_Element; src/models/whisper.cpp binds the names) and audio_processor_config.json (the
// log-mel pipeline of onnxruntime-extensions its WhisperProcessor runs on audio files; the one
// GenAI's model builder writes, builders/whisper.py).
#include <cmath>

#include <nlohmann/json.hpp>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/seq2seq.hpp"

namespace mobius::nn {

namespace {

using json = nlohmann::json;

// A token id of config.json or generation_config.json: an integer, or the first of a list.
std::optional<int64_t> token(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_array() && !it->empty() && it->front().is_number_integer()) return it->front().get<int64_t>();
  return std::nullopt;
}

}  // namespace

bool whisper_genai_runs(const Seq2SeqConfig& cfg, std::string* why) {
  // GenAI's Whisper runner feeds 3000 frames and allocates 1500-frame caches (whisper.h).
  if (cfg.max_source_positions == 1500) return true;
  if (why)
    *why = "ONNX Runtime GenAI's Whisper runner reads 3000 frames of features (max_source_positions 1500), and "
           "config.json's max_source_positions is " + std::to_string(cfg.max_source_positions);
  return false;
}

void add_whisper_genai_files(BuildContext& ctx, const Seq2SeqConfig& cfg) {
  json config = json::object(), generation = json::object();
  if (auto t = ctx.source_config()) config = parse_config_text(*t, "config.json");
  if (auto t = ctx.source_file("generation_config.json")) {
    try {
      generation = json::parse(*t);
    } catch (const json::exception&) {
      generation = json::object();  // the token ids then come from config.json
    }
  }
  auto pick = [&](const char* key) -> std::optional<int64_t> {
    if (auto v = token(generation, key)) return v;
    return token(config, key);
  };
  const int64_t eos = pick("eos_token_id").value_or(cfg.vocab_size - 1);
  const int64_t pad = pick("pad_token_id").value_or(eos);
  const int64_t bos = pick("bos_token_id").value_or(eos);
  for (const auto& [key, id] : {std::pair<const char*, int64_t>{"eos_token_id", eos}, {"pad_token_id", pad}, {"bos_token_id", bos}})
    if (id < 0 || id >= cfg.vocab_size)
      throw Error(MOBIUS_ERROR_KIND_CONFIG, std::string("[config] config.json: '") + key + "' (" + std::to_string(id) +
                                                ") is not a token id below vocab_size " + std::to_string(cfg.vocab_size));
  const json session = {{"log_id", "onnxruntime-genai"}, {"provider_options", json::array()}};
  auto sizes = [&](json j) {
    j["head_size"] = cfg.decoder_head_dim;
    j["hidden_size"] = cfg.d_model;
    j["num_hidden_layers"] = cfg.decoder_layers;
    j["num_attention_heads"] = cfg.decoder_heads;
    j["num_key_value_heads"] = cfg.decoder_heads;
    return j;
  };
  json encoder = sizes({{"session_options", session},
                        {"filename", "encoder_model.onnx"},
                        {"inputs", {{"audio_features", "audio_features"}}},
                        {"outputs",
                         {{"encoder_hidden_states", "encoder_hidden_states"},
                          {"cross_present_key_names", "present_key_cross_%d"},
                          {"cross_present_value_names", "present_value_cross_%d"}}}});
  encoder["num_hidden_layers"] = cfg.encoder_layers;
  encoder["num_attention_heads"] = encoder["num_key_value_heads"] = cfg.encoder_heads;
  encoder["head_size"] = cfg.head_dim;
  json decoder = sizes({{"session_options", session},
                        {"filename", "decoder_model_merged.onnx"},
                        {"inputs",
                         {{"input_ids", "input_ids"},
                          {"past_key_names", "past_key_self_%d"},
                          {"past_value_names", "past_value_self_%d"},
                          {"cross_past_key_names", "past_key_cross_%d"},
                          {"cross_past_value_names", "past_value_cross_%d"}}},
                        {"outputs",
                         {{"logits", "logits"},
                          {"present_key_names", "present_key_self_%d"},
                          {"present_value_names", "present_value_self_%d"}}}});
  json genai = {{"model",
                 {{"type", "whisper"},
                  {"bos_token_id", bos},
                  {"eos_token_id", eos},
                  {"pad_token_id", pad},
                  {"context_length", cfg.max_positions},
                  {"vocab_size", cfg.vocab_size},
                  {"encoder", encoder},
                  {"decoder", decoder}}},
                {"search",
                 {{"diversity_penalty", 0.0},
                  {"do_sample", false},
                  {"early_stopping", true},
                  {"length_penalty", 1.0},
                  {"max_length", cfg.max_positions},
                  {"min_length", 0},
                  {"no_repeat_ngram_size", 0},
                  {"num_beams", 1},
                  {"num_return_sequences", 1},
                  {"past_present_share_buffer", false},
                  {"repetition_penalty", 1.0},
                  {"temperature", 1.0},
                  {"top_k", 1},
                  {"top_p", 1.0}}}};
  ctx.add_runtime_file("genai_config.json", genai.dump(4) + "\n");

  // The log-mel features: 16 kHz audio, a 400-point STFT (periodic Hann window) every 160
  // samples, num_mel_bins mel bins over 30 s chunks, as WhisperFeatureExtractor computes them.
  json window = json::array();
  for (int n = 0; n < 400; ++n) window.push_back(0.5 - 0.5 * std::cos(2.0 * M_PI * n / 400.0));
  json audio = {{"feature_extraction",
                 {{"sequence",
                   json::array({{{"operation", {{"name", "audio_decoder"}, {"type", "AudioDecoder"}}}},
                                {{"operation",
                                  {{"name", "STFT"},
                                   {"type", "STFTNorm"},
                                   {"attrs", {{"n_fft", 400}, {"frame_length", 400}, {"hop_length", 160}, {"_comment", window}}}}}},
                                {{"operation",
                                  {{"name", "log_mel_spectrogram"},
                                   {"type", "LogMelSpectrum"},
                                   {"attrs", {{"chunk_size", 30}, {"hop_length", 160}, {"n_fft", 400}, {"n_mel", cfg.num_mel_bins}}}}}}})}}}};
  ctx.add_runtime_file("audio_processor_config.json", audio.dump(4) + "\n");
}

}  // namespace mobius::nn
