// mobius/sdk/modernbert.hpp - ModernBERT (transformers' models/modernbert/modeling_modernbert.py),
// the encoder tasks of mobius/sdk/encoder.hpp (feature extraction, sequence and token
// classification, fill-mask) built from the SDK's parts:
//
//   h = LayerNorm(tok_embeddings(input_ids))                       no positions, no token types
//   every layer i (pre-norm; layer 0 has no attn_norm):
//     h = h + Wo(attention(attn_norm(h)))   q, k, v rows of Wqkv in that order; rotary
//                                           (rotate_half) at positions 0 .. seq-1, theta by the
//                                           layer's type; a sliding layer sees keys with
//                                           |query - key| <= local_attention / 2
//     x, gate = split(Wi(mlp_norm(h)));  h = h + Wo(act(x) * gate)
//   last_hidden_state = final_norm(h)
// Heads: head = norm(act(dense(.))); masked LM decoder(head(h)) with the word embeddings'
// weight (and decoder.bias); classification classifier(head(pool(h))), pooled by the first
// token or the mean over real tokens (classifier_pooling); token classification per token.
// Norms have no bias unless norm_bias; linears none unless attention_bias / mlp_bias /
// classifier_bias. Masked scores get finfo(float32).min, so a padded query whose window holds
// only padding stays finite, as in transformers' eager attention.
#pragma once

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// Registers "modernbert" for the encoder tasks.
void register_modernbert(PluginRegistrar& r);

}  // namespace mobius::nn
