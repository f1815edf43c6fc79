// net_policy.hpp - where a download may be sent: the address spaces of private network access
// (the rule browsers apply), and which redirects a hub's answer may take.
//
// Every address is in one of three spaces, from the most public to the most private:
//   public   everything not below
//   private  10/8, 172.16/12, 192.168/16, 100.64/10 (shared), 169.254/16 (link-local),
//            198.18/15 (benchmarking), fc00::/7 (unique-local), fe80::/10 (link-local),
//            fec0::/10 (site-local)
//   local    127/8, 0/8 (unspecified, "this host"), ::1, ::
// IPv6 forms that carry an IPv4 address (::ffff:a.b.c.d mapped, ::a.b.c.d compatible,
// 64:ff9b::/96 NAT64, 2002::/16 6to4) are classified by the address they carry. Host names
// are classified by what they resolve to (the most private of their addresses).
//
// A hop from a URL in one space to an address in a more private one is refused: a hub on a
// public address cannot send a download to loopback or to the private network (a metadata
// service, an internal page), while a mirror on loopback may redirect anywhere. https never
// downgrades to http.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

namespace mobius::net {

enum class AddressSpace { Public = 0, Private = 1, Local = 2 };

const char* space_name(AddressSpace s);  // "public", "private", "loopback"

// An IPv4 address in host order as inet_aton reads it: one to four parts, each decimal, octal
// (leading 0) or hex (0x), the last filling the remaining bytes ("127.1", "2130706433",
// "0177.0.0.1", "0x7f000001"). nullopt when it is not one.
std::optional<uint32_t> parse_ipv4(std::string_view s);

// The space of a host written as an address: an IPv4 address in any spelling parse_ipv4
// takes, or an IPv6 address (with or without brackets, a zone id after '%' ignored). nullopt
// for a host name.
std::optional<AddressSpace> literal_space(std::string_view host);

// The space of a socket address (AF_INET or AF_INET6; anything else is Local, the strictest).
AddressSpace sockaddr_space(const sockaddr* sa);

// The most private space among the addresses `host` resolves to (a literal is classified
// without a lookup); nullopt when it does not resolve here.
std::optional<AddressSpace> resolve_space(const std::string& host);

// Whether a request made in `context` may reach an address in `target`.
inline bool reachable(AddressSpace context, AddressSpace target) {
  return static_cast<int>(target) <= static_cast<int>(context);
}

// Why a redirect from `from` to `to` (absolute http(s) URLs) is refused for a download that
// started in `context` (the space of the endpoint), or nullopt when it may be followed: https
// to http; a target host (literal or resolved) more private than `context`. A name that does
// not resolve here is left to the connection, which checks the address it connects to.
std::optional<std::string> refuse_redirect(const std::string& from, const std::string& to,
                                           AddressSpace context);

// True when a proxy variable (http_proxy, HTTPS_PROXY, ALL_PROXY, ...) is set: connections
// then go to the proxy, and only the target host's own address can be checked.
bool proxy_configured();

}  // namespace mobius::net
