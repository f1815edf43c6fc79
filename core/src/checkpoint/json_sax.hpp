// json_sax.hpp - the base of the checkpoint readers' SAX handlers (safetensors headers, shard
// indexes) and the call that runs one.
//
// Untrusted JSON is parsed with nlohmann's SAX interface straight into small structs: no DOM is
// built (a 100 MiB document of tiny values would otherwise blow up in memory), duplicate keys are
// seen (a DOM silently keeps the last one) and parsing stops at the first bad field.
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.hpp"

namespace mobius {

// Shared parts of the handlers: skipping values the reader ignores, and parse errors.
class SaxBase {
 public:
  explicit SaxBase(const char* what) : what_(what) {}
  std::string error;  // the first problem found; parsing stops there

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    if (error.empty()) {
      // what() reads "[json.exception.parse_error.101] parse error at ..."; the id adds nothing
      // for a user, and the text can quote a long stretch of the input, so it is clipped.
      std::string_view text = ex.what();
      const size_t close = text.find("] ");
      if (close != std::string_view::npos) text.remove_prefix(close + 2);
      error = std::string(what_) + " is not valid JSON: " + printable(text);
    }
    return false;
  }

 protected:
  // While skip_depth_ > 0 every event belongs to a value being ignored.
  bool skipping() const { return skip_depth_ > 0; }
  void begin_skip() { skip_depth_ = 1; }
  bool skip_open() {
    ++skip_depth_;
    return true;
  }
  // Returns true when the ignored value just ended.
  bool skip_close() { return --skip_depth_ == 0; }
  bool reject(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }

 private:
  const char* what_;
  int64_t skip_depth_ = 0;
};

// The state machine both handlers share: Expect (an enum with Root, Key and Ignored) says what
// the next value must be; Derived::wrong_type() reports an event that does not fit it.
template <typename Derived, typename Expect>
class SaxHandler : public SaxBase {
 public:
  using SaxBase::SaxBase;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_float(nlohmann::json::number_float_t, const nlohmann::json::string_t&) {
    return scalar();
  }
  bool binary(nlohmann::json::binary_t&) { return scalar(); }

 protected:
  // A value inside an object is complete: the next event is a key or the object's end.
  bool done() {
    expect_ = Expect::Key;
    return true;
  }
  // A scalar where only an ignored value may take any type.
  bool scalar() {
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    return static_cast<Derived*>(this)->wrong_type();
  }

  Expect expect_ = Expect::Root;
};

// Runs sax over text; a failure becomes an error naming display. what ("header", "index") names
// the document in messages.
template <typename Sax>
void run_sax(const std::string& text, Sax& sax, const CheckpointFormat& fmt,
             const std::string& display, const char* what) {
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text, &sax, nlohmann::json::input_format_t::json,
                                   /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fmt.fail(display, std::string(what) + " is not valid JSON: " + printable(e.what()));
  }
  if (!ok) {
    fmt.fail(display, sax.error.empty() ? std::string(what) + " is not valid JSON" : sax.error);
  }
}

}  // namespace mobius
