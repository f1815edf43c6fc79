// fuzz_torch_zip.cpp - libFuzzer target: whole torch.save archives, raw or assembled from parts.
//
// data.pkl carries a CRC, so random mutations of a raw archive rarely reach the pickle and
// storage checks. Inputs starting with 0xFA are therefore parts to assemble: the harness wraps
// a pickle and storage blobs into a valid zip, so the fuzzer explores pickle x archive
// combinations (storage lookups, size checks, strided reads). For those, every tensor read is
// also compared with a naive element-by-element gather from the blobs. Any other input is an
// archive as is.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bin_util.hpp"
#include "checkpoint/pytorch_bin.hpp"

namespace {

struct Parts {
  std::string pickle;
  std::map<std::string, std::string> storages;
};

// 0xFA, storage count, then per storage: key length (1 byte), key, size (2 bytes LE), bytes;
// the rest is the pickle.
bool split(const uint8_t* data, size_t size, Parts& parts) {
  if (size < 2 || data[0] != 0xFA) return false;
  size_t p = 2;
  for (unsigned i = 0; i < data[1] % 8u; ++i) {
    if (p + 1 > size) return false;
    const size_t klen = data[p++] % 8u;
    if (p + klen + 2 > size) return false;
    std::string key(reinterpret_cast<const char*>(data + p), klen);
    p += klen;
    const size_t blen = data[p] | (data[p + 1] << 8);
    p += 2;
    if (p + blen > size) return false;
    parts.storages[key] = std::string(reinterpret_cast<const char*>(data + p), blen);
    p += blen;
  }
  parts.pickle.assign(reinterpret_cast<const char*>(data + p), size - p);
  return true;
}

// The reference: element by element, straight from the storage blob.
void check_gather(const mobius::TorchTensor& t, const std::string& storage, size_t elem,
                  const std::vector<unsigned char>& got) {
  const size_t count = got.size() / elem;
  if (count > (1u << 20)) return;
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (size_t n = 0; n < count; ++n) {
    uint64_t at = t.offset;
    for (size_t k = 0; k < idx.size(); ++k) at += static_cast<uint64_t>(idx[k] * t.stride[k]);
    if ((at + 1) * elem > storage.size()) __builtin_trap();
    if (std::memcmp(got.data() + n * elem, storage.data() + at * elem, elem) != 0) {
      __builtin_trap();
    }
    for (size_t k = idx.size(); k-- > 0;) {
      if (++idx[k] < t.shape[k]) break;
      idx[k] = 0;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Parts parts;
  const bool assembled = split(data, size, parts);
  std::string bytes = assembled ? mobius::test::torch_zip(parts.pickle, parts.storages)
                                : std::string(reinterpret_cast<const char*>(data), size);
  try {
    auto reader = mobius::open_pytorch_archive_bytes(std::move(bytes), "fuzz.bin");
    mobius::TorchPickle pickle;
    if (assembled) {
      pickle = mobius::parse_torch_pickle(reinterpret_cast<const uint8_t*>(parts.pickle.data()),
                                          parts.pickle.size(), "fuzz.bin");
      if (pickle.tensors.size() != reader->tensors().size()) __builtin_trap();
    }
    uint64_t budget = uint64_t{256} << 20;  // bytes materialized per input
    for (size_t i = 0; i < reader->tensors().size(); ++i) {
      const mobius::TensorMeta& t = reader->tensors()[i];
      if (t.nbytes > budget) continue;
      budget -= t.nbytes;
      std::vector<unsigned char> buf(t.nbytes);
      reader->read(t, buf.data());
      if (assembled) {
        const mobius::TorchTensor& pt = pickle.tensors[i];  // both sorted by name
        const mobius::TorchStorage& s = pickle.storages[pt.storage];
        if (pt.name != t.name || s.dtype != t.dtype) __builtin_trap();
        check_gather(pt, parts.storages.at(s.key), mobius::dtype_size(s.dtype), buf);
      }
    }
  } catch (const mobius::Error&) {
  }
  return 0;
}
