// untrusted.cpp - quoting untrusted values, and JSON/YAML parsing within limits.
#include "util/untrusted.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/error.hpp"
#include "mobius/utf8.h"

namespace mobius {

namespace {

// Code points a terminal obeys or that change how the text around them reads: the C1 controls
// (CSI, OSC, ... as UTF-8), line and paragraph separators, and the bidirectional overrides.
bool hidden_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void hex(std::string& out, unsigned char u) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[u >> 4];
  out += kHex[u & 15];
}

// Appends `s` to `out` with every control byte (C0, DEL), every byte that is not valid UTF-8 and
// every hidden_control() code point escaped as \xNN; '\n' stays when `keep_newlines`. Stops
// before the output would pass `max_out` bytes; returns how many bytes of `s` were used.
size_t escape_into(std::string& out, std::string_view s, bool keep_newlines, size_t max_out) {
  size_t i = 0;
  while (i < s.size()) {
    const auto u = static_cast<unsigned char>(s[i]);
    size_t n = 1;
    std::string piece;
    if (u == '\n' && keep_newlines) {
      piece = "\n";
    } else if (u < 0x20 || u == 0x7F) {
      hex(piece, u);
    } else if (u < 0x80) {
      piece = static_cast<char>(u);
    } else {
      uint32_t cp = 0;
      n = mobius_utf8_at(s.data(), s.size(), i, &cp);
      if (n == 0) {
        n = 1;
        hex(piece, u);
      } else if (hidden_control(cp)) {
        for (size_t k = 0; k < n; ++k) hex(piece, static_cast<unsigned char>(s[i + k]));
      } else {
        piece.assign(s.substr(i, n));
      }
    }
    if (out.size() + piece.size() > max_out) break;
    out += piece;
    i += n;
  }
  return i;
}

}  // namespace

std::string printable(std::string_view s, size_t max_bytes) {
  bool cut = false;
  if (s.size() > max_bytes) {
    size_t n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    s = s.substr(0, n);
    cut = true;
  }
  std::string out;
  out.reserve(s.size() + 8);
  escape_into(out, s, false, SIZE_MAX);
  if (cut) out += "...";
  return out;
}

std::string printable_lines(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 32);
  const size_t used = escape_into(out, s, true, max_bytes);
  if (used < s.size())
    out += "... (" + std::to_string(s.size() - used) + " more bytes not shown)";
  return out;
}

std::string quote_name(std::string_view s) { return "'" + printable(s) + "'"; }

namespace {

[[noreturn]] void fail(const char* tag, const std::string& what, const std::string& reason) {
  throw Error(ErrorKind::Config, std::string("[") + tag + "] " + what + ": " + reason);
}

void check_size(std::string_view text, const std::string& what, const TextLimits& limits,
                const char* tag) {
  if (text.size() > limits.max_bytes)
    fail(tag, what,
         "larger than " + (limits.max_bytes % (1u << 20) == 0
                               ? std::to_string(limits.max_bytes >> 20) + " MiB"
                               : std::to_string(limits.max_bytes >> 10) + " KiB") +
             " (" + std::to_string(text.size()) + " bytes)");
}

}  // namespace

nlohmann::json parse_json_limited(std::string_view text, const std::string& what,
                                  const TextLimits& limits, const char* tag) {
  check_size(text, what, limits, tag);
  size_t values = 0;
  // The callback sees every value as it opens; refusing there stops the parse before the
  // document grows, whatever comes after.
  auto guard = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    using E = nlohmann::json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= limits.max_depth)
      fail(tag, what, "values nest deeper than " + std::to_string(limits.max_depth) + " levels");
    if ((event == E::value || event == E::object_start || event == E::array_start) &&
        ++values > limits.max_values)
      fail(tag, what, "more than " + std::to_string(limits.max_values) + " values");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), guard);
  } catch (const nlohmann::json::exception& e) {
    std::string_view m = e.what();
    const size_t close = m.find("] ");
    if (close != std::string_view::npos) m.remove_prefix(close + 2);
    fail(tag, what, "not valid JSON (" + printable(m) + ")");
  }
}

YAML::Node parse_yaml_limited(std::string_view text, const std::string& what,
                              const TextLimits& limits, const char* tag) {
  check_size(text, what, limits, tag);
  // Flow nesting ([ and { outside quotes) and block nesting (distinct indentation levels of
  // the lines above) bound yaml-cpp's recursion; both are measured here, quotes aside.
  int flow = 0, max_flow = 0;
  std::vector<size_t> indents;
  size_t values = 0;
  char quote = 0;
  bool line_start = true, comment = false, escaped = false;
  size_t indent = 0;
  char prev = ' ';  // the last character outside quotes: a quote opens a scalar only after these
  for (char c : text) {
    if (c == '\n') {
      line_start = true;
      comment = false;
      indent = 0;
      if (quote == '\'') continue;  // single-quoted scalars may span lines
      quote = quote == '"' ? quote : 0;
      continue;
    }
    if (comment) continue;
    if (line_start) {
      if (c == ' ' || c == '-') {
        ++indent;
        prev = c;
        continue;
      }
      line_start = false;
      if (c != '#' && !quote && flow == 0) {
        while (!indents.empty() && indents.back() >= indent) indents.pop_back();
        indents.push_back(indent);
        if (static_cast<int>(indents.size()) > limits.max_depth)
          fail(tag, what, "values nest deeper than " + std::to_string(limits.max_depth) + " levels");
        if (++values > limits.max_values)
          fail(tag, what, "more than " + std::to_string(limits.max_values) + " values");
      }
    }
    if (quote) {
      if (escaped) escaped = false;
      else if (quote == '"' && c == '\\') escaped = true;
      else if (c == quote) quote = 0;
      continue;
    }
    const char before = prev;
    prev = c;
    switch (c) {
      case '"':
      case '\'':
        if (std::string_view(" \t:[{,-").find(before) != std::string_view::npos) quote = c;
        break;
      case '#':
        comment = true;
        break;
      case '[':
      case '{':
        if (++flow > limits.max_depth)
          fail(tag, what, "values nest deeper than " + std::to_string(limits.max_depth) + " levels");
        max_flow = std::max(max_flow, flow);
        break;
      case ']':
      case '}':
        flow = std::max(0, flow - 1);
        break;
      case ',':
        if (++values > limits.max_values)
          fail(tag, what, "more than " + std::to_string(limits.max_values) + " values");
        break;
      default:
        break;
    }
  }
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    fail(tag, what, "not valid YAML (" + printable(e.what()) + ")");
  }
}

uint64_t small_file_limit(std::string_view name) {
  const size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  for (std::string_view w : {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".onnx_data",
                             ".msgpack", ".h5", ".npz"})
    if (ends(w)) return 0;
  if (name == "model_index.json") return kPipelineIndexMax;
  if (ends(".index.json")) return kWeightIndexMax;
  for (std::string_view t : {"tokenizer.json", "vocab.json", "merges.txt", "vocab.txt"})
    if (name == t) return kTokenizerFileMax;
  if (ends(".model")) return kTokenizerFileMax;  // tokenizer.model, spiece.model, sentencepiece.bpe.model
  return kConfigLimits.max_bytes;
}

bool is_component_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.'))
      return false;
  return true;
}

}  // namespace mobius
