// sha256.hpp - SHA-256 (FIPS 180-4), fed incrementally: checks a downloaded file against the
// digest the hub announced for it while the bytes stream in, and hashes the checkpoint's files
// for the provenance. OpenSSL's libcrypto computes it (with the CPU's SHA instructions where
// there are any: about 1.4 GB/s on one core here, against 0.2 GB/s for plain C++).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace mobius {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void reset();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits; the object must be reset() before reuse.
  std::string hex_digest();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace mobius
