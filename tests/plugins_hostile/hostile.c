/* hostile.c - a plain C plugin that hands the host terminal control bytes, built once per mode:
 * HOSTILE_MODE 1 says its name is "hostile_name" followed by an escape sequence and a bell;
 * 2 registers "hostile_task" with a task holding an escape sequence and a carriage return;
 * 3 fails to register with a message holding an operating-system-command sequence. */
#include <string.h>

#include "mobius/plugin.h"

#if HOSTILE_MODE == 1
#define HOSTILE_INFO_NAME "hostile_name\033[2J\007"
#define HOSTILE_TYPE "hostile_name"
#elif HOSTILE_MODE == 2
#define HOSTILE_INFO_NAME "hostile_task"
#define HOSTILE_TYPE "hostile_task"
#else
#define HOSTILE_INFO_NAME "hostile_error"
#define HOSTILE_TYPE "hostile_error"
#endif

#if HOSTILE_MODE != 3
static mobius_status parse_config(void* user, mobius_context* ctx, const char* config_json,
                                  mobius_string_sink* out) {
  (void)user, (void)ctx, (void)config_json, (void)out;
  return MOBIUS_ERROR;
}

static mobius_status build(void* user, mobius_context* ctx, const char* config_json) {
  (void)user, (void)ctx, (void)config_json;
  return MOBIUS_ERROR;
}
#endif

MOBIUS_PLUGIN_EXPORT const mobius_plugin_info* mobius_plugin_get_info(void) {
  static const mobius_plugin_info info = {sizeof(mobius_plugin_info), MOBIUS_ABI_VERSION,
                                          HOSTILE_INFO_NAME, "1.0.0", "mobius tests"};
  return &info;
}

MOBIUS_PLUGIN_EXPORT mobius_status mobius_plugin_register(const mobius_host_api* host,
                                                          mobius_registrar* reg) {
  if (!host || host->abi_version != MOBIUS_ABI_VERSION) return MOBIUS_ERROR;
#if HOSTILE_MODE == 3
  host->registrar_error(reg, "\033]0;owned\007cannot register\033[2J");
  return MOBIUS_ERROR;
#else
  mobius_architecture a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.model_type = HOSTILE_TYPE;
  a.task = HOSTILE_MODE == 2 ? "feature\033[31m-extraction\r" : "feature-extraction";
  a.parse_config = &parse_config;
  a.build = &build;
  return host->register_architecture(reg, &a);
#endif
}
