// builder_graph.cpp - the decode benchmark's reference graph: a llama checkpoint written as ONNX the
// way ONNX Runtime GenAI's model builder writes it for the CPU execution provider
// (`python -m onnxruntime_genai.models.builder -e cpu -p fp32|int4`), read from the builder's source
// (src/python/py/models/builders/base.py; line numbers below are of the revision studied,
// a0c04eb1 of 2026-08-22). Independent of mobius: no sdk/ or core/ header, its own safetensors
// reader and its own 4-bit quantizer, so it can be the yardstick mobius's graph is measured with.
//
// usage: builder_graph CHECKPOINT_DIR OUT_DIR [--precision fp32|int4]
//   CHECKPOINT_DIR: config.json + model.safetensors or model-*.safetensors (f32, bf16 or f16)
//   OUT_DIR/model.onnx, OUT_DIR/model.onnx.data (every initializer external), OUT_DIR/config.json
// Checks of the quantizer, not the builder's: --accuracy-level N (int4: MatMulNBits computing in
// f32 with 0 instead of 4, the builder's CPU default), --dequantized (fp32: every MatMul weight
// replaced by its int4 round trip, dequant(quant(W)); logits then equal those of int4 with
// --accuracy-level 0 up to f32 rounding, which checks the packing and the scales).
//
// What is reproduced (base.py):
//   inputs input_ids, attention_mask, past_key_values.N.key/value [batch, kv_heads, past,
//   "kv_cache_dim"]; no position_ids: GQA applies the rotary embedding itself (:695-698).
//   attention mask -> seqlens_k = Cast<int32>(ReduceSum(mask, [1]) - [1]),
//   total_seq_len = Cast<int32>(Gather(Shape(mask), 1)) (make_attention_mask_reformatting_for_gqa,
//   :5457). Gather embedding (make_embedding :2248). SimplifiedLayerNormalization for layer 0's
//   input norm, then SkipSimplifiedLayerNormalization (com.microsoft) fusing every residual Add,
//   the last one with a single output (make_layernorm :2342, make_layer :4888). Q/K/V packed into one MatMul whose
//   weight is cat([q, k, v]).T, [hidden, q + 2 kv] (make_packed_matmul_float_class :2165,
//   make_matmul_float :1951 stores weight.T). GroupQueryAttention with packed QKV, do_rotary 1,
//   cos_cache/sin_cache [context_length, head_dim / 2] (make_rotary_embedding_caches :2584),
//   scale 1/sqrt(head_dim), local_window_size -1, softcap 0 (get_attention_op_attributes :3315).
//   MLP: gate and up MatMuls, SiLU as Sigmoid + Mul (make_activation :4721 ->
//   make_activation_with_mul :4653), Mul, down MatMul. Final SkipSimplifiedLayerNormalization, then
//   lm_head MatMul writing `logits` (make_lm_head :4738); tied embeddings get a separate transposed
//   copy (shared_embeddings defaults to false, make_tied_embeddings_init :882). Constants are
//   Constant nodes (make_constant :1570). Opsets ai.onnx 21 + com.microsoft 1, IR version 10 (:155).
//   int4 (-p int4 -e cpu): the float graph, then MatMulNBitsQuantizer over every MatMul with a 2-D
//   initializer weight, lm_head included (to_nbits :1281; op_types_to_quantize defaults to
//   ("MatMul",) and nothing is excluded): the "default" method (quant_config.py WeightsConfig.method)
//   is ORT's DefaultWeightOnlyQuantizer -> quantize_matmul_4bits -> MlasQuantizeBlockwise<float, 4>
//   columnwise, symmetric (is_symmetric defaults to true), block_size 32, accuracy_level 4 on CPU
//   (quant_config.py :397): per block of 32 along K, scale = (the value of largest magnitude) / -8,
//   q = clamp(roundf(v * (1 / scale) + 8), 0, 15), no zero-point input (8 implied). Tensors `W_Q4`
//   [N, K/32, 16] uint8 and `W_scales` [N * K/32] float; node `<name>_Q4`.
//   External data as onnx_ir's ir.save writes it: initializers in ascending size, those over 1 MiB
//   aligned to 64 KiB (onnx_ir external_data.py _compute_new_offset).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

// ---------------------------------------------------------------------------------------------
// safetensors: 8-byte little-endian header length, a JSON header, then the data.

struct StTensor {
  std::string dtype;  // F32, BF16, F16
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
};

class Checkpoint {
 public:
  explicit Checkpoint(const fs::path& dir) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_regular_file() && n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) fail(dir.string() + ": no *.safetensors file");
    for (const auto& f : files) open(f);
  }
  ~Checkpoint() {
    for (auto& [p, n] : maps_) munmap(p, n);
  }
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const StTensor& get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) fail("checkpoint has no tensor " + name);
    return it->second;
  }
  // The tensor as float32 (bf16 and f16 widen exactly).
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& expect) const {
    const StTensor& t = get(name);
    if (t.shape != expect) {
      std::string a, b;
      for (auto d : t.shape) a += std::to_string(d) + ",";
      for (auto d : expect) b += std::to_string(d) + ",";
      fail(name + ": shape [" + a + "] where [" + b + "] was expected");
    }
    const int64_t n = t.numel();
    std::vector<float> out(static_cast<size_t>(n));
    if (t.dtype == "F32") {
      std::memcpy(out.data(), t.data, n * 4);
    } else if (t.dtype == "BF16") {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        uint32_t u = static_cast<uint32_t>(h) << 16;
        std::memcpy(&out[i], &u, 4);
      }
    } else if (t.dtype == "F16") {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = half_to_float(h);
      }
    } else {
      fail(name + ": dtype " + t.dtype + " is not supported (F32, BF16, F16)");
    }
    return out;
  }

 private:
  static float half_to_float(uint16_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0) {
      f = std::ldexp(static_cast<float>(man), -24);
    } else if (exp == 31) {
      f = man ? std::nanf("") : INFINITY;
    } else {
      f = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
    }
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }

  void open(const fs::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open " + path.string());
    struct stat st {};
    fstat(fd, &st);
    const auto size = static_cast<size_t>(st.st_size);
    if (size < 8) fail(path.string() + ": too short for safetensors");
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) fail("cannot map " + path.string());
    maps_.emplace_back(p, size);
    const auto* base = static_cast<const uint8_t*>(p);
    uint64_t hl;
    std::memcpy(&hl, base, 8);
    if (hl > size - 8) fail(path.string() + ": header length past the end of the file");
    json header = json::parse(base + 8, base + 8 + hl);
    const uint8_t* data = base + 8 + hl;
    const uint64_t data_size = size - 8 - hl;
    for (auto& [name, v] : header.items()) {
      if (name == "__metadata__") continue;
      StTensor t;
      t.dtype = v.at("dtype").get<std::string>();
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size) fail(path.string() + ": bad data_offsets for " + name);
      t.data = data + off[0];
      t.nbytes = off[1] - off[0];
      const uint64_t es = t.dtype == "F32" ? 4 : 2;
      if (t.nbytes != static_cast<uint64_t>(t.numel()) * es && (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16"))
        fail(path.string() + ": " + name + " byte size does not match its shape");
      tensors_[name] = t;
    }
  }

  std::vector<std::pair<void*, size_t>> maps_;
  std::map<std::string, StTensor> tensors_;
};

// ---------------------------------------------------------------------------------------------
// config.json

struct Config {
  int64_t hidden, inter, heads, kv_heads, head_dim, layers, vocab, context;
  double eps, theta;
  bool tied;
  int64_t window = -1;
};

Config read_config(const fs::path& dir) {
  std::ifstream f(dir / "config.json");
  if (!f) fail((dir / "config.json").string() + ": cannot read");
  json j = json::parse(f);
  auto num = [&](const char* k, int64_t def) -> int64_t {
    return j.contains(k) && !j[k].is_null() ? j[k].get<int64_t>() : def;
  };
  Config c{};
  c.hidden = num("hidden_size", 0);
  c.inter = num("intermediate_size", 0);
  c.heads = num("num_attention_heads", 0);
  c.kv_heads = num("num_key_value_heads", c.heads);
  c.head_dim = num("head_dim", c.heads ? c.hidden / c.heads : 0);
  c.layers = num("num_hidden_layers", 0);
  c.vocab = num("vocab_size", 0);
  // base.py :80: context_length = seq_length if present else max_position_embeddings
  c.context = num("seq_length", num("max_position_embeddings", 2048));
  c.eps = j.contains("rms_norm_eps") ? j["rms_norm_eps"].get<double>() : 1e-6;  // base.py :265
  c.theta = j.contains("rope_theta") && !j["rope_theta"].is_null() ? j["rope_theta"].get<double>() : 10000.0;
  c.tied = j.value("tie_word_embeddings", false);
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) c.window = j["sliding_window"].get<int64_t>();
  if (c.hidden <= 0 || c.inter <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.head_dim <= 0 || c.layers <= 0 ||
      c.vocab <= 0 || c.context <= 0 || c.heads % c.kv_heads)
    fail("config.json: missing or inconsistent llama dimensions");
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu" && act != "swish") fail("config.json: hidden_act " + act + " (only silu is reproduced)");
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    if (j.contains(k) && !j[k].is_null()) {
      const json& r = j[k];
      const std::string type = r.value("rope_type", r.value("type", std::string("default")));
      if (type != "default") fail(std::string("config.json: ") + k + " of type " + type + " is not reproduced");
    }
  }
  if (j.value("attention_bias", false) || j.value("mlp_bias", false)) fail("config.json: biases are not reproduced");
  if (c.window > 0) fail("config.json: sliding_window is not reproduced");
  return c;
}

// ---------------------------------------------------------------------------------------------
// The graph.

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;

struct Init {
  std::string name;
  std::vector<int64_t> dims;
  int32_t dtype;
  uint64_t nbytes;
  std::function<void(std::vector<uint8_t>&)> produce;  // fills exactly nbytes
};

class Builder {
 public:
  Builder(const Checkpoint& ck, const Config& c, bool int4, int accuracy_level, bool dequantized)
      : ck_(ck), c_(c), int4_(int4), accuracy_level_(accuracy_level), dequantized_(dequantized) {
    model_.set_ir_version(10);
    model_.set_producer_name("mobius bench/builder_graph (onnxruntime-genai model builder layout)");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(21);
    o = model_.add_opset_import();
    o->set_domain("com.microsoft");
    o->set_version(1);
    g_ = model_.mutable_graph();
    g_->set_name("main_graph");
  }

  void build() {
    const int64_t H = c_.hidden, L = c_.layers;
    add_input("input_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
    add_input("attention_mask", TensorProto::INT64, {"batch_size", "total_sequence_length"});
    for (int64_t i = 0; i < L; ++i)
      for (const char* kind : {"key", "value"})
        add_input("past_key_values." + std::to_string(i) + "." + kind, TensorProto::FLOAT,
                  {"batch_size", c_.kv_heads, "past_sequence_length", "kv_cache_dim"});
    add_output("logits", TensorProto::FLOAT, {"batch_size", "sequence_length", c_.vocab});
    for (int64_t i = 0; i < L; ++i)
      for (const char* kind : {"key", "value"})
        add_output("present." + std::to_string(i) + "." + kind, TensorProto::FLOAT,
                   {"batch_size", c_.kv_heads, "total_sequence_length", "kv_cache_dim"});

    // make_attention_mask_reformatting_for_gqa (base.py :5457)
    const std::string m = "/model/attn_mask_reformat/attn_mask_subgraph";
    const std::string one_1d = constant_i64("[1]", {1}, true), one = constant_i64("1", {1}, false);
    node("ReduceSum", m + "/ReduceSum", {"attention_mask", one_1d}, {m + "/ReduceSum/output_0"}, "",
         {attr_i("keepdims", 0)});
    node("Sub", m + "/Sub", {m + "/ReduceSum/output_0", one_1d}, {m + "/Sub/output_0"});
    node("Cast", m + "/Sub/Cast", {m + "/Sub/output_0"}, {m + "/Sub/Cast/output_0"}, "",
         {attr_i("to", TensorProto::INT32)});
    node("Shape", m + "/Shape", {"attention_mask"}, {m + "/Shape/output_0"});
    node("Gather", m + "/Gather", {m + "/Shape/output_0", one}, {m + "/Gather/output_0"}, "", {attr_i("axis", 0)});
    node("Cast", m + "/Gather/Cast", {m + "/Gather/output_0"}, {m + "/Gather/Cast/output_0"}, "",
         {attr_i("to", TensorProto::INT32)});
    seqlens_k_ = m + "/Sub/Cast/output_0";
    total_len_ = m + "/Gather/Cast/output_0";

    // make_embedding (base.py :2248): Gather on the [vocab, hidden] table.
    add_float_init("model.embed_tokens.weight", {c_.vocab, H}, [this, H](float* dst) {
      auto w = ck_.floats("model.embed_tokens.weight", {c_.vocab, H});
      std::memcpy(dst, w.data(), w.size() * 4);
    });
    node("Gather", "/model/embed_tokens/Gather", {"model.embed_tokens.weight", "input_ids"},
         {"/model/embed_tokens/Gather/output_0"});
    root_ = skip_ = "/model/embed_tokens/Gather/output_0";

    for (int64_t i = 0; i < L; ++i) layer(i);

    // final norm: SkipSimplifiedLayerNormalization with only output 0, then lm_head
    layernorm(L, "final_norm", "model.norm.weight", true, true);
    const std::string lm_src = ck_.has("lm_head.weight") && !c_.tied ? "lm_head.weight" : "model.embed_tokens.weight";
    matmul("/lm_head/MatMul", ln_out_, {lm_src}, c_.vocab, H, "logits");
  }

  void write(const fs::path& out) {
    fs::create_directories(out);
    // onnx_ir external_data.py: ascending size (stable), > 1 MiB aligned to 64 KiB.
    std::vector<size_t> order(inits_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return inits_[a].nbytes < inits_[b].nbytes; });
    std::vector<uint64_t> offsets(inits_.size());
    uint64_t off = 0;
    for (size_t k : order) {
      if (inits_[k].nbytes > (1u << 20)) off = (off + 65535) / 65536 * 65536;
      offsets[k] = off;
      off += inits_[k].nbytes;
    }
    const fs::path data_path = out / "model.onnx.data";
    int fd = ::open(data_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("cannot create " + data_path.string());
    if (ftruncate(fd, static_cast<off_t>(off)) != 0) fail("cannot size " + data_path.string());
    std::vector<uint8_t> buf;
    for (size_t k : order) {
      Init& in = inits_[k];
      buf.assign(in.nbytes, 0);
      in.produce(buf);
      uint64_t done = 0;
      while (done < in.nbytes) {
        ssize_t w = pwrite(fd, buf.data() + done, in.nbytes - done, static_cast<off_t>(offsets[k] + done));
        if (w <= 0) fail("cannot write " + data_path.string());
        done += static_cast<uint64_t>(w);
      }
      TensorProto* t = g_->add_initializer();
      t->set_name(in.name);
      t->set_data_type(in.dtype);
      for (auto d : in.dims) t->add_dims(d);
      t->set_data_location(TensorProto::EXTERNAL);
      auto kv = [&](const char* key, const std::string& value) {
        auto* e = t->add_external_data();
        e->set_key(key);
        e->set_value(value);
      };
      kv("location", "model.onnx.data");
      kv("offset", std::to_string(offsets[k]));
      kv("length", std::to_string(in.nbytes));
    }
    if (fsync(fd) != 0 || ::close(fd) != 0) fail("cannot close " + data_path.string());
    std::ofstream f(out / "model.onnx", std::ios::binary | std::ios::trunc);
    if (!model_.SerializeToOstream(&f)) fail("cannot write model.onnx");
    f.close();
    std::cout << out.string() << ": " << g_->node_size() << " nodes, " << inits_.size() << " initializers, "
              << off / (1024 * 1024) << " MiB of weights (" << (int4_ ? "int4" : "fp32") << ")\n";
  }

 private:
  // One decoder layer (make_layer, base.py :4888).
  void layer(int64_t i) {
    const int64_t H = c_.hidden, Q = c_.heads * c_.head_dim, KV = c_.kv_heads * c_.head_dim, I = c_.inter;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string n = "/model/layers." + std::to_string(i);
    layernorm(i, "input", p + "input_layernorm.weight", i > 0, false);

    // make_attention_input_proj: packed QKV MatMul, weight cat([q, k, v]).T
    const std::string qkv = n + "/attn/qkv_proj/MatMul";
    matmul(qkv, ln_out_, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
           Q + 2 * KV, H, qkv + "/output_0", {Q, KV, KV});

    // GroupQueryAttention with packed QKV and rotary inside (make_group_query_attention :3341)
    if (i == 0) rotary_caches();
    const std::string attn = n + "/attn/GroupQueryAttention";
    const std::string si = std::to_string(i);
    node("GroupQueryAttention", attn,
         {qkv + "/output_0", "", "", "past_key_values." + si + ".key", "past_key_values." + si + ".value", seqlens_k_,
          total_len_, "cos_cache", "sin_cache"},
         {attn + "/output_0", "present." + si + ".key", "present." + si + ".value"}, "com.microsoft",
         {attr_i("num_heads", c_.heads), attr_i("kv_num_heads", c_.kv_heads),
          attr_f("scale", static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim)))),
          attr_i("local_window_size", c_.window), attr_f("softcap", 0.0f), attr_i("do_rotary", 1),
          attr_i("rotary_interleaved", 0)});

    const std::string o = n + "/attn/o_proj/MatMul";
    matmul(o, attn + "/output_0", {p + "self_attn.o_proj.weight"}, H, Q, o + "/output_0");
    skip_ = o + "/output_0";

    layernorm(i, "post_attention", p + "post_attention_layernorm.weight", true, false);

    // make_mlp_proj (:4065): gate, up, Sigmoid + Mul (SiLU), Mul, down
    const std::string mlp_in = ln_out_;
    const std::string gate = n + "/mlp/gate_proj/MatMul", up = n + "/mlp/up_proj/MatMul";
    matmul(gate, mlp_in, {p + "mlp.gate_proj.weight"}, I, H, gate + "/output_0");
    matmul(up, mlp_in, {p + "mlp.up_proj.weight"}, I, H, up + "/output_0");
    const std::string sig = n + "/mlp/act_fn/Sigmoid", act = n + "/mlp/act_fn/Mul", mul = n + "/mlp/Mul";
    node("Sigmoid", sig, {gate + "/output_0"}, {sig + "/output_0"});
    node("Mul", act, {gate + "/output_0", sig + "/output_0"}, {act + "/output_0"});
    node("Mul", mul, {act + "/output_0", up + "/output_0"}, {mul + "/output_0"});
    const std::string down = n + "/mlp/down_proj/MatMul";
    matmul(down, mul + "/output_0", {p + "mlp.down_proj.weight"}, H, I, down + "/output_0");
    skip_ = down + "/output_0";
  }

  // make_layernorm (base.py :2342). skip: SkipSimplifiedLayerNormalization (com.microsoft), whose
  // output 3 (input + skip) becomes the next residual root; the last one has output 0 only.
  void layernorm(int64_t id, const std::string& location, const std::string& src, bool skip, bool last) {
    const std::string w = "model.layers." + std::to_string(id) + "." + location + "_layernorm.weight";
    add_float_init(w, {c_.hidden}, [this, src](float* dst) {
      auto v = ck_.floats(src, {c_.hidden});
      std::memcpy(dst, v.data(), v.size() * 4);
    });
    const std::string base = "/model/layers." + std::to_string(id) + "/" + location + "_layernorm";
    const std::string out0 = base + "/output_0", out3 = base + "/output_3";
    if (!skip) {
      node("SimplifiedLayerNormalization", base + "/LayerNorm", {root_, w}, {out0}, "",
           {attr_f("epsilon", static_cast<float>(c_.eps)), attr_i("axis", -1), attr_i("stash_type", 1)});
    } else if (last) {
      node("SkipSimplifiedLayerNormalization", base + "/SkipLayerNorm", {root_, skip_, w}, {out0}, "com.microsoft",
           {attr_f("epsilon", static_cast<float>(c_.eps))});
    } else {
      node("SkipSimplifiedLayerNormalization", base + "/SkipLayerNorm", {root_, skip_, w}, {out0, "", "", out3},
           "com.microsoft", {attr_f("epsilon", static_cast<float>(c_.eps))});
      root_ = out3;
    }
    ln_out_ = out0;
  }

  // A MatMul whose weight is the row-wise concatenation of `srcs` (HF layout [out, in]) transposed to
  // [in, out]; int4: MatMulNBits over the same values, quantized as the builder's to_nbits does.
  void matmul(const std::string& name, const std::string& x, const std::vector<std::string>& srcs, int64_t N,
              int64_t K, const std::string& out, std::vector<int64_t> rows = {}) {
    if (rows.empty()) rows = {N};
    // weight initializer name: basename[1:].replace("/", ".") + ".weight" (make_matmul_float :1952)
    std::string wname = name.substr(1) + ".weight";
    std::replace(wname.begin(), wname.end(), '/', '.');
    // HF-layout rows [N, K] of the (packed) weight
    auto load = [this, srcs, rows, N, K]() {
      std::vector<float> w;
      for (size_t s = 0; s < srcs.size(); ++s) {
        auto part = ck_.floats(srcs[s], {rows[s], K});
        w.insert(w.end(), part.begin(), part.end());
      }
      if (dequantized_) round_trip_q4(w, N, K);
      return w;
    };
    if (!int4_) {
      add_float_init(wname, {K, N}, [load, N, K](float* dst) {
        auto w = load();
        // transpose [N, K] -> [K, N] in tiles
        constexpr int64_t T = 64;
        for (int64_t n0 = 0; n0 < N; n0 += T)
          for (int64_t k0 = 0; k0 < K; k0 += T)
            for (int64_t n = n0; n < std::min(N, n0 + T); ++n)
              for (int64_t k = k0; k < std::min(K, k0 + T); ++k) dst[k * N + n] = w[n * K + k];
      });
      node("MatMul", name, {x, wname}, {out});
      return;
    }
    constexpr int64_t B = 32;
    const int64_t kb = (K + B - 1) / B;
    add_init(wname + "_Q4", {N, kb, B / 2}, TensorProto::UINT8, static_cast<uint64_t>(N * kb * (B / 2)),
             [load, N, K, kb](std::vector<uint8_t>& dst) {
               auto w = load();
               std::vector<float> scales(static_cast<size_t>(N * kb));
               quantize_q4(w.data(), N, K, dst.data(), scales.data());
             });
    add_init(wname + "_scales", {N * kb}, TensorProto::FLOAT, static_cast<uint64_t>(N * kb * 4),
             [load, N, K, kb](std::vector<uint8_t>& dst) {
               auto w = load();
               std::vector<uint8_t> q(static_cast<size_t>(N * kb * (B / 2)));
               quantize_q4(w.data(), N, K, q.data(), reinterpret_cast<float*>(dst.data()));
             });
    node("MatMulNBits", name + "_Q4", {x, wname + "_Q4", wname + "_scales"}, {out}, "com.microsoft",
         {attr_i("K", K), attr_i("N", N), attr_i("bits", 4), attr_i("block_size", B), attr_i("accuracy_level", accuracy_level_)});
  }

  // MlasQuantizeBlockwise<float, 4>, columnwise, symmetric (zero_points == nullptr): for column n of
  // B = W^T (row n of W), blocks of 32 along K. Bytes [N, K/32, 16], low nibble first; scales [N, K/32].
  static void quantize_q4(const float* w, int64_t N, int64_t K, uint8_t* q, float* scales) {
    constexpr int64_t B = 32;
    const int64_t kb = (K + B - 1) / B;
    for (int64_t n = 0; n < N; ++n) {
      const float* row = w + n * K;
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t k0 = b * B, k1 = std::min(K, k0 + B);
        float mn = std::numeric_limits<float>::max(), mx = -mn;
        for (int64_t k = k0; k < k1; ++k) {
          mn = std::min(mn, row[k]);
          mx = std::max(mx, row[k]);
        }
        if (k1 < k0 + B) {  // the quantizer pads K with zeros to whole blocks (np.pad)
          mn = std::min(mn, 0.0f);
          mx = std::max(mx, 0.0f);
        }
        const float big = std::fabs(mx) > std::fabs(mn) ? mx : mn;  // range2scale
        const float scale = big / -8.0f;
        scales[n * kb + b] = scale;
        const float rs = scale != 0.0f ? 1.0f / scale : 0.0f;
        uint8_t* dst = q + (n * kb + b) * (B / 2);
        for (int64_t k = k0; k < k0 + B; k += 2) {
          auto qv = [&](int64_t kk) -> uint8_t {
            if (kk >= k1) return 8;  // padding zeros quantize to the zero point
            return static_cast<uint8_t>(std::clamp(std::roundf(row[kk] * rs + 8.0f), 0.0f, 15.0f));
          };
          dst[(k - k0) / 2] = static_cast<uint8_t>((qv(k) & 0xf) | (qv(k + 1) << 4));
        }
      }
    }
  }

  // W <- dequant(quant(W)) as MatMulNBits dequantizes: (q - 8) * scale.
  static void round_trip_q4(std::vector<float>& w, int64_t N, int64_t K) {
    constexpr int64_t B = 32;
    const int64_t kb = (K + B - 1) / B;
    std::vector<uint8_t> q(static_cast<size_t>(N * kb * (B / 2)));
    std::vector<float> scales(static_cast<size_t>(N * kb));
    quantize_q4(w.data(), N, K, q.data(), scales.data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t b = k / B, i = k % B;
        const uint8_t byte = q[(n * kb + b) * (B / 2) + i / 2];
        const int v = (i % 2 ? byte >> 4 : byte & 0xf) - 8;
        w[n * K + k] = static_cast<float>(v) * scales[n * kb + b];
      }
  }

  // make_rotary_embedding_caches_from_scratch (:2565), computed in float32 as torch does, halved
  // to [context, head_dim / 2] (:2599).
  void rotary_caches() {
    const int64_t half = c_.head_dim / 2, M = c_.context, dim = c_.head_dim;
    auto make = [this, half, M, dim](bool cos_) {
      return [this, half, M, dim, cos_](float* dst) {
        std::vector<float> inv(static_cast<size_t>(half));
        for (int64_t j = 0; j < half; ++j) {
          const float e = static_cast<float>(2 * j) / static_cast<float>(dim);
          inv[j] = 1.0f / std::pow(static_cast<float>(c_.theta), e);
        }
        for (int64_t t = 0; t < M; ++t)
          for (int64_t j = 0; j < half; ++j) {
            const float a = static_cast<float>(t) * inv[j];
            dst[t * half + j] = static_cast<float>(cos_ ? std::cos(static_cast<double>(a)) : std::sin(static_cast<double>(a)));
          }
      };
    };
    add_float_init("cos_cache", {M, half}, make(true));
    add_float_init("sin_cache", {M, half}, make(false));
  }

  // Constant nodes named as make_constant (:1570) names them: /model/constants/INT64/[1] etc.
  std::string constant_i64(const std::string& text, std::vector<int64_t> values, bool vector) {
    const std::string out = "/model/constants/INT64/" + text;
    NodeProto* n = g_->add_node();
    n->set_op_type("Constant");
    n->set_name("/model/constant_nodes/INT64/" + text);
    n->add_output(out);
    AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(AttributeProto::TENSOR);
    TensorProto* t = a->mutable_t();
    t->set_name(out);
    t->set_data_type(TensorProto::INT64);
    if (vector) t->add_dims(static_cast<int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return out;
  }

  static AttributeProto attr_i(const std::string& name, int64_t v) {
    AttributeProto a;
    a.set_name(name);
    a.set_type(AttributeProto::INT);
    a.set_i(v);
    return a;
  }
  static AttributeProto attr_f(const std::string& name, float v) {
    AttributeProto a;
    a.set_name(name);
    a.set_type(AttributeProto::FLOAT);
    a.set_f(v);
    return a;
  }

  void node(const std::string& op, const std::string& name, const std::vector<std::string>& in,
            const std::vector<std::string>& out, const std::string& domain = "",
            const std::vector<AttributeProto>& attrs = {}) {
    NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    if (!domain.empty()) n->set_domain(domain);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    for (const auto& a : attrs) *n->add_attribute() = a;
  }

  void value_info(onnx::ValueInfoProto* v, const std::string& name, int32_t dtype,
                  const std::vector<std::variant<int64_t, const char*>>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtype);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (std::holds_alternative<int64_t>(d)) dim->set_dim_value(std::get<int64_t>(d));
      else dim->set_dim_param(std::get<const char*>(d));
    }
  }
  void add_input(const std::string& name, int32_t dtype, const std::vector<std::variant<int64_t, const char*>>& dims) {
    value_info(g_->add_input(), name, dtype, dims);
  }
  void add_output(const std::string& name, int32_t dtype, const std::vector<std::variant<int64_t, const char*>>& dims) {
    value_info(g_->add_output(), name, dtype, dims);
  }

  void add_init(const std::string& name, std::vector<int64_t> dims, int32_t dtype, uint64_t nbytes,
                std::function<void(std::vector<uint8_t>&)> produce) {
    inits_.push_back({name, std::move(dims), dtype, nbytes, std::move(produce)});
  }
  void add_float_init(const std::string& name, std::vector<int64_t> dims, std::function<void(float*)> produce) {
    const int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
    add_init(name, std::move(dims), TensorProto::FLOAT, static_cast<uint64_t>(n) * 4,
             [produce](std::vector<uint8_t>& dst) { produce(reinterpret_cast<float*>(dst.data())); });
  }

  const Checkpoint& ck_;
  Config c_;
  bool int4_;
  int accuracy_level_;
  bool dequantized_;
  onnx::ModelProto model_;
  onnx::GraphProto* g_;
  std::vector<Init> inits_;
  std::string root_, skip_, ln_out_, seqlens_k_, total_len_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string precision = "fp32";
  int accuracy_level = 4;  // quant_config.py :397, cpu
  bool dequantized = false, bad = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--precision" && i + 1 < argc) precision = argv[++i];
    else if (a == "--accuracy-level" && i + 1 < argc) accuracy_level = std::atoi(argv[++i]);
    else if (a == "--dequantized") dequantized = true;
    else if (a.rfind("--", 0) == 0) bad = true;
    else pos.push_back(a);
  }
  if (bad || pos.size() != 2 || (precision != "fp32" && precision != "int4") || (dequantized && precision != "fp32")) {
    std::cerr << "usage: builder_graph CHECKPOINT_DIR OUT_DIR [--precision fp32|int4] [--accuracy-level N]"
                 " [--dequantized]\n";
    return 2;
  }
  try {
    const fs::path ckdir = pos[0], out = pos[1];
    Config c = read_config(ckdir);
    Checkpoint ck(ckdir);
    Builder b(ck, c, precision == "int4", accuracy_level, dequantized);
    b.build();
    b.write(out);
    fs::copy_file(ckdir / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  } catch (const std::exception& e) {
    std::cerr << "builder_graph: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
