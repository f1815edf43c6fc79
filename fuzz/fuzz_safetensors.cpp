// fuzz_safetensors.cpp - libFuzzer target: the safetensors header parser on arbitrary files.
//
// The reader's entry point takes a folder, so each input is written to model.safetensors in a
// private temp folder (on tmpfs when /dev/shm exists), opened, and every tensor read back.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace {

const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::filesystem::path d =
        std::filesystem::path(base) / ("mobius-fuzz-st-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(work_dir(), ec);
    });
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path file = work_dir() / "model.safetensors";
  FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  try {
    auto reader = mobius::open_safetensors_checkpoint(work_dir());
    for (const auto& t : reader->tensors()) {
      // Validated tensors tile the data region, so they cannot claim more than the file holds.
      if (t.nbytes > size) __builtin_trap();
      std::vector<unsigned char> buf(t.nbytes);
      reader->read(t, buf.data());
    }
  } catch (const mobius::Error&) {
  }
  return 0;
}
