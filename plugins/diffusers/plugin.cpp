// plugin.cpp - the diffusers plugin: Stable Diffusion's UNet and VAE as model types named by
// their config.json `_class_name`, as a pipeline's model_index.json lists them.
#include "diffusers.hpp"

namespace {
void register_all(mobius::PluginRegistrar& r) {
  mobius::diffusers::register_unet(r);
  mobius::diffusers::register_vae(r);
}
}  // namespace

MOBIUS_PLUGIN("diffusers", "0.1.0", "mobius", register_all)
