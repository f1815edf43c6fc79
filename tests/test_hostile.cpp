// test_hostile.cpp - hostile checkpoints through the whole CLI: every one is refused with the file
// and the exact reason, exit status 1, nothing written to OUT, no crash and no hang.
#include <doctest/doctest.h>

#include <cstring>

#include "bin_util.hpp"
#include "golden_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

const char* kConfig = R"({"model_type": "toy", "hidden_size": 4, "out_size": 3})";

struct Hostile {
  std::string what;
  std::function<void(const fs::path&)> make;  // writes the checkpoint files into the folder
  std::string error;                           // the whole message: "[format] file: reason"
};

std::string st_header_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

void write_bytes(const fs::path& p, const std::string& b) { write_text(p, b); }

std::string evil_pickle(const std::string& module, const std::string& name) {
  Pickler p;
  p.proto(2).global(module, name).str("touch /tmp/mobius-pwned").tuple_n(1).reduce().stop();
  return p.bytes;
}

}  // namespace

TEST_CASE("hostile: checkpoints from strangers are refused before anything is written") {
  const std::string f32x12(48, '\0');
  std::vector<Hostile> cases = {
      {"safetensors header length beyond the file",
       [](const fs::path& d) { write_bytes(d / "model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}"); },
       "[safetensors] model.safetensors: header length 9223372036854775807 exceeds the 100 MiB limit"},
      {"safetensors overlapping tensors",
       [&](const fs::path& d) {
         write_bytes(d / "model.safetensors",
                     st_header_file(R"({"proj.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[0,48]},"proj.bias":{"dtype":"F32","shape":[3],"data_offsets":[36,48]}})", f32x12));
       },
       "[safetensors] model.safetensors: tensors 'proj.weight' [0, 48) and 'proj.bias' [36, 48) overlap"},
      {"safetensors dtype x shape != bytes",
       [&](const fs::path& d) {
         write_bytes(d / "model.safetensors",
                     st_header_file(R"({"proj.weight":{"dtype":"F32","shape":[3,5],"data_offsets":[0,48]}})", f32x12));
       },
       "[safetensors] model.safetensors: tensor 'proj.weight' byte length 48 does not match F32 x [3, 5] = 60 bytes"},
      {"index shard path traversal",
       [](const fs::path& d) {
         write_text(d / "model.safetensors.index.json", R"({"weight_map":{"proj.weight":"../../etc/passwd"}})");
       },
       "[safetensors] model.safetensors.index.json: shard '../../etc/passwd' has a '..' component"},
      {"index shard absolute path",
       [](const fs::path& d) {
         write_text(d / "model.safetensors.index.json", R"({"weight_map":{"proj.weight":"/etc/passwd"}})");
       },
       "[safetensors] model.safetensors.index.json: shard '/etc/passwd' is an absolute path"},
      {"index shard symlink out of the folder",
       [](const fs::path& d) {
         fs::create_directories(d.parent_path() / "elsewhere");
         write_safetensors(d.parent_path() / "elsewhere" / "x.safetensors", {f32_tensor("proj.weight", {3, 4}, std::vector<float>(12))});
         fs::create_symlink(d.parent_path() / "elsewhere" / "x.safetensors", d / "model-00001.safetensors");
         write_text(d / "model.safetensors.index.json", R"({"weight_map":{"proj.weight":"model-00001.safetensors"}})");
       },
       "[safetensors] model.safetensors.index.json: shard 'model-00001.safetensors' resolves outside the checkpoint folder: "
       "'model-00001.safetensors' is a symbolic link to '"},
      {"index naming one shard of a numbered series while another lies beside it",
       [](const fs::path& d) {
         for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
           write_safetensors(d / shard, {f32_tensor("proj.weight", {3, 4}, std::vector<float>(12)),
                                         f32_tensor("proj.bias", {3}, {0, 0, 0})});
         }
         write_text(d / "model.safetensors.index.json",
                    R"({"weight_map":{"proj.weight":"model-00001-of-00002.safetensors","proj.bias":"model-00001-of-00002.safetensors"}})");
       },
       "[safetensors] model-00002-of-00002.safetensors: shard of the numbered series is not named by model.safetensors.index.json"},
      {"pickle calling os.system",
       [](const fs::path& d) { write_bytes(d / "pytorch_model.bin", torch_zip(evil_pickle("os", "system"), {})); },
       "[pytorch] pytorch_model.bin: data.pkl: GLOBAL (0x63) at offset 2: global 'os.system' is not allowed"},
      {"pickle calling builtins.eval",
       [](const fs::path& d) { write_bytes(d / "pytorch_model.bin", torch_zip(evil_pickle("builtins", "eval"), {})); },
       "[pytorch] pytorch_model.bin: data.pkl: GLOBAL (0x63) at offset 2: global 'builtins.eval' is not allowed"},
      {"pickle calling subprocess.Popen",
       [](const fs::path& d) { write_bytes(d / "pytorch_model.bin", torch_zip(evil_pickle("subprocess", "Popen"), {})); },
       "[pytorch] pytorch_model.bin: data.pkl: GLOBAL (0x63) at offset 2: global 'subprocess.Popen' is not allowed"},
      {"pickle calling a torch function outside the allowlist",
       [](const fs::path& d) { write_bytes(d / "pytorch_model.bin", torch_zip(evil_pickle("torch", "load"), {})); },
       "[pytorch] pytorch_model.bin: data.pkl: GLOBAL (0x63) at offset 2: global 'torch.load' is not allowed"},
      {"zip that is not a zip",
       [](const fs::path& d) { write_bytes(d / "pytorch_model.bin", "PK\x03\x04 truncated"); },
       "[pytorch] pytorch_model.bin: file is 14 bytes, too short to be a zip archive"},
      {"zip without an end record",
       [](const fs::path& d) { write_bytes(d / "pytorch_model.bin", "PK\x03\x04" + std::string(60, 'x')); },
       "[pytorch] pytorch_model.bin: not a zip archive (no end of central directory record)"},
      {"torch storage missing from the archive",
       [](const fs::path& d) {
         write_bytes(d / "pytorch_model.bin",
                     torch_zip(state_dict_pickle({{"proj.weight", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}}}), {}));
       },
       "[pytorch] pytorch_model.bin: storage '0' has no archive entry 'archive/data/0'"},
      {"torch tensor extent beyond its storage",
       [](const fs::path& d) {
         write_bytes(d / "pytorch_model.bin",
                     torch_zip(state_dict_pickle({{"proj.weight", "FloatStorage", "0", 12, 4, {3, 4}, {4, 1}}}),
                               {{"0", std::string(48, '\0')}}));
       },
       "[pytorch] pytorch_model.bin: data.pkl: tensor 'proj.weight' (offset 4, size [3, 4], stride [4, 1]) "
       "reaches element 15 of storage '0', which has 12 elements"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    TempDir t;
    fs::path ckpt = t / "ckpt";
    fs::create_directories(ckpt);
    write_text(ckpt / "config.json", kConfig);
    c.make(ckpt);
    RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " + quote(ckpt.string()) + " " +
                      quote((t / "out").string()) + " --plugin-path " + quote(env_or_empty("MOBIUS_TEST_PLUGIN_DIR")));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("mobius: error: ") != std::string::npos);
    CHECK(r.output.find("mobius: error: " + c.error) != std::string::npos);
    CHECK_FALSE(fs::exists(t / "out"));
    CHECK_FALSE(fs::exists("/tmp/mobius-pwned"));
  }
}

TEST_CASE("hostile: safetensors wins over a pickle in the same folder") {
  TempDir t;
  fs::path ckpt = t / "ckpt";
  fs::create_directories(ckpt);
  write_text(ckpt / "config.json", kConfig);
  write_safetensors(ckpt / "model.safetensors", {f32_tensor("proj.weight", {3, 4}, std::vector<float>(12, 1.f)),
                                                 f32_tensor("proj.bias", {3}, {0, 0, 0})});
  write_text(ckpt / "pytorch_model.bin", torch_zip(evil_pickle("os", "system"), {}));
  RunResult r = run(quote(env_or_empty("MOBIUS_CLI")) + " build -q --model " + quote(ckpt.string()) + " " +
                    quote((t / "out").string()) + " --plugin-path " + quote(env_or_empty("MOBIUS_TEST_PLUGIN_DIR")));
  INFO(r.output);
  CHECK(r.status == 0);  // the pickle is never opened
}
