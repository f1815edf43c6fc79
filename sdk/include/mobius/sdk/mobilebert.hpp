// mobius/sdk/mobilebert.hpp - MobileBERT (transformers' models/mobilebert/modeling_mobilebert.py),
// the encoder tasks of mobius/sdk/encoder.hpp built from the SDK's parts. T is the inner width
// (intra_bottleneck_size with bottlenecks, else hidden_size); N a norm, NoNorm (x * w + b) or
// LayerNorm by normalization_type:
//
//   e = word(input_ids)                                  embedding_size wide
//   trigram_input: e = [e shifted left, e, e shifted right] (zeros past the ends), then
//   h = N(embedding_transformation(e) + position(0 .. seq-1) + token_type(ids))
//   every layer (hs its input):
//     li = N(bottleneck.input(hs)); q, k from N(bottleneck.attention(hs)) (key_query_shared),
//     li, or hs; v from li (use_bottleneck_attention) or hs
//     a = N(attention.output.dense(attention(q, k, v)) + li)
//     num_feedforward_networks - 1 times: a = N(ffn.k.output(act(ffn.k.intermediate(a))) + a)
//     o = N(output.dense(act(intermediate.dense(a))) + a)
//     out = N(output.bottleneck.dense(o) + hs)           (with bottlenecks; else o)
//   pooler_output = tanh(pooler.dense(h[:, 0])) (classifier_activation), else h[:, 0]
// Heads: classifier on the pooler / per token; the masked LM's transform (dense, act, LayerNorm)
// times [word embeddings^T ; cls.predictions.dense.weight] plus cls.predictions.bias. With
// LayerNorm, the embeddings' and each layer's output norm use torch's default eps 1e-5, as
// transformers builds them.
#pragma once

namespace mobius {
class PluginRegistrar;
}

namespace mobius::nn {

// Registers "mobilebert" for the encoder tasks.
void register_mobilebert(PluginRegistrar& r);

}  // namespace mobius::nn
