// test_abi.cpp - the C ABI across versions and at its boundary: plugins built against the
// version-1 header as first shipped and against a later one load and build; structs are read
// within their declared size and refused below version 1's; the SDK checks the host table before a
// later slot; no exception crosses the boundary; every error says whose fault it is.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>

#include "checkpoint/checkpoint.hpp"
#include "plugins/context.hpp"
#include "mobius/build.hpp"
#include "mobius/plugins.hpp"
#include "mobius/sdk/context.hpp"
#include "mobius/sdk/plugin.hpp"
#include "test_util.hpp"

using namespace mobius::test;
using mobius::ErrorKind;

namespace {

fs::path abi_dir() { return env_or_empty("MOBIUS_TEST_ABI_DIR"); }

const std::vector<float> kW = {1, 0, -1, 2, 0.5f, 0.5f, 0.5f, 0.5f, -2, 1, 0, 3};  // [3, 4]

// A checkpoint for the test plugins: config.json as given, proj.weight [3, 4] (+ `extra`).
fs::path checkpoint(const fs::path& dir, const nlohmann::json& config,
                    std::vector<StTensor> extra = {}) {
  fs::create_directories(dir);
  write_text(dir / "config.json", config.dump());
  std::vector<StTensor> ts{f32_tensor("proj.weight", {3, 4}, kW)};
  for (auto& e : extra) ts.push_back(std::move(e));
  write_safetensors(dir / "model.safetensors", ts);
  return dir;
}

struct Loaded {
  mobius::PluginHost host;
  mobius::ModelRegistry registry;
  std::vector<mobius::PluginRecord> records;
};

std::unique_ptr<Loaded> load_abi_plugins() {
  auto l = std::make_unique<Loaded>();
  l->records = l->host.load({{abi_dir(), mobius::kPriorityCommandLine, "--plugin-path"}}, l->registry);
  return l;
}

// The host's error of building `dir`, or a failed check when it builds.
mobius::Error build_error(const fs::path& dir, const mobius::ModelRegistry& reg) {
  try {
    mobius::build(dir.string(), {}, reg);
  } catch (const mobius::Error& e) {
    return e;
  }
  FAIL("the build did not fail: " << dir);
  return mobius::Error("");
}

mobius_tensor_type ttype(std::vector<mobius_dim>& dims, uint32_t size = sizeof(mobius_tensor_type)) {
  mobius_tensor_type t{};
  t.struct_size = size;
  t.dtype = MOBIUS_DTYPE_FLOAT;
  t.rank = static_cast<int32_t>(dims.size());
  t.dims = dims.data();
  return t;
}

std::string last_error(mobius_context& ctx) { return mobius::host_api()->last_error(&ctx); }

}  // namespace

TEST_CASE("abi: plugins built against the version-1 header and a later one load and build") {
  REQUIRE_FALSE(abi_dir().empty());
  auto l = load_abi_plugins();
  REQUIRE(l->records.size() == 3);
  for (const auto& r : l->records) {
    CAPTURE(r.library);
    CHECK(r.loaded);
    CHECK(r.error.empty());
  }
  CHECK(l->registry.get("abi_older").version == "1.0.0");
  CHECK(l->registry.get("abi_newer").version == "2.0.0");

  for (const char* type : {"abi_older", "abi_newer"}) {
    CAPTURE(type);
    TempDir t;
    nlohmann::json config = {{"model_type", type}, {"note", "older and newer"}};
    fs::path ckpt = checkpoint(t / "ckpt", config);
    mobius::ModelPackage pkg = mobius::build(ckpt.string(), {}, l->registry);
    CHECK(pkg.node_count() == 3);
    CHECK(pkg.initializer_count() == 1);
    pkg.save(t / "out");  // the onnx checker runs here
    REQUIRE(fs::exists(t / "out" / "model.onnx"));

    // The model computes y = x W^T in ONNX Runtime.
    std::vector<float> x = {1, 2, 3, 4};
    nlohmann::json in = {{"x", {{"type", "float32"}, {"dims", {1, 4}}, {"data", x}}}};
    write_text(t / "in.json", in.dump());
    RunResult o = run("node " + quote(env_or_empty("MOBIUS_SOURCE_ROOT") + "/tests/ort_run.mjs") +
                          " " + quote((t / "out" / "model.onnx").string()) + " " +
                          quote((t / "in.json").string()),
                      false);
    INFO(o.output);
    REQUIRE(o.status == 0);
    auto y = nlohmann::json::parse(o.output)["y"]["data"].get<std::vector<float>>();
    REQUIRE(y.size() == 3);
    for (size_t j = 0; j < 3; ++j) {
      float e = 0;
      for (size_t k = 0; k < 4; ++k) e += x[k] * kW[j * 4 + k];
      CHECK(y[j] == doctest::Approx(e));
    }
  }
}

TEST_CASE("abi: a plugin's runtime file is written beside the model byte for byte") {
  auto l = load_abi_plugins();
  TempDir t;
  // The newer plugin hands back the config.json text it got through source_config.
  std::string text = "{\"model_type\": \"abi_newer\",\n  \"bytes\": \"\\u00e9 kept as written\"}\n";
  checkpoint(t / "ckpt", nlohmann::json::object());
  write_text(t / "ckpt" / "config.json", text);
  mobius::build((t / "ckpt").string(), {}, l->registry).save(t / "out");
  CHECK(read_text(t / "out" / "abi_newer.json") == text);
  CHECK_FALSE(fs::exists(t / "out" / "genai_config.json"));  // not a text-generation model
}

TEST_CASE("abi: a struct smaller than version 1's is refused; a larger one is read up to its own") {
  const mobius_host_api* api = mobius::host_api();
  REQUIRE(api->struct_size == sizeof(mobius_host_api));
  CHECK(MOBIUS_HOST_API_SIZE_V1 < sizeof(mobius_host_api));  // slots were appended since
  CHECK(MOBIUS_HAS_FIELD(api, mobius_host_api, set_error_kind));
  CHECK(MOBIUS_HAS_FIELD(api, mobius_host_api, add_runtime_file));
  CHECK(MOBIUS_HAS_FIELD(api, mobius_host_api, source_config));
  // Version 1's sizes do not move when fields are appended.
  CHECK(MOBIUS_HOST_API_SIZE_V1 == offsetof(mobius_host_api, query_tensor) + sizeof(void*));
  CHECK(MOBIUS_TENSOR_TYPE_SIZE_V1 == offsetof(mobius_tensor_type, dims) + sizeof(void*));

  mobius_context ctx;
  mobius_graph* g = api->main_graph(&ctx);
  std::vector<mobius_dim> dims{{-1, "batch_size"}, {4, nullptr}};

  auto small = ttype(dims, MOBIUS_TENSOR_TYPE_SIZE_V1 - 1);
  CHECK(api->add_input(g, "x", &small) == MOBIUS_ERROR);
  CHECK(last_error(ctx).find("tensor type of 'x': struct_size " +
                             std::to_string(MOBIUS_TENSOR_TYPE_SIZE_V1 - 1) +
                             " is smaller than version 1's") != std::string::npos);
  auto exact = ttype(dims, MOBIUS_TENSOR_TYPE_SIZE_V1);
  CHECK(api->add_input(g, "x", &exact) == MOBIUS_OK);
  // Larger than this host's struct: the fields past its own are never read.
  struct {
    mobius_tensor_type v;
    char appended[64];
  } larger{};
  larger.v = ttype(dims, sizeof(larger));
  std::memset(larger.appended, 0x5a, sizeof(larger.appended));
  CHECK(api->add_input(g, "x2", &larger.v) == MOBIUS_OK);

  std::vector<const char*> in{"x"}, out{"r"};
  std::vector<const mobius_attribute*> attrs;
  mobius_node n{};
  n.struct_size = MOBIUS_NODE_SIZE_V1 - 1;
  n.op_type = "Relu";
  n.inputs = in.data();
  n.n_inputs = 1;
  n.outputs = out.data();
  n.n_outputs = 1;
  CHECK(api->add_node(g, &n) == MOBIUS_ERROR);
  CHECK(last_error(ctx).find("node: struct_size") != std::string::npos);

  mobius_attribute a{};
  a.struct_size = MOBIUS_ATTRIBUTE_SIZE_V1 - 8;
  a.name = "alpha";
  a.kind = MOBIUS_ATTR_FLOAT;
  attrs.push_back(&a);
  n.struct_size = MOBIUS_NODE_SIZE_V1;
  n.op_type = "LeakyRelu";
  n.name = "leaky";
  n.attributes = attrs.data();
  n.n_attributes = 1;
  CHECK(api->add_node(g, &n) == MOBIUS_ERROR);
  CHECK(last_error(ctx).find("attribute of node 'leaky': struct_size") != std::string::npos);
  a.struct_size = MOBIUS_ATTRIBUTE_SIZE_V1;
  CHECK(api->add_node(g, &n) == MOBIUS_OK);

  mobius_tensor_info info{};
  info.struct_size = MOBIUS_TENSOR_INFO_SIZE_V1 - 8;  // room for 7 dims: the host writes none
  CHECK(api->query_tensor(&ctx, "w", &info) == MOBIUS_ERROR);
  CHECK(last_error(ctx).find("query_tensor of 'w': result: struct_size") != std::string::npos);

  mobius_architecture arch{};
  arch.struct_size = MOBIUS_ARCHITECTURE_SIZE_V1 - 8;
  mobius_registrar reg;
  CHECK(api->register_architecture(&reg, &arch) == MOBIUS_ERROR);
  CHECK(reg.error.find("architecture: struct_size") != std::string::npos);
}

TEST_CASE("abi: query_tensor refuses a tensor of rank above 8, naming it") {
  TempDir t;
  std::vector<int64_t> nine(9, 1);
  checkpoint(t / "ckpt", {{"model_type", "abi_faulty"}, {"fail", "rank"}},
             {f32_tensor("big", nine, {7.0f})});
  auto reader = mobius::open_safetensors_checkpoint(t / "ckpt");
  mobius_context ctx;
  ctx.checkpoint = reader.get();
  const mobius_host_api* api = mobius::host_api();

  mobius_tensor_info info{};
  info.struct_size = sizeof(info);
  CHECK(api->query_tensor(&ctx, "big", &info) == MOBIUS_ERROR);
  CHECK(info.rank == 9);  // the true rank, never a truncated shape
  CHECK(last_error(ctx).find("tensor 'big' has rank 9") != std::string::npos);
  CHECK(api->query_tensor(&ctx, "proj.weight", &info) == MOBIUS_OK);
  CHECK(info.rank == 2);
  CHECK(info.dims[0] == 3);

  // The SDK turns it into an error (an absent tensor stays "no such tensor").
  mobius::BuildContext bc(api, &ctx);
  CHECK_THROWS_WITH_AS(bc.query_tensor("big"), doctest::Contains("'big' has rank 9"),
                       mobius::sdk::Error);
  CHECK_FALSE(bc.query_tensor("absent").has_value());
  CHECK(bc.query_tensor("proj.weight")->dims == std::vector<int64_t>{3, 4});

  // Through a plugin: a checkpoint error naming the tensor.
  auto l = load_abi_plugins();
  mobius::Error e = build_error(t / "ckpt", l->registry);
  CHECK(e.kind() == ErrorKind::Checkpoint);
  CHECK(std::string(e.what()).find("tensor 'big' has rank 9") != std::string::npos);
}

TEST_CASE("abi: the SDK checks the host table's size before a slot added after version 1") {
  // A host that speaks version 1 only: its table ends with query_tensor.
  mobius_host_api old = *mobius::host_api();
  old.struct_size = MOBIUS_HOST_API_SIZE_V1;
  mobius_context ctx;
  ctx.source_config = "{\"model_type\": \"x\"}";
  {
    mobius::BuildContext bc(&old, &ctx);
    CHECK_FALSE(bc.host_has_runtime_files());
    CHECK_FALSE(bc.source_config().has_value());
    std::string too_old = "host is too old for this plugin: its function table (" +
                          std::to_string(MOBIUS_HOST_API_SIZE_V1) +
                          " bytes) has no 'add_runtime_file' slot";
    CHECK_THROWS_WITH_AS(bc.add_runtime_file("notes.txt", "x"),
                         doctest::Contains(too_old.c_str()), mobius::sdk::Error);
    CHECK(ctx.runtime_files.empty());
  }
  {
    mobius::BuildContext bc(mobius::host_api(), &ctx);
    CHECK(bc.source_config() == ctx.source_config);
    bc.add_runtime_file("notes.txt", "x");
    REQUIRE(ctx.runtime_files.size() == 1);
    CHECK_THROWS_WITH(bc.add_runtime_file("notes.txt", "y"), doctest::Contains("added twice"));
    CHECK_THROWS_WITH(bc.add_runtime_file("../escape", "y"),
                      doctest::Contains("not a bare file name"));
    CHECK_THROWS_WITH(bc.add_runtime_file("model.onnx", "y"),
                      doctest::Contains("written by the host itself"));
  }

  // Errors reach a version-1 host through set_error, the kind in its "[config]" convention.
  using mobius::detail::run_guarded;
  CHECK(run_guarded(&old, &ctx, MOBIUS_ERROR_KIND_PLUGIN, [] {
          throw mobius::sdk::Error(MOBIUS_ERROR_KIND_CONFIG, "'x' is bad");
        }) == MOBIUS_ERROR);
  CHECK(ctx.plugin_error == "[config] 'x' is bad");
  CHECK(ctx.plugin_error_kind == MOBIUS_ERROR_KIND_CONFIG);
  CHECK(run_guarded(&old, &ctx, MOBIUS_ERROR_KIND_CONFIG,
                    [] { throw std::logic_error("a bug"); }) == MOBIUS_ERROR);
  CHECK(ctx.plugin_error == "[plugin] unexpected exception: a bug");
  CHECK(ctx.plugin_error_kind == MOBIUS_ERROR_KIND_PLUGIN);

  // A table too small for version 1 is refused outright.
  old.struct_size = MOBIUS_HOST_API_SIZE_V1 - sizeof(void*);
  CHECK_THROWS_WITH_AS(mobius::BuildContext(&old, &ctx), doctest::Contains("smaller than version 1"),
                       mobius::sdk::Error);
}

TEST_CASE("abi: plan_layout reads its layout within its size and reports errors in last_error") {
  const mobius_host_api* api = mobius::host_api();
  REQUIRE(MOBIUS_HAS_FIELD(api, mobius_host_api, plan_layout));
  mobius_context ctx;
  std::vector<mobius_dim> dims{{4, nullptr}, {3, nullptr}};
  auto t = ttype(dims);
  REQUIRE(api->add_initializer(api->main_graph(&ctx), "w_t", &t) == MOBIUS_OK);
  const char* tensors[] = {"proj.weight"};
  mobius_weight_layout l{};
  l.struct_size = sizeof(l);
  l.kind = MOBIUS_LAYOUT_TRANSPOSED;

  CHECK(api->plan_layout(nullptr, "w_t", tensors, 1, &l) == MOBIUS_ERROR);
  CHECK(api->plan_layout(&ctx, nullptr, tensors, 1, &l) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[abi] initializer is NULL");
  CHECK(api->plan_layout(&ctx, "w_t", tensors, 1, nullptr) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[abi] layout of 'w_t' is NULL");
  mobius_weight_layout small = l;
  small.struct_size = MOBIUS_WEIGHT_LAYOUT_SIZE_V1 - 1;
  CHECK(api->plan_layout(&ctx, "w_t", tensors, 1, &small) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[abi] layout of 'w_t': struct_size " +
                               std::to_string(MOBIUS_WEIGHT_LAYOUT_SIZE_V1 - 1) +
                               " is smaller than version 1's " +
                               std::to_string(MOBIUS_WEIGHT_LAYOUT_SIZE_V1) + " bytes");
  CHECK(api->plan_layout(&ctx, "w_t", nullptr, 1, &l) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[abi] NULL tensor name list");
  CHECK(api->plan_layout(&ctx, "w_t", tensors, 0, &l) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[plan] initializer 'w_t' is laid out from no tensor");
  mobius_weight_layout q = l;
  q.kind = MOBIUS_LAYOUT_BLOCK_QUANTIZED;
  q.bits = 3;
  CHECK(api->plan_layout(&ctx, "w_t", tensors, 1, &q) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[plan] initializer 'w_t': block quantization has 4 or 8 bits, not 3");
  CHECK(api->plan_layout(&ctx, "absent", tensors, 1, &l) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[plan] no initializer 'absent' to plan (declare it in the graph first)");

  // A layout from a later header: the fields past this host's are never read.
  struct {
    mobius_weight_layout v;
    int32_t appended[4];
  } larger{};
  larger.v = l;
  larger.v.struct_size = sizeof(larger);
  std::fill(std::begin(larger.appended), std::end(larger.appended), -1);
  CHECK(api->plan_layout(&ctx, "w_t", tensors, 1, &larger.v) == MOBIUS_OK);
  CHECK(api->plan_layout(&ctx, "w_t", tensors, 1, &l) == MOBIUS_ERROR);
  CHECK(last_error(ctx) == "[plan] initializer 'w_t' already has a source");

  // Through the SDK: the host's message, naming the initializer.
  mobius::BuildContext bc(api, &ctx);
  CHECK_THROWS_WITH_AS(bc.plan_layout("w_t", {"proj.weight"}, l),
                       "[plan] initializer 'w_t' already has a source (plan 'w_t')", mobius::sdk::Error);
}

TEST_CASE("abi: the SDK's plan_layout and quantization options on a host that predates them") {
  mobius_context ctx;
  mobius_weight_layout l{};
  l.struct_size = sizeof(l);
  l.kind = MOBIUS_LAYOUT_TRANSPOSED;
  // A host whose table ends before plan_layout, and whose build options end with
  // runtime_is_default.
  mobius_host_api old = *mobius::host_api();
  old.struct_size = offsetof(mobius_host_api, plan_layout);
  ctx.options.struct_size = MOBIUS_SIZE_THROUGH(mobius_build_options, runtime_is_default);
  {
    mobius::BuildContext bc(&old, &ctx);
    std::string too_old = "has no 'plan_layout' slot; use a newer mobius";
    CHECK_THROWS_WITH_AS(bc.plan_layout("w", {"proj.weight"}, l), doctest::Contains(too_old.c_str()),
                         mobius::sdk::Error);
    CHECK(bc.ops() == "standard");
    CHECK(bc.weight_bits() == 0);
    CHECK(bc.block_size() == 32);
    CHECK_FALSE(bc.symmetric());
    CHECK(bc.accuracy_level() == 4);
  }
  // This host: its defaults, then what a build sets.
  ctx.options.struct_size = sizeof(ctx.options);
  mobius::BuildContext bc(mobius::host_api(), &ctx);
  CHECK(bc.ops() == "ort");
  CHECK(bc.weight_bits() == 0);
  CHECK(bc.block_size() == 32);
  CHECK_FALSE(bc.symmetric());
  CHECK(bc.accuracy_level() == 4);
  ctx.ops = "standard";
  ctx.options.ops = ctx.ops.c_str();
  ctx.options.weight_bits = 8;
  ctx.options.block_size = 128;
  ctx.options.symmetric = 1;
  ctx.options.accuracy_level = 0;
  CHECK(bc.ops() == "standard");
  CHECK(bc.weight_bits() == 8);
  CHECK(bc.block_size() == 128);
  CHECK(bc.symmetric());
  CHECK(bc.accuracy_level() == 0);
}

TEST_CASE("abi: no exception crosses the boundary and the error says whose fault it is") {
  auto l = load_abi_plugins();
  struct Case {
    nlohmann::json config;
    ErrorKind kind;
    const char* message;
  };
  const Case cases[] = {
      {{{"fail_in", "parse"}, {"fail", "config"}}, ErrorKind::Config, "'fail' asks for a config error"},
      {{{"fail_in", "build"}, {"fail", "config"}}, ErrorKind::Config, "'fail' asks for a config error"},
      {{{"fail_in", "parse"}, {"fail", "std"}}, ErrorKind::Plugin, "unexpected exception: vector::_M_range_check"},
      {{{"fail_in", "build"}, {"fail", "std"}}, ErrorKind::Plugin, "unexpected exception: vector::_M_range_check"},
      {{{"fail_in", "build"}, {"fail", "alloc"}}, ErrorKind::Internal, "out of memory in the plugin"},
      {{{"fail_in", "parse"}, {"fail", "int"}}, ErrorKind::Internal, "unknown exception in the plugin"},
      {{{"fail_in", "build"}, {"fail", "int"}}, ErrorKind::Internal, "unknown exception in the plugin"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.config.dump());
    TempDir t;
    nlohmann::json config = c.config;
    config["model_type"] = "abi_faulty";
    fs::path ckpt = checkpoint(t / "ckpt", config);
    mobius::Error e = build_error(ckpt, l->registry);
    std::string m = e.what();
    CAPTURE(m);
    CHECK(e.kind() == c.kind);
    CHECK(m.find(c.message) != std::string::npos);
    std::string cfg = (ckpt / "config.json").string();
    if (c.kind == ErrorKind::Config) {
      // Only a genuine config error names config.json.
      CHECK(m.rfind("[config] " + cfg + ": ", 0) == 0);
    } else {
      CHECK(m.find(cfg) == std::string::npos);
      CHECK(m.rfind("[plugin] plugin 'abi_faulty' 1.0.0 (", 0) == 0);
      CHECK(m.find("not of the checkpoint or its config.json") != std::string::npos);
    }
  }

  // A transform that throws while the weights are written: the plugin's error, OUT untouched.
  TempDir t;
  fs::path ckpt = checkpoint(t / "ckpt", {{"model_type", "abi_faulty"}, {"fail", "transform"}});
  mobius::ModelPackage pkg = mobius::build(ckpt.string(), {}, l->registry);
  try {
    pkg.save(t / "out");
    FAIL("the save did not fail");
  } catch (const mobius::Error& e) {
    std::string m = e.what();
    CHECK(e.kind() == ErrorKind::Plugin);
    CHECK(m.find("plugin 'abi_faulty'") != std::string::npos);
    CHECK(m.find("writing the weights of 'abi_faulty'") != std::string::npos);
    CHECK(m.find("the transform failed on purpose") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(t / "out"));

  // The C plugins: set_error with "[config]" (version 1) and set_error_kind (later).
  for (const char* type : {"abi_older", "abi_newer"}) {
    CAPTURE(type);
    TempDir u;
    fs::path c = checkpoint(u / "ckpt", {{"model_type", type}, {"reject", true}});
    mobius::Error e = build_error(c, l->registry);
    CHECK(e.kind() == ErrorKind::Config);
    CHECK(std::string(e.what()) == "[config] " + (c / "config.json").string() + ": 'reject' is set");
  }
  TempDir u;
  fs::path c = checkpoint(u / "ckpt", {{"model_type", "abi_newer"}, {"fail_build", true}});
  mobius::Error e = build_error(c, l->registry);
  CHECK(e.kind() == ErrorKind::Plugin);
  CHECK(std::string(e.what()).find("plugin 'abi_newer' 2.0.0") != std::string::npos);
  CHECK(std::string(e.what()).find("[abi_newer] the build failed on purpose") != std::string::npos);
}

TEST_CASE("abi: the CLI reports a plugin's fault as the plugin's, a config error with its file") {
  std::string cli = env_or_empty("MOBIUS_CLI");
  REQUIRE_FALSE(cli.empty());
  TempDir t;
  auto build = [&](const nlohmann::json& config) {
    fs::remove_all(t / "ckpt");
    fs::path ckpt = checkpoint(t / "ckpt", config);
    return run(quote(cli) + " build --plugin-path " + quote(abi_dir().string()) + " --model " +
               quote(ckpt.string()) + " " + quote((t / "out").string()));
  };
  RunResult r = build({{"model_type", "abi_faulty"}, {"fail_in", "build"}, {"fail", "std"}});
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("mobius: plugin error: [plugin] plugin 'abi_faulty' 1.0.0 (") !=
        std::string::npos);
  CHECK(r.output.find((t / "ckpt" / "config.json").string()) == std::string::npos);

  r = build({{"model_type", "abi_faulty"}, {"fail_in", "parse"}, {"fail", "config"}});
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("mobius: error: [config] " + (t / "ckpt" / "config.json").string() +
                      ": 'fail' asks for a config error") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}
