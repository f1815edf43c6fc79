/* newer.c - a plugin in plain C, built against a later version of the ABI
 * (newer/mobius_plugin_next.h): every struct it hands the host is larger than the host's, with
 * appended fields set; it uses the slots appended after version 1 that this host has, and checks
 * the host table's size before a slot this host lacks.
 *
 * "abi_newer": the same graph as older.c, y = MatMul(x, Transpose(proj.weight)); its runtime
 * file abi_newer.json holds the config.json text the build started from. A config.json with
 * "reject" is a config error; with "fail_build" the build fails as the plugin's own error. */
#include <string.h>

#include "mobius_plugin_next.h"

static const mobius_host_api* g_host;

/* The later slot, or NULL when this host's table is too small to hold it. */
static mobius_status (*add_metadata(void))(mobius_context*, const char*, const char*) {
  if (g_host->struct_size < MOBIUS_SIZE_THROUGH(next_host_api, add_metadata)) return NULL;
  return ((const next_host_api*)g_host)->add_metadata;
}

static mobius_status parse_config(void* user, mobius_context* ctx, const char* config_json,
                                  mobius_string_sink* out) {
  (void)user;
  if (strstr(config_json, "\"reject\"")) {
    g_host->set_error_kind(ctx, MOBIUS_ERROR_KIND_CONFIG, "'reject' is set");
    return MOBIUS_ERROR;
  }
  static const char normalized[] = "{\"hidden_size\": 4, \"out_size\": 3}";
  out->write(out->opaque, normalized, sizeof(normalized) - 1);
  return MOBIUS_OK;
}

static mobius_status validate(void* user, mobius_context* ctx) {
  (void)user;
  (void)ctx;
  return MOBIUS_OK;
}

static mobius_status failed(mobius_context* ctx) {
  g_host->set_error_kind(ctx, MOBIUS_ERROR_KIND_PLUGIN, g_host->last_error(ctx));
  return MOBIUS_ERROR;
}

static next_tensor_type ttype(mobius_dtype dtype, int32_t rank, const mobius_dim* dims) {
  next_tensor_type t;
  memset(&t, 0, sizeof(t));
  t.v.struct_size = sizeof(t);
  t.v.dtype = dtype;
  t.v.rank = rank;
  t.v.dims = dims;
  t.layout = "row-major";
  t.reserved[0] = t.reserved[3] = -7;
  return t;
}

static next_node node(const char* op, const char* name, const char* const* in, size_t n_in,
                      const char* const* out, const mobius_attribute* const* attrs,
                      size_t n_attrs) {
  next_node n;
  memset(&n, 0, sizeof(n));
  n.v.struct_size = sizeof(n);
  n.v.op_type = op;
  n.v.domain = "";
  n.v.name = name;
  n.v.inputs = in;
  n.v.n_inputs = n_in;
  n.v.outputs = out;
  n.v.n_outputs = 1;
  n.v.attributes = attrs;
  n.v.n_attributes = n_attrs;
  n.doc_string = "a field this host does not know";
  n.priority = 99;
  return n;
}

static mobius_status build(void* user, mobius_context* ctx, const char* config_json) {
  (void)user;
  (void)config_json;
  const mobius_host_api* h = g_host;
  const char* src = h->source_config(ctx);
  if (src && strstr(src, "\"fail_build\"")) {
    h->set_error_kind(ctx, MOBIUS_ERROR_KIND_PLUGIN, "[abi_newer] the build failed on purpose");
    return MOBIUS_ERROR;
  }
  mobius_graph* g = h->main_graph(ctx);
  const mobius_build_options* opts = h->build_options(ctx);

  mobius_dim xd[2] = {{-1, "batch_size"}, {4, NULL}};
  next_tensor_type xt = ttype(MOBIUS_DTYPE_FLOAT, 2, xd);
  if (h->add_input(g, "x", &xt.v) != MOBIUS_OK) return failed(ctx);

  mobius_dim wd[2] = {{3, NULL}, {4, NULL}};
  next_tensor_type wt = ttype(opts->dtype, 2, wd);
  if (h->add_initializer(g, "proj.weight", &wt.v) != MOBIUS_OK) return failed(ctx);
  if (h->plan_tensor(ctx, "proj.weight", "proj.weight") != MOBIUS_OK) return failed(ctx);

  next_attribute to;
  memset(&to, 0, sizeof(to));
  to.v.struct_size = sizeof(to);
  to.v.name = "to";
  to.v.kind = MOBIUS_ATTR_INT;
  to.v.i = MOBIUS_DTYPE_FLOAT;
  to.doc_string = "ignored by this host";
  const mobius_attribute* cast_attrs[1] = {&to.v};
  const char* cast_in[1] = {"proj.weight"};
  const char* cast_out[1] = {"w32"};
  next_node cast = node("Cast", "cast", cast_in, 1, cast_out, cast_attrs, 1);
  if (h->add_node(g, &cast.v) != MOBIUS_OK) return failed(ctx);

  static const int64_t perm_v[2] = {1, 0};
  next_attribute perm;
  memset(&perm, 0, sizeof(perm));
  perm.v.struct_size = sizeof(perm);
  perm.v.name = "perm";
  perm.v.kind = MOBIUS_ATTR_INTS;
  perm.v.ints = perm_v;
  perm.v.count = 2;
  perm.doc_string = "ignored by this host";
  const mobius_attribute* tr_attrs[1] = {&perm.v};
  const char* tr_in[1] = {"w32"};
  const char* tr_out[1] = {"wt"};
  next_node tr = node("Transpose", "transpose", tr_in, 1, tr_out, tr_attrs, 1);
  if (h->add_node(g, &tr.v) != MOBIUS_OK) return failed(ctx);

  const char* mm_in[2] = {"x", "wt"};
  const char* mm_out[1] = {"y"};
  next_node mm = node("MatMul", "matmul", mm_in, 2, mm_out, NULL, 0);
  if (h->add_node(g, &mm.v) != MOBIUS_OK) return failed(ctx);

  mobius_dim yd[2] = {{-1, "batch_size"}, {3, NULL}};
  next_tensor_type yt = ttype(MOBIUS_DTYPE_FLOAT, 2, yd);
  if (h->add_output(g, "y", &yt.v) != MOBIUS_OK) return failed(ctx);

  /* Slots appended after version 1 that this host has... */
  if (!src) src = "";
  if (h->add_runtime_file(ctx, "abi_newer.json", src, strlen(src)) != MOBIUS_OK)
    return failed(ctx);
  /* ...and one it does not: checked before use, the plugin does without it. */
  if (add_metadata() && add_metadata()(ctx, "built_by", "abi_newer") != MOBIUS_OK)
    return failed(ctx);
  return MOBIUS_OK;
}

MOBIUS_PLUGIN_EXPORT const mobius_plugin_info* mobius_plugin_get_info(void) {
  static const next_plugin_info info = {
      {sizeof(next_plugin_info), MOBIUS_ABI_VERSION, "abi_newer", "2.0.0", "mobius tests"},
      "Apache-2.0",
      0xffffffffffffffffull};
  return &info.v;
}

MOBIUS_PLUGIN_EXPORT mobius_status mobius_plugin_register(const mobius_host_api* host,
                                                          mobius_registrar* reg) {
  /* What this plugin cannot do without: the version-1 table and the two slots it always uses. */
  if (!host || host->abi_version != MOBIUS_ABI_VERSION ||
      !MOBIUS_HAS_FIELD(host, mobius_host_api, set_error_kind) ||
      !MOBIUS_HAS_FIELD(host, mobius_host_api, source_config)) {
    if (host) host->registrar_error(reg, "abi_newer needs set_error_kind and source_config");
    return MOBIUS_ERROR;
  }
  g_host = host;
  next_architecture a;
  memset(&a, 0, sizeof(a));
  a.v.struct_size = sizeof(a);
  a.v.model_type = "abi_newer";
  a.v.task = "feature-extraction";
  a.v.parse_config = &parse_config;
  a.v.build = &build;
  a.description = "a field this host does not know";
  a.validate = &validate;
  return host->register_architecture(reg, &a.v);
}
