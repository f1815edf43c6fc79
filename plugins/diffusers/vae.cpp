// vae.cpp - diffusers' AutoencoderKL (Stable Diffusion's VAE) as two graphs, "encoder" and
// "decoder", each built from its own half of one checkpoint.
//
// Semantics are diffusers 0.31's (autoencoders/autoencoder_kl.py, autoencoders/vae.py Encoder and
// Decoder, unets/unet_2d_blocks.py DownEncoderBlock2D, UpDecoderBlock2D and UNetMidBlock2D), from
// the SDK's convolutional parts (mobius/sdk/conv.hpp). Every group norm of the VAE has eps 1e-6;
// the mid block's attention is one head over all the channels.
//
// encoder: sample [batch_size, in_channels, height, width] -> latent_dist [batch_size,
//   2 * latent_channels, latent_height, latent_width], the quant_conv output (the mean and the log
//   variance of the latent distribution, concatenated on the channels).
// decoder: latent_sample [batch_size, latent_channels, latent_height, latent_width] (already
//   divided by scaling_factor: the graph does not scale) -> sample [batch_size, out_channels,
//   height, width].
// Inputs and outputs are in the activation dtype (float16 in a float16 build).
#include <cmath>

#include "diffusers.hpp"
#include "mobius/sdk/config.hpp"
#include "mobius/sdk/conv.hpp"
#include "mobius/sdk/layers.hpp"

namespace mobius::diffusers {
namespace {

using nlohmann::json;
using namespace mobius::nn;

// What the graphs read of config.json (diffusers' AutoencoderKL.__init__ defaults), plus the
// scaling the pipeline applies outside the graphs, kept for the record.
struct VaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t latent_channels = 4;
  std::vector<int64_t> block_out_channels{64};
  int64_t layers_per_block = 1;
  int64_t norm_num_groups = 32;
  bool mid_block_add_attention = true;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool force_upcast = true;
  double scaling_factor = 0.18215;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(VaeConfig, in_channels, out_channels,
                                                latent_channels, block_out_channels,
                                                layers_per_block, norm_num_groups,
                                                mid_block_add_attention, use_quant_conv,
                                                use_post_quant_conv, force_upcast, scaling_factor)

constexpr double kEps = 1e-6;  // every GroupNorm of the VAE (Encoder, Decoder, their blocks)

// An integer of config.json within [lo, hi] (plausible sizes; no released VAE comes near hi).
int64_t bounded(const ConfigReader& r, const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) r.fail(key, "is " + std::to_string(v) + ", smaller than " + std::to_string(lo));
  if (v > hi) r.fail(key, "is " + std::to_string(v) + ", larger than " + std::to_string(hi));
  return v;
}

json parse(const json& raw) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  VaeConfig c;
  const std::string act = r.get_string("act_fn", "silu");
  if (act != "silu" && act != "swish")
    r.fail("act_fn", "is " + quote_value(act) + "; AutoencoderKL is built with silu only");
  c.in_channels = bounded(r, "in_channels", r.get_int("in_channels", 3), 1, 64);
  c.out_channels = bounded(r, "out_channels", r.get_int("out_channels", 3), 1, 64);
  c.latent_channels = bounded(r, "latent_channels", r.get_int("latent_channels", 4), 1, 1024);
  c.layers_per_block = bounded(r, "layers_per_block", r.get_int("layers_per_block", 1), 1, 16);
  c.norm_num_groups = bounded(r, "norm_num_groups", r.get_int("norm_num_groups", 32), 1, 1024);
  c.block_out_channels = r.get_ints("block_out_channels", std::vector<int64_t>{64});
  if (c.block_out_channels.empty() || c.block_out_channels.size() > 8)
    r.fail("block_out_channels", "has " + std::to_string(c.block_out_channels.size()) +
                                     " entries; a VAE has 1 to 8 blocks");
  for (int64_t ch : c.block_out_channels) {
    bounded(r, "block_out_channels", ch, 1, 8192);
    if (ch % c.norm_num_groups != 0)
      r.fail("norm_num_groups", "(" + std::to_string(c.norm_num_groups) +
                                    ") must divide every entry of 'block_out_channels' (" +
                                    std::to_string(ch) + ")");
  }
  const size_t blocks = c.block_out_channels.size();
  auto block_types = [&](const std::string& key, const std::string& only) {
    std::vector<std::string> types = r.has(key) ? r.get_strings(key) : std::vector<std::string>{only};
    if (types.size() != blocks)
      r.fail(key, "has " + std::to_string(types.size()) + " entries for the " +
                      std::to_string(blocks) + " of 'block_out_channels'");
    for (const auto& t : types)
      if (t != only)
        r.fail(key, "holds " + quote_value(t) + "; AutoencoderKL is built with " + only + " only");
  };
  block_types("down_block_types", "DownEncoderBlock2D");
  block_types("up_block_types", "UpDecoderBlock2D");
  c.mid_block_add_attention = r.get_bool("mid_block_add_attention", true);
  c.use_quant_conv = r.get_bool("use_quant_conv", true);
  c.use_post_quant_conv = r.get_bool("use_post_quant_conv", true);
  // diffusers types force_upcast as a float whose truth counts.
  if (r.has("force_upcast")) {
    const json& f = raw.at("force_upcast");
    if (f.is_boolean()) c.force_upcast = f.get<bool>();
    else if (f.is_number()) c.force_upcast = f.get<double>() != 0.0;
    else r.fail("force_upcast", "must be true or false, got " + describe_value(f));
  }
  c.scaling_factor = r.get_double("scaling_factor", 0.18215);
  if (r.has("norm_type") && r.get_string("norm_type") != "group")
    r.fail("norm_type", "is " + quote_value(r.get_string("norm_type")) +
                            "; AutoencoderKL is built with group norms only");
  return json(c);
}

// ---------------------------------------------------------------------------------------------
// The modules, named as diffusers names them (so their parameter paths are the checkpoint's).

// UNetMidBlock2D without a time embedding: resnets.0, attentions.0 (one head over all the
// channels, when add_attention), resnets.1.
class MidBlock : public Module {
 public:
  MidBlock(int64_t ch, int64_t groups, bool attention)
      : r0_(add<ResnetBlock2D>("resnets.0", ch, ch, 0, groups, kEps)),
        attn_(attention ? &add<SpatialSelfAttention>("attentions.0", ch, 1, groups, kEps) : nullptr),
        r1_(add<ResnetBlock2D>("resnets.1", ch, ch, 0, groups, kEps)) {}
  Value forward(Graph& g, Value x) const {
    x = r0_.forward(g, x);
    if (attn_) x = attn_->forward(g, x);
    return r1_.forward(g, x);
  }

 private:
  ResnetBlock2D& r0_;
  SpatialSelfAttention* attn_;
  ResnetBlock2D& r1_;
};

enum class Resample { Down, Up };

// DownEncoderBlock2D (Resample::Down) and UpDecoderBlock2D (Up): `layers` resnets, then (but in
// the last block) a stride-2 conv after a (0, 1, 0, 1) pad, or a nearest 2x upsample and a 3x3
// conv.
class ResnetBlocks : public Module {
 public:
  ResnetBlocks(int64_t in, int64_t out, int64_t layers, int64_t groups, Resample r, bool resample) {
    for (int64_t i = 0; i < layers; ++i)
      resnets_.push_back(&add<ResnetBlock2D>("resnets." + std::to_string(i), i == 0 ? in : out, out,
                                             0, groups, kEps));
    if (resample && r == Resample::Down) down_ = &add<Downsample2D>("downsamplers.0", out, true, 0, out);
    if (resample && r == Resample::Up) up_ = &add<Upsample2D>("upsamplers.0", out, true, out);
  }
  Value forward(Graph& g, Value x) const {
    for (const auto* r : resnets_) x = r->forward(g, x);
    if (down_) return down_->forward(g, x);
    return up_ ? up_->forward(g, x) : x;
  }

 private:
  std::vector<ResnetBlock2D*> resnets_;
  Downsample2D* down_ = nullptr;
  Upsample2D* up_ = nullptr;
};

// What the Encoder and the Decoder share: conv_in, the blocks and the mid block (in an order
// of their own), conv_norm_out, SiLU, conv_out.
class Coder : public Module {
 protected:
  Value forward_coder(Graph& g, Value x, bool mid_first) const {
    x = conv_in_->forward(g, x);
    if (mid_first) x = mid_->forward(g, x);
    x = blocks(g, x);
    if (!mid_first) x = mid_->forward(g, x);
    x = activation("silu", norm_out_->forward(g, x));
    return conv_out_->forward(g, x);
  }
  // Blocks `name`.<i> over the channels `ch`: block i maps ch[i - 1] (ch[0] for the first) to
  // ch[i] with `layers` resnets; all but the last resample.
  void add_blocks(const std::string& name, const std::vector<int64_t>& ch, int64_t layers,
                  int64_t groups, Resample r) {
    for (size_t i = 0; i < ch.size(); ++i)
      blocks_.push_back(&add<ResnetBlocks>(name + "." + std::to_string(i), ch[i == 0 ? 0 : i - 1],
                                           ch[i], layers, groups, r, i + 1 < ch.size()));
  }
  // The blocks in order.
  Value blocks(Graph& g, Value x) const {
    for (const auto* block : blocks_) x = block->forward(g, x);
    return x;
  }

  Conv2d* conv_in_ = nullptr;
  MidBlock* mid_ = nullptr;
  GroupNorm* norm_out_ = nullptr;
  Conv2d* conv_out_ = nullptr;

 private:
  std::vector<ResnetBlocks*> blocks_;
};

// vae.py Encoder (double_z): conv_in, the down blocks, the mid block, conv_norm_out, SiLU,
// conv_out to 2 * latent_channels.
class Encoder : public Coder {
 public:
  explicit Encoder(const VaeConfig& c) {
    const auto& ch = c.block_out_channels;
    conv_in_ = &add<Conv2d>("conv_in", c.in_channels, ch.front(), 3, 1, 1);
    add_blocks("down_blocks", ch, c.layers_per_block, c.norm_num_groups, Resample::Down);
    mid_ = &add<MidBlock>("mid_block", ch.back(), c.norm_num_groups, c.mid_block_add_attention);
    norm_out_ = &add<GroupNorm>("conv_norm_out", ch.back(), c.norm_num_groups, kEps);
    conv_out_ = &add<Conv2d>("conv_out", ch.back(), 2 * c.latent_channels, 3, 1, 1);
  }
  Value forward(Graph& g, Value x) const { return forward_coder(g, x, false); }
};

// vae.py Decoder (norm_type "group"): conv_in, the mid block, the up blocks over the channels in
// reverse with layers_per_block + 1 resnets each, conv_norm_out, SiLU, conv_out.
class Decoder : public Coder {
 public:
  explicit Decoder(const VaeConfig& c) {
    std::vector<int64_t> ch(c.block_out_channels.rbegin(), c.block_out_channels.rend());
    conv_in_ = &add<Conv2d>("conv_in", c.latent_channels, ch.front(), 3, 1, 1);
    mid_ = &add<MidBlock>("mid_block", ch.front(), c.norm_num_groups, c.mid_block_add_attention);
    add_blocks("up_blocks", ch, c.layers_per_block + 1, c.norm_num_groups, Resample::Up);
    norm_out_ = &add<GroupNorm>("conv_norm_out", ch.back(), c.norm_num_groups, kEps);
    conv_out_ = &add<Conv2d>("conv_out", ch.back(), c.out_channels, 3, 1, 1);
  }
  Value forward(Graph& g, Value x) const { return forward_coder(g, x, true); }
};

// AutoencoderKL.encode without the sampling: the encoder, then quant_conv (1x1) when
// use_quant_conv.
class EncoderGraph : public Module {
 public:
  explicit EncoderGraph(const VaeConfig& c) : encoder_(add<Encoder>("encoder", c)) {
    if (c.use_quant_conv)
      quant_ = &add<Conv2d>("quant_conv", 2 * c.latent_channels, 2 * c.latent_channels, 1, 1, 0);
  }
  Value forward(Graph& g, Value x) const {
    x = encoder_.forward(g, x);
    return quant_ ? quant_->forward(g, x) : x;
  }

 private:
  Encoder& encoder_;
  Conv2d* quant_ = nullptr;
};

// AutoencoderKL.decode: post_quant_conv (1x1) when use_post_quant_conv, then the decoder.
class DecoderGraph : public Module {
 public:
  explicit DecoderGraph(const VaeConfig& c) {
    if (c.use_post_quant_conv)
      post_quant_ = &add<Conv2d>("post_quant_conv", c.latent_channels, c.latent_channels, 1, 1, 0);
    decoder_ = &add<Decoder>("decoder", c);
  }
  Value forward(Graph& g, Value z) const {
    if (post_quant_) z = post_quant_->forward(g, z);
    return decoder_->forward(g, z);
  }

 private:
  Conv2d* post_quant_ = nullptr;
  Decoder* decoder_ = nullptr;
};

// The value under a type with the graph's own names for its dims (an Identity the host folds
// into the output).
Value named(Graph& g, Value v, const TensorType& t) { return g.node("Identity", {v}, {t})[0]; }

void build(BuildContext& ctx, const json& j) {
  const VaeConfig c = j.get<VaeConfig>();
  const std::string which = ctx.graph_name();
  if (which != "encoder" && which != "decoder")
    throw Error(which.empty()
                    ? "[plugin] AutoencoderKL is two graphs, 'encoder' and 'decoder', and this host "
                      "did not say which to build (it predates types of several graphs; use a newer "
                      "mobius)"
                    : "[plugin] AutoencoderKL has the graphs 'encoder' and 'decoder', not " +
                          quote_value(which));
  const DType act = activation_dtype(ctx);
  if (act == DType::Float16 && c.force_upcast)
    ctx.log(MOBIUS_LOG_WARNING,
            "config.json sets force_upcast: diffusers runs this VAE in float32 even in a float16 "
            "pipeline, because its activations can overflow float16; this float16 " + which +
            " may give inf or NaN on real images (--dtype f32 is safe)");
  Graph& g = ctx.graph();
  if (which == "encoder") {
    // Each graph reads its half of the checkpoint; the other half is the other graph's.
    ctx.ignore_tensors("decoder.*");
    ctx.ignore_tensors("post_quant_conv.*");
    EncoderGraph m(c);
    Value x = g.input("sample", TensorType(act, {"batch_size", Dim(c.in_channels), "height", "width"}));
    Value y = m.forward(g, x);
    g.output(named(g, y, TensorType(act, {"batch_size", Dim(2 * c.latent_channels), "latent_height",
                                          "latent_width"})),
             "latent_dist");
  } else {
    ctx.ignore_tensors("encoder.*");
    ctx.ignore_tensors("quant_conv.*");
    DecoderGraph m(c);
    Value z = g.input("latent_sample",
                      TensorType(act, {"batch_size", Dim(c.latent_channels), "latent_height", "latent_width"}));
    Value y = m.forward(g, z);
    g.output(named(g, y, TensorType(act, {"batch_size", Dim(c.out_channels), "height", "width"})),
             "sample");
  }
}

}  // namespace

void register_vae(PluginRegistrar& r) {
  r.add("AutoencoderKL", "image-vae", parse, build, {"encoder", "decoder"});
}

}  // namespace mobius::diffusers
