// mobius/sdk/decoder_config.hpp - the keys every decoder's config.json shares, read once with a
// row of per-model-type defaults: a family's parser reads only what is its own.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "mobius/sdk/config.hpp"

namespace mobius {

// transformers' configuration_<type>.py defaults for the keys a config.json may omit, as one row
// per model type.
struct DecoderDefaults {
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008;
  int64_t num_hidden_layers = 32, num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads
  int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t sliding_window = 0;  // when the key is absent; 0: none
  bool tie_word_embeddings = false;
  const char* hidden_act = "silu";
  const char* act_key = "hidden_act";  // Gemma 2/3 read "hidden_activation"
  double partial_rotary_factor = 1.0;  // when no spelling of the key is present
  double attn_logit_softcapping = 0.0, final_logit_softcapping = 0.0;  // 0: none
  // The config.json keys of the shared fields where a family spells them its own way
  // (transformers' attribute_map, e.g. GPT-2's {"hidden_size", {"n_embd"}}), by field name:
  // vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
  // num_key_value_heads, max_position_embeddings, rms_norm_eps (the eps of every norm, whatever
  // the family calls it: layer_norm_epsilon, norm_eps, ...). Several spellings: the first present
  // is read. Absent: the field's own name. No spelling: the field is not read (the row's default;
  // BioGPT's norms are torch's 1e-5 whatever its layer_norm_eps says).
  std::map<std::string, std::vector<std::string>> keys = {};
};

// Reads (under the keys d.keys names) vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads,
// num_key_value_heads, head_dim (hidden_size / num_attention_heads when absent, naming both keys
// when they do not divide), the activation (checked), rms_norm_eps, max_position_embeddings, the
// rope (read_rope; with transformers' per-layer-type rope_parameters {"full_attention": ...,
// "sliding_attention": ...}, the sliding layers' rope goes to sliding_rope), tie_word_embeddings,
// attention_bias (q/k/v and o), mlp_bias, sliding_window, layer_types and the soft-caps
// (read_softcap). The family then reads its own keys and calls validate().
ArchitectureConfig read_decoder_config(const ConfigReader& r, const std::string& model_type,
                                       const DecoderDefaults& d);

// The config.json key `field` is read from: the first spelling of d.keys[field] present (the
// first when none is), `field` itself, or "" when the row reads no spelling of it.
std::string decoder_key(const ConfigReader& r, const DecoderDefaults& d, const std::string& field);

// A soft-cap key (attn_logit_softcapping, final_logit_softcapping): absent -> `def`, null -> 0
// (none); otherwise a positive number.
double read_softcap(const ConfigReader& r, const std::string& key, double def);

// Fills c.layer_types when the config has none: `pattern(i)` names layer i's type.
template <class F>
void default_layer_types(ArchitectureConfig& c, F pattern) {
  if (!c.layer_types.empty()) return;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.layer_types.push_back(pattern(i));
}

// Throws "[config] ... 'layer_types' has unknown layer type '<t>' (known: ...)" for a type not in
// `known`, and when the list's length is not num_hidden_layers (unless `any_length`).
void check_layer_types(const ConfigReader& r, const ArchitectureConfig& c,
                       std::initializer_list<const char*> known, bool any_length = true);
// check_layer_types of an attention-only decoder: full_attention and sliding_attention.
void check_attention_layer_types(const ConfigReader& r, const ArchitectureConfig& c);

// The keys families of one lineage share, for the packs that hold its dense and its MoE models:
// Mistral's and Qwen's sliding window where the config turns it on (use_sliding_window; the
// layers from max_window_layers on) as layer types, checked.
void read_qwen_window(const ConfigReader& r, ArchitectureConfig& c);
// Granite's multipliers: embedding_multiplier, attention_multiplier, residual_multiplier and
// logits_scaling (not 0).
void read_granite_multipliers(const ConfigReader& r, ArchitectureConfig& c);
// HunYuan's attention: head_dim required (transformers does not derive it), per-head q/k norms,
// a dynamic rope with an alpha read as the fixed change of base it is (NTK alpha); layer types
// checked.
void read_hunyuan_attention(const ConfigReader& r, ArchitectureConfig& c);

}  // namespace mobius
