// quantized_checkpoint.hpp - checkpoints whose weights are stored quantized, read as float32.
//
// Hub checkpoints of some models ship their weights only quantized: DeepSeek-V3/R1 and
// Qwen3-*-FP8 store linear weights as FP8 (e4m3fn) with a scale per block, gpt-oss stores its
// MoE experts as MXFP4. transformers loads them dequantized (FineGrainedFP8 / Mxfp4 with
// dequantize=True); this reader does the same as the tensors are read, so plugins see ordinary
// float tensors under the names and layouts of the dequantized model and know nothing of it.
//
//  - fp8 (quantization_config {quant_method: "fp8", fmt: "e4m3", weight_block_size: [bo, bi]}):
//    every F8_E4M3 tensor W [out, in] with a sibling "<W>_scale_inv" S (F32 or BF16,
//    [ceil(out/bo), ceil(in/bi)], edge blocks may be ragged) becomes a float32 tensor of the same
//    name and shape, W[i, j] = float(e4m3(q[i, j])) * float(S[i / bo, j / bi]) computed in
//    float32; the scales are no longer listed.
//  - mxfp4 (quant_method "mxfp4"): every "<p>_blocks" uint8 [E, R, G, 16] with "<p>_scales"
//    uint8 [E, R, G] becomes a float32 tensor "<p>" [E, G * 32, R]: value k of row r is the FP4
//    (e2m1) nibble k of the row's packed bytes (low nibble first) times 2^(scale - 127), then
//    the last two dimensions are swapped, as transformers' convert_moe_packed_tensors does (its
//    GptOssExperts layout: gate_up_proj [E, H, 2I], down_proj [E, I, H]).
//
// Non-finite results (a NaN code, an infinite or huge scale) are kept, as transformers keeps
// them. Reads are bounded: a range of an fp8 tensor reads only the rows of q and of the scales it
// covers; an mxfp4 tensor is read one expert's packed bytes at a time. Virtual tensors have no
// extent(); read_range streams them.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.hpp"

namespace mobius {

// `base` as the model's config.json (its text) says it is to be read: `base` itself when the
// config has no quantization_config (but an F8_E4M3 tensor is then refused, since nothing says
// how to dequantize it) or when nothing in the checkpoint is quantized; else a reader showing
// the quantized tensors dequantized. A config.json that does not parse within the config limits
// leaves `base` as it is: reporting it is the config reader's business, and the weight plan then
// refuses any F8_E4M3 tensor as a dtype it cannot convert. `dir` is the checkpoint folder, for
// the file names in messages. Throws ErrorKind::Config "[config] quantization_config.<key> ..."
// for an unsupported or malformed quantization_config, ErrorKind::Checkpoint "[checkpoint]
// <file>: tensor '<name>' ..." for quantized tensors that do not fit it.
std::unique_ptr<CheckpointReader> dequantizing_checkpoint(std::unique_ptr<CheckpointReader> base,
                                                          const std::filesystem::path& dir,
                                                          const std::string& config_text);

}  // namespace mobius
