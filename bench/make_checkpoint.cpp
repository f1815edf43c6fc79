// make_checkpoint.cpp - writes a synthetic Llama-shaped checkpoint of about a given size for the
// benchmarks: sharded safetensors + index, every tensor's bytes distinct (seeded per tensor), so no
// writer can look fast by de-duplicating.
//
// usage: make_checkpoint OUT_DIR SIZE_MIB [f32|bf16] [OPTIONS]
//   Without options: hidden 2048, intermediate 5632, 16 heads / 4 kv heads, vocab 32000, as many
//   layers as fit SIZE_MIB, weights uniform in [-0.05, 0.05) (bench/run.sh, the streaming benchmark).
//   --hidden N --intermediate N --heads N --kv-heads N --head-dim N --vocab N --max-pos N
//   --layers N        fixed layer count (SIZE_MIB is then ignored; pass 0)
//   --init normal     a model that computes something plausible (bench/decode.sh): linear and
//                     embedding weights N(0, std), RMSNorm weights 1 + N(0, std) (default uniform)
//   --std S           standard deviation for --init normal (default 0.02)
//   --tie             tie_word_embeddings: true, no lm_head.weight
//   --model-type T    llama (default) or qwen3: Qwen3's RMSNorm of each head's queries and keys
//                     (self_attn.{q,k}_norm.weight, head_dim wide), rms_norm_eps 1e-6 and
//                     rope_theta 1000000 as Qwen3 ships them
//   --experts N       a Mixtral-shaped sparse MoE: N experts of width --intermediate per layer
//                     (block_sparse_moe.experts.E.{w1,w2,w3}.weight and the router
//                     block_sparse_moe.gate.weight) instead of the dense MLP; model_type mixtral
//   --top-k K         experts per token with --experts (default 2)
//   --fp8 B           the projection and expert weights stored as FP8 (F8_E4M3, random codes)
//                     with F32 <name>_scale_inv per B x B block, and a quantization_config
//                     (quant_method fp8, weight_block_size [B, B]) as DeepSeek-V3 ships them; the
//                     other tensors keep the checkpoint's dtype
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "synthetic.hpp"

namespace fs = std::filesystem;
using bench::fill;
using bench::put;
using bench::splitmix;
using bench::Tensor;

namespace {

// mean + N(0, std) by Box-Muller, clipped to 6 sigma: finite, and a network built from it gives
// finite, non-degenerate logits (the scale HF initializers use, initializer_range 0.02).
void fill_normal(std::vector<uint8_t>& buf, uint64_t n, bool bf16, uint64_t seed, float mean, float std_) {
  buf.resize(n * (bf16 ? 2 : 4));
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (uint64_t i = 0; i < n; i += 2) {
    uint64_t r = splitmix(s);
    double u1 = (static_cast<double>(r >> 40) + 0.5) / 16777216.0;  // (0, 1)
    double u2 = static_cast<double>((r >> 16) & 0xffffff) / 16777216.0;
    double rad = std::sqrt(-2.0 * std::log(u1));
    double z[2] = {rad * std::cos(6.283185307179586 * u2), rad * std::sin(6.283185307179586 * u2)};
    for (int k = 0; k < 2 && i + k < n; ++k) {
      double v = std::clamp(z[k], -6.0, 6.0);
      put(buf, i + k, mean + std_ * static_cast<float>(v), bf16);
    }
  }
}

// Random E4M3 codes, never NaN (S.1111.111), for an FP8 weight; scales around 1e-3 for its blocks.
void fill_fp8(std::vector<uint8_t>& buf, uint64_t n, uint64_t seed) {
  buf.resize(n);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (uint64_t i = 0; i < n; i += 8) {
    uint64_t r = splitmix(s);
    for (uint64_t k = 0; k < 8 && i + k < n; ++k) {
      uint8_t b = static_cast<uint8_t>(r >> (8 * k));
      buf[i + k] = (b & 0x7f) == 0x7f ? b ^ 1 : b;
    }
  }
}

void fill_scales(std::vector<uint8_t>& buf, uint64_t n, uint64_t seed) {
  buf.resize(n * 4);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (uint64_t i = 0; i < n; ++i) {
    float f = 1e-3f * (0.5f + static_cast<float>(splitmix(s) >> 40) / 16777216.0f);
    std::memcpy(&buf[i * 4], &f, 4);
  }
}

std::string shape_json(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: make_checkpoint OUT_DIR SIZE_MIB [f32|bf16] [--hidden N] [--intermediate N] [--heads N]\n"
      "         [--kv-heads N] [--head-dim N] [--vocab N] [--max-pos N] [--layers N]\n"
      "         [--init uniform|normal] [--std S] [--tie] [--model-type llama|qwen3]\n"
      "         [--experts N] [--top-k K] [--fp8 B]\n";
  std::vector<std::string> pos;
  int64_t hidden = 2048, inter = 5632, heads = 16, kv = 4, hd = 0, vocab = 32000, max_pos = 4096, fixed_layers = 0;
  int64_t experts = 0, top_k = 2, fp8 = 0;
  std::string init = "uniform";
  std::string model_type = "llama";
  float std_ = 0.02f;
  bool tie = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      pos.push_back(a);
      continue;
    }
    if (a == "--tie") {
      tie = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "make_checkpoint: " << a << " needs a value\n" << usage;
      return 2;
    }
    std::string v = argv[++i];
    int64_t n = std::atoll(v.c_str());
    if (a == "--hidden") hidden = n;
    else if (a == "--intermediate") inter = n;
    else if (a == "--heads") heads = n;
    else if (a == "--kv-heads") kv = n;
    else if (a == "--head-dim") hd = n;
    else if (a == "--vocab") vocab = n;
    else if (a == "--max-pos") max_pos = n;
    else if (a == "--layers") fixed_layers = n;
    else if (a == "--experts") experts = n;
    else if (a == "--top-k") top_k = n;
    else if (a == "--fp8") fp8 = n;
    else if (a == "--init") init = v;
    else if (a == "--model-type") model_type = v;
    else if (a == "--std") std_ = static_cast<float>(std::atof(v.c_str()));
    else {
      std::cerr << "make_checkpoint: unknown option " << a << "\n" << usage;
      return 2;
    }
  }
  if (pos.size() < 2 || pos.size() > 3) {
    std::cerr << usage;
    return 2;
  }
  fs::path out = pos[0];
  double size_mib = std::atof(pos[1].c_str());
  std::string dtype = pos.size() > 2 ? pos[2] : "f32";
  if ((size_mib <= 0 && fixed_layers <= 0) || (dtype != "f32" && dtype != "bf16")) {
    std::cerr << "make_checkpoint: SIZE_MIB must be positive (or --layers given) and dtype f32 or bf16\n";
    return 2;
  }
  if (hd == 0) hd = heads > 0 ? hidden / heads : 0;
  if (hidden <= 0 || inter <= 0 || heads <= 0 || kv <= 0 || hd <= 0 || vocab <= 0 || max_pos <= 0 ||
      heads % kv != 0 || (init != "uniform" && init != "normal") || !(std_ > 0) || experts < 0 ||
      (experts > 0 && (top_k <= 0 || top_k > experts)) || fp8 < 0 ||
      (model_type != "llama" && model_type != "qwen3") || (model_type == "qwen3" && experts > 0)) {
    std::cerr << "make_checkpoint: bad shape options (heads must be a multiple of kv-heads; "
                 "--model-type llama or qwen3, qwen3 without --experts)\n";
    return 2;
  }
  const bool bf16 = dtype == "bf16";
  const bool normal = init == "normal";
  const bool qwen3 = model_type == "qwen3";
  const uint64_t es = bf16 ? 2 : 4;
  const uint64_t fixed = ((tie ? 1 : 2) * vocab * hidden + hidden) * es;
  const uint64_t mlp = experts > 0 ? experts * 3 * hidden * inter + experts * hidden : 3 * hidden * inter;
  const uint64_t per_layer = (2 * hidden * heads * hd + 2 * hidden * kv * hd + mlp + 2 * hidden + (qwen3 ? 2 * hd : 0)) * es;
  const auto target = static_cast<uint64_t>(size_mib * 1024 * 1024);
  int64_t layers = target > fixed ? static_cast<int64_t>((target - fixed + per_layer / 2) / per_layer) : 1;
  layers = std::max<int64_t>(layers, 1);
  if (fixed_layers > 0) layers = fixed_layers;

  std::vector<Tensor> ts{{"model.embed_tokens.weight", {vocab, hidden}}};
  for (int64_t i = 0; i < layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    ts.push_back({p + "input_layernorm.weight", {hidden}});
    ts.push_back({p + "self_attn.q_proj.weight", {heads * hd, hidden}});
    ts.push_back({p + "self_attn.k_proj.weight", {kv * hd, hidden}});
    ts.push_back({p + "self_attn.v_proj.weight", {kv * hd, hidden}});
    ts.push_back({p + "self_attn.o_proj.weight", {hidden, heads * hd}});
    if (qwen3) {
      ts.push_back({p + "self_attn.q_norm.weight", {hd}});
      ts.push_back({p + "self_attn.k_norm.weight", {hd}});
    }
    ts.push_back({p + "post_attention_layernorm.weight", {hidden}});
    if (experts > 0) {
      ts.push_back({p + "block_sparse_moe.gate.weight", {experts, hidden}});
      for (int64_t e = 0; e < experts; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        ts.push_back({x + "w1.weight", {inter, hidden}});
        ts.push_back({x + "w2.weight", {hidden, inter}});
        ts.push_back({x + "w3.weight", {inter, hidden}});
      }
    } else {
      ts.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
      ts.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
      ts.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
    }
  }
  ts.push_back({"model.norm.weight", {hidden}});
  if (!tie) ts.push_back({"lm_head.weight", {vocab, hidden}});
  if (fp8 > 0) {
    std::vector<Tensor> q;
    for (auto& t : ts) {
      const bool proj = t.shape.size() == 2 && t.name.rfind("model.layers.", 0) == 0 &&
                        t.name.find(".gate.weight") == std::string::npos;  // not the router
      if (!proj) {
        q.push_back(t);
        continue;
      }
      t.code = "F8_E4M3";
      q.push_back(t);
      q.push_back({t.name + "_scale_inv", {(t.shape[0] + fp8 - 1) / fp8, (t.shape[1] + fp8 - 1) / fp8}, "F32"});
    }
    ts = std::move(q);
  }
  auto bytes = [&](const Tensor& t) {
    const std::string c = t.code ? t.code : "";
    return t.numel() * (c == "F8_E4M3" ? 1 : c == "F32" ? 4 : es);
  };

  fs::create_directories(out);
  // Shards of at most 2 GiB, as hub checkpoints are split.
  const uint64_t shard_cap = 2ull << 30;
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    uint64_t b = bytes(ts[i]);
    if (in_shard > 0 && in_shard + b > shard_cap) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
  }
  std::string weight_map;
  std::vector<uint8_t> buf;
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::string header = "{";
    uint64_t off = 0;
    for (size_t k = 0; k < shards[s].size(); ++k) {
      const Tensor& t = ts[shards[s][k]];
      uint64_t b = bytes(t);
      header += (k ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + (t.code ? t.code : bf16 ? "BF16" : "F32") +
                "\",\"shape\":" + shape_json(t.shape) + ",\"data_offsets\":[" + std::to_string(off) + "," +
                std::to_string(off + b) + "]}";
      off += b;
      weight_map += std::string(weight_map.empty() ? "" : ",") + "\"" + t.name + "\":\"" + name + "\"";
    }
    header += "}";
    while ((header.size() + 8) % 8) header += ' ';
    std::ofstream f(out / name, std::ios::binary);
    uint64_t hl = header.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);
    f << header;
    for (size_t idx : shards[s]) {
      const std::string code = ts[idx].code ? ts[idx].code : "";
      if (code == "F8_E4M3") {
        fill_fp8(buf, ts[idx].numel(), idx + 1);
      } else if (code == "F32") {
        fill_scales(buf, ts[idx].numel(), idx + 1);
      } else if (!normal) {
        fill(buf, ts[idx].numel(), bf16, idx + 1);
      } else {
        const bool norm = ts[idx].shape.size() == 1;  // RMSNorm weights: around 1, as trained ones are
        fill_normal(buf, ts[idx].numel(), bf16, idx + 1, norm ? 1.0f : 0.0f, std_);
      }
      f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    }
    if (!f) {
      std::cerr << "make_checkpoint: cannot write " << (out / name) << "\n";
      return 1;
    }
    total += off;
  }
  std::ofstream(out / "model.safetensors.index.json")
      << "{\"metadata\":{\"total_size\":" << total << "},\"weight_map\":{" << weight_map << "}}\n";
  std::ofstream(out / "config.json")
      << (experts > 0 ? "{\"model_type\":\"mixtral\",\"architectures\":[\"MixtralForCausalLM\"],\"num_local_experts\":" +
                            std::to_string(experts) + ",\"num_experts_per_tok\":" + std::to_string(top_k) + ","
          : qwen3 ? std::string("{\"model_type\":\"qwen3\",\"architectures\":[\"Qwen3ForCausalLM\"],"
                                "\"attention_bias\":false,\"hidden_act\":\"silu\",")
                  : std::string("{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],"))
      << "\"vocab_size\":" << vocab
      << ",\"hidden_size\":" << hidden << ",\"intermediate_size\":" << inter
      << ",\"num_hidden_layers\":" << layers << ",\"num_attention_heads\":" << heads
      << ",\"num_key_value_heads\":" << kv << ",\"head_dim\":" << hd
      << (qwen3 ? ",\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0" : ",\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0")
      << ",\"max_position_embeddings\":" << max_pos
      << ",\"tie_word_embeddings\":" << (tie ? "true" : "false") << ",\"torch_dtype\":\""
      << (bf16 ? "bfloat16" : "float32") << "\""
      << (fp8 > 0 ? ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
                    "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[" +
                        std::to_string(fp8) + "," + std::to_string(fp8) + "]}"
                  : std::string())
      << "}\n";
  std::cout << out.string() << ": " << layers << " layers, " << ts.size() << " tensors, "
            << total / (1024 * 1024) << " MiB in " << shards.size() << " shard(s), largest tensor "
            << (vocab * hidden * es) / (1024 * 1024) << " MiB\n";
  return 0;
}
