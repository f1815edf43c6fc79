// mobius/sdk/sentence.hpp - a sentence-transformers folder's modules after the transformer:
// what modules.json lists (read and checked here) and the `sentence_embedding` they compute,
// equal to SentenceTransformer's own forward (sentence_transformers' Pooling and Normalize):
//
//   Pooling    each mode the config turns on, concatenated in this order:
//                cls            h[:, 0]
//                max            max over tokens, padded tokens at -1e9
//                mean           sum(h * mask) / max(sum(mask), 1e-9)
//                mean_sqrt_len  sum(h * mask) / sqrt(max(sum(mask), 1e-9))
//                weightedmean   as mean, token i weighted i + 1
//                lasttoken      h at the last token whose mask is 1 (0 when there is none)
//   Normalize  x / max(||x||_2, 1e-12)
//
//   Dense      act(x W^T + b) (activation_function: torch's Tanh, Identity, ReLU, GELU, Sigmoid,
//              SiLU)
// computed in float32. modules.json names its modules by their Python class; only
// sentence_transformers' own Transformer (first), Pooling, Dense and Normalize are built. A
// module mobius does not build (a custom class), a path outside the folder, a malformed file,
// Dense weights of another shape than its config's: each is refused naming the file, the key and
// the reason; never silently left out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mobius/sdk/context.hpp"
#include "mobius/sdk/graph.hpp"

namespace mobius::nn {

struct SentencePooling {
  bool cls = false, max = false, mean = false, mean_sqrt_len = false, weightedmean = false, lasttoken = false;
  int64_t modes() const { return cls + max + mean + mean_sqrt_len + weightedmean + lasttoken; }
};

// A Dense module: y = act(x W^T + b), its weights the module folder's ("2_Dense/linear.weight",
// as the host shows a module folder's tensors).
struct SentenceDense {
  std::string folder;
  int64_t in = 0, out = 0;
  bool bias = true;
  std::string activation;  // a name activation() knows ("tanh", "linear", ...)
};

struct SentenceModules {
  SentencePooling pooling;
  std::vector<SentenceDense> dense;
  bool normalize = false;
};

// The modules of the checkpoint folder's modules.json for a build of `task`, checked against
// the transformer's `hidden` size and the Dense modules' weights; nullopt when the folder has no
// modules.json, or for a task other than feature-extraction (whose graph has no
// sentence_embedding: the module folders' weights are then ignored). Throws mobius::Error (config
// kind) naming the file and the key.
std::optional<SentenceModules> read_sentence_modules(BuildContext& ctx, int64_t hidden, const std::string& task);

// sentence_embedding [batch, hidden * modes] in `act` from the transformer's token embeddings
// h [batch, seq, hidden] and attention_mask [batch, seq] (int64).
Value sentence_embedding(Graph& g, const SentenceModules& m, Value h, Value attention_mask, DType act);

}  // namespace mobius::nn
