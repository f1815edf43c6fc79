// net_policy.cpp - address spaces and the redirect rule (see net_policy.hpp).
#include "hub/net_policy.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>

#include "hub/http.hpp"
#include "util/untrusted.hpp"

namespace mobius::net {
namespace {

AddressSpace ipv4_space(uint32_t a) {
  auto in = [a](uint32_t net, int bits) {
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    return (a & mask) == (net & mask);
  };
  if (in(0x7f000000, 8) || in(0x00000000, 8)) return AddressSpace::Local;
  if (in(0x0a000000, 8) || in(0xac100000, 12) || in(0xc0a80000, 16) || in(0x64400000, 10) ||
      in(0xa9fe0000, 16) || in(0xc6120000, 15))
    return AddressSpace::Private;
  return AddressSpace::Public;
}

uint32_t ipv4_at(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

AddressSpace ipv6_space(const unsigned char* b) {
  static const unsigned char kZero[16] = {};
  if (std::memcmp(b, kZero, 15) == 0 && (b[15] == 0 || b[15] == 1)) return AddressSpace::Local;  // :: and ::1
  // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible): the IPv4 address decides.
  if (std::memcmp(b, kZero, 10) == 0 && ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0)))
    return ipv4_space(ipv4_at(b + 12));
  // 64:ff9b::/96 (NAT64) carries the IPv4 address in its last 32 bits.
  static const unsigned char kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, kNat64, 12) == 0) return ipv4_space(ipv4_at(b + 12));
  // 2002::/16 (6to4) carries it in bits 16 to 48.
  if (b[0] == 0x20 && b[1] == 0x02) {
    const AddressSpace s = ipv4_space(ipv4_at(b + 2));
    if (s != AddressSpace::Public) return s;
  }
  if ((b[0] & 0xfe) == 0xfc) return AddressSpace::Private;                      // fc00::/7
  if (b[0] == 0xfe && ((b[1] & 0xc0) == 0x80 || (b[1] & 0xc0) == 0xc0)) return AddressSpace::Private;  // fe80::/10, fec0::/10
  return AddressSpace::Public;
}

// One part of an inet_aton address: decimal, octal (leading 0) or hex (0x); nullopt when it
// is none of them or exceeds 32 bits.
std::optional<uint64_t> ipv4_part(std::string_view p) {
  if (p.empty()) return std::nullopt;
  int base = 10;
  if (p.size() > 1 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p.remove_prefix(2);
    if (p.empty()) return uint64_t{0};  // "0x" is 0 for inet_aton
  } else if (p.size() > 1 && p[0] == '0') {
    base = 8;
    p.remove_prefix(1);
  }
  uint64_t v = 0;
  for (char c : p) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    if (d >= base) return std::nullopt;
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    if (v > 0xffffffffull) return std::nullopt;
  }
  return v;
}

}  // namespace

const char* space_name(AddressSpace s) {
  switch (s) {
    case AddressSpace::Public:
      return "public";
    case AddressSpace::Private:
      return "private";
    case AddressSpace::Local:
      return "loopback";
  }
  return "?";
}

std::optional<uint32_t> parse_ipv4(std::string_view s) {
  if (s.empty() || s.size() > 64) return std::nullopt;
  if (s.back() == '.') s.remove_suffix(1);  // a trailing dot names the same host
  uint64_t parts[4];
  size_t n = 0;
  size_t start = 0;
  while (true) {
    if (n == 4) return std::nullopt;
    const size_t dot = s.find('.', start);
    const std::string_view p = s.substr(start, dot == std::string_view::npos ? s.size() - start : dot - start);
    std::optional<uint64_t> v = ipv4_part(p);
    if (!v) return std::nullopt;
    parts[n++] = *v;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // The leading parts are one byte each; the last fills what is left.
  uint64_t a = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (parts[i] > 255) return std::nullopt;
    a |= parts[i] << (24 - 8 * i);
  }
  const unsigned last_bits = 32 - 8 * static_cast<unsigned>(n - 1);
  if (last_bits < 32 && parts[n - 1] >> last_bits) return std::nullopt;
  a |= parts[n - 1];
  return static_cast<uint32_t>(a);
}

std::optional<AddressSpace> literal_space(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.find(':') != std::string_view::npos) {
    std::string h(host.substr(0, host.find('%')));  // a zone id names an interface, not an address
    unsigned char b[16];
    if (h.size() < 64 && ::inet_pton(AF_INET6, h.c_str(), b) == 1) return ipv6_space(b);
    return std::nullopt;
  }
  if (std::optional<uint32_t> a = parse_ipv4(host)) return ipv4_space(*a);
  return std::nullopt;
}

AddressSpace sockaddr_space(const sockaddr* sa) {
  if (sa && sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return ipv4_space(ntohl(in->sin_addr.s_addr));
  }
  if (sa && sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return ipv6_space(in6->sin6_addr.s6_addr);
  }
  return AddressSpace::Local;
}

std::optional<AddressSpace> resolve_space(const std::string& host) {
  if (std::optional<AddressSpace> s = literal_space(host)) return s;
  if (host.empty() || host.size() > 253) return std::nullopt;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return std::nullopt;
  AddressSpace most = AddressSpace::Public;
  for (addrinfo* p = res; p; p = p->ai_next) {
    const AddressSpace s = sockaddr_space(p->ai_addr);
    if (static_cast<int>(s) > static_cast<int>(most)) most = s;
  }
  ::freeaddrinfo(res);
  return most;
}

std::optional<std::string> refuse_redirect(const std::string& from, const std::string& to,
                                           AddressSpace context) {
  const std::string from_scheme = http::scheme_of(from), to_scheme = http::scheme_of(to);
  if (from_scheme == "https" && to_scheme != "https")
    return "it leaves https for " + (to_scheme.empty() ? std::string("another scheme") : to_scheme);
  const std::string host = http::host_of(to);
  if (host.empty()) return std::string("it names no host");
  std::optional<AddressSpace> s = resolve_space(host);
  if (s && !reachable(context, *s))
    return std::string(literal_space(host) ? "it is" : "it resolves to") + " a " + space_name(*s) +
           " address, and the hub is on a " + space_name(context) +
           " one (a download never goes from a public address to the private network or loopback)";
  return std::nullopt;
}

bool proxy_configured() {
  const char* no = std::getenv("NO_PROXY");
  if (!no || !*no) no = std::getenv("no_proxy");
  if (no && std::strcmp(no, "*") == 0) return false;
  for (const char* k : {"http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"}) {
    const char* v = std::getenv(k);
    if (v && *v) return true;
  }
  return false;
}

}  // namespace mobius::net
