// badabi.cpp - a plugin built for an ABI version this host does not speak (its manifest lies).
#include "mobius/plugin.h"

extern "C" MOBIUS_PLUGIN_EXPORT const mobius_plugin_info* mobius_plugin_get_info(void) {
  static const mobius_plugin_info info = {sizeof(mobius_plugin_info), 99u, "badabi", "0.1.0",
                                          "mobius tests"};
  return &info;
}

extern "C" MOBIUS_PLUGIN_EXPORT mobius_status mobius_plugin_register(const mobius_host_api*,
                                                                     mobius_registrar*) {
  __builtin_trap();  // must never be called: the host checks the ABI version first
}
