// make_seeds.cpp - writes the fuzzers' seed corpora (tiny valid and hostile inputs) into a folder.
//
// Usage: make_seeds OUT_DIR [CASES_DIR GOLDEN_DIR]. Creates OUT_DIR/<target>/seed-*; with the
// other two (CASES_DIR: tests/golden), also extracts the golden qwen2-bias data.pkl into GOLDEN_DIR.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bin_util.hpp"

namespace fs = std::filesystem;
using mobius::test::Pickler;
using mobius::test::raw_bytes;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary) << bytes;
}

std::string le(uint64_t v, int n) {
  std::string s;
  mobius::test::put_le(s, v, n);
  return s;
}

// Parts for fuzz_torch_zip's assembled mode: 0xFA, count, (klen, key, len16, bytes)..., pickle.
std::string parts(const std::vector<std::pair<std::string, std::string>>& storages,
                  const std::string& pickle) {
  std::string s = "\xFA";
  s += static_cast<char>(storages.size());
  for (const auto& [key, bytes] : storages) {
    s += static_cast<char>(key.size());
    s += key + le(bytes.size(), 2) + bytes;
  }
  return s + pickle;
}

std::string safetensors(const std::string& header, const std::string& data) {
  return le(header.size(), 8) + header + data;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const fs::path out = argv[1];

  // Pickles.
  const std::string basic = mobius::test::state_dict_pickle({
      {"a.weight", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1}},
      {"a.t", "FloatStorage", "0", 6, 0, {3, 2}, {1, 3}},
      {"b", "HalfStorage", "1", 2, 1, {1}, {1}},
  });
  Pickler meta;  // model.state_dict(): _metadata through BUILD
  meta.proto(2).global("collections", "OrderedDict").binput(0).empty_tuple().reduce().binput(1);
  meta.mark().str("w").tensor("BFloat16Storage", "0", 2, 0, {2}, {1}).setitems();
  meta.empty_dict().str("_metadata").binget(0).empty_tuple().reduce();
  meta.str("").empty_dict().str("version").integer(1).setitem().setitem().setitem().build().stop();
  Pickler p4;  // protocol 4 with framing, MEMOIZE and STACK_GLOBAL
  {
    Pickler body;
    body.short_str("collections").memoize().short_str("OrderedDict").memoize().stack_global();
    body.memoize().empty_tuple().reduce().memoize().mark().short_str("w").memoize();
    body.short_str("torch._utils").short_str("_rebuild_parameter").stack_global();
    body.tensor("LongStorage", "k", 3, 0, {3}, {1}).boolean(true);
    body.binget(2).empty_tuple().reduce().tuple_n(3).reduce().setitems().stop();
    p4.proto(4).frame(body.bytes.size()).raw(body.bytes);
  }
  Pickler wrapped;
  wrapped.proto(2).empty_dict().mark().str("epoch").integer(3).str("lr").binfloat(0.5);
  wrapped.str("state_dict").empty_dict().str("x").tensor("IntStorage", "0", 4, 0, {2, 2}, {1, 2});
  wrapped.setitem().str("l").empty_list().none().append().setitems().stop();
  Pickler evil;
  evil.proto(2).global("os", "system").str("id").tuple_n(1).reduce().stop();
  Pickler nested;
  nested.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().empty_tuple();
  nested.reduce().stop();
  const std::vector<std::pair<std::string, std::string>> pickles = {
      {"basic", basic},           {"metadata", meta.bytes},  {"proto4", p4.bytes},
      {"wrapped", wrapped.bytes}, {"os-system", evil.bytes}, {"nested-reduce", nested.bytes}};
  for (const auto& [name, bytes] : pickles) put(out / "unpickler", name, bytes);

  // Archives, raw and as parts.
  const std::string f6 = raw_bytes(std::vector<float>{1, 2, 3, 4, 5, 6});
  const std::string h2 = raw_bytes(std::vector<uint16_t>{0x3C00, 0x4000});
  put(out / "torch_zip", "basic", mobius::test::torch_zip(basic, {{"0", f6}, {"1", h2}}));
  put(out / "torch_zip", "basic-nozip64",
      mobius::test::build_zip(
          {{"a/data.pkl", basic}, {"a/data/0", f6}, {"a/data/1", h2}, {"a/byteorder", "little"}},
          /*zip64=*/false));
  put(out / "torch_zip", "parts-basic", parts({{"0", f6}, {"1", h2}}, basic));
  put(out / "torch_zip", "parts-metadata", parts({{"0", h2}}, meta.bytes));
  put(out / "torch_zip", "parts-proto4",
      parts({{"k", raw_bytes(std::vector<int64_t>{1, 2, 3})}}, p4.bytes));
  put(out / "torch_zip", "parts-wrapped",
      parts({{"0", raw_bytes(std::vector<int32_t>{1, 2, 3, 4})}}, wrapped.bytes));

  // safetensors files.
  put(out / "safetensors", "basic",
      safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})",
                  std::string(16, '\x01')));
  put(out / "safetensors", "metadata",
      safetensors(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[1,2],)"
                  R"("data_offsets":[0,4]}})",
                  std::string(4, '\x02')));
  put(out / "safetensors", "empty", safetensors("{}", ""));
  put(out / "safetensors", "zero",
      safetensors(R"({"z":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]}})", ""));

  // The golden checkpoint's real data.pkl, into a separate folder: it is not committed.
  if (argc > 3) {
    std::ifstream in(fs::path(argv[2]) / "qwen2-bias" / "pytorch_model.bin",
                     std::ios::binary);
    const std::string zip((std::istreambuf_iterator<char>(in)), {});
    const auto u16 = [&](size_t p) {
      return static_cast<size_t>(static_cast<uint8_t>(zip[p])) |
             (static_cast<size_t>(static_cast<uint8_t>(zip[p + 1])) << 8);
    };
    const auto u32 = [&](size_t p) { return u16(p) | (u16(p + 2) << 16); };
    const std::string name = "pytorch_model/data.pkl";
    // A dev tool on a known file: find the directory entry by name, then its local header.
    for (size_t cd = zip.find("PK\x01\x02"); cd != std::string::npos && cd + 46 < zip.size();
         cd = zip.find("PK\x01\x02", cd + 1)) {
      if (zip.compare(cd + 46, name.size(), name) != 0) continue;
      const size_t size = u32(cd + 24), local = u32(cd + 42);
      const size_t data = local + 30 + u16(local + 26) + u16(local + 28);
      if (data + size <= zip.size()) put(argv[3], "qwen2-data.pkl", zip.substr(data, size));
      break;
    }
  }
  return 0;
}
