// gpt.cpp - the GPT-2 lineage: gpt2, gpt_neo, gpt_neox (Pythia), gptj, codegen, gpt_bigcode.
//
// Each family is a row: transformers' configuration defaults under its own key spellings, the
// keys of its own, and the decoder spec (names, norms, where positions come from). The parts are
// the SDK's: learned positions, fused qkv layouts, Conv1D weights, parallel residuals, partial
// and interleaved rotary, local attention layers.
#include <map>

#include "mobius/sdk/decoder_family.hpp"
#include "mobius/sdk/nn.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using mobius::DecoderDefaults;
using namespace mobius::nn;
using nlohmann::json;

// GPT-2's spellings (transformers' attribute_map), shared by GPT-J, CodeGen and GPT-BigCode.
const std::map<std::string, std::vector<std::string>> kGpt2Keys = {
    {"hidden_size", {"n_embd"}},     {"num_hidden_layers", {"n_layer"}},
    {"num_attention_heads", {"n_head"}}, {"max_position_embeddings", {"n_positions"}},
    {"intermediate_size", {"n_inner"}},  {"rms_norm_eps", {"layer_norm_epsilon"}}};

// n_inner / intermediate_size null or absent: four times the width.
void default_inner(const ConfigReader& r, const std::string& key, ArchitectureConfig& c) {
  if (!r.has(key)) c.intermediate_size = 4 * c.hidden_size;
}

// GPT-2's module names: transformer.{wte, wpe, h.<i>.{ln_1, attn, ln_2, mlp}, ln_f}.
DecoderSpec gpt2_names() {
  DecoderSpec s;
  s.norm = NormKind::Layer;
  s.feed_forward = plain_mlp();
  TensorNames& n = s.names;
  n.text_path = "transformer";
  n.embed = "wte";
  n.positions = "wpe";
  n.layers = "h";
  n.final_norm = "ln_f";
  n.input_norm = "ln_1";
  n.post_attention_norm = "ln_2";
  n.mixer = "attn";
  n.attention.qkv = "c_attn";
  n.attention.o = "c_proj";
  n.mlp.up = "c_fc";
  n.mlp.down = "c_proj";
  return s;
}

// GPT-J's and CodeGen's rotary: the first rotary_dim dims of each head (all of them when null),
// adjacent pairs rotated (rotate_every_two), base 10000.
void rotary_dims(const ConfigReader& r, ArchitectureConfig& c) {
  const int64_t rot = r.has("rotary_dim") ? r.get_int("rotary_dim") : c.head_dim;
  if (rot <= 0 || rot > c.head_dim || rot % 2)
    r.fail("rotary_dim", "must be even and at most the head size " + std::to_string(c.head_dim) + ", got " +
                             std::to_string(rot));
  c.rope = mobius::RopeConfig{};
  c.rope.partial_rotary_factor = static_cast<double>(rot) / static_cast<double>(c.head_dim);
  c.rope.interleaved = true;
}

// GPT-J's layer: one norm (ln_1) before attention and MLP in parallel; fc_in, fc_out.
DecoderSpec gptj_names() {
  DecoderSpec s = gpt2_names();
  s.placement = NormPlacement::Parallel;
  s.parallel_shared_norm = true;
  s.names.attention.qkv.clear();
  s.names.attention.o = "out_proj";
  s.names.mlp.up = "fc_in";
  s.names.mlp.down = "fc_out";
  return s;
}

const std::map<std::string, DecoderFamily>& families() {
  static const std::map<std::string, DecoderFamily> f = {
      {"gpt2",
       {{50257, 768, 0, 12, 12, 0, 0, 1024, 1e-5, 10000.0, 0, true, "gelu_new", "activation_function",
         1.0, 0, 0, kGpt2Keys},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          default_inner(r, "n_inner", c);
          c.position_embedding = "learned";
          c.qkv_bias = c.o_bias = c.mlp_bias = true;
          if (!r.get_bool("scale_attn_weights", true)) c.attention_multiplier = 1.0;
          c.attention_scale_by_layer = r.get_bool("scale_attn_by_inverse_layer_idx", false);
        },
        [](const json&) {
          DecoderSpec s = gpt2_names();
          s.names.attention.in_out = s.names.mlp.in_out = true;  // Conv1D: [in, out]
          return s;
        }}},
      {"gpt_bigcode",
       {{50257, 768, 0, 12, 12, 0, 0, 1024, 1e-5, 10000.0, 0, true, "gelu_pytorch_tanh",
         "activation_function", 1.0, 0, 0, kGpt2Keys},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          default_inner(r, "n_inner", c);
          c.position_embedding = "learned";
          c.qkv_bias = c.o_bias = c.mlp_bias = true;
          const bool mq = r.get_bool("multi_query", true);
          c.num_key_value_heads = mq ? 1 : c.num_attention_heads;  // num_key_value_heads is not read
          extra["multi_query"] = mq;
          // transformers.js reads config.json's own multi_query (absent: false).
          extra["tjs_multi_query"] = r.has("multi_query") && r.get_bool("multi_query");
          if (!r.get_bool("scale_attn_weights", true)) c.attention_multiplier = 1.0;
        },
        [](const json& j) {
          DecoderSpec s = gpt2_names();
          if (!j.value("multi_query", true)) s.names.attention.qkv_layout = QkvLayout::PerHead;
          s.packed_key_value_for_transformers_js = j.value("tjs_multi_query", false);
          return s;
        }}},
      {"gpt_neo",
       {{50257, 2048, 0, 24, 16, 0, 0, 2048, 1e-5, 10000.0, 0, true, "gelu_new", "activation_function",
         1.0, 0, 0,
         {{"num_hidden_layers", {"num_layers"}}, {"num_attention_heads", {"num_heads"}},
          {"rms_norm_eps", {"layer_norm_epsilon"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          default_inner(r, "intermediate_size", c);
          c.position_embedding = "learned";
          c.o_bias = c.mlp_bias = true;  // q, k and v have none
          c.attention_multiplier = 1.0;  // GPT-Neo does not scale its scores
          // attention_layers (one per layer), else attention_types [[types, repeat], ...].
          std::vector<std::string> kinds = r.get_strings("attention_layers");
          if (kinds.empty() && r.raw().contains("attention_types")) {
            const json& t = r.raw().at("attention_types");
            if (!t.is_array()) r.fail("attention_types", "must be a list of [types, repeat]");
            for (const json& e : t) {
              if (!e.is_array() || e.size() != 2 || !e[0].is_array() || !e[1].is_number_integer() ||
                  e[1].get<int64_t>() < 0 || e[1].get<int64_t>() > 1024)
                r.fail("attention_types", "must be a list of [types, repeat]");
              for (int64_t i = 0; i < e[1].get<int64_t>(); ++i)
                for (const json& k : e[0]) {
                  if (!k.is_string()) r.fail("attention_types", "names 'global' or 'local' layers");
                  kinds.push_back(k.get<std::string>());
                }
            }
          }
          if (kinds.empty()) kinds.assign(static_cast<size_t>(c.num_hidden_layers), "global");
          if (static_cast<int64_t>(kinds.size()) != c.num_hidden_layers)
            r.fail("attention_layers", "names " + std::to_string(kinds.size()) + " layers for " +
                                           std::to_string(c.num_hidden_layers) + " ('num_layers')");
          c.layer_types.clear();
          for (const auto& k : kinds) {
            if (k != "global" && k != "local")
              r.fail("attention_layers", "has '" + k + "' (global or local)");
            c.layer_types.push_back(k == "local" ? "sliding_attention" : "full_attention");
          }
          c.sliding_window = r.get_int("window_size", 256);
        },
        [](const json&) {
          DecoderSpec s = gpt2_names();
          s.names.mixer = "attn.attention";
          s.names.attention.qkv.clear();
          s.names.attention.o = "out_proj";
          return s;
        }}},
      {"gptj",
       {{50400, 4096, 0, 28, 16, 0, 0, 2048, 1e-5, 10000.0, 0, false, "gelu_new", "activation_function",
         1.0, 0, 0, kGpt2Keys},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          default_inner(r, "n_inner", c);
          rotary_dims(r, c);
          c.mlp_bias = c.lm_head_bias = true;
        },
        [](const json&) { return gptj_names(); }}},
      {"codegen",
       {{50400, 4096, 0, 28, 16, 0, 0, 2048, 1e-5, 10000.0, 0, false, "gelu_new", "activation_function",
         1.0, 0, 0, kGpt2Keys},
        [](const ConfigReader& r, ArchitectureConfig& c, json&) {
          default_inner(r, "n_inner", c);
          rotary_dims(r, c);
          c.mlp_bias = c.lm_head_bias = true;
        },
        [](const json&) {
          DecoderSpec s = gptj_names();
          s.names.attention.qkv = "qkv_proj";
          s.names.attention.qkv_layout = QkvLayout::CodeGen;
          return s;
        }}},
      {"gpt_neox",
       {{50432, 6144, 24576, 44, 64, 0, 0, 2048, 1e-5, 10000.0, 0, false, "gelu", "hidden_act", 0.25, 0, 0,
         {{"rms_norm_eps", {"layer_norm_eps"}}}},
        [](const ConfigReader& r, ArchitectureConfig& c, json& extra) {
          // The legacy spellings of the rope: rotary_pct, rotary_emb_base.
          if (r.has("rotary_pct") && !r.has("partial_rotary_factor"))
            c.rope.partial_rotary_factor = r.get_double("rotary_pct");
          if (r.has("rotary_emb_base") && !r.has("rope_theta") && !r.has("rope_parameters"))
            c.rope.theta = r.get_double("rotary_emb_base");
          c.qkv_bias = c.o_bias = r.get_bool("attention_bias", true);
          c.mlp_bias = true;
          extra["use_parallel_residual"] = r.get_bool("use_parallel_residual", true);
        },
        [](const json& j) {
          DecoderSpec s;
          s.norm = NormKind::Layer;
          s.feed_forward = plain_mlp();
          s.placement = j.value("use_parallel_residual", true) ? NormPlacement::Parallel : NormPlacement::Pre;
          TensorNames& n = s.names;
          n.text_path = "gpt_neox";
          n.embed = "embed_in";
          n.final_norm = "final_layer_norm";
          n.lm_head = "embed_out";
          n.mixer = "attention";
          n.attention.qkv = "query_key_value";
          n.attention.qkv_layout = QkvLayout::PerHead;
          n.attention.o = "dense";
          n.mlp.up = "dense_h_to_4h";
          n.mlp.down = "dense_4h_to_h";
          return s;
        }}},
  };
  return f;
}

void register_all(mobius::PluginRegistrar& r) { register_decoder_families(r, families()); }

}  // namespace

MOBIUS_PLUGIN("gpt", "0.1.0", "mobius", register_all)
