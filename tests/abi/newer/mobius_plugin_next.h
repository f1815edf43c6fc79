/* tests/abi/newer/mobius_plugin_next.h - a later version of the ABI as a plugin built against it
 * would see it: the structs of mobius/plugin.h with fields appended that this host does not
 * know, and a host function table with a slot this host does not have. The test plugin newer.c
 * sends these larger structs and must check the host table's struct_size before the new slot. */
#ifndef MOBIUS_PLUGIN_NEXT_H
#define MOBIUS_PLUGIN_NEXT_H

#include "mobius/plugin.h"

/* Each struct: today's fields, then the appended ones (today's structs have no tail padding, so
 * the appended fields start right after the last field, as in a real later header). */
typedef struct next_plugin_info {
  mobius_plugin_info v;
  const char* license;
  uint64_t capabilities;
} next_plugin_info;

typedef struct next_tensor_type {
  mobius_tensor_type v;
  const char* layout;
  int64_t reserved[4];
} next_tensor_type;

typedef struct next_attribute {
  mobius_attribute v;
  const char* doc_string;
} next_attribute;

typedef struct next_node {
  mobius_node v;
  const char* doc_string;
  int32_t priority;
} next_node;

typedef struct next_architecture {
  mobius_architecture v;
  const char* description;
  mobius_status (*validate)(void* user, mobius_context* ctx);
} next_architecture;

typedef struct next_host_api {
  mobius_host_api v;
  /* A slot of the later version; a host without it has a smaller struct_size. */
  mobius_status (*add_metadata)(mobius_context* ctx, const char* key, const char* value);
} next_host_api;

#define NEXT_APPENDED_AFTER(type, first_new, base, last_old) \
  _Static_assert(offsetof(type, first_new) == MOBIUS_SIZE_THROUGH(base, last_old), \
                 #type " appends right after " #base)
NEXT_APPENDED_AFTER(next_plugin_info, license, mobius_plugin_info, vendor);
NEXT_APPENDED_AFTER(next_tensor_type, layout, mobius_tensor_type, dims);
NEXT_APPENDED_AFTER(next_attribute, doc_string, mobius_attribute, tensor_nbytes);
NEXT_APPENDED_AFTER(next_node, doc_string, mobius_node, n_attributes);
NEXT_APPENDED_AFTER(next_architecture, description, mobius_architecture, flags);
NEXT_APPENDED_AFTER(next_host_api, add_metadata, mobius_host_api, weight_layout_size);

#endif /* MOBIUS_PLUGIN_NEXT_H */
