// mobius/sdk/conv.hpp - the parts of convolutional image models (diffusers' UNets and VAEs), as
// nn::Modules whose parameter paths are the checkpoint's tensor names: group normalization, 2-D
// convolution, nearest 2x upsampling and strided downsampling, the residual block and the
// spatial self-attention of a VAE's mid block. Tensors are NCHW, as the checkpoints' modules
// compute them. A plugin for another image model reuses them.
//
// Dtypes: every module computes in its input's dtype (the activation dtype, nn::activation_dtype)
// and stores its weights in it (a float16 build: float16 weights and activations; bfloat16
// checkpoints are computed in float32). Group norms and the attention softmax compute in float32
// and cast back. An int4/int8 build quantizes the nn::Linear parts only (the attention's
// projections, a resnet's time_emb_proj: MatMulNBits, --ops ort); convolution weights stay in
// float. Only standard ONNX operators at opset 17 are used (Conv, Resize, InstanceNormalization,
// AveragePool, MatMul, Softmax, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mobius/sdk/graph.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/module.hpp"

namespace mobius::nn {

// torch.nn.GroupNorm(groups, channels, eps, affine=True) over x [N, C, ...]: statistics in
// float32 over each group of C/groups channels and every spatial position, then the per-channel
// weight and bias (float32 too), cast back to x's dtype.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t channels, int64_t groups, double eps);
  Value forward(Graph& g, Value x) const;
  int64_t channels, groups;
  double eps;
};

// torch.nn.Conv2d(in, out, kernel, stride, padding) with a bias (weight [out, in, k, k], read as
// stored: ONNX Conv takes that layout).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true);
  Value forward(Graph& g, Value x) const;
  // The same convolution with its own zero padding {top, left, bottom, right} in place of
  // `padding` on every side (e.g. {0, 0, 1, 1}: F.pad(x, (0, 1, 0, 1)) then the conv).
  Value forward(Graph& g, Value x, const std::vector<int64_t>& pads) const;
  int64_t in_channels, out_channels, kernel, stride, padding;
  bool has_bias;
};

// diffusers' Upsample2D: nearest-neighbour 2x (F.interpolate(scale_factor=2, mode="nearest")),
// then `conv` (3x3, padding 1) when use_conv.
class Upsample2D : public Module {
 public:
  Upsample2D(int64_t channels, bool use_conv, int64_t out_channels = 0);
  // size: diffusers' output_size, an int64 [2] value (height, width) the result is resized to
  // instead of twice the input; empty for 2x.
  Value forward(Graph& g, Value x, Value size = Value()) const;
  int64_t channels, out_channels;
  bool use_conv;
};

// diffusers' Downsample2D with use_conv: `conv` 3x3 stride 2 with `padding` (1 in UNets; 0 in
// VAEs, which first pad the right and bottom by one); without use_conv a 2x2 average pool.
class Downsample2D : public Module {
 public:
  Downsample2D(int64_t channels, bool use_conv, int64_t padding, int64_t out_channels = 0);
  Value forward(Graph& g, Value x) const;
  int64_t channels, out_channels;
  bool use_conv;
  int64_t padding;
};

// diffusers' ResnetBlock2D (time_embedding_norm "default"): norm1, SiLU, conv1, plus
// time_emb_proj(SiLU(temb)) broadcast over the spatial dims when temb_channels > 0, norm2, SiLU,
// conv2; the input through conv_shortcut (1x1) when the channel count changes; the sum divided by
// output_scale_factor.
class ResnetBlock2D : public Module {
 public:
  ResnetBlock2D(int64_t in_channels, int64_t out_channels, int64_t temb_channels, int64_t groups,
                double eps, double output_scale_factor = 1.0);
  // temb: [N, temb_channels], or an empty Value when temb_channels is 0.
  Value forward(Graph& g, Value x, Value temb = Value()) const;
  int64_t in_channels, out_channels, temb_channels;
  double output_scale_factor;
};

// The mid-block attention of diffusers' AutoencoderKL (Attention with a group norm, one head of
// all the channels by default): group_norm, to_q/to_k/to_v over the channels of every position,
// softmax(q k^T / sqrt(head_dim)) v, to_out.0, plus the input (residual), divided by
// rescale_output_factor. Old checkpoints name the linears query/key/value/proj_attn: both
// spellings are read.
class SpatialSelfAttention : public Module {
 public:
  SpatialSelfAttention(int64_t channels, int64_t heads, int64_t groups, double eps,
                       double rescale_output_factor = 1.0);
  Value forward(Graph& g, Value x) const;
  int64_t channels, heads;
  double rescale_output_factor;
};

}  // namespace mobius::nn
