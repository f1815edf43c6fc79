// hang.cpp - a plugin whose register function never returns.
#include <unistd.h>

#include "mobius/sdk/plugin.hpp"

namespace {
void register_all(mobius::PluginRegistrar&) {
  for (;;) ::pause();
}
}  // namespace

MOBIUS_PLUGIN("hang", "0.1.0", "mobius tests", register_all)
