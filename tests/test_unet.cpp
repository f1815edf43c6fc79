// test_unet.cpp - diffusers' UNet2DConditionModel (plugins/diffusers/unet.cpp, unet_config.cpp):
// - the config as diffusers reads it: attention_head_dim as the number of heads (an int for every
//   block or a list of one per block, the mid block taking the last, the up blocks the reversed
//   list), the skip-connection channels of the up blocks, and every key an SD 1.x/2.x UNet does
//   not use refused by its name;
// - the graph's inputs and output, both operator sets, f32 and f16, the runtimes;
// - --no-weights builds of the published Stable Diffusion 1.5 and 2.1 UNet configs through the
//   ONNX checker, with diffusers' parameter counts and the heads of every attention;
// - the golden UNets (tests/golden-diffusers) against diffusers' outputs, f32 and f16, both
//   operator sets; one timestep for a batch, per-sample timesteps, and odd latent sizes.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>

#include "../plugins/diffusers/unet_config.hpp"
#include "golden_util.hpp"

using namespace mobius::test;
using mobius::diffusers::plan_unet;
using mobius::diffusers::read_unet_config;
using mobius::diffusers::UNetConfig;

namespace {

// runwayml/stable-diffusion-v1-5, unet/config.json as published.
const char* kSd15Unet = R"({
  "_class_name": "UNet2DConditionModel",
  "_diffusers_version": "0.6.0",
  "act_fn": "silu",
  "attention_head_dim": 8,
  "block_out_channels": [320, 640, 1280, 1280],
  "center_input_sample": false,
  "cross_attention_dim": 768,
  "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
  "downsample_padding": 1,
  "flip_sin_to_cos": true,
  "freq_shift": 0,
  "in_channels": 4,
  "layers_per_block": 2,
  "mid_block_scale_factor": 1,
  "norm_eps": 1e-05,
  "norm_num_groups": 32,
  "out_channels": 4,
  "sample_size": 64,
  "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"]
})";

// stabilityai/stable-diffusion-2-1, unet/config.json as published.
const char* kSd21Unet = R"({
  "_class_name": "UNet2DConditionModel",
  "_diffusers_version": "0.10.0.dev0",
  "act_fn": "silu",
  "attention_head_dim": [5, 10, 20, 20],
  "block_out_channels": [320, 640, 1280, 1280],
  "center_input_sample": false,
  "cross_attention_dim": 1024,
  "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
  "downsample_padding": 1,
  "dual_cross_attention": false,
  "flip_sin_to_cos": true,
  "freq_shift": 0,
  "in_channels": 4,
  "layers_per_block": 2,
  "mid_block_scale_factor": 1,
  "norm_eps": 1e-05,
  "norm_num_groups": 32,
  "num_class_embeds": null,
  "only_cross_attention": false,
  "out_channels": 4,
  "sample_size": 96,
  "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
  "upcast_attention": true,
  "use_linear_projection": true
})";

fs::path golden_unet(const std::string& c) {
  return fs::path(env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden-diffusers" / c / "unet";
}

nlohmann::json golden_config(const std::string& c) {
  return nlohmann::json::parse(read_text(golden_unet(c) / "config.json"));
}

// The message read_unet_config throws for `cfg`, "" when it accepts it.
std::string refusal(const nlohmann::json& cfg) {
  try {
    read_unet_config(cfg);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> dims_of(const onnx::ValueInfoProto& v) {
  std::vector<std::string> out;
  for (const auto& d : v.type().tensor_type().shape().dim())
    out.push_back(d.has_dim_param() ? d.dim_param() : std::to_string(d.dim_value()));
  return out;
}

std::map<std::string, std::vector<int64_t>> initializer_dims(const onnx::ModelProto& m) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& i : m.graph().initializer()) out[i.name()] = {i.dims().begin(), i.dims().end()};
  return out;
}

// Every parameter of the model: the initializers named after its modules.
int64_t parameter_count(const onnx::ModelProto& m) {
  int64_t n = 0;
  const std::set<std::string> roots{"conv_in", "time_embedding", "down_blocks", "mid_block",
                                    "up_blocks", "conv_norm_out", "conv_out"};
  for (const auto& i : m.graph().initializer()) {
    if (!roots.count(i.name().substr(0, i.name().find('.')))) continue;
    int64_t k = 1;
    for (int64_t d : i.dims()) k *= d;
    n += k;
  }
  return n;
}

// tests/parity/component_parity.mjs on a built UNet against golden case `c` (its JSON report).
nlohmann::json unet_parity(const fs::path& model, const std::string& c, bool f16) {
  const std::string root = env_or_empty("MOBIUS_SOURCE_ROOT");
  RunResult r = run("cd " + quote(root) + " && node tests/parity/component_parity.mjs --json --model " +
                        quote(model.string()) + " --case " +
                        quote((fs::path(root) / "tests" / "golden-diffusers" / c).string()) +
                        " --graph unet" + (f16 ? " --atol 2e-2 --rtol 1e-2" : ""),
                    false);
  INFO(r.output.substr(0, 3000));
  const size_t end = r.output.rfind('}');
  REQUIRE(end != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(r.output.substr(0, end + 1));
  j["status"] = r.status;
  return j;
}

// Runs a float32 model on `inputs` with tests/ort_run.mjs; returns its outputs.
nlohmann::json ort_run(const TempDir& t, const fs::path& model, const nlohmann::json& inputs) {
  write_text(t / "inputs.json", inputs.dump());
  RunResult r = run("cd " + quote(env_or_empty("MOBIUS_SOURCE_ROOT")) + " && node tests/ort_run.mjs " +
                        quote(model.string()) + " " + quote((t / "inputs.json").string()),
                    false);
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.output);
}

std::vector<double> pseudo_random(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  uint32_t s = seed;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<double>(s >> 8) / 16777216.0) * 2.0 - 1.0;
  }
  return v;
}

}  // namespace

TEST_CASE("unet: attention_head_dim is the number of heads, per block (int or list)") {
  // SD 1.x: one int for every block; 8 heads of 40, 80, 160, 160.
  UNetConfig sd15 = read_unet_config(nlohmann::json::parse(kSd15Unet));
  CHECK(sd15.attention_heads == std::vector<int64_t>{8, 8, 8, 8});
  CHECK(sd15.cross_attention_dim == 768);
  CHECK(sd15.time_embed_dim == 1280);
  CHECK(sd15.layers_per_block == std::vector<int64_t>{2, 2, 2, 2});
  CHECK(sd15.transformer_layers_per_block == std::vector<int64_t>{1, 1, 1, 1});
  CHECK_FALSE(sd15.use_linear_projection);
  CHECK_FALSE(sd15.upcast_attention);
  CHECK(sd15.mid_block);
  // SD 2.x: a list, one per down block; the up blocks read it reversed, the mid block its last.
  UNetConfig sd21 = read_unet_config(nlohmann::json::parse(kSd21Unet));
  CHECK(sd21.attention_heads == std::vector<int64_t>{5, 10, 20, 20});
  CHECK(sd21.use_linear_projection);
  CHECK(sd21.upcast_attention);
  auto plan = plan_unet(sd21);
  REQUIRE(plan.down.size() == 4);
  REQUIRE(plan.up.size() == 4);
  CHECK(plan.down[0].heads == 5);
  CHECK(plan.down[1].heads == 10);
  CHECK(plan.up[1].heads == 20);
  CHECK(plan.up[2].heads == 10);
  CHECK(plan.up[3].heads == 5);
  // The golden SD2-style case: [2, 4] with blocks of 16 and 32: heads of 8 everywhere.
  UNetConfig tiny = read_unet_config(golden_config("sd2-tiny-linear-proj"));
  CHECK(tiny.attention_heads == std::vector<int64_t>{2, 4});
  CHECK(plan_unet(tiny).up[1].heads == 2);
  CHECK(UNetConfig::head_dim(16, 2) == 8);
  CHECK(UNetConfig::head_dim(32, 4) == 8);
  // "UNetRes" prefixes are dropped as get_down_block does; integral floats read as integers.
  nlohmann::json j = nlohmann::json::parse(kSd15Unet);
  j["down_block_types"][3] = "UNetResDownBlock2D";
  j["attention_head_dim"] = 8.0;
  CHECK(read_unet_config(j).down_block_types[3] == "DownBlock2D");
  CHECK(read_unet_config(j).attention_heads == std::vector<int64_t>{8, 8, 8, 8});
  // The normalized config round-trips.
  CHECK(nlohmann::json(nlohmann::json(sd21).get<UNetConfig>()) == nlohmann::json(sd21));
}

TEST_CASE("unet: the skip connections are diffusers' (channels of every up-block resnet)") {
  auto plan = plan_unet(read_unet_config(nlohmann::json::parse(kSd15Unet)));
  // Hidden states plus the skip each resnet concatenates, as the SD 1.5 checkpoint's conv1
  // weights are shaped (up_blocks.3.resnets.0.conv1.weight is [320, 960, 3, 3]).
  CHECK(plan.up[0].resnet_in_channels == std::vector<int64_t>{2560, 2560, 2560});
  CHECK(plan.up[1].resnet_in_channels == std::vector<int64_t>{2560, 2560, 1920});
  CHECK(plan.up[2].resnet_in_channels == std::vector<int64_t>{1920, 1280, 960});
  CHECK(plan.up[3].resnet_in_channels == std::vector<int64_t>{960, 640, 640});
  CHECK(plan.up[3].skip_channels == std::vector<int64_t>{320, 320, 320});
  CHECK(plan.down[3].in_channels == 1280);
  CHECK_FALSE(plan.down[3].downsample);
  CHECK(plan.down[2].downsample);
  CHECK(plan.up[2].upsample);
  CHECK_FALSE(plan.up[3].upsample);
  CHECK_FALSE(plan.up[0].cross_attention);
  CHECK(plan.up[1].cross_attention);
  // The golden tiny case: up block 0 (32 wide) takes 64, 64 and 32 + 16 channels.
  auto tiny = plan_unet(read_unet_config(golden_config("sd15-tiny")));
  CHECK(tiny.up[0].resnet_in_channels == std::vector<int64_t>{64, 64, 48});
  CHECK(tiny.up[1].resnet_in_channels == std::vector<int64_t>{48, 32, 32});
  // Per-block layers_per_block: up block i has layers_per_block[n-1-i] + 1 resnets.
  nlohmann::json j = nlohmann::json::parse(kSd15Unet);
  j["layers_per_block"] = {1, 2, 2, 3};
  auto asym = plan_unet(read_unet_config(j));
  CHECK(asym.down[0].layers == 1);
  CHECK(asym.up[0].resnet_in_channels.size() == 4);
  CHECK(asym.up[3].resnet_in_channels.size() == 2);
}

TEST_CASE("unet: what an SD 1.x/2.x UNet does not have is refused, naming the key") {
  struct Case {
    std::string what;
    std::function<void(nlohmann::json&)> edit;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"num_attention_heads", [](auto& c) { c["num_attention_heads"] = 8; }, "'num_attention_heads' is 8"},
      {"class embedding", [](auto& c) { c["class_embed_type"] = "timestep"; }, "'class_embed_type' is 'timestep'"},
      {"class embeds", [](auto& c) { c["num_class_embeds"] = 1000; }, "'num_class_embeds' is 1000"},
      {"SDXL's added embedding", [](auto& c) { c["addition_embed_type"] = "text_time"; },
       "'addition_embed_type' is 'text_time'"},
      {"encoder projection", [](auto& c) { c["encoder_hid_dim"] = 1024; }, "'encoder_hid_dim' is 1024"},
      {"LCM condition", [](auto& c) { c["time_cond_proj_dim"] = 256; }, "'time_cond_proj_dim' is 256"},
      {"time embedding act", [](auto& c) { c["time_embedding_act_fn"] = "silu"; }, "'time_embedding_act_fn'"},
      {"post act", [](auto& c) { c["timestep_post_act"] = "silu"; }, "'timestep_post_act'"},
      {"dual cross attention", [](auto& c) { c["dual_cross_attention"] = true; }, "'dual_cross_attention' is true"},
      {"only cross attention", [](auto& c) { c["only_cross_attention"] = true; }, "'only_cross_attention' is true"},
      {"only cross attention per block", [](auto& c) { c["only_cross_attention"] = {false, true, false, false}; },
       "'only_cross_attention' is true"},
      {"gated attention", [](auto& c) { c["attention_type"] = "gated"; }, "'attention_type' is 'gated'"},
      {"scale shift", [](auto& c) { c["resnet_time_scale_shift"] = "scale_shift"; },
       "'resnet_time_scale_shift' is 'scale_shift'"},
      {"fourier", [](auto& c) { c["time_embedding_type"] = "fourier"; }, "'time_embedding_type' is 'fourier'"},
      {"gelu", [](auto& c) { c["act_fn"] = "gelu"; }, "'act_fn' is 'gelu'"},
      {"nested transformer layers", [](auto& c) { c["transformer_layers_per_block"] = {{1}, {1}, {1}, {1}}; },
       "'transformer_layers_per_block' holds a list per block"},
      {"reverse transformer layers", [](auto& c) { c["reverse_transformer_layers_per_block"] = {{1}, {1}, {1}, {1}}; },
       "'reverse_transformer_layers_per_block'"},
      {"attention down block", [](auto& c) { c["down_block_types"][0] = "AttnDownBlock2D"; },
       "'down_block_types' has block type 'AttnDownBlock2D'"},
      {"simple cross attention up block", [](auto& c) { c["up_block_types"][1] = "SimpleCrossAttnUpBlock2D"; },
       "'up_block_types' has block type 'SimpleCrossAttnUpBlock2D'"},
      {"up blocks of another count", [](auto& c) { c["up_block_types"].erase(0); }, "'up_block_types' lists 3 blocks"},
      {"widths of another count", [](auto& c) { c["block_out_channels"] = {320, 640, 1280}; },
       "'block_out_channels' has 3 entries"},
      {"a width that is not a list", [](auto& c) { c["block_out_channels"] = 320; }, "'block_out_channels' must be a list"},
      {"heads of another count", [](auto& c) { c["attention_head_dim"] = {8, 8}; }, "'attention_head_dim' has 2 entries"},
      {"no heads", [](auto& c) { c["attention_head_dim"] = nullptr; }, "'attention_head_dim' is null"},
      {"more heads than channels", [](auto& c) { c["attention_head_dim"] = 512; }, "'attention_head_dim' gives 512 heads"},
      {"heads not dividing a linear projection",
       [](auto& c) {
         c["attention_head_dim"] = 7;
         c["use_linear_projection"] = true;
       },
       "'attention_head_dim' gives 7 heads, which do not divide"},
      {"cross widths that differ", [](auto& c) { c["cross_attention_dim"] = {768, 1024, 768, 768}; },
       "'cross_attention_dim' differs between blocks"},
      {"another mid block", [](auto& c) { c["mid_block_type"] = "UNetMidBlock2DSimpleCrossAttn"; },
       "'mid_block_type' is 'UNetMidBlock2DSimpleCrossAttn'"},
      {"groups not dividing", [](auto& c) { c["norm_num_groups"] = 24; }, "'norm_num_groups' (24) does not divide"},
      {"no groups", [](auto& c) { c["norm_num_groups"] = nullptr; }, "'norm_num_groups' is null"},
      {"even kernel", [](auto& c) { c["conv_in_kernel"] = 4; }, "'conv_in_kernel' is even"},
      {"zero layers", [](auto& c) { c["layers_per_block"] = 0; }, "'layers_per_block' is 0"},
      {"absurd width", [](auto& c) { c["block_out_channels"][2] = 1e9; }, "'block_out_channels' is 1000000000"},
      {"string channels", [](auto& c) { c["in_channels"] = "4"; }, "'in_channels' must be an integer"},
      {"downsample padding", [](auto& c) { c["downsample_padding"] = 2; }, "'downsample_padding' is 2"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    nlohmann::json cfg = nlohmann::json::parse(kSd15Unet);
    c.edit(cfg);
    const std::string err = refusal(cfg);
    INFO(err);
    CHECK(err.rfind("[config] ", 0) == 0);
    CHECK(err.find(c.reason) != std::string::npos);
  }
  // What SD 1.x/2.x configs hold is accepted: nulls, the defaults, an absent mid block.
  nlohmann::json ok = nlohmann::json::parse(kSd21Unet);
  ok["class_embed_type"] = nullptr;
  ok["addition_embed_type"] = nullptr;
  ok["only_cross_attention"] = {false, false, false, false};
  ok["transformer_layers_per_block"] = {1, 1, 1, 1};
  ok["mid_block_type"] = nullptr;
  CHECK(refusal(ok) == "");
  CHECK_FALSE(read_unet_config(ok).mid_block);
  CHECK(refusal(golden_config("sd15-tiny")) == "");
  CHECK(refusal(golden_config("sd2-tiny-linear-proj")) == "");

  // Through the CLI: the config error, exit status 1, nothing written.
  TempDir t;
  nlohmann::json bad = golden_config("sd15-tiny");
  bad["addition_embed_type"] = "text_time";
  fs::create_directories(t / "bad");
  write_text(t / "bad" / "config.json", bad.dump());
  fs::copy_file(golden_unet("sd15-tiny") / "diffusion_pytorch_model.safetensors",
                t / "bad" / "diffusion_pytorch_model.safetensors");
  RunResult r = build_cli(t / "bad", t / "out", "--runtime onnxruntime");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("[config]") != std::string::npos);
  CHECK(r.output.find("'addition_embed_type' is 'text_time'") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out"));
}

TEST_CASE("unet: graph inputs and output, f32 and f16, both operator sets") {
  for (const std::string dtype : {"f32", "f16"}) {
    for (const std::string ops : {"ort", "standard"}) {
      CAPTURE(dtype);
      CAPTURE(ops);
      TempDir t;
      RunResult r = build_cli(golden_unet("sd15-tiny"), t / "out",
                              "--runtime onnxruntime --dtype " + dtype + " --ops " + ops);
      INFO(r.output);
      REQUIRE(r.status == 0);
      onnx::ModelProto m = load_model(t / "out" / "model.onnx");
      const auto& g = m.graph();
      const int32_t act = dtype == "f16" ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
      REQUIRE(g.input_size() == 3);
      REQUIRE(g.output_size() == 1);
      CHECK(g.input(0).name() == "sample");
      CHECK(g.input(0).type().tensor_type().elem_type() == act);
      CHECK(dims_of(g.input(0)) == std::vector<std::string>{"batch_size", "4", "height", "width"});
      CHECK(g.input(1).name() == "timestep");
      CHECK(g.input(1).type().tensor_type().elem_type() == onnx::TensorProto::INT64);
      CHECK(dims_of(g.input(1)) == std::vector<std::string>{"batch_size"});
      CHECK(g.input(2).name() == "encoder_hidden_states");
      CHECK(g.input(2).type().tensor_type().elem_type() == act);
      CHECK(dims_of(g.input(2)) == std::vector<std::string>{"batch_size", "sequence_length", "32"});
      CHECK(g.output(0).name() == "out_sample");
      CHECK(g.output(0).type().tensor_type().elem_type() == act);
      CHECK(dims_of(g.output(0)) == std::vector<std::string>{"batch_size", "4", "height", "width"});
      std::map<std::string, int> count;
      for (const auto& n : g.node()) {
        count[n.op_type()]++;
        if (ops == "standard") CHECK(n.domain().empty());
        // The attention heads: 8 everywhere in the SD 1.x-style case (heads of 2 and 4).
        if (n.op_type() == "MultiHeadAttention") CHECK(attr_int(n, "num_heads") == 8);
      }
      // 6 transformers (2 down, 1 mid, 3 up) of one block each: attn1 and attn2.
      CHECK(count["MultiHeadAttention"] == (ops == "ort" ? 12 : 0));
      CHECK(count["Softmax"] == (ops == "ort" ? 0 : 12));
      CHECK(count["LayerNormalization"] == 18);
      CHECK(count["Resize"] == 1);
      // Group norms in float32 statistics: 12 resnets (4 down, 2 mid, 6 up) x 2, 6 transformers,
      // conv_norm_out.
      CHECK(count["InstanceNormalization"] == 12 * 2 + 6 + 1);
      // The timestep embedding's sin and cos, once.
      CHECK(count["Sin"] == 1);
      CHECK(count["Cos"] == 1);
      // Attention weights: q, k, v of attn1 packed in one MatMul; k and v of attn2 in another.
      auto inits = initializer_dims(m);
      CHECK(inits["down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_qkv.weight"] ==
            std::vector<int64_t>{16, 48});
      CHECK(inits["down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_kv.weight"] ==
            std::vector<int64_t>{32, 32});
      CHECK(inits["down_blocks.0.attentions.0.proj_in.weight"] == std::vector<int64_t>{16, 16, 1, 1});
    }
  }
}

TEST_CASE("unet: runtimes - GenAI and transformers.js refused when asked for; the default lays out for ONNX Runtime") {
  TempDir t;
  RunResult genai = build_cli(golden_unet("sd15-tiny"), t / "genai", "--runtime ort-genai");
  INFO(genai.output);
  CHECK(genai.status == 1);
  CHECK(genai.output.find("UNet2DConditionModel is a diffusion UNet (task image-unet), which ONNX Runtime GenAI does not run") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "genai"));
  RunResult tjs = build_cli(golden_unet("sd15-tiny"), t / "tjs", "--runtime transformers.js");
  INFO(tjs.output);
  CHECK(tjs.status == 1);
  CHECK(tjs.output.find("UNet2DConditionModel is a diffusion UNet (task image-unet), which transformers.js does not run: it has no diffusion models") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "tjs"));
  RunResult def = build_cli(golden_unet("sd15-tiny"), t / "default");
  INFO(def.output);
  REQUIRE(def.status == 0);
  CHECK(fs::exists(t / "default" / "model.onnx"));
  CHECK_FALSE(fs::exists(t / "default" / "genai_config.json"));
}

TEST_CASE("unet: the published SD 1.5 and SD 2.1 UNet configs build graph-only, checker-clean") {
  struct Published {
    std::string name;
    const char* config;
    int64_t params;  // diffusers' UNet2DConditionModel of the config
    std::vector<int64_t> heads;  // the attentions' heads in graph order
    int64_t convs;
    std::vector<int64_t> proj_in;
    std::vector<int64_t> attn2_kv;
  };
  // 16 transformers: down blocks 0-2 (2 each), the mid block, up blocks 1-3 (3 each); attn1 and
  // attn2 of each.
  auto heads_of = [](std::vector<int64_t> down, int64_t mid, std::vector<int64_t> up) {
    std::vector<int64_t> h;
    for (int64_t x : down) h.insert(h.end(), 4, x);
    h.insert(h.end(), 2, mid);
    for (int64_t x : up) h.insert(h.end(), 6, x);
    return h;
  };
  const std::vector<Published> models = {
      // conv_in, 16 resnet convs + 2 shortcuts + 3 downsamplers, 16 x proj_in/out (1x1 convs),
      // the mid block's 4, 24 up resnet convs + 12 shortcuts + 3 upsamplers, conv_out.
      {"stable-diffusion-v1-5", kSd15Unet, 859520964, heads_of({8, 8, 8}, 8, {8, 8, 8}), 98,
       {320, 320, 1, 1}, {768, 2 * 640}},
      // Linear proj_in/out: 32 convs fewer, their weights read as [in, out].
      {"stable-diffusion-2-1", kSd21Unet, 865910724, heads_of({5, 10, 20}, 20, {20, 10, 5}), 66,
       {320, 320}, {1024, 2 * 640}},
  };
  for (const auto& p : models) {
    CAPTURE(p.name);
    TempDir t;
    onnx::ModelProto m = build_config_only(t, p.config, "--runtime onnxruntime");
    CHECK(parameter_count(m) == p.params);
    std::vector<int64_t> heads;
    std::map<std::string, int> count;
    for (const auto& n : m.graph().node()) {
      count[n.op_type()]++;
      if (n.op_type() == "MultiHeadAttention") heads.push_back(attr_int(n, "num_heads"));
    }
    CHECK(heads == p.heads);
    CHECK(count["Conv"] == p.convs);
    CHECK(count["Resize"] == 3);
    CHECK(count["LayerNormalization"] == 48);
    auto inits = initializer_dims(m);
    CHECK(inits["down_blocks.0.attentions.0.proj_in.weight"] == p.proj_in);
    CHECK(inits["down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_kv.weight"] == p.attn2_kv);
    CHECK(inits["up_blocks.3.resnets.0.conv1.weight"] == std::vector<int64_t>{320, 960, 3, 3});
    CHECK(inits["up_blocks.1.resnets.2.conv_shortcut.weight"] == std::vector<int64_t>{1280, 1920, 1, 1});
    CHECK(inits["time_embedding.linear_1.weight"] == std::vector<int64_t>{320, 1280});
    CHECK(inits["mid_block.attentions.0.transformer_blocks.0.ff.net.0.proj.weight"] ==
          std::vector<int64_t>{1280, 2 * 5120});
    const auto& in = m.graph().input(2);
    CHECK(dims_of(in)[2] == std::to_string(p.attn2_kv[0]));
  }
  // Standard operators and float16: the SD 2.1 graph's upcast attention computes its scores and
  // softmax in float32.
  TempDir t;
  onnx::ModelProto m = build_config_only(t, kSd21Unet, "--runtime onnxruntime --ops standard --dtype f16");
  for (const auto& o : m.opset_import()) CHECK(o.domain().empty());
  std::map<std::string, int> count;
  std::map<std::string, const onnx::NodeProto*> producer;
  for (const auto& n : m.graph().node())
    for (const auto& o : n.output()) producer[o] = &n;
  auto made_by = [&](const std::string& v, const std::string& op) -> const onnx::NodeProto* {
    auto it = producer.find(v);
    return it != producer.end() && it->second->op_type() == op ? it->second : nullptr;
  };
  int f32_softmax = 0;
  for (const auto& n : m.graph().node()) {
    count[n.op_type()]++;
    if (n.op_type() != "Softmax") continue;
    // Softmax(Mul(MatMul(Cast(q), Cast(k)), scale)): the scores computed from float32 q and k.
    const onnx::NodeProto* mul = made_by(n.input(0), "Mul");
    const onnx::NodeProto* mm = mul ? made_by(mul->input(0), "MatMul") : nullptr;
    if (mm && made_by(mm->input(0), "Cast") && made_by(mm->input(1), "Cast")) ++f32_softmax;
  }
  CHECK(count["Softmax"] == 32);
  CHECK(f32_softmax == 32);
  CHECK(count["MultiHeadAttention"] == 0);
  CHECK(m.graph().input(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT16);
}

TEST_CASE("unet: the golden UNets match diffusers (f32, f16; both operator sets)") {
  for (const std::string c : {"sd15-tiny", "sd2-tiny-linear-proj"}) {
    for (const std::string dtype : {"f32", "f16"}) {
      for (const std::string ops : {"ort", "standard"}) {
        CAPTURE(c);
        CAPTURE(dtype);
        CAPTURE(ops);
        TempDir t;
        RunResult r = build_cli(golden_unet(c), t / "out",
                                "--runtime onnxruntime --dtype " + dtype + " --ops " + ops);
        INFO(r.output);
        REQUIRE(r.status == 0);
        nlohmann::json j = unet_parity(t / "out", c, dtype == "f16");
        REQUIRE(j["results"].size() == 1);
        const auto& res = j["results"][0];
        MESSAGE(c << " " << dtype << " " << ops << ": max |diff| " << res["maxAbs"].get<double>()
                  << ", worst " << res["worst"].get<double>() << " of the tolerance");
        CHECK(j["status"] == 0);
        CHECK(res["pass"] == true);
        CHECK(res["bad"] == 0);
        CHECK(res["compared"] == 2048);
      }
    }
  }
}

TEST_CASE("unet: one timestep for the batch, per-sample timesteps, and odd latent sizes") {
  TempDir t;
  RunResult r = build_cli(golden_unet("sd15-tiny"), t / "out", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const fs::path model = t / "out" / "model.onnx";
  const int64_t h = 15, w = 13, seq = 5;  // odd: the down path rounds up, the upsampler follows the skip
  const size_t one = static_cast<size_t>(4 * h * w), ctx = static_cast<size_t>(seq * 32);
  std::vector<double> s0 = pseudo_random(one, 1), s1 = pseudo_random(one, 2);
  std::vector<double> c0 = pseudo_random(ctx, 3), c1 = pseudo_random(ctx, 4);
  auto cat = [](std::vector<double> a, const std::vector<double>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  auto inputs = [&](int64_t batch, const std::vector<double>& s, const std::vector<double>& c,
                    const std::vector<int64_t>& ts) {
    return nlohmann::json{
        {"sample", {{"type", "float32"}, {"dims", {batch, 4, h, w}}, {"data", s}}},
        {"timestep", {{"type", "int64"}, {"dims", {static_cast<int64_t>(ts.size())}}, {"data", ts}}},
        {"encoder_hidden_states", {{"type", "float32"}, {"dims", {batch, seq, 32}}, {"data", c}}}};
  };
  auto out = [&](const nlohmann::json& in) {
    nlohmann::json o = ort_run(t, model, in)["out_sample"];
    return std::make_pair(o["dims"].get<std::vector<int64_t>>(), o["data"].get<std::vector<double>>());
  };
  auto max_diff = [](const std::vector<double>& a, const std::vector<double>& b, size_t off) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[off + i]));
    return m;
  };
  auto [d_batch, batch] = out(inputs(2, cat(s0, s1), cat(c0, c1), {981, 1}));
  CHECK(d_batch == std::vector<int64_t>{2, 4, h, w});
  for (double v : batch) REQUIRE(std::isfinite(v));
  // Each sample with its own timestep, alone: the same rows.
  auto [d0, alone0] = out(inputs(1, s0, c0, {981}));
  auto [d1, alone1] = out(inputs(1, s1, c1, {1}));
  CHECK(d0 == std::vector<int64_t>{1, 4, h, w});
  CHECK(max_diff(alone0, batch, 0) < 1e-5);
  CHECK(max_diff(alone1, batch, one) < 1e-5);
  // The timestep matters (the embedding is not constant).
  auto [d0_t1, alone0_t1] = out(inputs(1, s0, c0, {1}));
  CHECK(max_diff(alone0, alone0_t1, 0) > 1e-3);
  // One timestep for a batch of two: expanded to both.
  auto [d_same, same] = out(inputs(2, cat(s0, s1), cat(c0, c1), {981}));
  CHECK(d_same == std::vector<int64_t>{2, 4, h, w});
  CHECK(max_diff(alone0, same, 0) < 1e-5);
  auto [d_same1, same1] = out(inputs(1, s1, c1, {981}));
  CHECK(max_diff(same1, same, one) < 1e-5);
}

TEST_CASE("unet: int8 and int4 quantize the linears (MatMulNBits), convolutions stay float") {
  for (const std::string dtype : {"int8", "int4"}) {
    CAPTURE(dtype);
    TempDir t;
    RunResult r = build_cli(golden_unet("sd2-tiny-linear-proj"), t / "out", "--runtime onnxruntime --dtype " + dtype);
    INFO(r.output);
    REQUIRE(r.status == 0);
    onnx::ModelProto m = load_model(t / "out" / "model.onnx");
    std::map<std::string, int> count;
    for (const auto& n : m.graph().node()) count[n.op_type()]++;
    // Per transformer: proj_in, attn1 qkv, attn2 q and kv, two to_out, ff's two, proj_out (9);
    // the time embedding's two linears and the 12 resnets' time_emb_proj.
    CHECK(count["MatMulNBits"] == 6 * 9 + 2 + 12);
    CHECK(count["Conv"] > 0);
    nlohmann::json j = unet_parity(t / "out", "sd2-tiny-linear-proj", false);
    MESSAGE(dtype << ": max |diff| " << j["results"][0]["maxAbs"].get<double>());
    CHECK(j["results"][0]["compared"] == 2048);
  }
  TempDir t;
  RunResult r = build_cli(golden_unet("sd15-tiny"), t / "out", "--runtime onnxruntime --dtype int4 --ops standard");
  CHECK(r.status == 1);
  CHECK(r.output.find("--ops ort") != std::string::npos);
}
