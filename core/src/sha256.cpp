// sha256.cpp - SHA-256 through OpenSSL's EVP interface.
#include "sha256.hpp"

#include <openssl/evp.h>

#include "mobius/error.hpp"

namespace mobius {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : s_(std::make_unique<State>()) {
  s_->ctx = EVP_MD_CTX_new();
  if (!s_->ctx) throw Error(ErrorKind::Internal, "[internal] cannot allocate a SHA-256 context");
  reset();
}

Sha256::~Sha256() = default;

void Sha256::reset() {
  if (EVP_DigestInit_ex(s_->ctx, EVP_sha256(), nullptr) != 1)
    throw Error(ErrorKind::Internal, "[internal] SHA-256 is not available from libcrypto");
}

void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(s_->ctx, data, n) != 1)
    throw Error(ErrorKind::Internal, "[internal] SHA-256 update failed");
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(s_->ctx, md, &len) != 1 || len != 32)
    throw Error(ErrorKind::Internal, "[internal] SHA-256 final failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace mobius
