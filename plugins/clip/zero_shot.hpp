// zero_shot.hpp - CLIPModel and SiglipModel for zero-shot image classification (zero_shot.cpp).
#pragma once

#include "mobius/sdk/plugin.hpp"

namespace clip {

// Registers clip and siglip for the task zero-shot-image-classification.
void register_zero_shot(mobius::PluginRegistrar& r);

}  // namespace clip
