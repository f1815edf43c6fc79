// test_llama.cpp - the llama pack beyond parity: configs and checkpoints that do not fit fail
// before anything is written, naming the key or tensor; the graph stays small; the library API
// builds a module a C++ program assembled itself.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "mobius/sdk/module_build.hpp"
#include "mobius/plugins.hpp"
#include "onnx/onnx_pb.h"
#include "golden_util.hpp"
#include "sdk_util.hpp"

using namespace mobius;
using namespace mobius::test;

TEST_CASE("llama: configs and checkpoints that do not fit fail before anything is written") {
  REQUIRE(fs::exists(golden("llama-tiny") / "config.json"));
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::function<bool(StTensor&)> keep;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"unknown rope type", [](auto& c) { c["rope_scaling"] = {{"rope_type", "warp"}, {"factor", 2.0}}; }, {},
       "'rope_scaling' has unknown rope type 'warp'"},
      {"llama3 rope without its keys", [](auto& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 0}}; }, {},
       "llama3 rope needs original_max_position_embeddings"},
      {"unknown activation", [](auto& c) { c["hidden_act"] = "swoosh"; }, {}, "'hidden_act' has unknown activation 'swoosh'"},
      {"kv heads do not divide heads", [](auto& c) { c["num_key_value_heads"] = 3; }, {},
       "'num_key_value_heads' (3) must divide 'num_attention_heads' (4)"},
      {"wrong type", [](auto& c) { c["hidden_size"] = "64"; }, {}, "'hidden_size' must be an integer"},
      {"negative layers", [](auto& c) { c["num_hidden_layers"] = -1; }, {}, "'num_hidden_layers' must be positive"},
      {"wrong shape", [](auto& c) { c["intermediate_size"] = 96; }, {},
       "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], the graph expects [96, 64]"},
      {"missing tensor", {}, [](StTensor& t) { return t.name != "model.layers.1.self_attn.k_proj.weight"; },
       "checkpoint has no tensor 'model.layers.1.self_attn.k_proj.weight'"},
      {"extra tensor", {}, [](StTensor& t) {
         if (t.name == "model.norm.weight") t.name = "model.norm.weight_extra";
         return true;
       },
       "checkpoint tensor 'model.norm.weight_extra' is not used by llama"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    expect_rejected("llama-tiny", c.edit, c.keep, c.reason);
  }
}

// Nodes whose input is an initializer and that only re-lay it out: a runtime would fold them at
// session start (time and a second copy in memory), so a graph must not have any.
static std::vector<std::string> folded_at_load(const onnx::ModelProto& m) {
  std::set<std::string> inits;
  for (const auto& i : m.graph().initializer()) inits.insert(i.name());
  std::vector<std::string> out;
  for (const auto& n : m.graph().node())
    if ((n.op_type() == "Transpose" || n.op_type() == "Cast" || n.op_type() == "Identity") &&
        inits.count(n.input(0)))
      out.push_back(n.op_type() + "(" + n.input(0) + ")");
  return out;
}

TEST_CASE("llama: the standard-ONNX graph is small and computes masks and rope tables once") {
  TempDir t;
  RunResult r = build_cli(golden("llama-tiny"), t / "out", "--ops standard");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.op_type()]++;
  CHECK(ops["Cos"] == 1);
  CHECK(ops["Sin"] == 1);
  CHECK(ops["Range"] == 2);
  CHECK(ops["Where"] == 1);
  CHECK(ops["Softmax"] == 2);
  CHECK(m.graph().node_size() < 220);
  for (const auto& o : m.opset_import()) CHECK(o.domain().empty());
  CHECK(folded_at_load(m).empty());
  // MatMul weights are stored [in, out], transposed while the weights stream.
  for (const auto& i : m.graph().initializer())
    if (i.name() == "model.layers.0.mlp.gate_proj.weight")
      CHECK(std::vector<int64_t>(i.dims().begin(), i.dims().end()) == std::vector<int64_t>{64, 128});
}

TEST_CASE("llama: the default graph uses ONNX Runtime's fused operators, with the same I/O") {
  TempDir t;
  RunResult r = build_cli(golden("llama-tiny"), t / "out");
  INFO(r.output);
  REQUIRE(r.status == 0);
  onnx::ModelProto m = load_model(t / "out" / "model.onnx");
  std::map<std::string, int> ops;
  int float_adds = 0;  // Adds of activations; the one of gqa_lengths adds token counts
  for (const auto& n : m.graph().node()) {
    ops[n.op_type()]++;
    if (n.op_type() == "Add" && n.name().find("gqa_lengths") == std::string::npos) ++float_adds;
    if (n.op_type() == "GroupQueryAttention") {
      // The packed projection, rotated inside the operator with the caches.
      CHECK(attr_int(n, "do_rotary") == 1);
      CHECK(n.input(1).empty());
      CHECK(n.input(2).empty());
      CHECK(n.input(7).find("cos_cache") != std::string::npos);
    }
    // The operator appends to the cache (in place when GenAI shares it).
    if (n.op_type() == "Concat")
      for (const auto& i : n.input()) CHECK(i.rfind("past_key_values", 0) != 0);
  }
  CHECK(ops["GroupQueryAttention"] == 2);
  CHECK(ops["RotaryEmbedding"] == 0);
  CHECK(ops["Split"] == 0);
  // Every residual add is one with the norm after it: the pre-MLP norm of each layer, the input
  // norm of layer 1 and the final norm; only layer 0's input norm has no add before it.
  CHECK(ops["SkipSimplifiedLayerNormalization"] == 4);
  CHECK(ops["SimplifiedLayerNormalization"] == 1);
  CHECK(float_adds == 0);
  CHECK(ops["Softmax"] == 0);
  CHECK(ops["Transpose"] == 0);
  CHECK(m.graph().node_size() < 80);
  CHECK(folded_at_load(m).empty());
  // One pair of rotary caches [max_position_embeddings, head_dim / 2], made while streaming.
  int caches = 0;
  for (const auto& i : m.graph().initializer())
    if (i.name().find("cos_cache") != std::string::npos) {
      ++caches;
      CHECK(std::vector<int64_t>(i.dims().begin(), i.dims().end()) == std::vector<int64_t>{128, 8});
    }
  CHECK(caches == 1);
  // GenAI may give the operator one buffer for past and present.
  CHECK(nlohmann::json::parse(read_text(t / "out" / "genai_config.json"))["search"]
             ["past_present_share_buffer"] == true);
  // Inputs and outputs of the I/O contract. The operator rotates at key slots, so the graph
  // reads no position_ids and declares none.
  std::vector<std::string> inputs, outputs;
  for (const auto& i : m.graph().input()) inputs.push_back(i.name());
  for (const auto& o : m.graph().output()) outputs.push_back(o.name());
  CHECK(inputs == std::vector<std::string>{"input_ids", "attention_mask",
                                           "past_key_values.0.key", "past_key_values.0.value",
                                           "past_key_values.1.key", "past_key_values.1.value"});
  CHECK(outputs == std::vector<std::string>{"logits", "present.0.key", "present.0.value",
                                            "present.1.key", "present.1.value"});
  const auto& pk = m.graph().input(2).type().tensor_type().shape();
  CHECK(pk.dim(0).dim_param() == "batch_size");
  CHECK(pk.dim(1).dim_value() == 2);
  CHECK(pk.dim(2).dim_param() == "past_sequence_length");
  CHECK(pk.dim(3).dim_value() == 16);
  // Runtime files: genai_config.json describes the cache, provenance says who built it.
  auto genai = nlohmann::json::parse(read_text(t / "out" / "genai_config.json"));
  CHECK(genai["model"]["decoder"]["head_size"] == 16);
  CHECK(genai["model"]["decoder"]["num_key_value_heads"] == 2);
  CHECK(genai["model"]["decoder"]["inputs"]["past_key_names"] == "past_key_values.%d.key");
  auto prov = nlohmann::json::parse(read_text(t / "out" / "mobius_provenance.json"));
  CHECK(prov["plugin"] == "llama");
  CHECK(fs::exists(t / "out" / "config.json"));
  // Initializer names are the checkpoint's tensor names.
  std::set<std::string> inits;
  for (const auto& i : m.graph().initializer()) inits.insert(i.name());
  // q, k and v are one packed projection, read from the three checkpoint tensors.
  CHECK(inits.count("model.layers.0.self_attn.qkv_packed.weight"));
  CHECK(inits.count("model.layers.0.mlp.gate_proj.weight"));
  CHECK(inits.count("lm_head.weight"));
}

TEST_CASE("llama: position ids, per runtime and --position-ids") {
  TempDir t;
  // The graph's inputs, its GroupQueryAttention do_rotary and its RotaryEmbedding count.
  struct Shape {
    bool position_ids = false;
    int do_rotary = -1;
    int rotary_nodes = 0;
  };
  auto built = [&](const std::string& name, const std::string& args) {
    RunResult r = build_cli(golden("llama-tiny"), t / name, args);
    INFO(r.output);
    REQUIRE(r.status == 0);
    const fs::path file = fs::exists(t / name / "model.onnx") ? t / name / "model.onnx"
                                                              : t / name / "onnx" / "model.onnx";
    onnx::ModelProto m = load_model(file);
    Shape s;
    for (const auto& i : m.graph().input()) s.position_ids |= i.name() == "position_ids";
    for (const auto& n : m.graph().node()) {
      if (n.op_type() == "GroupQueryAttention") s.do_rotary = static_cast<int>(attr_int(n, "do_rotary"));
      s.rotary_nodes += n.op_type() == "RotaryEmbedding";
    }
    return s;
  };
  // GenAI feeds generation's positions: rotary at cache slots, inside the operator.
  Shape genai = built("genai", "");
  CHECK_FALSE(genai.position_ids);
  CHECK(genai.do_rotary == 1);
  CHECK(genai.rotary_nodes == 0);
  // ONNX Runtime and transformers.js callers may feed their own: the graph rotates at them.
  for (const std::string rt : {"onnxruntime", "transformers.js"}) {
    CAPTURE(rt);
    Shape s = built(rt, "--runtime " + rt);
    CHECK(s.position_ids);
    CHECK(s.do_rotary != 1);  // no do_rotary attribute: the operator does not rotate
    CHECK(s.rotary_nodes == 4);  // q and k of two layers
  }
  // Either way on request.
  Shape input = built("genai-input", "--position-ids input");
  CHECK(input.position_ids);
  CHECK(input.rotary_nodes == 4);
  CHECK(nlohmann::json::parse(read_text(t / "genai-input" / "genai_config.json"))["model"]["decoder"]
            ["inputs"]["position_ids"] == "position_ids");
  Shape slots = built("ort-slots", "--runtime onnxruntime --position-ids slots");
  CHECK_FALSE(slots.position_ids);
  CHECK(slots.do_rotary == 1);
  // Standard operators rotate at position_ids whatever is asked.
  CHECK(built("standard", "--ops standard --position-ids slots").position_ids);
  RunResult bad = build_cli(golden("llama-tiny"), t / "bad", "--position-ids cache");
  CHECK(bad.status != 0);
  CHECK(bad.output.find("--position-ids") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "bad"));
}

TEST_CASE("llama: a caller's own position ids (gaps, a jump while decoding) are honoured") {
  // Where the graph takes position_ids, they are the rotation's, not generation's: the gapped
  // case's logits differ from generation's positions by up to 4 (case.json).
  for (const std::string args : {"--runtime onnxruntime", "--position-ids input",
                                 "--runtime onnxruntime --ops standard",
                                 "--runtime transformers.js"}) {
    CAPTURE(args);
    TempDir t;
    RunResult r = build_cli(golden("llama-gapped-positions"), t / "out", args);
    INFO(r.output);
    REQUIRE(r.status == 0);
    RunResult p = parity(fs::exists(t / "out" / "model.onnx") ? t / "out" : t / "out" / "onnx",
                         "llama-gapped-positions");
    INFO(p.output);
    CHECK(p.status == 0);
  }
}

// The nodes that read initializer `name`, as "op:input index".
static std::vector<std::string> readers(const onnx::ModelProto& m, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& n : m.graph().node())
    for (int i = 0; i < n.input_size(); ++i)
      if (n.input(i) == name) out.push_back(n.op_type() + ":" + std::to_string(i));
  std::sort(out.begin(), out.end());
  return out;
}

// The model file of a build of `c` into `out` with `args`: OUT/model.onnx, or transformers.js's
// onnx/model.onnx (onnx/model_q4.onnx at 4 bits).
static fs::path built_model(const std::string& c, const fs::path& out, const std::string& args) {
  RunResult r = build_cli(golden(c), out, args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const fs::path dir = fs::exists(out / "model.onnx") ? out : out / "onnx";
  return fs::exists(dir / "model.onnx") ? dir / "model.onnx" : dir / "model_q4.onnx";
}

TEST_CASE("llama: a tied lm_head reads the embedding table itself, once on disk and in memory") {
  for (const char* args : {"", "--ops standard", "--dtype f16", "--runtime transformers.js"}) {
    CAPTURE(args);
    TempDir t;
    onnx::ModelProto m = load_model(built_model("llama3-rope-tied", t / "out", args));
    std::map<std::string, std::vector<int64_t>> inits;
    for (const auto& i : m.graph().initializer())
      inits[i.name()] = std::vector<int64_t>(i.dims().begin(), i.dims().end());
    // The checkpoint has no lm_head.weight: the table [vocab, hidden] as stored is the lookup's
    // and the head's (Gemm with transB), with no transposed copy on disk or folded at load.
    CHECK(inits.count("lm_head.weight") == 0);
    CHECK(inits["model.embed_tokens.weight"] == std::vector<int64_t>{192, 64});
    CHECK(readers(m, "model.embed_tokens.weight") == std::vector<std::string>{"Gather:0", "Gemm:1"});
    for (const auto& n : m.graph().node())
      if (n.op_type() == "Gemm") {
        REQUIRE(n.attribute_size() == 1);
        CHECK(n.attribute(0).name() == "transB");
        CHECK(n.attribute(0).i() == 1);
      }
    CHECK(folded_at_load(m).empty());
  }
  for (const char* args : {"--dtype int4", "--dtype int4 --asymmetric", "--dtype int4 --runtime transformers.js"}) {
    CAPTURE(args);
    TempDir t;
    const fs::path file = built_model("llama3-rope-tied", t / "out", args);
    onnx::ModelProto m = load_model(file);
    std::set<std::string> inits;
    for (const auto& i : m.graph().initializer()) inits.insert(i.name());
    // One block-quantized table: the head's MatMulNBits and the lookup's GatherBlockQuantized
    // read the same blocks and scales; no float table, no lm_head of its own.
    CHECK(inits.count("model.embed_tokens.weight") == 0);
    CHECK(inits.count("lm_head.weight_Q4") == 0);
    const bool asym = std::string(args).find("asym") != std::string::npos;
    // Asymmetric blocks are gathered from the table viewed as rows (a Reshape, as the scales'
    // view is for symmetric ones).
    CHECK(readers(m, "model.embed_tokens.weight_Q4") ==
          (asym ? std::vector<std::string>{"MatMulNBits:1", "Reshape:0"}
                : std::vector<std::string>{"GatherBlockQuantized:0", "MatMulNBits:1"}));
    CHECK(readers(m, "model.embed_tokens.weight_scales") ==
          (asym ? std::vector<std::string>{"GatherBlockQuantized:2", "MatMulNBits:2"}
                : std::vector<std::string>{"MatMulNBits:2", "Reshape:0"}));
    if (asym)
      CHECK(readers(m, "model.embed_tokens.weight_zero_points") ==
            std::vector<std::string>{"GatherBlockQuantized:3", "MatMulNBits:3"});
    if (file.filename() != "model.onnx") continue;  // transformers.js runs it: the runtime tests
    RunResult p = parity(file.parent_path(), "llama3-rope-tied", "--top1 0.3");
    INFO(p.output);
    CHECK(p.status == 0);
  }
}

TEST_CASE("llama: build_from_module builds a module assembled in C++ that matches transformers") {
  ArchitectureConfig cfg = llama_tiny_config();
  cfg.validate();
  nn::CausalLMModel model(cfg);
  ModelPackage pkg = build_from_module(model, cfg, "text-generation", {}, golden("llama-tiny"));
  TempDir t;
  pkg.save(t / "out");
  // The SDK's text-generation task hands genai_config.json to the host, as a plugin's does.
  auto genai = nlohmann::json::parse(read_text(t / "out" / "genai_config.json"));
  CHECK(genai["model"]["type"] == "llama");
  CHECK(genai["model"]["decoder"]["num_key_value_heads"] == 2);
  RunResult r = parity(t / "out", "llama-tiny");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("parity: 3 passed, 0 failed") != std::string::npos);
  CHECK_THROWS_WITH_AS(build_from_module(model, cfg, "image-classification"),
                       doctest::Contains("task 'image-classification' is not supported"),
                       mobius::sdk::Error);
}

namespace {

// llama-tiny's tensors under the names of Meta's original Llama release (and InternLM), with q/k/v
// and gate/up optionally fused into one tensor each (rows concatenated, as Phi-3 stores them).
void write_renamed_llama(const fs::path& dir, bool fused) {
  fs::create_directories(dir);
  auto reader = open_safetensors_checkpoint(golden("llama-tiny"));
  std::map<std::string, StTensor> by_name;
  for (const auto& m : reader->tensors()) {
    REQUIRE(m.dtype == MOBIUS_DTYPE_FLOAT);
    StTensor t{m.name, "F32", m.shape, std::vector<uint8_t>(m.nbytes)};
    reader->read(m, t.bytes.data());
    by_name[m.name] = std::move(t);
  }
  const std::vector<std::pair<std::string, std::string>> renames = {
      {"model.embed_tokens.", "transformer.wte."}, {"model.norm.", "transformer.ln_f."},
      {"lm_head.", "output."}, {"model.layers.", "transformer.h."},
      {".input_layernorm.", ".attention_norm."}, {".post_attention_layernorm.", ".ffn_norm."},
      {".self_attn.q_proj.", ".attention.wq."}, {".self_attn.k_proj.", ".attention.wk."},
      {".self_attn.v_proj.", ".attention.wv."}, {".self_attn.o_proj.", ".attention.wo."},
      {".mlp.gate_proj.", ".feed_forward.w1."}, {".mlp.up_proj.", ".feed_forward.w3."},
      {".mlp.down_proj.", ".feed_forward.w2."}};
  auto renamed = [&](std::string n) {
    for (const auto& [from, to] : renames)
      if (auto p = n.find(from); p != std::string::npos) n.replace(p, from.size(), to);
    return n;
  };
  auto concat_rows = [](std::string name, const std::vector<const StTensor*>& parts) {
    StTensor t{std::move(name), "F32", parts[0]->shape, {}};
    t.shape[0] = 0;
    for (const StTensor* p : parts) {
      t.shape[0] += p->shape[0];
      t.bytes.insert(t.bytes.end(), p->bytes.begin(), p->bytes.end());
    }
    return t;
  };
  std::vector<StTensor> out;
  for (const auto& [name, t] : by_name) {
    if (fused && (name.find(".k_proj.") != std::string::npos || name.find(".v_proj.") != std::string::npos ||
                  name.find(".up_proj.") != std::string::npos))
      continue;  // folded into the fused tensor of q_proj / gate_proj
    if (fused && name.find(".q_proj.") != std::string::npos) {
      const std::string base = name.substr(0, name.find(".q_proj."));  // model.layers.N.self_attn
      const std::string layer = base.substr(0, base.rfind('.'));
      out.push_back(concat_rows(renamed(layer + ".") + "attention.wqkv.weight",
                                {&t, &by_name.at(base + ".k_proj.weight"), &by_name.at(base + ".v_proj.weight")}));
    } else if (fused && name.find(".gate_proj.") != std::string::npos) {
      const std::string base = name.substr(0, name.find(".gate_proj."));  // model.layers.N.mlp
      const std::string layer = base.substr(0, base.rfind('.'));
      out.push_back(concat_rows(renamed(layer + ".") + "feed_forward.w13.weight",
                                {&t, &by_name.at(base + ".up_proj.weight")}));
    } else {
      StTensor r = t;
      r.name = renamed(name);
      out.push_back(std::move(r));
    }
  }
  write_safetensors(dir / "model.safetensors", out);
  write_text(dir / "config.json", read_text(golden("llama-tiny") / "config.json"));
}

}  // namespace

TEST_CASE("decoder spec: a llama-like model with other tensor names is a table entry") {
  // The whole difference from Llama is the names table (docs/writing-a-plugin.md shows it).
  for (bool fused : {false, true}) {
    CAPTURE(fused);
    TempDir t;
    write_renamed_llama(t / "ckpt", fused);
    nn::DecoderSpec spec;
    nn::TensorNames& n = spec.names;
    n.text_path = "transformer";
    n.embed = "wte";
    n.layers = "h";
    n.final_norm = "ln_f";
    n.lm_head = "output";
    n.input_norm = "attention_norm";
    n.post_attention_norm = "ffn_norm";
    n.mixer = "attention";
    n.attention = {"wq", "wk", "wv", "wo", fused ? "wqkv" : ""};
    n.feed_forward = "feed_forward";
    n.mlp = {"w1", "w3", "w2", fused ? "w13" : ""};
    ArchitectureConfig cfg = llama_tiny_config();
    nn::CausalLMModel model(cfg, spec);
    ModelPackage pkg = build_from_module(model, cfg, "text-generation", {}, t / "ckpt");
    pkg.save(t / "out");
    RunResult r = parity(t / "out", "llama-tiny");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("parity: 3 passed, 0 failed") != std::string::npos);
    if (fused) {
      onnx::ModelProto m = load_model(t / "out" / "model.onnx");
      std::set<std::string> inits;
      for (const auto& i : m.graph().initializer()) inits.insert(i.name());
      CHECK(inits.count("transformer.h.0.attention.wqkv.weight"));
      CHECK(inits.count("transformer.h.1.feed_forward.w13.weight"));
      CHECK_FALSE(inits.count("transformer.h.0.attention.wq.weight"));
    }
  }
}

TEST_CASE("llama: a tied config with an lm_head of the checkpoint's own reads that head") {
  // transformers ties only a head the checkpoint lacks: a stored lm_head.weight is used as it is.
  auto reader = open_safetensors_checkpoint(golden("llama3-rope-tied"));
  const TensorMeta* e = reader->find("model.embed_tokens.weight");
  REQUIRE(e);
  std::vector<float> table(e->nbytes / 4);
  reader->read(*e, table.data());
  auto head_of = [&](float scale) {
    std::vector<uint8_t> bytes(table.size() * 4);
    for (size_t i = 0; i < table.size(); ++i) {
      const float v = table[i] * scale;
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    return StTensor{"lm_head.weight", "F32", e->shape, bytes};
  };
  TempDir t;
  // The table itself stored as the head: transformers' logits.
  copy_case("llama3-rope-tied", t / "same", {}, {}, {head_of(1.0f)});
  RunResult r = build_cli(t / "same", t / "out-same", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(parity(t / "out-same", "llama3-rope-tied").status == 0);
  // Twice the table: the head is read, so the logits are not the tied model's.
  copy_case("llama3-rope-tied", t / "twice", {}, {}, {head_of(2.0f)});
  r = build_cli(t / "twice", t / "out-twice", "--runtime onnxruntime");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(parity(t / "out-twice", "llama3-rope-tied").status != 0);
}
