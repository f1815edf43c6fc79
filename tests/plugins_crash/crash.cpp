// crash.cpp - a plugin that dies with SIGSEGV in its register function.
#include <csignal>

#include "mobius/sdk/plugin.hpp"

namespace {
void register_all(mobius::PluginRegistrar&) { std::raise(SIGSEGV); }
}  // namespace

MOBIUS_PLUGIN("crash", "0.1.0", "mobius tests", register_all)
