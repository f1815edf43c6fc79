// test_phi3.cpp - the phi3 pack beyond parity: the published Phi-3, Phi-3.5 and Phi-4-mini
// configs build graph-only in seconds, checker-clean; a run whose positions all stay below
// original_max_position_embeddings uses the short factors, checked against a reference forward
// pass written here; the spellings of the rope that must give the same model; configs that must
// fail early, naming the key.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"
#include "onnx/onnx_pb.h"
#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

// The published config.json files (keys the model does not read, such as auto_map, left as
// published where known).
const char* kPhi3Mini4k = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
  "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true,
  "vocab_size": 32064})";

// Phi-3-mini-128k-instruct's shape. Its factor lists have 48 entries (head_dim 96 / 2); the
// values here are the 48-entry lists another published 128k Phi-3 config carries
// (Phi-3-vision-128k-instruct's, whose text model is Phi-3-mini's), which may differ from the
// mini's own values: the build depends on their length, not on them.
const char* kPhi3Mini128k = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
  "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "model_type": "phi3", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "long_factor": [1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
      1.0799999237060547, 1.2299998998641968, 1.2299998998641968, 1.2999999523162842,
      1.4499999284744263, 1.5999999046325684, 1.6499998569488525, 1.8999998569488525,
      2.859999895095825, 3.68999981880188, 5.419999599456787, 5.489999771118164,
      5.489999771118164, 9.09000015258789, 11.579999923706055, 15.65999984741211,
      15.769999504089355, 15.789999961853027, 18.360000610351562, 21.989999771118164,
      23.079999923706055, 30.009998321533203, 32.35000228881836, 32.590003967285156,
      35.56000518798828, 39.95000457763672, 53.840003967285156, 56.20000457763672,
      57.95000457763672, 59.29000473022461, 59.77000427246094, 59.920005798339844,
      61.190006256103516, 61.96000671386719, 62.50000762939453, 63.3700065612793,
      63.48000717163086, 63.48000717163086, 63.66000747680664, 63.850006103515625,
      64.08000946044922, 64.760009765625, 64.80001068115234, 64.81001281738281,
      64.81001281738281],
    "short_factor": [1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002,
      1.4000000000000004, 1.4500000000000004, 1.5500000000000005, 1.8500000000000008,
      1.9000000000000008, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996, 2.3499999999999996,
      2.3499999999999996, 2.3499999999999996, 2.3999999999999995, 2.3999999999999995,
      2.6499999999999986, 2.6999999999999984, 2.8999999999999977, 2.9499999999999975,
      3.049999999999997, 3.049999999999997, 3.049999999999997],
    "type": "longrope"},
  "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true,
  "vocab_size": 32064})";

const char* kPhi35Mini = R"({
  "_name_or_path": "Phi-3.5-mini-instruct", "architectures": ["Phi3ForCausalLM"],
  "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
               "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
  "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
  "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "model_type": "phi3", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "long_factor": [1.0800000429153442, 1.1100000143051147, 1.1399999856948853,
      1.340000033378601, 1.5899999141693115, 1.600000023841858, 1.6200000047683716,
      2.620000123977661, 3.2300000190734863, 3.2300000190734863, 4.789999961853027,
      7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
      17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578,
      30.840002059936523, 32.590003967285156, 32.93000411987305, 42.320003509521484,
      44.96000289916992, 50.340003967285156, 50.45000457763672, 57.55000305175781,
      57.93000411987305, 58.21000289916992, 60.1400032043457, 62.61000442504883,
      62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
      63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125,
      64.02999877929688, 64.06999969482422, 64.08000183105469, 64.12000274658203,
      64.41000366210938, 64.4800033569336, 64.51000213623047, 64.52999877929688,
      64.83999633789062],
    "short_factor": [1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
      1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
      1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
      1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
      1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
      1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
      1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
      2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
      2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
      2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533],
    "type": "longrope"},
  "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.3", "use_cache": true,
  "attention_bias": false, "vocab_size": 32064})";

// Phi-4-mini-instruct: 24 query and 8 key/value heads of 128, three quarters of each head
// rotated (48 factors), the lm_head tied to a 200064-token embedding.
const char* kPhi4Mini = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
               "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM",
               "AutoTokenizer": "Xenova/gpt-4o"},
  "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 200020, "full_attn_mod": 1,
  "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
  "intermediate_size": 8192, "interpolate_factor": 1, "lm_head_bias": false,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "phi3",
  "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "original_max_position_embeddings": 4096, "pad_token_id": 199999,
  "partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "long_factor": [1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897,
      1.956131817, 2.187582649, 2.446418898, 2.735880826, 3.059592084, 3.421605075,
      3.826451687, 4.279200023, 4.785517845, 5.351743533, 5.984965424, 6.693110555,
      7.485043894, 8.370679318, 9.36110372, 10.4687158, 11.70738129, 13.09260651,
      14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418,
      28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71, 32.93,
      32.97, 33.28, 33.49, 33.5, 44.16, 47.77],
    "short_factor": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
      1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
      1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    "type": "longrope"},
  "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.45.0", "use_cache": true,
  "vocab_size": 200064})";

std::vector<int64_t> dims_of(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

// ---------------------------------------------------------------------------------------------
// A reference Phi-3 forward pass, written from transformers' modeling_phi3.py and
// modeling_rope_utils.py (longrope) and sharing nothing with the SDK: one sequence, no padding,
// a key/value cache across steps, every sum in double. The rope of a step follows
// transformers' longrope update: long factors when max(position_ids) + 1 > original.

using Tensors = std::map<std::string, std::vector<float>>;

Tensors load_f32(const fs::path& dir) {
  Tensors out;
  auto reader = open_safetensors_checkpoint(dir);
  for (const auto& m : reader->tensors()) {
    REQUIRE(m.dtype == MOBIUS_DTYPE_FLOAT);
    std::vector<float> v(m.nbytes / 4);
    reader->read(m, v.data());
    out[m.name] = std::move(v);
  }
  return out;
}

struct PhiReference {
  const Tensors& w;
  nlohmann::json cfg;
  int64_t hidden, heads, kv_heads, head_dim, inter, vocab, layers, original;
  double eps, theta, attention_factor;
  std::vector<double> short_factor, long_factor;
  bool force_long = false;  // the long factors in every step (a selection that must be wrong)
  std::vector<std::vector<std::vector<double>>> keys, values;  // [layer][slot][kv_heads * head_dim]

  PhiReference(const Tensors& weights, const nlohmann::json& c) : w(weights), cfg(c) {
    hidden = c["hidden_size"];
    heads = c["num_attention_heads"];
    kv_heads = c["num_key_value_heads"];
    head_dim = hidden / heads;
    inter = c["intermediate_size"];
    vocab = c["vocab_size"];
    layers = c["num_hidden_layers"];
    original = c["original_max_position_embeddings"];
    eps = c["rms_norm_eps"];
    theta = c["rope_theta"];
    short_factor = c["rope_scaling"]["short_factor"].get<std::vector<double>>();
    long_factor = c["rope_scaling"]["long_factor"].get<std::vector<double>>();
    const double factor = c["max_position_embeddings"].get<double>() / static_cast<double>(original);
    attention_factor = factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original)));
    keys.resize(static_cast<size_t>(layers));
    values.resize(static_cast<size_t>(layers));
  }

  const std::vector<float>& t(const std::string& name) const { return w.at(name); }

  // W [out, in] times x.
  static std::vector<double> matvec(const std::vector<float>& W, const std::vector<double>& x, int64_t out) {
    const auto in = static_cast<int64_t>(x.size());
    std::vector<double> y(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(W[static_cast<size_t>(o * in + i)]) * x[static_cast<size_t>(i)];
      y[static_cast<size_t>(o)] = s;
    }
    return y;
  }

  std::vector<double> rms_norm(const std::vector<double>& x, const std::string& weight) const {
    double ms = 0;
    for (double v : x) ms += v * v;
    const double r = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
    const auto& g = t(weight);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<double>(g[i]) * x[i] * r;
    return y;
  }

  // rotate_half rope over each head of `x` (n_heads * head_dim) at `pos`.
  void rope(std::vector<double>& x, int64_t n_heads, int64_t pos, const std::vector<double>& ext) const {
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
      double* v = x.data() + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double inv = 1.0 / (ext[static_cast<size_t>(i)] *
                                  std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
        const double c = std::cos(static_cast<double>(pos) * inv) * attention_factor;
        const double s = std::sin(static_cast<double>(pos) * inv) * attention_factor;
        const double a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }

  // One forward call: logits [tokens][vocab] for `ids` at `pos`.
  std::vector<std::vector<double>> step(const std::vector<int64_t>& ids, const std::vector<int64_t>& pos) {
    int64_t top = 0;
    for (int64_t p : pos) top = std::max(top, p);
    const auto& ext = force_long || top + 1 > original ? long_factor : short_factor;
    const int64_t rep = heads / kv_heads, kv = kv_heads * head_dim, q_width = heads * head_dim;
    const int64_t window = cfg.value("sliding_window", int64_t{0});
    std::vector<std::vector<double>> logits;
    for (size_t n = 0; n < ids.size(); ++n) {
      const auto& emb = t("model.embed_tokens.weight");
      std::vector<double> x(emb.begin() + ids[n] * hidden, emb.begin() + (ids[n] + 1) * hidden);
      for (int64_t l = 0; l < layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        auto h = rms_norm(x, p + "input_layernorm.weight");
        auto qkv = matvec(t(p + "self_attn.qkv_proj.weight"), h, q_width + 2 * kv);
        std::vector<double> q(qkv.begin(), qkv.begin() + q_width);
        std::vector<double> k(qkv.begin() + q_width, qkv.begin() + q_width + kv);
        std::vector<double> v(qkv.begin() + q_width + kv, qkv.end());
        rope(q, heads, pos[n], ext);
        rope(k, kv_heads, pos[n], ext);
        auto& K = keys[static_cast<size_t>(l)];
        auto& V = values[static_cast<size_t>(l)];
        K.push_back(k);
        V.push_back(v);
        const auto slot = static_cast<int64_t>(K.size()) - 1;
        std::vector<double> o(static_cast<size_t>(q_width), 0.0);
        for (int64_t hq = 0; hq < heads; ++hq) {
          const int64_t g = hq / rep;
          std::vector<double> score;
          for (int64_t j = 0; j <= slot; ++j) {
            if (window > 0 && j <= slot - window) {
              score.push_back(-INFINITY);
              continue;
            }
            double s = 0;
            for (int64_t d = 0; d < head_dim; ++d)
              s += q[static_cast<size_t>(hq * head_dim + d)] * K[static_cast<size_t>(j)][static_cast<size_t>(g * head_dim + d)];
            score.push_back(s / std::sqrt(static_cast<double>(head_dim)));
          }
          double mx = -INFINITY, sum = 0;
          for (double s : score) mx = std::max(mx, s);
          for (double& s : score) sum += (s = std::exp(s - mx));
          for (int64_t j = 0; j <= slot; ++j)
            for (int64_t d = 0; d < head_dim; ++d)
              o[static_cast<size_t>(hq * head_dim + d)] +=
                  score[static_cast<size_t>(j)] / sum * V[static_cast<size_t>(j)][static_cast<size_t>(g * head_dim + d)];
        }
        auto attn = matvec(t(p + "self_attn.o_proj.weight"), o, hidden);
        for (int64_t i = 0; i < hidden; ++i) x[static_cast<size_t>(i)] += attn[static_cast<size_t>(i)];
        h = rms_norm(x, p + "post_attention_layernorm.weight");
        auto gu = matvec(t(p + "mlp.gate_up_proj.weight"), h, 2 * inter);
        std::vector<double> a(static_cast<size_t>(inter));
        for (int64_t i = 0; i < inter; ++i) {
          const double gate = gu[static_cast<size_t>(i)], up = gu[static_cast<size_t>(inter + i)];
          a[static_cast<size_t>(i)] = up * gate / (1 + std::exp(-gate));
        }
        auto mlp = matvec(t(p + "mlp.down_proj.weight"), a, hidden);
        for (int64_t i = 0; i < hidden; ++i) x[static_cast<size_t>(i)] += mlp[static_cast<size_t>(i)];
      }
      logits.push_back(matvec(t("lm_head.weight"), rms_norm(x, "model.norm.weight"), vocab));
    }
    return logits;
  }
};

StTensor i64_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  StTensor t{name, "I64", std::move(shape), std::vector<uint8_t>(v.size() * 8)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

double max_diff(const std::vector<std::vector<double>>& a, const float* b) {
  double m = 0;
  for (const auto& row : a)
    for (double v : row) m = std::max(m, std::abs(v - static_cast<double>(*b++)));
  return m;
}

}  // namespace

TEST_CASE("phi3: the published Phi-3, Phi-3.5 and Phi-4-mini configs build graph-only in seconds, checker-clean") {
  struct Published {
    std::string name;
    const char* config;
    int64_t rotary_pairs, cache_rows, qkv_out, vocab;
    bool tied, longrope;
    int64_t window;
  };
  // Rotary caches: one table of max_position_embeddings rows, or for longrope the 4096 short
  // rows (the pretraining length) and the 131072 long ones in one.
  const std::vector<Published> models = {
      {"Phi-3-mini-4k-instruct", kPhi3Mini4k, 48, 4096, 3 * 3072, 32064, false, false, 2047},
      {"Phi-3-mini-128k-instruct", kPhi3Mini128k, 48, 4096 + 131072, 3 * 3072, 32064, false, true, 262144},
      {"Phi-3.5-mini-instruct", kPhi35Mini, 48, 4096 + 131072, 3 * 3072, 32064, false, true, 262144},
      {"Phi-4-mini-instruct", kPhi4Mini, 48, 4096 + 131072, 24 * 128 + 2 * 8 * 128, 200064, true, true, 262144},
  };
  for (const auto& p : models) {
    CAPTURE(p.name);
    TempDir t;
    double secs = 0;
    onnx::ModelProto m = build_config_only(t, p.config, "", &secs);
    MESSAGE(p.name << " graph-only build: " << secs << " s");
    CHECK(secs < 20);
    CHECK(nlohmann::json::parse(read_text(t / "out" / "genai_config.json"))["model"]["type"] == "phi3");

    std::map<std::string, int> ops;
    for (const auto& n : m.graph().node()) {
      ops[n.op_type()]++;
      if (n.op_type() == "GroupQueryAttention") CHECK(attr_int(n, "local_window_size") == p.window);
    }
    CHECK(ops["GroupQueryAttention"] == 32);
    // A longrope's table depends on the whole run: RotaryEmbedding nodes at position_ids.
    // Otherwise the operator rotates inside.
    CHECK(ops["RotaryEmbedding"] == (p.longrope ? 64 : 0));
    // The run's table is chosen once, by its largest position id, for every layer.
    CHECK(ops["ReduceMax"] == (p.longrope ? 1 : 0));
    std::map<std::string, std::vector<int64_t>> inits;
    uint64_t params = 0;
    for (const auto& i : m.graph().initializer()) {
      inits[i.name()] = dims_of(i);
      if (i.name().find("_cache") != std::string::npos) continue;  // rotary tables, not weights
      uint64_t n = 1;
      for (int64_t d : i.dims()) n *= static_cast<uint64_t>(d);
      params += n;
    }
    CHECK(inits["rope.cos_cache"] == std::vector<int64_t>{p.cache_rows, p.rotary_pairs});
    CHECK(inits["rope.sin_cache"] == std::vector<int64_t>{p.cache_rows, p.rotary_pairs});
    CHECK(inits.count("rope1.cos_cache") == 0);
    // The fused tensors are read as they are stored, [in, out] for their MatMul.
    CHECK(inits["model.layers.31.self_attn.qkv_proj.weight"] == std::vector<int64_t>{3072, p.qkv_out});
    CHECK(inits["model.layers.0.mlp.gate_up_proj.weight"] == std::vector<int64_t>{3072, 2 * 8192});
    // An untied head is its own [in, out] initializer; a tied one reads the embedding table.
    CHECK(inits.count("lm_head.weight") == (p.tied ? 0u : 1u));
    if (!p.tied) CHECK(inits["lm_head.weight"] == std::vector<int64_t>{3072, p.vocab});
    // Every parameter of the checkpoint, once: 3,821,079,552 for Phi-3-mini and 3,836,021,760
    // for Phi-4-mini, as their model cards count them.
    const uint64_t H = 3072, I = 8192, V = static_cast<uint64_t>(p.vocab);
    // qkv_proj, o_proj (from the 3072 query dims back to hidden), gate_up and down, two norms.
    const uint64_t layer = H * static_cast<uint64_t>(p.qkv_out) + 3072 * H + 3 * H * I + 2 * H;
    const uint64_t expected = V * H * (p.tied ? 1 : 2) + 32 * layer + H;
    CHECK(params == expected);
    CHECK(params == (p.tied ? 3836021760ull : 3821079552ull));
  }
}

TEST_CASE("phi3: --ops standard builds the published Phi-4-mini config, longrope picked per run") {
  TempDir t;
  onnx::ModelProto m = build_config_only(t, kPhi4Mini, "--runtime onnxruntime --ops standard");
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  for (const auto& o : m.opset_import()) CHECK(o.domain().empty());
  // The frequencies of the run are one Where between two rows of 48, before the tables are
  // computed once for all layers.
  CHECK(ops["ReduceMax"] == 1);
  CHECK(ops["Cos"] == 1);
  CHECK(ops["Sin"] == 1);
}

TEST_CASE("phi3: the golden graph holds both rotary tables once and reads them by shifted positions") {
  TempDir t;
  RunResult r = build_cli(golden("phi3-longrope"), t / "out", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, std::vector<int64_t>> inits;
  for (const auto& i : m.graph().initializer()) inits[i.name()] = dims_of(i);
  // original_max_position_embeddings 4 short rows, then max_position_embeddings 32 long rows.
  CHECK(inits["rope.cos_cache"] == std::vector<int64_t>{4 + 32, 8});
  CHECK(inits["model.layers.0.self_attn.qkv_proj.weight"] == std::vector<int64_t>{64, 64 + 2 * 32});
  std::set<std::string> rope_inputs;
  for (const auto& n : m.graph().node())
    if (n.op_type() == "RotaryEmbedding") rope_inputs.insert(n.input(1));
  CHECK(rope_inputs.size() == 1);
  CHECK(rope_inputs.count("position_ids") == 0);
}

TEST_CASE("phi3: a run below original_max_position_embeddings uses the short factors") {
  const Tensors w = load_f32(golden("phi3-longrope"));
  const auto golden_cfg = nlohmann::json::parse(read_text(golden("phi3-longrope") / "config.json"));

  // The reference first meets transformers' own logits: row 1 of the golden case has no
  // padding, and every step of the case is a long run (positions past 4).
  {
    auto ref = read_safetensors_file(golden("phi3-longrope") / "reference.safetensors");
    PhiReference model(w, golden_cfg);
    const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> steps = {
        {{39, 167, 167, 34, 43, 26, 48}, {0, 1, 2, 3, 4, 5, 6}}, {{33}, {7}}, {{45}, {8}}};
    const char* names[] = {"prefill", "decode", "decode2"};
    for (size_t s = 0; s < steps.size(); ++s) {
      CAPTURE(names[s]);
      const RefTensor& ids = ref.at(std::string(names[s]) + ".input_ids");
      const RefTensor& logits = ref.at(std::string(names[s]) + ".logits");
      const auto seq = static_cast<size_t>(ids.shape[1]);
      REQUIRE(std::memcmp(ids.bytes.data() + seq * 8, steps[s].first.data(), seq * 8) == 0);
      auto out = model.step(steps[s].first, steps[s].second);
      const auto* row1 = reinterpret_cast<const float*>(logits.bytes.data()) + seq * 192;
      CHECK(max_diff(out, row1) < 1e-4);
    }
  }

  // original_max_position_embeddings 8: the prefill (positions 0..6) and the first decode
  // (position 7) are short runs, the second decode (position 8) a long one, on a cache whose
  // keys were rotated with the short factors.
  nlohmann::json cfg = golden_cfg;
  cfg["original_max_position_embeddings"] = 8;
  const std::vector<std::vector<int64_t>> prompts = {{5, 77, 140, 3, 3, 91, 188}, {39, 167, 167, 34, 43, 26, 48}};
  const std::vector<std::vector<int64_t>> decodes = {{12, 150}, {33, 45}};
  const std::vector<std::vector<int64_t>> positions = {{0, 1, 2, 3, 4, 5, 6}, {7}, {8}};
  std::vector<std::vector<std::vector<std::vector<double>>>> logits(3);  // [step][row][token][vocab]
  double short_vs_long = 0;
  for (size_t row = 0; row < 2; ++row) {
    PhiReference model(w, cfg), wrong(w, cfg);
    wrong.force_long = true;
    CHECK(std::abs(model.attention_factor - std::sqrt(1 + std::log(4.0) / std::log(8.0))) < 1e-12);
    for (size_t s = 0; s < 3; ++s) {
      std::vector<int64_t> ids = s == 0 ? prompts[row] : std::vector<int64_t>{decodes[row][s - 1]};
      logits[s].push_back(model.step(ids, positions[s]));
      auto other = wrong.step(ids, positions[s]);
      if (s < 2)
        for (size_t n = 0; n < other.size(); ++n)
          for (size_t v = 0; v < other[n].size(); ++v)
            short_vs_long = std::max(short_vs_long, std::abs(other[n][v] - logits[s][row][n][v]));
    }
  }
  // The factors matter at these positions: picking the long ones would be seen.
  MESSAGE("short vs long factors, largest logit difference: " << short_vs_long);
  CHECK(short_vs_long > 1e-2);

  TempDir t;
  copy_case("phi3-longrope", t / "case", [&](nlohmann::json& c) { c = cfg; });
  std::vector<StTensor> ref;
  const char* names[] = {"prefill", "decode", "decode2"};
  for (size_t s = 0; s < 3; ++s) {
    const auto seq = static_cast<int64_t>(positions[s].size());
    const int64_t total = positions[s].back() + 1;
    std::vector<int64_t> ids, pos;
    for (size_t row = 0; row < 2; ++row) {
      if (s == 0) ids.insert(ids.end(), prompts[row].begin(), prompts[row].end());
      else ids.push_back(decodes[row][s - 1]);
      pos.insert(pos.end(), positions[s].begin(), positions[s].end());
    }
    std::vector<float> out;
    for (const auto& row : logits[s])
      for (const auto& tok : row) out.insert(out.end(), tok.begin(), tok.end());
    ref.push_back(i64_tensor(std::string(names[s]) + ".input_ids", {2, seq}, ids));
    ref.push_back(i64_tensor(std::string(names[s]) + ".attention_mask", {2, total},
                             std::vector<int64_t>(static_cast<size_t>(2 * total), 1)));
    ref.push_back(i64_tensor(std::string(names[s]) + ".position_ids", {2, seq}, pos));
    ref.push_back(f32_tensor(std::string(names[s]) + ".logits", {2, seq, 192}, out));
  }
  write_safetensors(t / "case" / "reference.safetensors", ref);
  write_text(t / "case" / "case.json",
             R"({"steps": ["prefill", "decode", "decode2"], "atol": 0.0001, "rtol": 0.001})");
  for (const char* ops : {"ort", "standard"}) {
    CAPTURE(ops);
    RunResult b = build_cli(t / "case", t / (std::string("out-") + ops),
                            std::string("--runtime onnxruntime --ops ") + ops);
    INFO(b.output);
    REQUIRE(b.status == 0);
    RunResult p = parity(t / (std::string("out-") + ops), (t / "case").string());
    INFO(p.output);
    CHECK(p.status == 0);
    CHECK(p.output.find("parity: 3 passed, 0 failed") != std::string::npos);
  }
}

TEST_CASE("phi3: the rope's other spellings build the same model") {
  // Each edit of the golden config must still match transformers' logits.
  struct Spelling {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Spelling> spellings = {
      // Phi-3's first configs called longrope "su"; configuration_phi3 reads "yarn" the same way.
      {"type su", [](auto& c) { c["rope_scaling"]["type"] = "su"; }},
      {"type yarn", [](auto& c) { c["rope_scaling"]["type"] = "yarn"; }},
      // transformers' newer key, with the theta inside.
      {"rope_parameters", [](auto& c) {
         nlohmann::json rp = c["rope_scaling"];
         rp.erase("type");
         rp["rope_type"] = "longrope";
         rp["rope_theta"] = c["rope_theta"];
         c.erase("rope_scaling");
         c.erase("rope_theta");
         c["rope_parameters"] = rp;
       }},
      // The top-level pretraining length wins over the rope's own.
      {"original length in the rope too", [](auto& c) { c["rope_scaling"]["original_max_position_embeddings"] = 16; }},
      // An explicit attention factor equal to the derived one.
      {"explicit attention_factor", [](auto& c) { c["rope_scaling"]["attention_factor"] = std::sqrt(2.5); }},
  };
  for (const auto& s : spellings) {
    CAPTURE(s.what);
    TempDir t;
    copy_case("phi3-longrope", t / "ckpt", s.edit);
    RunResult b = build_cli(t / "ckpt", t / "out", "--runtime onnxruntime");
    INFO(b.output);
    REQUIRE(b.status == 0);
    RunResult p = parity(t / "out", "phi3-longrope");
    INFO(p.output);
    CHECK(p.status == 0);
    CHECK(p.output.find("parity: 3 passed, 0 failed") != std::string::npos);
  }
}

TEST_CASE("phi3: configs and checkpoints that do not fit fail before anything is written") {
  REQUIRE(fs::exists(golden("phi3-longrope") / "config.json"));
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::function<bool(StTensor&)> keep;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"short factors of the wrong length", [](auto& c) { c["rope_scaling"]["short_factor"].erase(0); }, {},
       "'rope_scaling' short_factor has 7 entries; longrope needs one per rotated pair: 8"},
      {"long factors of the wrong length", [](auto& c) { c["rope_scaling"]["long_factor"].push_back(1.0); }, {},
       "'rope_scaling' long_factor has 9 entries; longrope needs one per rotated pair: 8"},
      {"partial rotary with full-width factors", [](auto& c) { c["partial_rotary_factor"] = 0.5; }, {},
       "'rope_scaling' short_factor has 8 entries; longrope needs one per rotated pair: 4"},
      {"unknown rope type", [](auto& c) { c["rope_scaling"]["type"] = "warp"; }, {},
       "'rope_scaling' has unknown rope type 'warp'"},
      {"a rope type Phi-3 does not have", [](auto& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }, {},
       "'rope_scaling' has rope type 'linear'; Phi-3 has default or longrope"},
      {"no long factors", [](auto& c) { c["rope_scaling"].erase("long_factor"); }, {},
       "rope_scaling: 'long_factor' is required for longrope"},
      {"a factor that is not a number", [](auto& c) { c["rope_scaling"]["long_factor"][3] = "x"; }, {},
       "rope_scaling: 'long_factor' must be a list of numbers, got 'x'"},
      {"a zero factor", [](auto& c) { c["rope_scaling"]["short_factor"][2] = 0; }, {},
       "rope_scaling: 'short_factor' must hold positive numbers, got 0 at index 2"},
      {"separate q/k/v tensors", {}, [](StTensor& t) {
         if (t.name == "model.layers.0.self_attn.qkv_proj.weight") t.name = "model.layers.0.self_attn.q_proj.weight";
         return true;
       },
       "checkpoint has no tensor 'model.layers.0.self_attn.qkv_proj.weight'"},
      {"gate/up of the wrong width", [](auto& c) { c["intermediate_size"] = 64; }, {},
       "tensor 'model.layers.0.mlp.gate_up_proj.weight' has shape [192, 64], the graph expects [128, 64]"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    expect_rejected("phi3-longrope", c.edit, c.keep, c.reason);
  }
}
