// make_tiny_llama - writes a tiny, randomly initialised Llama checkpoint (config.json + model.safetensors) for the demo.
//
// usage: make_tiny_llama OUT_DIR [--seed N]
//
// Standard library only, so the demo needs nothing beyond a C++ compiler: the safetensors file is
// written by hand (8-byte little-endian header length, JSON header, raw little-endian data).
// The values are deterministic for a given seed on every platform: the generator is our own
// (splitmix64 + Box-Muller), because std::normal_distribution's algorithm is implementation-defined.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
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

// The model: a LlamaForCausalLM small enough to build and run in well under a second.
struct Config {
  int hidden = 64;
  int intermediate = 128;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 16;
  int vocab = 256;
};

std::string config_json(const Config& c) {
  std::ostringstream o;
  o << "{\n"
    << "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    << "  \"model_type\": \"llama\",\n"
    << "  \"hidden_size\": " << c.hidden << ",\n"
    << "  \"intermediate_size\": " << c.intermediate << ",\n"
    << "  \"num_hidden_layers\": " << c.layers << ",\n"
    << "  \"num_attention_heads\": " << c.heads << ",\n"
    << "  \"num_key_value_heads\": " << c.kv_heads << ",\n"
    << "  \"head_dim\": " << c.head_dim << ",\n"
    << "  \"vocab_size\": " << c.vocab << ",\n"
    << "  \"rms_norm_eps\": 1e-06,\n"
    << "  \"rope_theta\": 10000.0,\n"
    << "  \"rope_scaling\": null,\n"
    << "  \"max_position_embeddings\": 256,\n"
    << "  \"attention_bias\": false,\n"
    << "  \"mlp_bias\": false,\n"
    << "  \"tie_word_embeddings\": false,\n"
    << "  \"torch_dtype\": \"float32\",\n"
    << "  \"bos_token_id\": 1,\n"
    << "  \"eos_token_id\": 2,\n"
    << "  \"hidden_act\": \"silu\",\n"
    << "  \"use_cache\": true\n"
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
  double normal() {  // Box-Muller; one value per call keeps the stream simple
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform());
  }
};

// Each tensor gets its own stream derived from (seed, name), so adding or reordering tensors
// does not change the values of the others.
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

// mean + stddev * N(0, 1) for every element.
Tensor make(const std::string& name, std::vector<int64_t> shape, uint64_t seed, double mean, double stddev) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor t{name, std::move(shape), std::vector<float>(static_cast<size_t>(n))};
  Rng rng{stream_seed(seed, name)};
  for (float& v : t.data) v = static_cast<float>(mean + stddev * rng.normal());
  return t;
}

// Every tensor a LlamaForCausalLM of this config has, with the Hugging Face names.
//
// Scales: the residual stream starts at the embedding, so embeddings and lm_head get a large scale
// (0.5) to give the logits a wide spread and the greedy choice a clear winner. The projections use
// 1/sqrt(fan_in), which keeps activations near unit size: with the usual 0.02 the attention and MLP
// contributions would vanish next to the embedding and the next token would depend only on the
// current one, so greedy output would fall into a short loop at once.
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
    ts.push_back(norm(p + "post_attention_layernorm.weight", h));
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

// The whole file in memory (about 0.5 MB here): header, then the tensors back to back.
std::string safetensors_bytes(const std::vector<Tensor>& ts) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t offset = 0;
  for (const Tensor& t : ts) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header += ",\"" + t.name + "\":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
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

// Write to a temporary name, then rename: an interrupted run never leaves a truncated file.
void write_file(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot open " + tmp.string() + " for writing: " + std::strerror(errno));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) throw std::runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  }
}

uint64_t parse_seed(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("--seed needs a non-negative integer, got '" + s + "'");
  }
  try {
    return std::stoull(s);
  } catch (const std::out_of_range&) {
    throw std::invalid_argument("--seed " + s + " is out of range (max 18446744073709551615)");
  }
}

constexpr const char* kUsage = "usage: make_tiny_llama OUT_DIR [--seed N]";

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  uint64_t seed = 0;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        std::cout << kUsage << "\nWrites OUT_DIR/config.json and OUT_DIR/model.safetensors: a random "
                     "2-layer Llama (hidden 64, vocab 256), the same for the same seed (default 0).\n";
        return 0;
      } else if (a == "--seed") {
        if (i + 1 >= argc) throw std::invalid_argument("--seed needs a value");
        seed = parse_seed(argv[++i]);
      } else if (a.rfind("--seed=", 0) == 0) {
        seed = parse_seed(a.substr(7));
      } else if (!a.empty() && a[0] == '-') {
        throw std::invalid_argument("unknown option '" + a + "'");
      } else if (out_dir.empty()) {
        out_dir = a;
      } else {
        throw std::invalid_argument("more than one OUT_DIR ('" + out_dir + "', '" + a + "')");
      }
    }
    if (out_dir.empty()) throw std::invalid_argument("OUT_DIR is missing");
  } catch (const std::invalid_argument& e) {
    std::cerr << "make_tiny_llama: " << e.what() << "\n" << kUsage << "\n";
    return 2;
  }

  try {
    const fs::path dir(out_dir);
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
      throw std::runtime_error(dir.string() + " exists and is not a directory");
    }
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create " + dir.string() + ": " + ec.message());

    const Config cfg;
    const std::vector<Tensor> weights = make_weights(cfg, seed);
    const std::string st = safetensors_bytes(weights);
    write_file(dir / "model.safetensors", st);
    write_file(dir / "config.json", config_json(cfg));
    std::cout << "make_tiny_llama: wrote " << (dir / "config.json").string() << " and "
              << (dir / "model.safetensors").string() << " (" << weights.size() << " tensors, " << st.size()
              << " bytes, seed " << seed << ")\n";
  } catch (const std::exception& e) {
    std::cerr << "make_tiny_llama: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
