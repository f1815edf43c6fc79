// test_util.hpp - shared helpers for the tests: temp folders, safetensors writing, subprocesses.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mobius::test {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("mobius-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

struct StTensor {
  std::string name;
  std::string dtype;  // safetensors dtype: F32, F16, BF16, I64, ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline StTensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                           const std::vector<float>& values) {
  StTensor t{name, "F32", std::move(shape), {}};
  t.bytes.resize(values.size() * 4);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// Writes a well-formed safetensors file.
inline void write_safetensors(const fs::path& p, const std::vector<StTensor>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::ofstream out(p, std::ios::binary);
  uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << hs;
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

inline void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct RunResult {
  int status = -1;     // exit code, or 128+signal
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing its output (stdout only when merge_stderr is false).
inline RunResult run(const std::string& cmd, bool merge_stderr = true) {
  RunResult r;
  FILE* p = ::popen((cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string env_or_empty(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

inline std::string quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

}  // namespace mobius::test
