// digest.cpp - SHA-256 and SHA-1 through OpenSSL's EVP interface.
#include "util/digest.hpp"

#include <openssl/evp.h>

#include "mobius/error.hpp"

namespace mobius {

namespace {
const char* name_of(Digest::Algorithm a) { return a == Digest::Algorithm::Sha256 ? "SHA-256" : "SHA-1"; }

bool is_lower_hex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
}  // namespace

struct Digest::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Digest::Digest(Algorithm a) : s_(std::make_unique<State>()), a_(a) {
  s_->ctx = EVP_MD_CTX_new();
  if (!s_->ctx)
    throw Error(ErrorKind::Internal, std::string("[internal] cannot allocate a ") + name_of(a_) + " context");
  reset();
}

Digest::~Digest() = default;

void Digest::reset() {
  const EVP_MD* md = a_ == Algorithm::Sha256 ? EVP_sha256() : EVP_sha1();
  if (EVP_DigestInit_ex(s_->ctx, md, nullptr) != 1)
    throw Error(ErrorKind::Internal, std::string("[internal] ") + name_of(a_) + " is not available from libcrypto");
}

void Digest::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(s_->ctx, data, n) != 1)
    throw Error(ErrorKind::Internal, std::string("[internal] ") + name_of(a_) + " update failed");
}

std::string Digest::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const unsigned int want = a_ == Algorithm::Sha256 ? 32 : 20;
  if (EVP_DigestFinal_ex(s_->ctx, md, &len) != 1 || len != want)
    throw Error(ErrorKind::Internal, std::string("[internal] ") + name_of(a_) + " final failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

GitBlobSha1::GitBlobSha1(uint64_t size) {
  const std::string header = "blob " + std::to_string(size);
  h_.update(header.data(), header.size() + 1);  // with its terminating NUL
}

bool is_sha256_hex(std::string_view s) { return is_lower_hex(s, 64); }
bool is_sha1_hex(std::string_view s) { return is_lower_hex(s, 40); }

}  // namespace mobius
