// mobius/sdk/xlm.hpp - XLM (transformers' models/xlm/modeling_xlm.py), the encoder tasks of
// mobius/sdk/encoder.hpp built from the SDK's parts:
//
//   h = LayerNorm(embeddings(input_ids) + position_embeddings(0 .. seq-1)) * mask
//   every layer (post-norm):  h = layer_norm1(h + out_lin(attention(h)))
//                             h = layer_norm2(h + lin2(act(lin1(h)))) * mask
// (mask: attention_mask, padded rows zeroed after the embeddings and every layer; act gelu, or
// relu where gelu_activation is false; the feed-forward 4 x emb_dim wide). Heads: the masked LM
// pred_layer.proj (its weight the embeddings'), sequence classification sequence_summary
// (first/last/mean token, a projection to the labels, its activation), token classification.
// A language embedding needs the langs input, which the runtimes do not feed: it is left out, as
// transformers leaves it out when langs is not given.
#pragma once

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// Registers "xlm" for the encoder tasks.
void register_xlm(PluginRegistrar& r);

}  // namespace mobius::nn
