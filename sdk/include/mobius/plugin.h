/*
 * mobius/plugin.h - the stable C ABI between the mobius host and architecture plugins.
 *
 * COMPATIBILITY PROMISE (read before editing):
 *   - This is the only header whose binary compatibility is promised. A plugin built
 *     against ABI version N keeps loading into every host that speaks version N.
 *   - Every struct that crosses the boundary starts with `struct_size`; the reader
 *     only touches fields that lie inside the size the writer declared.
 *   - Fields and function-pointer slots are APPEND-ONLY. Never reorder, remove or
 *     change the type of an existing member. Changing semantics means a new slot.
 *   - Only C types cross: opaque handles, plain structs, function pointers and
 *     status codes. No C++ type, exception or allocator ever crosses this boundary:
 *     memory is owned by the side that allocated it, strings passed in are copied
 *     by the callee before the call returns.
 *
 * Loading sequence (host side):
 *   1. the host reads the plugin's manifest (plugin.yaml) and checks its abi_version;
 *   2. dlopen; resolve `mobius_plugin_get_info` and check info->abi_version first,
 *      refusing with both version numbers if it does not speak it;
 *   3. resolve `mobius_plugin_register` and call it once with the host's function
 *      table; the plugin declares its architectures through `register_architecture`.
 *
 * Every function returns MOBIUS_OK (0) on success. On failure a host function
 * records a message retrievable with `last_error(ctx)`; a plugin callback that fails
 * calls `set_error_kind(ctx, kind, msg)` (`set_error(ctx, msg)` on a host without that slot)
 * before returning a non-zero status.
 *
 * Reading a struct written by the other side:
 *   - a struct whose struct_size is below its MOBIUS_*_SIZE_V1 is refused: it cannot hold
 *     the fields of version 1;
 *   - a field appended after version 1 is read only when MOBIUS_HAS_FIELD says the writer's
 *     struct holds it; otherwise it takes its documented default;
 *   - a larger struct than the reader knows is fine: the fields past its own are ignored.
 * This holds for the host's function table too: a plugin checks
 * MOBIUS_HAS_FIELD(host, mobius_host_api, slot) before calling a slot added after version 1.
 */
#ifndef MOBIUS_PLUGIN_H
#define MOBIUS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOBIUS_ABI_VERSION 1u

#if defined(_WIN32)
#define MOBIUS_PLUGIN_EXPORT __declspec(dllexport)
#else
#define MOBIUS_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

typedef int32_t mobius_status;
#define MOBIUS_OK 0
#define MOBIUS_ERROR 1

/* Bytes of `type` up to and including `field`: the smallest struct_size holding it. */
#define MOBIUS_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))
/* Whether the struct at `p` (declared struct_size) holds `field` of `type`. */
#define MOBIUS_HAS_FIELD(p, type, field) \
  ((size_t)(p)->struct_size >= MOBIUS_SIZE_THROUGH(type, field))

/* Whose fault a failure is; set with host->set_error_kind. The values are fixed. */
typedef int32_t mobius_error_kind;
#define MOBIUS_ERROR_KIND_CONFIG 1     /* config.json does not describe a model this code builds */
#define MOBIUS_ERROR_KIND_CHECKPOINT 2 /* the checkpoint's tensors do not fit */
#define MOBIUS_ERROR_KIND_PLUGIN 3     /* a bug or limitation of the plugin itself */
#define MOBIUS_ERROR_KIND_IO 4         /* reading or writing a file failed */
#define MOBIUS_ERROR_KIND_INTERNAL 5   /* out of memory, an unexpected exception, a broken invariant */

/* Element types. The numeric values are ONNX TensorProto.DataType codes. */
typedef int32_t mobius_dtype;
#define MOBIUS_DTYPE_UNDEFINED 0
#define MOBIUS_DTYPE_FLOAT 1
#define MOBIUS_DTYPE_UINT8 2
#define MOBIUS_DTYPE_INT8 3
#define MOBIUS_DTYPE_UINT16 4
#define MOBIUS_DTYPE_INT16 5
#define MOBIUS_DTYPE_INT32 6
#define MOBIUS_DTYPE_INT64 7
#define MOBIUS_DTYPE_BOOL 9
#define MOBIUS_DTYPE_FLOAT16 10
#define MOBIUS_DTYPE_DOUBLE 11
#define MOBIUS_DTYPE_UINT32 12
#define MOBIUS_DTYPE_UINT64 13
#define MOBIUS_DTYPE_BFLOAT16 16

/* Log levels for host->log. */
#define MOBIUS_LOG_DEBUG 0
#define MOBIUS_LOG_INFO 1
#define MOBIUS_LOG_WARNING 2
#define MOBIUS_LOG_ERROR 3

/* Opaque handles, owned by the host. */
typedef struct mobius_context mobius_context;     /* one build (or one config parse) */
typedef struct mobius_graph mobius_graph;         /* the main graph or a subgraph */
typedef struct mobius_registrar mobius_registrar; /* valid during mobius_plugin_register */

/* One dimension of a tensor type: `param` non-NULL and non-empty names a symbolic
 * dimension (e.g. "batch_size"); otherwise `value` >= 0 is a static size, and
 * value < 0 with no param means unknown. An array element, so fixed forever (no struct_size). */
typedef struct mobius_dim {
  int64_t value;
  const char* param;
} mobius_dim;

typedef struct mobius_tensor_type {
  uint32_t struct_size;
  mobius_dtype dtype;
  int32_t rank;
  const mobius_dim* dims; /* `rank` entries */
} mobius_tensor_type;
#define MOBIUS_TENSOR_TYPE_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_tensor_type, dims)

/* Node attribute kinds. The numeric values are ONNX AttributeProto.AttributeType codes. */
typedef int32_t mobius_attr_kind;
#define MOBIUS_ATTR_FLOAT 1
#define MOBIUS_ATTR_INT 2
#define MOBIUS_ATTR_STRING 3
#define MOBIUS_ATTR_TENSOR 4
#define MOBIUS_ATTR_GRAPH 5
#define MOBIUS_ATTR_FLOATS 6
#define MOBIUS_ATTR_INTS 7
#define MOBIUS_ATTR_STRINGS 8

typedef struct mobius_attribute {
  uint32_t struct_size;
  const char* name;
  mobius_attr_kind kind;
  int64_t i;                   /* INT */
  float f;                     /* FLOAT */
  const char* s;               /* STRING */
  const int64_t* ints;         /* INTS, `count` entries */
  const float* floats;         /* FLOATS, `count` entries */
  const char* const* strings;  /* STRINGS, `count` entries */
  size_t count;
  mobius_graph* graph;         /* GRAPH: a subgraph from create_subgraph; consumed by add_node */
  /* TENSOR: a constant tensor value (row-major, little-endian). */
  mobius_dtype tensor_dtype;
  int32_t tensor_rank;
  const int64_t* tensor_dims;
  const void* tensor_data;
  size_t tensor_nbytes;
} mobius_attribute;
#define MOBIUS_ATTRIBUTE_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_attribute, tensor_nbytes)

typedef struct mobius_node {
  uint32_t struct_size;
  const char* op_type;
  const char* domain; /* NULL or "" for the default ONNX domain, "com.microsoft", ... */
  const char* name;   /* NULL: the host names the node */
  const char* const* inputs; /* value names; "" for an omitted optional input */
  size_t n_inputs;
  const char* const* outputs; /* value names; "" for an omitted optional output */
  size_t n_outputs;
  const mobius_attribute* const* attributes;
  size_t n_attributes;
} mobius_node;
#define MOBIUS_NODE_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_node, n_attributes)

/* A tensor handed to a weight transform. Host-owned memory. */
typedef struct mobius_tensor_view {
  uint32_t struct_size;
  mobius_dtype dtype;
  int32_t rank;
  const int64_t* dims;
  void* data;
  size_t nbytes;
} mobius_tensor_view;
#define MOBIUS_TENSOR_VIEW_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_tensor_view, nbytes)

/* A plugin-supplied weight transform: reads `n_inputs` source tensors (converted to
 * FLOAT by the host) and fills `output` (FLOAT, the initializer's shape, buffer
 * allocated by the host). Must be pure: the same inputs give the same bytes.
 * On failure, write a NUL-terminated reason into `err` (capacity `err_size`). */
typedef mobius_status (*mobius_transform_fn)(void* user, const mobius_tensor_view* const* inputs,
                                             size_t n_inputs, mobius_tensor_view* output,
                                             char* err, size_t err_size);

/* How a checkpoint tensor (or several, concatenated along their first dimension) becomes an
 * initializer in a layout an operator consumes, computed by the host while it streams the
 * weights (memory bounded by chunks, byte-identical whatever the thread count). */
#define MOBIUS_LAYOUT_TRANSPOSED 1 /* [rows, cols] stored -> [cols, rows] (MatMul's [in, out]) */
#define MOBIUS_LAYOUT_BLOCK_QUANTIZED 2 /* RTN block quantization of [N, K] for MatMulNBits */
#define MOBIUS_QUANT_PART_DATA 0        /* UINT8 [N, ceil(K/block), block*bits/8] */
#define MOBIUS_QUANT_PART_SCALES 1      /* FLOAT or FLOAT16 [N, ceil(K/block)] */
#define MOBIUS_QUANT_PART_ZERO_POINTS 2 /* UINT8 [N, ceil(ceil(K/block)*bits/8)] (asymmetric) */
typedef struct mobius_weight_layout {
  uint32_t struct_size;
  int32_t kind;       /* MOBIUS_LAYOUT_* */
  int32_t bits;       /* BLOCK_QUANTIZED: 4 or 8 */
  int32_t block_size; /* BLOCK_QUANTIZED: a power of two from 16 to 256 */
  int32_t symmetric;  /* BLOCK_QUANTIZED: 1 symmetric (zero point 2^(bits-1)), 0 asymmetric */
  int32_t part;       /* BLOCK_QUANTIZED: MOBIUS_QUANT_PART_* */
  /* --- appended after version 1: set only when the host's weight_layout_size covers it --- */
  /* BLOCK_QUANTIZED: 0 or 1, the tensors' rows one after another; g > 1, the tensors taken g at a
   * time (their count a multiple of g, each group's tensors of equal row counts) with their
   * rows alternating: row r of the group's first tensor, row r of its second, ..., then row r + 1
   * (ONNX Runtime's QMoE reads an expert's gate and up rows so, interleaved). */
  int32_t interleave;
} mobius_weight_layout;
#define MOBIUS_WEIGHT_LAYOUT_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_weight_layout, part)
#define MOBIUS_WEIGHT_LAYOUT_SIZE_V2 MOBIUS_SIZE_THROUGH(mobius_weight_layout, interleave)

/* Options of the current build, as the user gave them. */
typedef struct mobius_build_options {
  uint32_t struct_size;
  mobius_dtype dtype;                /* FLOAT, FLOAT16 or BFLOAT16: the model's weight dtype */
  const char* execution_provider;    /* "cpu" or "cuda": the provider the graph is tuned for */
  int32_t no_weights;                /* 1: graph only; no checkpoint is opened */
  /* --- appended after version 1: check MOBIUS_HAS_FIELD(opts, mobius_build_options, field) --- */
  /* The runtime the output folder is laid out for: "ort-genai" (ONNX Runtime GenAI; the
   * default), "onnxruntime" (ONNX Runtime alone: the graph and its weights) or "transformers.js".
   * A plugin names its graph's inputs and outputs as that runtime feeds them and refuses, with
   * a reason, a model the runtime cannot run. Absent: "ort-genai". */
  const char* runtime;
  /* Where the graph is written, relative to the output folder (e.g. "model.onnx",
   * "onnx/model_fp16.onnx"): what a runtime config file names. Absent: "model.onnx". */
  const char* model_file;
  /* 1: the user did not choose the runtime. When `runtime` ("ort-genai") cannot run the model,
   * the plugin lays the folder out for "onnxruntime" instead (the graph files are the same) and
   * logs why, rather than failing. Absent: 0. */
  int32_t runtime_is_default;
  /* The operator set the graph may use: "ort" (ONNX Runtime's contrib operators where they fit
   * the pattern: GroupQueryAttention, RotaryEmbedding, SimplifiedLayerNormalization,
   * MatMulNBits, ...) or "standard" (the ONNX domain only, for any runtime). Absent: "standard"
   * (what a plugin built before the option emitted). */
  const char* ops;
  /* Weight-only quantization of the MatMul weights: 0 (none: `dtype` throughout), 4 or 8 bits
   * (MatMulNBits; `dtype` is then the activation and scale dtype). Absent: 0. */
  int32_t weight_bits;
  int32_t block_size;     /* quantization block along the input dimension (16, 32, 64, 128, 256) */
  int32_t symmetric;      /* 1: symmetric RTN (no zero points); 0: asymmetric, with zero points */
  int32_t accuracy_level; /* MatMulNBits accuracy_level (4: int8 compute on the CPU) */
  /* The graph being built, for an architecture that registered several (`graphs` of
   * mobius_architecture, e.g. a VAE's "encoder" and "decoder"): one of those names. NULL (or
   * absent) for an architecture of one graph. */
  const char* graph;
  /* The task the user chose (`mobius build --task`), one of the architecture's `tasks`. NULL
   * (or absent): not chosen; the plugin builds the task the checkpoint names (config.json's
   * `architectures`, e.g. BertForSequenceClassification) or else its first. */
  const char* task;
  /* Where a decoder's rotary positions come from (`mobius build --position-ids`): "input" (a
   * position_ids input the graph rotates at, so a caller's own positions, such as packed or
   * gapped sequences, are honoured) or "slots" (ONNX Runtime's GroupQueryAttention rotates each
   * token at its cache slot, the graph has no position_ids input: equal to transformers for
   * generation's positions, cumsum(attention_mask) - 1, and the fastest). NULL (or absent): the
   * runtime's default, "slots" for "ort-genai" (GenAI feeds generation's positions), "input"
   * for the others. */
  const char* positions;
  /* 1: config.json names a model type no plugin registers, and the host asks this architecture
   * (its manifest's `fallback`) to build it. The parser refuses a config without the fields a
   * decoder of this type reads (no defaults), and the host builds the model only if the
   * checkpoint holds exactly the tensors it reads. Absent: 0. */
  int32_t fallback;
  /* 1: a mixture-of-experts layer runs as a loop over the experts its tokens chose even where a
   * fused operator could run it (`mobius build --expert-loop`: for a runtime without ONNX
   * Runtime's QMoE, or to compare the two). Absent: 0. */
  int32_t expert_loop;
} mobius_build_options;
#define MOBIUS_BUILD_OPTIONS_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_build_options, no_weights)

/* Checkpoint tensor metadata (header only; no data is read). A tensor of rank above 8 is
 * an error of query_tensor, never truncated: `rank` then holds its true rank. */
typedef struct mobius_tensor_info {
  uint32_t struct_size;
  mobius_dtype dtype;
  int32_t rank;
  int64_t dims[8];
} mobius_tensor_info;
#define MOBIUS_TENSOR_INFO_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_tensor_info, dims)

/* Receives a string produced by a plugin (the host copies it). Fixed forever: no struct_size. */
typedef struct mobius_string_sink {
  void* opaque;
  void (*write)(void* opaque, const char* data, size_t size);
} mobius_string_sink;

/* One architecture a plugin provides. */
typedef struct mobius_architecture {
  uint32_t struct_size;
  const char* model_type; /* the config.json model_type, e.g. "llama" */
  const char* task;       /* e.g. "text-generation" */
  void* user;             /* passed back to the callbacks; owned by the plugin */
  /* Validate config.json (the whole file's text) and write this architecture's
   * normalized config (Hugging Face defaults filled in) as a JSON object to `out`. */
  mobius_status (*parse_config)(void* user, mobius_context* ctx, const char* config_json,
                                mobius_string_sink* out);
  /* Build the graph into host->main_graph(ctx) and plan every initializer's weights.
   * `config_json` is the normalized config that parse_config wrote. */
  mobius_status (*build)(void* user, mobius_context* ctx, const char* config_json);
  /* --- appended after version 1: check MOBIUS_HAS_FIELD(arch, mobius_architecture, field) --- */
  /* The graphs one checkpoint of this type becomes when it is more than one (e.g. an
   * AutoencoderKL's "encoder" and "decoder"): `n_graphs` names (letters, digits, '_'), each
   * built by its own call of `build` with build_options->graph set to it, each its own model
   * file. NULL and 0: one graph, build_options->graph NULL. */
  const char* const* graphs;
  size_t n_graphs;
  /* The runtime a build lays the folder out for when the user names none ("ort-genai",
   * "onnxruntime" or "transformers.js"): the task's. NULL: "ort-genai", as before the field. */
  const char* default_runtime;
  /* Every task the architecture builds when more than one (e.g. a BERT's "feature-extraction",
   * "sequence-classification", "token-classification", "fill-mask"), `task` among them: the
   * build builds build_options->task when the user chose one. NULL and 0: `task` alone. */
  const char* const* tasks;
  size_t n_tasks;
  /* MOBIUS_ARCHITECTURE_* bits; 0 for none. */
  uint64_t flags;
} mobius_architecture;
/* The `graphs` are files of one model folder (an encoder-decoder's "encoder_model" and
 * "decoder_model_merged", as transformers.js and ONNX Runtime GenAI load them), each named after
 * its graph where a one-graph build writes "model", their runtime files shared. Without it each
 * graph is a model folder of its own (OUT/<graph>). */
#define MOBIUS_ARCHITECTURE_GRAPHS_IN_ONE_FOLDER ((uint64_t)1)
#define MOBIUS_ARCHITECTURE_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_architecture, build)

/* The host's function table, passed to mobius_plugin_register. Slots are append-only;
 * a plugin that needs a slot added after version 1 checks MOBIUS_HAS_FIELD first. */
typedef struct mobius_host_api {
  uint32_t struct_size;
  uint32_t abi_version;

  /* --- diagnostics --- */
  void (*log)(mobius_context* ctx, int32_t level, const char* message); /* ctx may be NULL */
  const char* (*last_error)(mobius_context* ctx); /* message of the last failed host call */
  void (*set_error)(mobius_context* ctx, const char* message);

  /* --- registration (only during mobius_plugin_register) --- */
  mobius_status (*register_architecture)(mobius_registrar* reg, const mobius_architecture* arch);
  void (*registrar_error)(mobius_registrar* reg, const char* message);

  /* --- build options --- */
  const mobius_build_options* (*build_options)(mobius_context* ctx);

  /* --- graph building --- */
  mobius_graph* (*main_graph)(mobius_context* ctx);
  /* A new, empty subgraph for a GRAPH attribute (Loop/Scan/If body). */
  mobius_graph* (*create_subgraph)(mobius_context* ctx, const char* name);
  mobius_status (*add_input)(mobius_graph* g, const char* name, const mobius_tensor_type* type);
  mobius_status (*add_output)(mobius_graph* g, const char* name, const mobius_tensor_type* type);
  /* Declares a weight; its bytes come from the weight plan (plan_* below). Main graph only. */
  mobius_status (*add_initializer)(mobius_graph* g, const char* name,
                                   const mobius_tensor_type* type);
  /* A small constant embedded in the graph (row-major, little-endian bytes). */
  mobius_status (*add_constant)(mobius_graph* g, const char* name, const mobius_tensor_type* type,
                                const void* data, size_t nbytes);
  mobius_status (*add_node)(mobius_graph* g, const mobius_node* node);
  /* Records an intermediate value's type (helps readers; optional). */
  mobius_status (*add_value_info)(mobius_graph* g, const char* name,
                                  const mobius_tensor_type* type);

  /* --- weight planning: every initializer gets exactly one source --- */
  mobius_status (*plan_tensor)(mobius_context* ctx, const char* initializer,
                               const char* checkpoint_tensor);
  /* Stacks n per-expert tensors of equal shape along a new leading axis. */
  mobius_status (*plan_expert_bank)(mobius_context* ctx, const char* initializer,
                                    const char* const* checkpoint_tensors, size_t n);
  /* `release` (may be NULL) is called with `user` when the host no longer needs it. */
  mobius_status (*plan_transformed)(mobius_context* ctx, const char* initializer,
                                    const char* const* checkpoint_tensors, size_t n,
                                    mobius_transform_fn fn, void* user,
                                    void (*release)(void* user));
  /* Declares checkpoint tensors this architecture knowingly does not use. `pattern` is
   * a glob where '*' matches any run of characters (e.g. "model.layers.*.rotary_emb.*"). */
  mobius_status (*ignore_tensors)(mobius_context* ctx, const char* pattern);
  /* Header-only query of a checkpoint tensor: MOBIUS_OK and `out` filled when it
   * exists; MOBIUS_ERROR when it does not (or there is no checkpoint). */
  mobius_status (*query_tensor)(mobius_context* ctx, const char* name, mobius_tensor_info* out);

  /* --- appended after version 1: check MOBIUS_HAS_FIELD(host, mobius_host_api, slot) --- */

  /* Like set_error, with whose fault it is (MOBIUS_ERROR_KIND_*). A plugin callback calls it
   * before returning a non-zero status. (set_error means MOBIUS_ERROR_KIND_PLUGIN, or
   * MOBIUS_ERROR_KIND_CONFIG when the message starts with "[config]".) */
  void (*set_error_kind)(mobius_context* ctx, mobius_error_kind kind, const char* message);
  /* A file the runtime needs beside the model (e.g. "genai_config.json"): `name` is a bare
   * file name (letters, digits, '.', '_', '-'; not starting with '.'), the bytes (at most
   * 64 MiB) are copied and written unchanged at the root of the output folder when it is
   * saved. A file of the checkpoint the host would copy there (config.json,
   * tokenizer_config.json, ...) is replaced by the one added. A name already added in this
   * build, or one the host writes itself (the graph and its data, mobius_provenance.json), is an
   * error. */
  mobius_status (*add_runtime_file)(mobius_context* ctx, const char* name, const void* data,
                                    size_t size);
  /* The text of the config.json this build started from, unchanged (NUL-terminated, owned by
   * the host, valid during the build); NULL when the build has none. */
  const char* (*source_config)(mobius_context* ctx);
  /* The text of a small file of the checkpoint folder that describes the model for a runtime
   * (generation_config.json, tokenizer_config.json, special_tokens_map.json,
   * chat_template.jinja, a sentence-transformers folder's modules.json), unchanged,
   * NUL-terminated, owned by the host and valid during the build; NULL when the folder has no
   * such file, the build has no folder, or the name is not one of those. The host reads it
   * under the checkpoint folder's file rules and size limits. */
  const char* (*source_file)(mobius_context* ctx, const char* name);
  /* Plans an initializer from `n` checkpoint tensors of rank 2 with equal column counts,
   * concatenated along their first dimension (n = 1: one tensor) and laid out as `layout`
   * says. The initializer's declared dtype and shape must be what the layout produces: for
   * TRANSPOSED any floating dtype, shape [cols, total rows]; for BLOCK_QUANTIZED the part's
   * dtype and shape above, with N = total rows and K = cols, or the same bytes with the N rows
   * split over leading dimensions and each row cut into equal parts (e.g. [E, N/E, K*bits/8] for
   * the data of E stacked matrices, read by GatherBlockQuantized, when K is a multiple of the
   * block size). */
  mobius_status (*plan_layout)(mobius_context* ctx, const char* initializer,
                               const char* const* checkpoint_tensors, size_t n,
                               const mobius_weight_layout* layout);
  /* A small file of the checkpoint folder, read as source_file reads one but saying why it could
   * not be: source_file's names, and a sentence-transformers folder's module configs
   * ("<module>/config.json", the module a single folder name). Returns MOBIUS_OK with the text
   * written to `out` (`found` 1), MOBIUS_OK with `found` 0 when the folder has no such file (or
   * the build no folder), MOBIUS_ERROR when it cannot be read: a link leaving the folder, not a
   * regular file, larger than the limit, JSON beyond the config limits, a name not allowed
   * (last_error says which file and why). */
  mobius_status (*read_source_file)(mobius_context* ctx, const char* name, mobius_string_sink* out,
                                    int32_t* found);
  /* The largest mobius_weight_layout this host reads (MOBIUS_WEIGHT_LAYOUT_SIZE_V2 and up: it
   * honours `interleave`). A host without this field reads version 1 only and would ignore later
   * fields: a plugin sets them only when this covers them. */
  uint64_t weight_layout_size;
} mobius_host_api;
#define MOBIUS_HOST_API_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_host_api, query_tensor)

/* What a plugin says about itself; returned by mobius_plugin_get_info and checked
 * before anything else of the plugin runs. Points to static storage. */
typedef struct mobius_plugin_info {
  uint32_t struct_size;
  uint32_t abi_version; /* MOBIUS_ABI_VERSION the plugin was built against */
  const char* name;
  const char* version;
  const char* vendor;
} mobius_plugin_info;
#define MOBIUS_PLUGIN_INFO_SIZE_V1 MOBIUS_SIZE_THROUGH(mobius_plugin_info, vendor)

/* The two symbols every plugin exports. */
typedef const mobius_plugin_info* (*mobius_plugin_get_info_fn)(void);
typedef mobius_status (*mobius_plugin_register_fn)(const mobius_host_api* host,
                                                   mobius_registrar* reg);

#define MOBIUS_PLUGIN_GET_INFO_SYMBOL "mobius_plugin_get_info"
#define MOBIUS_PLUGIN_REGISTER_SYMBOL "mobius_plugin_register"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOBIUS_PLUGIN_H */
