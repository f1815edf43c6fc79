// deberta.cpp - the deberta plugin: DeBERTa (model_type "deberta") and DeBERTa-v2/v3
// ("deberta-v2"), built by the SDK's nn::register_deberta (mobius/sdk/deberta.hpp: disentangled
// attention over relative positions, v2's log buckets, shared keys, normed relative embeddings
// and convolution). Each builds feature extraction, sequence and token classification and
// fill-mask (the head config.json's architectures names, or --task).
#include "mobius/sdk/deberta.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

void register_all(mobius::PluginRegistrar& r) { mobius::nn::register_deberta(r); }

}  // namespace

MOBIUS_PLUGIN("deberta", "0.1.0", "mobius", register_all)
