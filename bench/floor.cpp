// floor.cpp - the decode benchmark's memory-bandwidth floor: the time to read N bytes once from RAM
// with 2 threads (the benchmark's intra-op thread count), best of several passes after a warm-up.
// A decode step reads every weight once, so no graph decodes a token faster than this for its
// weight bytes.
//
// usage: floor BYTES [BYTES...]      prints one JSON line per size: bytes, ms, gib_s
//   FLOOR_THREADS (default 2), FLOOR_PASSES (default 10)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

// Four independent accumulators over 64-bit words: integer adds vectorize, so the loop is bound by
// memory, not by an add chain.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a ^ b ^ c ^ d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: floor BYTES [BYTES...]\n");
    return 2;
  }
  const int threads = std::max(1, std::getenv("FLOOR_THREADS") ? std::atoi(std::getenv("FLOOR_THREADS")) : 2);
  const int passes = std::max(1, std::getenv("FLOOR_PASSES") ? std::atoi(std::getenv("FLOOR_PASSES")) : 10);
  std::vector<uint64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  const uint64_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const size_t words = (max_bytes + 7) / 8;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[words]);
  for (size_t i = 0; i < words; ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;  // touch every page
  volatile uint64_t sink = 0;
  for (uint64_t bytes : sizes) {
    const size_t n = (bytes + 7) / 8;
    double best = 1e30;
    for (int pass = 0; pass < passes + 1; ++pass) {  // pass 0 is the warm-up
      std::vector<uint64_t> part(threads);
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        ts.emplace_back([&, t, lo, hi] { part[t] = sum_words(buf.get() + lo, hi - lo); });
      }
      for (auto& th : ts) th.join();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      for (uint64_t v : part) sink = sink ^ v;
      if (pass > 0) best = std::min(best, ms);
    }
    std::printf("{\"bytes\":%llu,\"threads\":%d,\"ms\":%.3f,\"gib_s\":%.2f}\n", static_cast<unsigned long long>(bytes),
                threads, best, bytes / (best / 1000.0) / (1024.0 * 1024 * 1024));
  }
  return 0;
}
