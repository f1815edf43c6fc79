// make_checkpoint.cpp - writes a tiny random my_new_arch checkpoint (config.json + model.safetensors).
//
// usage: make_my_new_arch_checkpoint OUT_DIR [--seed N]
//
// Standard library only: the checkpoint is what a training framework would hand you, so this
// program knows nothing of mobius. The safetensors file is written by hand (8-byte little-endian
// header length, JSON header, raw little-endian float32 data). Values are the same for a given
// seed on every platform: the generator is our own (splitmix64 + Box-Muller), because
// std::normal_distribution's algorithm is implementation-defined.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Small enough to build and run in well under a second; two layers so the per-layer cache
// naming (past_key_values.<i>.*) is exercised, and kv_heads < heads so attention is grouped.
struct Config {
  int hidden = 64;
  int intermediate = 128;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 16;
  int vocab = 256;
  double residual_scale = 0.5;  // not 1.0, so the scaled path of the layer is the one built
};

std::string config_json(const Config& c) {
  std::ostringstream o;
  o << "{\n"
    << "  \"architectures\": [\"MyNewArchForCausalLM\"],\n"
    << "  \"model_type\": \"my_new_arch\",\n"
    << "  \"hidden_size\": " << c.hidden << ",\n"
    << "  \"intermediate_size\": " << c.intermediate << ",\n"
    << "  \"num_hidden_layers\": " << c.layers << ",\n"
    << "  \"num_attention_heads\": " << c.heads << ",\n"
    << "  \"num_key_value_heads\": " << c.kv_heads << ",\n"
    << "  \"head_dim\": " << c.head_dim << ",\n"
    << "  \"vocab_size\": " << c.vocab << ",\n"
    << "  \"residual_scale\": " << c.residual_scale << ",\n"
    << "  \"hidden_act\": \"silu\",\n"
    << "  \"rms_norm_eps\": 1e-06,\n"
    << "  \"rope_theta\": 10000.0,\n"
    << "  \"max_position_embeddings\": 256,\n"
    << "  \"tie_word_embeddings\": false,\n"
    << "  \"torch_dtype\": \"float32\"\n"
    << "}\n";
  return o.str();
}

// splitmix64: tiny, well mixed, and the same on every platform.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() {  // in (0, 1]: never 0, so log() below is finite
    return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53;
  }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform()); }
};

// Each tensor gets its own stream derived from (seed, name), so adding a tensor does not change
// the values of the others.
uint64_t stream_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Tensor make(const std::string& name, std::vector<int64_t> shape, uint64_t seed, double mean, double stddev) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor t{name, std::move(shape), std::vector<float>(static_cast<size_t>(n))};
  Rng rng{stream_seed(seed, name)};
  for (float& v : t.data) v = static_cast<float>(mean + stddev * rng.normal());
  return t;
}

// Every tensor the plugin's model declares, by the names its modules' paths give them. Note what
// is absent: this layer has no post_attention_layernorm (attention and MLP share one norm).
// Projections use 1/sqrt(fan_in) so activations stay near unit size through the layers.
std::vector<Tensor> make_weights(const Config& c, uint64_t seed) {
  const int64_t h = c.hidden, q = int64_t{c.heads} * c.head_dim, kv = int64_t{c.kv_heads} * c.head_dim;
  const int64_t in = c.intermediate;
  auto proj = [&](const std::string& name, int64_t out_dim, int64_t in_dim) {
    return make(name, {out_dim, in_dim}, seed, 0.0, 1.0 / std::sqrt(static_cast<double>(in_dim)));
  };
  auto norm = [&](const std::string& name, int64_t dim) { return make(name, {dim}, seed, 1.0, 0.05); };

  std::vector<Tensor> ts;
  ts.push_back(make("model.embed_tokens.weight", {c.vocab, h}, seed, 0.0, 0.5));
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    ts.push_back(norm(p + "input_layernorm.weight", h));
    ts.push_back(proj(p + "self_attn.q_proj.weight", q, h));
    ts.push_back(proj(p + "self_attn.k_proj.weight", kv, h));
    ts.push_back(proj(p + "self_attn.v_proj.weight", kv, h));
    ts.push_back(proj(p + "self_attn.o_proj.weight", h, q));
    ts.push_back(proj(p + "mlp.gate_proj.weight", in, h));
    ts.push_back(proj(p + "mlp.up_proj.weight", in, h));
    ts.push_back(proj(p + "mlp.down_proj.weight", h, in));
  }
  ts.push_back(norm("model.norm.weight", h));
  ts.push_back(make("lm_head.weight", {c.vocab, h}, seed, 0.0, 0.5));
  return ts;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string safetensors_bytes(const std::vector<Tensor>& ts) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t offset = 0;
  for (const Tensor& t : ts) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header += ",\"" + t.name + "\":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  // Pad with spaces so the data starts 8-byte aligned, as the safetensors writer does.
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::string out;
  out.reserve(8 + header.size() + offset);
  put_le(out, header.size(), 8);
  out += header;
  for (const Tensor& t : ts) {
    for (float v : t.data) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      put_le(out, bits, 4);  // explicit little-endian, whatever the host
    }
  }
  return out;
}

// Written under a temporary name, then renamed: an interrupted run never leaves a truncated file.
void write_file(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot open " + tmp.string() + " for writing");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) throw std::runtime_error("cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("cannot rename " + tmp.string() + ": " + ec.message());
}

constexpr const char* kUsage = "usage: make_my_new_arch_checkpoint OUT_DIR [--seed N]";

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage << "\nWrites OUT_DIR/config.json and OUT_DIR/model.safetensors: a random "
                   "2-layer my_new_arch model (hidden 64, vocab 256, residual_scale 0.5).\n";
      return 0;
    }
    if (a == "--seed" && i + 1 < argc) {
      const std::string s = argv[++i];
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19) {
        std::cerr << "make_my_new_arch_checkpoint: --seed needs a non-negative integer, got '" << s << "'\n";
        return 2;
      }
      seed = std::stoull(s);
    } else if (!a.empty() && a[0] != '-' && out_dir.empty()) {
      out_dir = a;
    } else {
      std::cerr << "make_my_new_arch_checkpoint: unexpected argument '" << a << "'\n" << kUsage << "\n";
      return 2;
    }
  }
  if (out_dir.empty()) {
    std::cerr << kUsage << "\n";
    return 2;
  }
  try {
    const fs::path dir(out_dir);
    fs::create_directories(dir);
    const Config cfg;
    write_file(dir / "model.safetensors", safetensors_bytes(make_weights(cfg, seed)));
    write_file(dir / "config.json", config_json(cfg));
    std::cout << "wrote " << (dir / "config.json").string() << " and "
              << (dir / "model.safetensors").string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "make_my_new_arch_checkpoint: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
