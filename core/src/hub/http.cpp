// http.cpp - the libcurl layer: one easy handle per Client (its connection cache reused from one
// request to the next), reset before every request so no option leaks from one to another.
#include "hub/http.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#ifndef MOBIUS_VERSION
#define MOBIUS_VERSION "0.0.0"
#endif

namespace mobius::http {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return std::string(s.substr(b, e - b));
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxHeaders = 256;
constexpr size_t kMaxHeaderBytes = 64 << 10;  // of all responses of one request (a hub sends ~2 KiB)

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Transfer {
  const Request* req;
  Response resp;
  bool headers_done = false;
  bool aborted = false;
  Clock::time_point start = Clock::now();
  // The body's rate window: when it began and how many bytes had come by then.
  Clock::time_point window_start;
  curl_off_t window_bytes = 0;
  std::string timed_out;  // why the transfer timed out, when it did
  std::string refused;    // the address a connection was refused to, when one was
  size_t header_bytes = 0;
  bool headers_too_large = false;
};

// Called by libcurl at least once a second: the header deadline, then the body's minimum rate.
int on_progress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  const Request& r = *t->req;
  if (r.cancelled && r.cancelled()) {
    t->aborted = true;
    return 1;
  }
  if (!t->headers_done) {
    if (seconds_since(t->start) > r.header_timeout_s) {
      t->timed_out = "no complete answer within " + format_seconds(r.header_timeout_s) + " s";
      return 1;
    }
    return 0;
  }
  const double in_window = seconds_since(t->window_start);
  if (in_window >= r.rate_window_s) {
    const double rate = static_cast<double>(dlnow - t->window_bytes) / in_window;
    if (rate < static_cast<double>(r.min_rate)) {
      t->timed_out = "the body came at " + format_seconds(std::round(rate * 10) / 10) +
                     " bytes/s over " + format_seconds(std::round(in_window)) + " s, below the minimum of " +
                     std::to_string(r.min_rate) + " bytes/s";
      return 1;
    }
    t->window_start = Clock::now();
    t->window_bytes = dlnow;
  }
  return 0;
}

// Opens the socket of a connection unless its address is more private than the request allows.
curl_socket_t open_socket(void* user, curlsocktype, struct curl_sockaddr* a) {
  auto* t = static_cast<Transfer*>(user);
  if (t->req->max_space) {
    const net::AddressSpace s = net::sockaddr_space(&a->addr);
    if (!net::reachable(*t->req->max_space, s)) {
      char host[INET6_ADDRSTRLEN] = "?";
      if (a->family == AF_INET)
        ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a->addr)->sin_addr, host, sizeof host);
      else if (a->family == AF_INET6)
        ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a->addr)->sin6_addr, host, sizeof host);
      t->refused = std::string(host) + " (a " + net::space_name(s) + " address)";
      return CURL_SOCKET_BAD;
    }
  }
  return ::socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  t->header_bytes += len;
  if (t->header_bytes > kMaxHeaderBytes) {
    t->headers_too_large = true;
    return 0;
  }
  std::string_view line(data, len);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (an interim 1xx one came first): start over.
    t->resp.headers.clear();
    t->resp.status = 0;
    size_t sp = line.find(' ');
    if (sp != std::string_view::npos) t->resp.status = std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
    t->headers_done = false;
    return len;
  }
  if (line == "\r\n" || line == "\n") {
    if (t->resp.status >= 200) {
      t->headers_done = true;
      t->window_start = Clock::now();
      if (t->req->on_headers && !t->req->on_headers(t->resp)) {
        t->aborted = true;
        return 0;
      }
    }
    return len;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos && t->resp.headers.size() < kMaxHeaders)
    t->resp.headers.emplace_back(lower(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
  return len;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (t->resp.status >= 200 && t->resp.status < 300) {
    if (t->req->on_body && !t->req->on_body(data, len)) {
      t->aborted = true;
      return 0;
    }
    return len;
  }
  if (t->resp.body.size() < kMaxErrorBody)
    t->resp.body.append(data, std::min(len, kMaxErrorBody - t->resp.body.size()));
  return len;
}

TransportError::Kind classify(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
      return TransportError::Kind::Connect;
    case CURLE_OPERATION_TIMEDOUT:
      return TransportError::Kind::Timeout;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return TransportError::Kind::Transfer;
    default:
      return TransportError::Kind::Fatal;
  }
}

struct Url {
  CURLU* u = curl_url();
  ~Url() { curl_url_cleanup(u); }
  bool set(const std::string& s) { return u && curl_url_set(u, CURLUPART_URL, s.c_str(), 0) == CURLUE_OK; }
  std::string get(CURLUPart part, unsigned flags = 0) const {
    char* p = nullptr;
    if (curl_url_get(u, part, &p, flags) != CURLUE_OK || !p) return {};
    std::string s = p;
    curl_free(p);
    return s;
  }
};

}  // namespace

const std::string* Response::header(std::string_view name) const {
  const std::string n = lower(std::string(name));
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (it->first == n) return &it->second;
  return nullptr;
}

struct Client::Impl {
  CURL* h = nullptr;
  char err[CURL_ERROR_SIZE] = {};
};

Client::Client() : impl_(std::make_unique<Impl>()) {
  global_init();
  impl_->h = curl_easy_init();
  if (!impl_->h) throw TransportError(TransportError::Kind::Fatal, "libcurl could not start");
}

Client::~Client() {
  if (impl_ && impl_->h) curl_easy_cleanup(impl_->h);
}

Response Client::perform(const Request& req) {
  CURL* h = impl_->h;
  curl_easy_reset(h);
  Transfer t;
  t.req = &req;
  struct curl_slist* list = nullptr;
  for (const auto& hd : req.headers) list = curl_slist_append(list, hd.c_str());
  struct ListGuard {
    curl_slist* l;
    ~ListGuard() { curl_slist_free_all(l); }
  } guard{list};
  const std::string ua = user_agent();
  impl_->err[0] = 0;
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, ua.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
  if (req.head)
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  else
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.header_timeout_s * 1000) + 1);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
  curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &t);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, impl_->err);
  CURLcode rc = curl_easy_perform(h);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t.resp.status);
    return std::move(t.resp);
  }
  if (t.headers_too_large || (rc == CURLE_OUT_OF_MEMORY && !t.headers_done))
    throw TransportError(TransportError::Kind::Fatal,
                         "the answer's headers are larger than " + std::to_string(kMaxHeaderBytes >> 10) + " KiB");
  if (!t.timed_out.empty()) throw TransportError(TransportError::Kind::Timeout, t.timed_out);
  if (!t.refused.empty() && rc == CURLE_COULDNT_CONNECT)
    throw TransportError(TransportError::Kind::Refused, "refused to connect to " + t.refused);
  if (t.aborted) throw TransportError(TransportError::Kind::Aborted, "transfer stopped");
  if (rc == CURLE_OPERATION_TIMEDOUT)
    throw TransportError(TransportError::Kind::Timeout,
                         "could not connect within " + format_seconds(req.header_timeout_s) + " s");
  std::string msg = curl_easy_strerror(rc);
  if (impl_->err[0]) msg += std::string(" (") + impl_->err + ")";
  throw TransportError(classify(rc), msg);
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string user_agent() {
  const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
  return std::string("mobius/") + MOBIUS_VERSION + "; libcurl/" + (v && v->version ? v->version : "?");
}

std::string url_encode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

bool is_relative_reference(std::string_view loc) {
  if (loc.rfind("//", 0) == 0) return false;  // a network-path reference names a host
  size_t end = loc.find_first_of(":/?#");
  if (end == std::string_view::npos || loc[end] != ':') return true;
  // "scheme:" needs a letter first, then letters, digits, '+', '-', '.'.
  if (end == 0 || !std::isalpha(static_cast<unsigned char>(loc[0]))) return true;
  for (size_t i = 1; i < end; ++i) {
    unsigned char c = static_cast<unsigned char>(loc[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return true;
  }
  return false;
}

std::optional<std::string> resolve_location(const std::string& base, const std::string& location) {
  global_init();
  Url u;
  if (!u.set(base) || !u.set(location)) return std::nullopt;
  std::string scheme = lower(u.get(CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https") return std::nullopt;
  std::string s = u.get(CURLUPART_URL);
  if (s.empty()) return std::nullopt;
  return s;
}

bool same_origin(const std::string& a, const std::string& b) {
  global_init();
  Url ua, ub;
  if (!ua.set(a) || !ub.set(b)) return false;
  auto key = [](const Url& u) {
    return lower(u.get(CURLUPART_SCHEME)) + "://" + lower(u.get(CURLUPART_HOST)) + ":" +
           u.get(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  };
  std::string ka = key(ua);
  return !ua.get(CURLUPART_HOST).empty() && ka == key(ub);
}

std::string scheme_of(const std::string& url) {
  global_init();
  Url u;
  return u.set(url) ? lower(u.get(CURLUPART_SCHEME)) : std::string();
}

std::string host_of(const std::string& url) {
  global_init();
  Url u;
  return u.set(url) ? lower(u.get(CURLUPART_HOST)) : std::string();
}

std::string origin_of(const std::string& url) {
  global_init();
  Url u;
  if (!u.set(url)) return url;
  std::string s = lower(u.get(CURLUPART_SCHEME)) + "://" + u.get(CURLUPART_HOST);
  std::string port = u.get(CURLUPART_PORT);
  if (!port.empty()) s += ":" + port;
  return s;
}

}  // namespace mobius::http
