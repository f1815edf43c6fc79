// make_unet.cpp - writes a synthetic diffusers UNet2DConditionModel folder for the UNet memory
// benchmark (bench/unet_memory.sh): config.json with Stable Diffusion 1.5's layout and
// diffusion_pytorch_model.safetensors holding every tensor diffusers' model has, under diffusers'
// names and shapes, every tensor's bytes distinct (seeded per tensor, as make_checkpoint's).
//
// usage: make_unet OUT_DIR [f32|bf16] [OPTIONS]
//   Without options: SD 1.5's UNet (block_out_channels 320,640,1280,1280, 2 layers per block,
//   8 heads, cross_attention_dim 768): 859,520,964 parameters, 3,278 MiB in f32, weights uniform
//   in [-0.05, 0.05) (group- and layer-norm weights too: the benchmark converts, it never runs).
//   --width-mult M        every block's channels times M, rounded to the nearest multiple of
//                         norm_num_groups (32); the parameters grow about as M^2
//   --channels C0,C1,C2,C3  block_out_channels given outright (multiples of 32)
//   --layers-per-block N  (default 2)
//   --cross-dim N         cross_attention_dim (default 768)
//   --linear-projection   use_linear_projection true (SD 2.x): proj_in/proj_out are Linear
// Up to 2 GiB the weights are one diffusion_pytorch_model.safetensors; beyond, shards of at
// most 2 GiB (diffusion_pytorch_model-0000K-of-0000N.safetensors) and their
// diffusion_pytorch_model.safetensors.index.json, as diffusers' save_pretrained splits them.
// The tensor list follows diffusers 0.31's UNet2DConditionModel.__init__
// (models/unets/unet_2d_condition.py, unet_2d_blocks.py get_down_block / get_up_block,
// resnet.py ResnetBlock2D, transformers/transformer_2d.py, attention.py): within each file the
// tensors are sorted by name, as the safetensors library writes them.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "synthetic.hpp"

namespace fs = std::filesystem;
using bench::fill;
using bench::put;
using bench::splitmix;
using bench::Tensor;

namespace {

std::string ints_json(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

// The UNet's tensors, as diffusers registers them.
class Unet {
 public:
  Unet(std::vector<int64_t> channels, int64_t layers_per_block, int64_t attention_heads,
       int64_t cross_dim, bool linear_projection)
      : ch(std::move(channels)), layers(layers_per_block), heads(attention_heads), cross(cross_dim),
        linear(linear_projection) {}

  std::vector<Tensor> tensors() {
    ts.clear();
    const size_t n = ch.size();
    const int64_t temb = ch[0] * 4;  // time_embed_dim
    conv("conv_in", in_channels, ch[0], 3);
    lin("time_embedding.linear_1", ch[0], temb);
    lin("time_embedding.linear_2", temb, temb);
    // Down blocks: CrossAttnDownBlock2D x (n-1), then DownBlock2D; a downsampler but on the last.
    int64_t output = ch[0];
    for (size_t i = 0; i < n; ++i) {
      const int64_t input = output;
      output = ch[i];
      const std::string p = "down_blocks." + std::to_string(i) + ".";
      for (int64_t j = 0; j < layers; ++j) {
        resnet(p + "resnets." + std::to_string(j), j == 0 ? input : output, output, temb);
        if (i + 1 != n) transformer(p + "attentions." + std::to_string(j), output);
      }
      if (i + 1 != n) conv(p + "downsamplers.0.conv", output, output, 3);
    }
    // UNetMidBlock2DCrossAttn: resnet, transformer, resnet at the widest channels.
    resnet("mid_block.resnets.0", ch[n - 1], ch[n - 1], temb);
    transformer("mid_block.attentions.0", ch[n - 1]);
    resnet("mid_block.resnets.1", ch[n - 1], ch[n - 1], temb);
    // Up blocks: UpBlock2D, then CrossAttnUpBlock2D x (n-1), channels reversed; layers + 1
    // resnets, each concatenating a skip connection (the last one's from the next wider block).
    output = ch[n - 1];
    for (size_t i = 0; i < n; ++i) {
      const size_t rev = n - 1 - i;
      const int64_t prev_output = output;
      output = ch[rev];
      const int64_t input = ch[rev == 0 ? 0 : rev - 1];
      const std::string p = "up_blocks." + std::to_string(i) + ".";
      for (int64_t j = 0; j < layers + 1; ++j) {
        const int64_t skip = j == layers ? input : output;
        const int64_t hidden = j == 0 ? prev_output : output;
        resnet(p + "resnets." + std::to_string(j), hidden + skip, output, temb);
        if (i != 0) transformer(p + "attentions." + std::to_string(j), output);
      }
      if (i + 1 != n) conv(p + "upsamplers.0.conv", output, output, 3);
    }
    norm("conv_norm_out", ch[0]);
    conv("conv_out", ch[0], out_channels, 3);
    return ts;
  }

  std::vector<int64_t> ch;
  int64_t layers, heads, cross;
  bool linear;
  int64_t in_channels = 4, out_channels = 4;

 private:
  void add(const std::string& name, std::vector<int64_t> shape) { ts.push_back({name, std::move(shape)}); }
  void norm(const std::string& p, int64_t c) {
    add(p + ".weight", {c});
    add(p + ".bias", {c});
  }
  void conv(const std::string& p, int64_t in, int64_t out, int64_t k) {
    add(p + ".weight", {out, in, k, k});
    add(p + ".bias", {out});
  }
  void lin(const std::string& p, int64_t in, int64_t out, bool bias = true) {
    add(p + ".weight", {out, in});
    if (bias) add(p + ".bias", {out});
  }
  // ResnetBlock2D (time_embedding_norm "default"); conv_shortcut when the channels change.
  void resnet(const std::string& p, int64_t in, int64_t out, int64_t temb) {
    norm(p + ".norm1", in);
    conv(p + ".conv1", in, out, 3);
    lin(p + ".time_emb_proj", temb, out);
    norm(p + ".norm2", out);
    conv(p + ".conv2", out, out, 3);
    if (in != out) conv(p + ".conv_shortcut", in, out, 1);
  }
  // Transformer2DModel (one BasicTransformerBlock): heads of channels // heads, GEGLU 4x.
  void transformer(const std::string& p, int64_t c) {
    const int64_t inner = heads * (c / heads);
    norm(p + ".norm", c);
    if (linear) lin(p + ".proj_in", c, inner);
    else conv(p + ".proj_in", c, inner, 1);
    const std::string b = p + ".transformer_blocks.0.";
    norm(b + "norm1", inner);
    lin(b + "attn1.to_q", inner, inner, false);
    lin(b + "attn1.to_k", inner, inner, false);
    lin(b + "attn1.to_v", inner, inner, false);
    lin(b + "attn1.to_out.0", inner, inner);
    norm(b + "norm2", inner);
    lin(b + "attn2.to_q", inner, inner, false);
    lin(b + "attn2.to_k", cross, inner, false);
    lin(b + "attn2.to_v", cross, inner, false);
    lin(b + "attn2.to_out.0", inner, inner);
    norm(b + "norm3", inner);
    lin(b + "ff.net.0.proj", inner, 8 * inner);
    lin(b + "ff.net.2", 4 * inner, inner);
    if (linear) lin(p + ".proj_out", inner, c);
    else conv(p + ".proj_out", inner, c, 1);
  }
  std::vector<Tensor> ts;
};

std::vector<int64_t> parse_ints(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoll(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: make_unet OUT_DIR [f32|bf16] [--width-mult M | --channels C0,C1,C2,C3]\n"
      "         [--layers-per-block N] [--cross-dim N] [--linear-projection]\n";
  std::vector<std::string> pos;
  std::vector<int64_t> base{320, 640, 1280, 1280}, channels;
  double mult = 1.0;
  int64_t layers = 2, cross = 768;
  const int64_t heads = 8, groups = 32;
  bool linear = false, have_mult = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      pos.push_back(a);
      continue;
    }
    if (a == "--linear-projection") {
      linear = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "make_unet: " << a << " needs a value\n" << usage;
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--width-mult") mult = std::atof(v.c_str()), have_mult = true;
    else if (a == "--channels") channels = parse_ints(v);
    else if (a == "--layers-per-block") layers = std::atoll(v.c_str());
    else if (a == "--cross-dim") cross = std::atoll(v.c_str());
    else {
      std::cerr << "make_unet: unknown option " << a << "\n" << usage;
      return 2;
    }
  }
  if (pos.empty() || pos.size() > 2) {
    std::cerr << usage;
    return 2;
  }
  const fs::path out = pos[0];
  const std::string dtype = pos.size() > 1 ? pos[1] : "f32";
  if (dtype != "f32" && dtype != "bf16") {
    std::cerr << "make_unet: dtype must be f32 or bf16\n";
    return 2;
  }
  if (have_mult && !channels.empty()) {
    std::cerr << "make_unet: --width-mult and --channels exclude each other\n";
    return 2;
  }
  if (channels.empty()) {
    if (!(mult > 0)) {
      std::cerr << "make_unet: --width-mult must be positive\n";
      return 2;
    }
    for (int64_t c : base)
      channels.push_back(std::max<int64_t>(groups, static_cast<int64_t>(static_cast<double>(c) * mult / groups + 0.5) * groups));
  }
  if (channels.size() != 4 || layers < 1 || cross < 1) {
    std::cerr << "make_unet: --channels needs 4 widths; --layers-per-block and --cross-dim must be positive\n";
    return 2;
  }
  for (int64_t c : channels)
    if (c < groups || c % groups != 0) {
      std::cerr << "make_unet: every block's channels must be a positive multiple of " << groups
                << " (norm_num_groups), got " << c << "\n";
      return 2;
    }

  const bool bf16 = dtype == "bf16";
  const uint64_t es = bf16 ? 2 : 4;
  Unet unet(channels, layers, heads, cross, linear);
  std::vector<Tensor> ts = unet.tensors();
  std::sort(ts.begin(), ts.end(), [](const Tensor& a, const Tensor& b) { return a.name < b.name; });

  fs::create_directories(out);
  // Shards of at most 2 GiB, in name order; one shard is written unsharded, without an index.
  const uint64_t shard_cap = 2ull << 30;
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, params = 0, largest = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const uint64_t b = ts[i].numel() * es;
    if (in_shard > 0 && in_shard + b > shard_cap) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
    params += ts[i].numel();
    largest = std::max(largest, b);
  }
  const std::string stem = "diffusion_pytorch_model";
  std::string weight_map;
  std::vector<uint8_t> buf;
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[96];
    if (shards.size() == 1)
      std::snprintf(name, sizeof(name), "%s.safetensors", stem.c_str());
    else
      std::snprintf(name, sizeof(name), "%s-%05zu-of-%05zu.safetensors", stem.c_str(), s + 1, shards.size());
    std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
    uint64_t off = 0;
    for (size_t idx : shards[s]) {
      const Tensor& t = ts[idx];
      const uint64_t b = t.numel() * es;
      header += ",\"" + t.name + "\":{\"dtype\":\"" + (bf16 ? "BF16" : "F32") + "\",\"shape\":" +
                ints_json(t.shape) + ",\"data_offsets\":[" + std::to_string(off) + "," +
                std::to_string(off + b) + "]}";
      off += b;
      weight_map += std::string(weight_map.empty() ? "" : ",") + "\"" + t.name + "\":\"" + name + "\"";
    }
    header += "}";
    while (header.size() % 8) header += ' ';
    std::ofstream f(out / name, std::ios::binary);
    const uint64_t hl = header.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);
    f << header;
    for (size_t idx : shards[s]) {
      fill(buf, ts[idx].numel(), bf16, idx + 1);
      f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    }
    if (!f) {
      std::cerr << "make_unet: cannot write " << (out / name) << "\n";
      return 1;
    }
    total += off;
  }
  if (shards.size() > 1)
    std::ofstream(out / (stem + ".safetensors.index.json"))
        << "{\"metadata\":{\"total_size\":" << total << "},\"weight_map\":{" << weight_map << "}}\n";
  std::ofstream(out / "config.json")
      << "{\"_class_name\":\"UNet2DConditionModel\",\"_diffusers_version\":\"0.31.0\","
         "\"act_fn\":\"silu\",\"attention_head_dim\":"
      << heads << ",\"block_out_channels\":" << ints_json(channels)
      << ",\"center_input_sample\":false,\"cross_attention_dim\":" << cross
      << ",\"down_block_types\":[\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\","
         "\"CrossAttnDownBlock2D\",\"DownBlock2D\"],\"downsample_padding\":1,"
         "\"flip_sin_to_cos\":true,\"freq_shift\":0,\"in_channels\":"
      << unet.in_channels << ",\"layers_per_block\":" << layers
      << ",\"mid_block_scale_factor\":1,\"mid_block_type\":\"UNetMidBlock2DCrossAttn\","
         "\"norm_eps\":1e-05,\"norm_num_groups\":"
      << groups << ",\"out_channels\":" << unet.out_channels
      << ",\"sample_size\":64,\"up_block_types\":[\"UpBlock2D\",\"CrossAttnUpBlock2D\","
         "\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"],\"use_linear_projection\":"
      << (linear ? "true" : "false") << "}\n";
  std::cout << out.string() << ": channels " << ints_json(channels) << ", " << ts.size() << " tensors, "
            << params << " parameters, " << total / (1024 * 1024) << " MiB in " << shards.size()
            << " file(s), largest tensor " << largest / (1024 * 1024) << " MiB\n";
  return 0;
}
