// fuzz_unpickler.cpp - libFuzzer target: the restricted unpickler on arbitrary data.pkl bytes.
#include <cstddef>
#include <cstdint>

#include "checkpoint/unpickler.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const mobius::TorchPickle p = mobius::parse_torch_pickle(data, size, "fuzz.bin");
    // Whatever is accepted must be self-consistent: every tensor names a known storage.
    for (const auto& t : p.tensors) {
      if (t.storage >= p.storages.size() || t.shape.size() != t.stride.size()) __builtin_trap();
    }
  } catch (const mobius::Error&) {
    // Rejections are the expected outcome for almost every input.
  }
  return 0;
}
