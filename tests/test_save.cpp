// test_save.cpp - a graph built through the raw C ABI is saved as model.onnx + external data,
// passes onnx's checker, runs in ONNX Runtime; the save is transactional.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "plugins/context.hpp"
#include "mobius/build.hpp"
#include "mobius/plugins.hpp"
#include "save/package.hpp"
#include "test_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

const float kW[6] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};  // [3, 2]

mobius_status fill_w(void*, const mobius_tensor_view* const*, size_t n, mobius_tensor_view* out,
                     char* err, size_t err_size) {
  if (n != 0 || out->nbytes != sizeof(kW)) {
    std::snprintf(err, err_size, "unexpected call");
    return MOBIUS_ERROR;
  }
  std::memcpy(out->data, kW, sizeof(kW));
  return MOBIUS_OK;
}

mobius_status fail_w(void*, const mobius_tensor_view* const*, size_t, mobius_tensor_view*,
                     char* err, size_t err_size) {
  std::snprintf(err, err_size, "deliberate failure");
  return MOBIUS_ERROR;
}

mobius_tensor_type ttype(mobius_dtype dt, const std::vector<mobius_dim>& dims) {
  mobius_tensor_type t{};
  t.struct_size = sizeof(t);
  t.dtype = dt;
  t.rank = static_cast<int32_t>(dims.size());
  t.dims = dims.data();
  return t;
}

mobius_node make_node(const char* op, std::vector<const char*>& ins,
                      std::vector<const char*>& outs,
                      std::vector<const mobius_attribute*>& attrs) {
  mobius_node n{};
  n.struct_size = sizeof(n);
  n.op_type = op;
  n.inputs = ins.data();
  n.n_inputs = ins.size();
  n.outputs = outs.data();
  n.n_outputs = outs.size();
  n.attributes = attrs.data();
  n.n_attributes = attrs.size();
  return n;
}

// y = If(true) { mm + mm } else { mm }, mm = x @ w: every kind of ABI call, a subgraph included.
std::unique_ptr<ModelPackage::Impl> abi_graph(mobius_transform_fn weights) {
  const mobius_host_api* api = host_api();
  auto impl = std::make_unique<ModelPackage::Impl>();
  impl->model_type = "abi-test";
  impl->ctx = std::make_unique<mobius_context>();
  mobius_context* ctx = impl->ctx.get();
  mobius_graph* g = api->main_graph(ctx);

  std::vector<mobius_dim> xd{{-1, "batch_size"}, {3, nullptr}};
  auto xt = ttype(MOBIUS_DTYPE_FLOAT, xd);
  REQUIRE(api->add_input(g, "x", &xt) == MOBIUS_OK);
  std::vector<mobius_dim> wd{{3, nullptr}, {2, nullptr}};
  auto wt = ttype(MOBIUS_DTYPE_FLOAT, wd);
  REQUIRE(api->add_initializer(g, "w", &wt) == MOBIUS_OK);
  REQUIRE(api->plan_transformed(ctx, "w", nullptr, 0, weights, nullptr, nullptr) == MOBIUS_OK);
  std::vector<mobius_dim> none;
  auto bt = ttype(MOBIUS_DTYPE_BOOL, none);
  uint8_t yes = 1;
  REQUIRE(api->add_constant(g, "cond", &bt, &yes, 1) == MOBIUS_OK);

  std::vector<const char*> ins{"x", "w"}, outs{"mm"};
  std::vector<const mobius_attribute*> attrs;
  auto mm = make_node("MatMul", ins, outs, attrs);
  REQUIRE(api->add_node(g, &mm) == MOBIUS_OK);

  std::vector<mobius_dim> yd{{-1, "batch_size"}, {2, nullptr}};
  auto yt = ttype(MOBIUS_DTYPE_FLOAT, yd);
  mobius_graph* then_g = api->create_subgraph(ctx, "then");
  mobius_graph* else_g = api->create_subgraph(ctx, "else");
  std::vector<const char*> tin{"mm", "mm"}, tout{"then_out"};
  auto add = make_node("Add", tin, tout, attrs);
  REQUIRE(api->add_node(then_g, &add) == MOBIUS_OK);
  REQUIRE(api->add_output(then_g, "then_out", &yt) == MOBIUS_OK);
  std::vector<const char*> ein{"mm"}, eout{"else_out"};
  auto id = make_node("Identity", ein, eout, attrs);
  REQUIRE(api->add_node(else_g, &id) == MOBIUS_OK);
  REQUIRE(api->add_output(else_g, "else_out", &yt) == MOBIUS_OK);

  mobius_attribute a_then{}, a_else{};
  a_then.struct_size = a_else.struct_size = sizeof(mobius_attribute);
  a_then.name = "then_branch";
  a_then.kind = a_else.kind = MOBIUS_ATTR_GRAPH;
  a_then.graph = then_g;
  a_else.name = "else_branch";
  a_else.graph = else_g;
  std::vector<const mobius_attribute*> if_attrs{&a_then, &a_else};
  std::vector<const char*> if_in{"cond"}, if_out{"y"};
  auto if_node = make_node("If", if_in, if_out, if_attrs);
  REQUIRE(api->add_node(g, &if_node) == MOBIUS_OK);
  REQUIRE(api->add_output(g, "y", &yt) == MOBIUS_OK);
  return impl;
}

std::string ort_run(const fs::path& model, const nlohmann::json& inputs, const TempDir& t) {
  write_text(t / "inputs.json", inputs.dump());
  std::string script = env_or_empty("MOBIUS_SOURCE_ROOT") + "/tests/ort_run.mjs";
  RunResult r = run("node " + quote(script) + " " + quote(model.string()) + " " +
                    quote((t / "inputs.json").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  return r.output;
}

}  // namespace

TEST_CASE("save: a C ABI graph with a subgraph saves, passes the checker and runs in ORT") {
  TempDir t;
  auto impl = abi_graph(&fill_w);
  fs::path out = t / "out";
  save_package(*impl, out, {});
  CHECK(fs::exists(out / "model.onnx"));
  CHECK(fs::file_size(out / "model.onnx.data") == sizeof(kW));

  onnx::ModelProto m;
  std::ifstream in(out / "model.onnx", std::ios::binary);
  REQUIRE(m.ParseFromIstream(&in));
  CHECK(m.ir_version() == 8);
  CHECK(m.opset_import(0).version() == 17);
  REQUIRE(m.graph().initializer_size() == 1);
  const auto& w = m.graph().initializer(0);
  CHECK(w.data_location() == onnx::TensorProto::EXTERNAL);
  CHECK(w.raw_data().empty());

  nlohmann::json x = {{"x", {{"type", "float32"}, {"dims", {2, 3}}, {"data", {1, 2, 3, -1, 0, 4}}}}};
  auto res = nlohmann::json::parse(ort_run(out / "model.onnx", x, t));
  std::vector<float> y = res["y"]["data"].get<std::vector<float>>();
  REQUIRE(y.size() == 4);
  const float xs[6] = {1, 2, 3, -1, 0, 4};
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 2; ++j) {
      float e = 0;
      for (int k = 0; k < 3; ++k) e += xs[b * 3 + k] * kW[k * 2 + j];
      CHECK(y[static_cast<size_t>(b * 2 + j)] == doctest::Approx(2 * e));
    }
}

TEST_CASE("save: a failing weight leaves an existing OUT untouched and no temp folder") {
  TempDir t;
  fs::path out = t / "out";
  save_package(*abi_graph(&fill_w), out, {});
  std::string before = read_text(out / "model.onnx.data");
  auto bad = abi_graph(&fail_w);
  CHECK_THROWS_WITH_AS(save_package(*bad, out, {}), doctest::Contains("deliberate failure"), Error);
  CHECK(read_text(out / "model.onnx.data") == before);
  for (const auto& e : fs::directory_iterator(t.path()))
    CHECK(e.path().filename().string().find("mobius-tmp") == std::string::npos);
}

TEST_CASE("save: replaces an earlier model, refuses a folder that is not one") {
  TempDir t;
  fs::path out = t / "out";
  save_package(*abi_graph(&fill_w), out, {});
  save_package(*abi_graph(&fill_w), out, {});  // replace
  CHECK(fs::exists(out / "model.onnx"));
  fs::path other = t / "photos";
  fs::create_directories(other);
  write_text(other / "holiday.jpg", "not a model");
  CHECK_THROWS_WITH_AS(save_package(*abi_graph(&fill_w), other, {}),
                       doctest::Contains("refusing to replace"), Error);
  CHECK(read_text(other / "holiday.jpg") == "not a model");
  write_text(t / "file", "x");
  CHECK_THROWS_WITH_AS(save_package(*abi_graph(&fill_w), t / "file", {}),
                       doctest::Contains("not a folder"), Error);
}

TEST_CASE("save: the library never writes over the checkpoint folder or a folder holding it") {
  TempDir t;
  const fs::path m = t / "models" / "m";
  fs::create_directories(m);
  write_text(m / "config.json", "{}");
  write_text(m / "model.onnx", "kept with the checkpoint");
  write_text(t / "models" / "model.onnx", "kept beside it");
  fs::create_directory_symlink(m, t / "alias");
  const auto save_to = [&](const fs::path& out) {
    auto impl = abi_graph(&fill_w);
    impl->source_dir = t / "alias";  // the checkpoint reached through a link
    ModelPackage(std::move(impl)).save(out);
  };
  CHECK_THROWS_WITH_AS(save_to(m), doctest::Contains("is the checkpoint folder"), Error);
  CHECK_THROWS_WITH_AS(save_to(t / "alias"), doctest::Contains("is the checkpoint folder"), Error);
  CHECK_THROWS_WITH_AS(save_to(m / ".."), doctest::Contains("contains the checkpoint folder"),
                       Error);
  CHECK_THROWS_WITH_AS(save_to(t.path()), doctest::Contains("contains the checkpoint folder"),
                       Error);
  CHECK(read_text(m / "model.onnx") == "kept with the checkpoint");
  CHECK(read_text(m / "config.json") == "{}");
  CHECK(read_text(t / "models" / "model.onnx") == "kept beside it");
  CHECK(fs::is_symlink(t / "alias"));
  save_to(t / "out");  // elsewhere is fine, and the runtime files are copied
  CHECK(read_text(t / "out" / "config.json") == "{}");
}

TEST_CASE("save: stale temp folders of killed runs are removed") {
  TempDir t;
  fs::path stale = t / ".out.mobius-tmp-999999999";
  fs::create_directories(stale);
  write_text(stale / "model.onnx.data", "partial");
  save_package(*abi_graph(&fill_w), t / "out", {});
  CHECK_FALSE(fs::exists(stale));
}

TEST_CASE("save: cancellation stops the save and cleans up") {
  TempDir t;
  SaveOptions so;
  so.cancelled = [] { return true; };
  CHECK_THROWS_WITH_AS(save_package(*abi_graph(&fill_w), t / "out", so),
                       doctest::Contains("interrupted"), Error);
  CHECK_FALSE(fs::exists(t / "out"));
  CHECK(fs::is_empty(t.path()));
}

TEST_CASE("abi: bad calls return an error with a message, never crash") {
  const mobius_host_api* api = host_api();
  mobius_context ctx;
  mobius_graph* g = api->main_graph(&ctx);
  std::vector<const char*> ins{"nowhere"}, outs{"o"};
  std::vector<const mobius_attribute*> attrs;
  auto n = make_node("Relu", ins, outs, attrs);
  CHECK(api->add_node(g, &n) == MOBIUS_ERROR);
  CHECK(std::string(api->last_error(&ctx)).find("undefined value 'nowhere'") != std::string::npos);

  std::vector<mobius_dim> sym{{-1, "batch_size"}};
  auto st = ttype(MOBIUS_DTYPE_FLOAT, sym);
  CHECK(api->add_initializer(g, "w", &st) == MOBIUS_ERROR);
  CHECK(std::string(api->last_error(&ctx)).find("static") != std::string::npos);

  CHECK(api->plan_tensor(&ctx, "missing", "t") == MOBIUS_ERROR);
  CHECK(std::string(api->last_error(&ctx)).find("no initializer 'missing'") != std::string::npos);

  CHECK(api->add_input(g, nullptr, &st) == MOBIUS_ERROR);
  CHECK(api->add_input(nullptr, "x", &st) == MOBIUS_ERROR);
  CHECK(api->add_node(g, nullptr) == MOBIUS_ERROR);
  CHECK(api->add_input(g, "x", nullptr) == MOBIUS_ERROR);
  auto xt = ttype(MOBIUS_DTYPE_FLOAT, sym);
  CHECK(api->add_input(g, "x", &xt) == MOBIUS_OK);
  CHECK(api->add_input(g, "x", &xt) == MOBIUS_ERROR);  // defined twice
  auto bad_dt = ttype(12345, sym);
  CHECK(api->add_input(g, "z", &bad_dt) == MOBIUS_ERROR);
  CHECK(api->add_output(g, "never_made", &xt) == MOBIUS_ERROR);

  std::vector<mobius_dim> one{{2, nullptr}};
  auto ft = ttype(MOBIUS_DTYPE_FLOAT, one);
  float vals[2] = {1, 2};
  CHECK(api->add_constant(g, "c", &ft, vals, 4) == MOBIUS_ERROR);  // 2 floats need 8 bytes
  CHECK(api->add_constant(g, "c", &ft, vals, 8) == MOBIUS_OK);

  mobius_attribute ga{};
  ga.struct_size = sizeof(ga);
  ga.name = "then_branch";
  ga.kind = MOBIUS_ATTR_GRAPH;
  ga.graph = g;  // the main graph is not a subgraph
  std::vector<const mobius_attribute*> gas{&ga};
  std::vector<const char*> ii{"c"}, oo{"r"};
  auto bad_if = make_node("If", ii, oo, gas);
  CHECK(api->add_node(g, &bad_if) == MOBIUS_ERROR);
  CHECK(std::string(api->last_error(&ctx)).find("not a subgraph") != std::string::npos);
}
