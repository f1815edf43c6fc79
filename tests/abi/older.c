/* older.c - a plugin in plain C, built against the version-1 header as first shipped
 * (tests/abi/older/mobius/plugin.h): it knows none of the slots appended since, reports errors
 * with set_error, and must keep loading and building in this host.
 *
 * "abi_older": y = MatMul(x, Transpose(proj.weight)), x [batch_size, 4], proj.weight [3, 4].
 * A config.json containing "reject" is refused as a config error ("[config]" prefix). */
#include <string.h>

#include "mobius/plugin.h"

static const mobius_host_api* g_host;

static mobius_status parse_config(void* user, mobius_context* ctx, const char* config_json,
                                  mobius_string_sink* out) {
  (void)user;
  if (strstr(config_json, "\"reject\"")) {
    g_host->set_error(ctx, "[config] 'reject' is set");
    return MOBIUS_ERROR;
  }
  static const char normalized[] = "{\"hidden_size\": 4, \"out_size\": 3}";
  out->write(out->opaque, normalized, sizeof(normalized) - 1);
  return MOBIUS_OK;
}

static mobius_status fail(mobius_context* ctx, const char* what) {
  /* The host's message stays in last_error; the plugin only says which step failed. */
  g_host->log(ctx, MOBIUS_LOG_ERROR, what);
  g_host->set_error(ctx, g_host->last_error(ctx));
  return MOBIUS_ERROR;
}

static mobius_status build(void* user, mobius_context* ctx, const char* config_json) {
  (void)user;
  (void)config_json;
  mobius_graph* g = g_host->main_graph(ctx);
  const mobius_build_options* opts = g_host->build_options(ctx);

  mobius_dim xd[2] = {{-1, "batch_size"}, {4, NULL}};
  mobius_tensor_type xt = {sizeof(mobius_tensor_type), MOBIUS_DTYPE_FLOAT, 2, xd};
  if (g_host->add_input(g, "x", &xt) != MOBIUS_OK) return fail(ctx, "input x");

  mobius_dim wd[2] = {{3, NULL}, {4, NULL}};
  mobius_tensor_type wt = {sizeof(mobius_tensor_type), opts->dtype, 2, wd};
  if (g_host->add_initializer(g, "proj.weight", &wt) != MOBIUS_OK) return fail(ctx, "weight");
  if (g_host->plan_tensor(ctx, "proj.weight", "proj.weight") != MOBIUS_OK)
    return fail(ctx, "plan");

  /* Cast the weight to float, transpose it with a `perm` attribute, then MatMul. */
  mobius_attribute to;
  memset(&to, 0, sizeof(to));
  to.struct_size = sizeof(to);
  to.name = "to";
  to.kind = MOBIUS_ATTR_INT;
  to.i = MOBIUS_DTYPE_FLOAT;
  const mobius_attribute* cast_attrs[1] = {&to};
  const char* cast_in[1] = {"proj.weight"};
  const char* cast_out[1] = {"w32"};
  mobius_node cast = {sizeof(mobius_node), "Cast", "", "cast", cast_in, 1, cast_out, 1,
                      cast_attrs, 1};
  if (g_host->add_node(g, &cast) != MOBIUS_OK) return fail(ctx, "Cast");

  static const int64_t perm_v[2] = {1, 0};
  mobius_attribute perm;
  memset(&perm, 0, sizeof(perm));
  perm.struct_size = sizeof(perm);
  perm.name = "perm";
  perm.kind = MOBIUS_ATTR_INTS;
  perm.ints = perm_v;
  perm.count = 2;
  const mobius_attribute* tr_attrs[1] = {&perm};
  const char* tr_in[1] = {"w32"};
  const char* tr_out[1] = {"wt"};
  mobius_node tr = {sizeof(mobius_node), "Transpose", "", "transpose", tr_in, 1, tr_out, 1,
                    tr_attrs, 1};
  if (g_host->add_node(g, &tr) != MOBIUS_OK) return fail(ctx, "Transpose");

  const char* mm_in[2] = {"x", "wt"};
  const char* mm_out[1] = {"y"};
  mobius_node mm = {sizeof(mobius_node), "MatMul", "", "matmul", mm_in, 2, mm_out, 1, NULL, 0};
  if (g_host->add_node(g, &mm) != MOBIUS_OK) return fail(ctx, "MatMul");

  mobius_dim yd[2] = {{-1, "batch_size"}, {3, NULL}};
  mobius_tensor_type yt = {sizeof(mobius_tensor_type), MOBIUS_DTYPE_FLOAT, 2, yd};
  if (g_host->add_output(g, "y", &yt) != MOBIUS_OK) return fail(ctx, "output y");
  return MOBIUS_OK;
}

MOBIUS_PLUGIN_EXPORT const mobius_plugin_info* mobius_plugin_get_info(void) {
  static const mobius_plugin_info info = {sizeof(mobius_plugin_info), MOBIUS_ABI_VERSION,
                                          "abi_older", "1.0.0", "mobius tests"};
  return &info;
}

MOBIUS_PLUGIN_EXPORT mobius_status mobius_plugin_register(const mobius_host_api* host,
                                                          mobius_registrar* reg) {
  if (!host || host->abi_version != MOBIUS_ABI_VERSION ||
      host->struct_size < sizeof(mobius_host_api))
    return MOBIUS_ERROR;
  g_host = host;
  mobius_architecture a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.model_type = "abi_older";
  a.task = "feature-extraction";
  a.parse_config = &parse_config;
  a.build = &build;
  return host->register_architecture(reg, &a);
}
