// unet_config.cpp - reading UNet2DConditionModel's config.json the way diffusers 0.31's
// UNet2DConditionModel.__init__ reads it (models/unets/unet_2d_condition.py), for the Stable
// Diffusion 1.x / 2.x subset: what those UNets do not use is refused by its key.
#include "unet_config.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/error.hpp"

namespace mobius::diffusers {

namespace {

using nlohmann::json;

constexpr size_t kMaxBlocks = 8;            // SD has 4
constexpr int64_t kMaxChannels = 1 << 14;   // SD's widest block has 1280
constexpr int64_t kMaxLayers = 32;          // layers_per_block: SD has 2
constexpr int64_t kMaxTransformerLayers = 64;  // SDXL's deepest blocks have 10

[[noreturn]] void fail(const ConfigReader& r, const std::string& key, const std::string& why) {
  r.fail(key, why);
}

// An integer of the config (an integral float such as 8.0 too), within [lo, hi].
int64_t int_value(const ConfigReader& r, const std::string& key, const json& v, int64_t lo,
                  int64_t hi) {
  int64_t out = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(r, key, "is " + v.dump() + ", larger than any integer a config may hold");
    out = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e15) {
    out = static_cast<int64_t>(v.get<double>());
  } else {
    fail(r, key, "must be an integer, got " + describe_value(v));
  }
  if (out < lo || out > hi)
    fail(r, key, "is " + std::to_string(out) + "; it must be between " + std::to_string(lo) +
                     " and " + std::to_string(hi));
  return out;
}

int64_t get_int(const ConfigReader& r, const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  if (!r.has(key)) return def;
  return int_value(r, key, r.raw().at(key), lo, hi);
}

// A key diffusers takes as one integer for every block or as a list of one per down block.
std::vector<int64_t> per_block(const ConfigReader& r, const std::string& key, size_t n,
                               std::optional<int64_t> def, int64_t lo, int64_t hi) {
  if (!r.has(key)) {
    if (!def) fail(r, key, "is required (an integer, or a list of one per down block)");
    return std::vector<int64_t>(n, *def);
  }
  const json& v = r.raw().at(key);
  if (v.is_array()) {
    if (v.size() != n)
      fail(r, key, "has " + std::to_string(v.size()) + " entries; 'down_block_types' has " +
                       std::to_string(n) + " blocks");
    std::vector<int64_t> out;
    for (const json& e : v) {
      if (e.is_array())
        fail(r, key, "holds a list per block (an asymmetric UNet such as SDXL's refiner); "
                     "SD 1.x/2.x UNets have one integer per block");
      out.push_back(int_value(r, key, e, lo, hi));
    }
    return out;
  }
  return std::vector<int64_t>(n, int_value(r, key, v, lo, hi));
}

// A key SD 1.x/2.x UNets leave null (or leave out).
void require_null(const ConfigReader& r, const std::string& key, const std::string& what) {
  if (r.has(key))
    fail(r, key, "is " + describe_value(r.raw().at(key)) + "; " + what +
                     " is not part of an SD 1.x/2.x UNet (mobius builds it only when null)");
}

void require_string(const ConfigReader& r, const std::string& key, const std::string& def,
                    const std::vector<std::string>& allowed, const std::string& what) {
  const std::string v = r.get_string(key, def);
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "'" : ", '") + a + "'";
  fail(r, key, "is " + quote_value(v) + "; " + what + " (mobius builds " + list + ")");
}

std::vector<std::string> block_types(const ConfigReader& r, const std::string& key,
                                     const std::vector<std::string>& def,
                                     const std::string& cross, const std::string& plain) {
  std::vector<std::string> types = r.has(key) ? r.get_strings(key) : def;
  if (types.empty()) fail(r, key, "lists no blocks");
  if (types.size() > kMaxBlocks)
    fail(r, key, "lists " + std::to_string(types.size()) + " blocks; mobius builds at most " +
                     std::to_string(kMaxBlocks));
  for (std::string& t : types) {
    // get_down_block / get_up_block drop a "UNetRes" prefix.
    if (t.rfind("UNetRes", 0) == 0) t = t.substr(7);
    if (t != cross && t != plain)
      fail(r, key, "has block type " + quote_value(t) + "; an SD 1.x/2.x UNet has '" + cross +
                       "' and '" + plain + "' only");
  }
  return types;
}

bool bool_or_all_false(const ConfigReader& r, const std::string& key) {
  if (!r.has(key)) return false;
  const json& v = r.raw().at(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_boolean()) fail(r, key, "must be true, false or a list of them");
      if (e.get<bool>()) return true;
    }
    return false;
  }
  fail(r, key, "must be true, false or a list of them, got " + describe_value(v));
}

}  // namespace

UNetConfig read_unet_config(const json& raw) {
  ConfigReader r(raw, "config.json");
  UNetConfig c;

  // What the SD 1.x/2.x UNet does not have: refused by name rather than built wrong.
  if (r.has("num_attention_heads"))
    fail(r, "num_attention_heads",
         "is " + describe_value(raw.at("num_attention_heads")) +
             "; diffusers 0.31 refuses it too (the number of heads is read from "
             "'attention_head_dim', a naming quirk kept for compatibility): leave it null");
  require_null(r, "class_embed_type", "a class embedding");
  require_null(r, "num_class_embeds", "a class embedding");
  require_null(r, "addition_embed_type", "an added embedding (SDXL's text_time, Kandinsky's)");
  require_null(r, "encoder_hid_dim", "a projection of encoder_hidden_states");
  require_null(r, "encoder_hid_dim_type", "a projection of encoder_hidden_states");
  require_null(r, "time_cond_proj_dim", "a timestep condition (LCM's w embedding)");
  require_null(r, "time_embedding_act_fn", "an activation after the time embedding");
  require_null(r, "timestep_post_act", "an activation after the time embedding's linear_2");
  require_null(r, "reverse_transformer_layers_per_block", "an asymmetric up path");
  if (r.get_bool("dual_cross_attention", false))
    fail(r, "dual_cross_attention", "is true; the dual transformer (versatile diffusion) is not "
                                    "part of an SD 1.x/2.x UNet");
  if (r.get_bool("class_embeddings_concat", false))
    fail(r, "class_embeddings_concat", "is true; an SD 1.x/2.x UNet has no class embedding");
  if (bool_or_all_false(r, "only_cross_attention"))
    fail(r, "only_cross_attention", "is true; mobius builds transformer blocks whose attn1 is "
                                    "self-attention (false) only");
  require_string(r, "attention_type", "default", {"default"},
                 "GLIGEN's gated attention is not part of an SD 1.x/2.x UNet");
  require_string(r, "resnet_time_scale_shift", "default", {"default"},
                 "the resnets add the time embedding ('scale_shift' is not built)");
  require_string(r, "time_embedding_type", "positional", {"positional"},
                 "the timestep embedding is sinusoidal (Fourier features are not built)");
  require_string(r, "act_fn", "silu", {"silu", "swish"},
                 "the resnets and the time embedding use SiLU");

  c.down_block_types = block_types(
      r, "down_block_types",
      {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"},
      "CrossAttnDownBlock2D", "DownBlock2D");
  c.up_block_types = block_types(
      r, "up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"},
      "CrossAttnUpBlock2D", "UpBlock2D");
  const size_t n = c.down_block_types.size();
  if (c.up_block_types.size() != n)
    fail(r, "up_block_types", "lists " + std::to_string(c.up_block_types.size()) +
                                  " blocks; 'down_block_types' lists " + std::to_string(n));
  if (!r.has("mid_block_type") && raw.contains("mid_block_type")) {
    c.mid_block = false;  // null: no mid block
  } else {
    require_string(r, "mid_block_type", "UNetMidBlock2DCrossAttn", {"UNetMidBlock2DCrossAttn"},
                   "an SD 1.x/2.x UNet has a cross-attention mid block (or none: null)");
  }

  if (r.has("block_out_channels")) {
    if (!raw.at("block_out_channels").is_array())
      fail(r, "block_out_channels", "must be a list of one width per down block, got " +
                                        describe_value(raw.at("block_out_channels")));
    c.block_out_channels = per_block(r, "block_out_channels", n, std::nullopt, 1, kMaxChannels);
  } else {
    c.block_out_channels = {320, 640, 1280, 1280};
  }
  if (c.block_out_channels.size() != n)
    fail(r, "block_out_channels", "has " + std::to_string(c.block_out_channels.size()) +
                                      " entries; 'down_block_types' has " + std::to_string(n) +
                                      " blocks");
  c.layers_per_block = per_block(r, "layers_per_block", n, 2, 1, kMaxLayers);
  if (raw.contains("attention_head_dim") && raw.at("attention_head_dim").is_array())
    for (const json& e : raw.at("attention_head_dim"))
      if (e.is_null())
        fail(r, "attention_head_dim", "has a null entry; each block needs its number of heads");
  if (raw.contains("attention_head_dim") && raw.at("attention_head_dim").is_null())
    fail(r, "attention_head_dim", "is null; it gives each block's number of heads");
  c.attention_heads = per_block(r, "attention_head_dim", n, 8, 1, 1024);
  c.transformer_layers_per_block =
      per_block(r, "transformer_layers_per_block", n, 1, 1, kMaxTransformerLayers);
  {
    std::vector<int64_t> cross = per_block(r, "cross_attention_dim", n, 1280, 1, kMaxChannels);
    for (int64_t d : cross)
      if (d != cross[0])
        fail(r, "cross_attention_dim", "differs between blocks; the graph has one "
                                       "encoder_hidden_states input, of one width");
    c.cross_attention_dim = cross[0];
  }
  c.in_channels = get_int(r, "in_channels", 4, 1, 1024);
  c.out_channels = get_int(r, "out_channels", 4, 1, 1024);
  c.center_input_sample = r.get_bool("center_input_sample", false);
  c.flip_sin_to_cos = r.get_bool("flip_sin_to_cos", true);
  c.freq_shift = r.get_double("freq_shift", 0.0);
  c.downsample_padding = get_int(r, "downsample_padding", 1, 0, 1);
  c.mid_block_scale_factor = r.get_double("mid_block_scale_factor", 1.0);
  if (!(c.mid_block_scale_factor > 0))
    fail(r, "mid_block_scale_factor", "must be positive");
  if (raw.contains("norm_num_groups") && raw.at("norm_num_groups").is_null())
    fail(r, "norm_num_groups", "is null (no output norm); an SD 1.x/2.x UNet has group norms");
  c.norm_num_groups = get_int(r, "norm_num_groups", 32, 1, kMaxChannels);
  c.norm_eps = r.get_double("norm_eps", 1e-5);
  if (!(c.norm_eps > 0)) fail(r, "norm_eps", "must be positive");
  c.use_linear_projection = r.get_bool("use_linear_projection", false);
  c.upcast_attention = r.get_bool("upcast_attention", false);
  c.conv_in_kernel = get_int(r, "conv_in_kernel", 3, 1, 15);
  c.conv_out_kernel = get_int(r, "conv_out_kernel", 3, 1, 15);
  for (const char* k : {"conv_in_kernel", "conv_out_kernel"})
    if ((k == std::string("conv_in_kernel") ? c.conv_in_kernel : c.conv_out_kernel) % 2 == 0)
      fail(r, k, "is even; the convolution pads (kernel - 1) / 2 on each side, which keeps the "
                 "height and width only for an odd kernel");
  c.time_embed_dim = get_int(r, "time_embedding_dim", c.block_out_channels[0] * 4, 1, 4 * kMaxChannels);
  if (c.block_out_channels[0] < 2)
    fail(r, "block_out_channels", "starts with " + std::to_string(c.block_out_channels[0]) +
                                      "; the sinusoidal timestep embedding needs at least 2");
  if (c.block_out_channels[0] / 2 - c.freq_shift == 0)
    fail(r, "freq_shift", "equals half of block_out_channels[0]: the embedding's frequencies "
                          "divide by zero");

  // Heads: as wide as the block allows (channels // heads, at least 1); linear projections
  // reshape back to the block's channels, so their heads must divide them.
  auto check_heads = [&](int64_t channels, int64_t heads) {
    if (heads > channels)
      fail(r, "attention_head_dim", "gives " + std::to_string(heads) + " heads to a block of " +
                                        std::to_string(channels) + " channels (heads of width 0)");
    if (c.use_linear_projection && channels % heads != 0)
      fail(r, "attention_head_dim", "gives " + std::to_string(heads) +
                                        " heads, which do not divide a block of " +
                                        std::to_string(channels) +
                                        " channels (use_linear_projection reshapes to them)");
  };
  for (size_t i = 0; i < n; ++i) {
    if (c.down_block_types[i] == "CrossAttnDownBlock2D")
      check_heads(c.block_out_channels[i], c.attention_heads[i]);
    if (c.up_block_types[i] == "CrossAttnUpBlock2D")
      check_heads(c.block_out_channels[n - 1 - i], c.attention_heads[n - 1 - i]);
  }
  if (c.mid_block) check_heads(c.block_out_channels[n - 1], c.attention_heads[n - 1]);
  plan_unet(c);  // the skip connections and group norms must fit
  return c;
}

UNetPlan plan_unet(const UNetConfig& c) {
  json raw = json::object();
  ConfigReader r(raw, "config.json");
  const size_t n = c.blocks();
  UNetPlan p;
  auto groups = [&](int64_t channels, const std::string& where) {
    if (channels % c.norm_num_groups != 0)
      fail(r, "norm_num_groups", "(" + std::to_string(c.norm_num_groups) + ") does not divide the " +
                                     std::to_string(channels) + " channels of " + where);
  };
  groups(c.block_out_channels[0], "conv_norm_out");
  // Down: the skip connections, as UNet2DConditionModel.forward collects them (conv_in's output
  // first, then every resnet/attention output and every downsampler output).
  std::vector<int64_t> skips{c.block_out_channels[0]};
  int64_t output = c.block_out_channels[0];
  for (size_t i = 0; i < n; ++i) {
    DownBlockPlan b;
    b.cross_attention = c.down_block_types[i] == "CrossAttnDownBlock2D";
    b.in_channels = output;
    b.out_channels = output = c.block_out_channels[i];
    b.layers = c.layers_per_block[i];
    b.heads = c.attention_heads[i];
    b.transformer_layers = c.transformer_layers_per_block[i];
    b.downsample = i + 1 != n;
    const std::string name = "down_blocks." + std::to_string(i);
    for (int64_t j = 0; j < b.layers; ++j) {
      groups(j == 0 ? b.in_channels : b.out_channels, name + ".resnets." + std::to_string(j) + ".norm1");
      groups(b.out_channels, name + ".resnets." + std::to_string(j) + ".norm2");
      skips.push_back(b.out_channels);
    }
    if (b.downsample) skips.push_back(b.out_channels);
    p.down.push_back(b);
  }
  // Up: channels reversed; each block pops layers + 1 skips, the last resnet's from the next
  // wider block (in_channels), as get_up_block is told.
  output = c.block_out_channels[n - 1];
  for (size_t i = 0; i < n; ++i) {
    const size_t rev = n - 1 - i;
    UpBlockPlan b;
    b.cross_attention = c.up_block_types[i] == "CrossAttnUpBlock2D";
    const int64_t prev_output = output;
    b.out_channels = output = c.block_out_channels[rev];
    const int64_t input = c.block_out_channels[rev == 0 ? 0 : rev - 1];
    const int64_t layers = c.layers_per_block[rev] + 1;
    b.heads = c.attention_heads[rev];
    b.transformer_layers = c.transformer_layers_per_block[rev];
    b.upsample = i + 1 != n;
    const std::string name = "up_blocks." + std::to_string(i);
    for (int64_t j = 0; j < layers; ++j) {
      const int64_t skip = j == layers - 1 ? input : b.out_channels;
      const int64_t hidden = j == 0 ? prev_output : b.out_channels;
      const std::string res = name + ".resnets." + std::to_string(j);
      if (skips.empty())
        fail(r, "layers_per_block", "leaves " + res + " without a skip connection to "
                                    "concatenate (the up path has more resnets than the down "
                                    "path has outputs)");
      if (skips.back() != skip)
        fail(r, "layers_per_block", "makes the skip connection " + res + " concatenates " +
                                        std::to_string(skips.back()) + " channels wide; its "
                                        "weights expect " + std::to_string(skip));
      skips.pop_back();
      groups(hidden + skip, res + ".norm1");
      groups(b.out_channels, res + ".norm2");
      b.skip_channels.push_back(skip);
      b.resnet_in_channels.push_back(hidden + skip);
    }
    if (b.upsample && skips.empty())
      fail(r, "layers_per_block", "leaves " + name + "'s upsampler without a skip connection to "
                                  "take its size from");
    p.up.push_back(b);
  }
  return p;
}

}  // namespace mobius::diffusers
