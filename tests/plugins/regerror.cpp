// regerror.cpp - a plugin whose register function reports an error.
#include "mobius/sdk/plugin.hpp"

namespace {
void register_all(mobius::PluginRegistrar&) {
  throw mobius::Error("[regerror] refusing to register: required resource missing");
}
}  // namespace

MOBIUS_PLUGIN("regerror", "0.1.0", "mobius tests", register_all)
