// diffusers.hpp - the registrations of the diffusers plugin, one per component model.
#pragma once

#include "mobius/sdk/plugin.hpp"

namespace mobius::diffusers {
void register_unet(PluginRegistrar& r);  // UNet2DConditionModel (unet.cpp)
void register_vae(PluginRegistrar& r);   // AutoencoderKL: graphs "encoder" and "decoder" (vae.cpp)
}  // namespace mobius::diffusers
