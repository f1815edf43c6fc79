// mobius/sdk/nn.hpp - every decoder part of the SDK in one include: the building blocks
// (layers.hpp), token mixers (attention.hpp, mla.hpp, gated_deltanet.hpp, short_conv.hpp,
// mamba.hpp, mamba2.hpp), feed-forwards (feed_forward.hpp, moe.hpp) and the decoder spec with
// its model and task (decoder.hpp).
#pragma once

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/decoder.hpp"
#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/feed_forward.hpp"
#include "mobius/sdk/gated_deltanet.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/mamba.hpp"
#include "mobius/sdk/mamba2.hpp"
#include "mobius/sdk/mla.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/short_conv.hpp"
