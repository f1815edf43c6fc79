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
    Transfer,  // dropped or stalled mid-way (worth resuming)
    Aborted,   // the body callback returned false
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
  long connect_timeout_s = 10;
  long stall_timeout_s = 30;  // a transfer below 1 byte/s for this long fails (Transfer)
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

// "scheme://host[:port]" of a URL, for messages; the URL itself when it does not parse.
std::string origin_of(const std::string& url);

}  // namespace mobius::http
