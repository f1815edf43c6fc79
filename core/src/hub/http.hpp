// http.hpp - the HTTP layer of hub downloads, over libcurl: one request at a time per Client,
// no redirect followed on its own (the caller decides which hops to take and which headers go
// with them), headers of the final response captured, the body of a 2xx response streamed to a
// callback. No libcurl type appears here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hub/net_policy.hpp"

namespace mobius::http {

struct Response {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;  // the body of a non-2xx response (first 64 KiB); 2xx bodies go to on_body
  // The last value of a header (name in any case), or nullptr.
  const std::string* header(std::string_view name) const;
};

// No complete HTTP response: the connection failed or dropped, timed out, or the body callback
// stopped the transfer.
class TransportError : public std::runtime_error {
 public:
  enum class Kind {
    Connect,   // could not resolve or connect: nothing was exchanged
    Transfer,  // dropped mid-way (worth resuming)
    Timeout,   // no answer in time, or a body below the minimum rate (worth one more try)
    Refused,   // every address the host has is one Request::max_space forbids
    Aborted,   // a callback returned false
    Fatal,     // TLS, protocol or local failure: retrying does not help
  };
  TransportError(Kind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

struct Request {
  bool head = false;                 // HEAD, else GET
  std::string url;                   // http or https only
  std::vector<std::string> headers;  // "Name: value"
  // Body bytes of a 2xx response, in order; false stops the transfer (TransportError Aborted).
  std::function<bool(const char* data, size_t n)> on_body;
  // Called once the final response's headers are in, before any body byte: false stops it.
  std::function<bool(const Response&)> on_headers;
  // The final response's headers must be in within this many seconds of the start, connecting
  // included (a HEAD's whole answer): a silent server or one trickling its headers fails
  // (Timeout) however many bytes it sends.
  double header_timeout_s = 10;
  // Then the body must bring at least min_rate bytes/s over every window of rate_window_s
  // seconds (a body that stops, or trickles, fails with Timeout).
  uint64_t min_rate = 1024;
  double rate_window_s = 10;
  // When set, no connection is made to an address more private than this (checked on the
  // address connected to, so a name that resolves there is refused too): Refused.
  std::optional<net::AddressSpace> max_space;
  // Polled at least once a second: true stops the transfer (TransportError Aborted).
  std::function<bool()> cancelled;
};

// One connection cache: reuse one Client per thread. Not thread-safe itself.
class Client {
 public:
  Client();
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  // Performs one request; redirects are returned, not followed. Throws TransportError.
  Response perform(const Request& req);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A number of seconds as messages print it ("10", "2.5").
std::string format_seconds(double s);

// "mobius/<version>; libcurl/<version>".
std::string user_agent();

// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string url_encode(std::string_view s, bool keep_slash);

// The absolute URL a Location header points to from `base` (relative references resolved);
// nullopt when it is not an http(s) URL.
std::optional<std::string> resolve_location(const std::string& base, const std::string& location);

// True for a Location without scheme and host ("/path", "path?q"): a redirect on the same site.
bool is_relative_reference(std::string_view location);

// Scheme, host (lower case) and port (the scheme's default when absent) are equal.
bool same_origin(const std::string& a, const std::string& b);

// The scheme (lower case) and host (lower case; an IPv6 address in brackets) of a URL, empty
// when it does not parse.
std::string scheme_of(const std::string& url);
std::string host_of(const std::string& url);

// "scheme://host[:port]" of a URL, for messages; the URL itself when it does not parse.
std::string origin_of(const std::string& url);

}  // namespace mobius::http
