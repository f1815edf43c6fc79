// test_untrusted.cpp - core/src/util/untrusted.cpp: values quoted into messages are printable and
// short; JSON and YAML are refused as soon as they pass their limits, naming the file and limit.
#include <doctest/doctest.h>

#include <yaml-cpp/yaml.h>

#include <string>

#include <nlohmann/json.hpp>

#include "mobius/error.hpp"
#include "util/untrusted.hpp"

using namespace mobius;

namespace {

// The message of the mobius::Error `f` throws; fails the test when it throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no mobius::Error was thrown");
  return "";
}

bool has_raw_control(const std::string& s, bool allow_newline = false) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u == '\n' && allow_newline) continue;
    if (u < 0x20 || u == 0x7F) return true;
    if (u == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F)
      return true;
  }
  return false;
}

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("untrusted: printable escapes control bytes and keeps text") {
  CHECK(printable("llama") == "llama");
  CHECK(printable("\x1b[2K\rbuilt llama\x07") == "\\x1b[2K\\x0dbuilt llama\\x07");
  CHECK(printable("a\nb\tc\x7f") == "a\\x0ab\\x09c\\x7f");
  // C1 controls written as UTF-8 (CSI U+009B, OSC U+009D) are escaped byte by byte.
  CHECK(printable("x\xc2\x9b" "31mred") == "x\\xc2\\x9b31mred");
  CHECK(printable("\xc2\x9d" "0;title\xc2\x9c") == "\\xc2\\x9d0;title\\xc2\\x9c");
  // Bytes that are not UTF-8 (a lone 8-bit CSI, a stray continuation, a truncated sequence).
  CHECK(printable("a\x9b" "b") == "a\\x9bb");
  CHECK(printable("\x80") == "\\x80");
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");
  // Bidirectional overrides reorder what a reader sees: escaped too.
  CHECK(printable("abc\xe2\x80\xae" "def") == "abc\\xe2\\x80\\xaedef");
  // Ordinary non-ASCII text stays as it is.
  CHECK(printable("caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\xa6\x99") ==
        "caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\xa6\x99");
}

TEST_CASE("untrusted: printable and quote_name cut long values on a character boundary") {
  const std::string huge(15u << 20, 'x');
  const std::string p = printable(huge);
  CHECK(p.size() == 203);
  CHECK(p.substr(200) == "...");
  CHECK(quote_name(huge).size() == 205);
  CHECK(quote_name("llama") == "'llama'");
  // 199 ASCII bytes then a 2-byte character: the cut falls before it, never inside it.
  const std::string s = std::string(199, 'a') + "\xc3\xa9" + "tail";
  CHECK(printable(s) == std::string(199, 'a') + "...");
  CHECK(printable("abcdef", 3) == "abc...");
  CHECK(printable("", 3).empty());
}

TEST_CASE("untrusted: printable_lines keeps line breaks, escapes the rest, caps the length") {
  CHECK(printable_lines("[preflight] 2 problems:\n  one\n  two") ==
        "[preflight] 2 problems:\n  one\n  two");
  CHECK(printable_lines("a\r\nb\x1b[1A") == "a\\x0d\nb\\x1b[1A");
  const std::string big(100000, 'y');
  const std::string out = printable_lines(big, 1000);
  CHECK(out.rfind(std::string(1000, 'y'), 0) == 0);
  CHECK(out.find("... (99000 more bytes not shown)") == 1000);
  CHECK_FALSE(has_raw_control(printable_lines(std::string("\x1b\x07\r\x9b\xc2\x9b") + "\n", 64), true));
}

TEST_CASE("untrusted: parse_json_limited parses what fits") {
  nlohmann::json j = parse_json_limited(R"({"model_type": "llama", "x": [[1, 2], {"y": null}]})",
                                        "/c/config.json", kConfigLimits);
  CHECK(j["model_type"] == "llama");
  CHECK(j["x"][0][1] == 2);
  // Exactly the depth limit is allowed; one more level is not.
  const TextLimits small{1u << 20, 4, 100};
  CHECK(parse_json_limited(nested_arrays(4), "f", small).is_array());
  CHECK(error_of([&] { parse_json_limited(nested_arrays(5), "f", small); }) ==
        "[config] f: values nest deeper than 4 levels");
  CHECK(parse_json_limited("[1, 2, 3]", "f", TextLimits{100, 4, 4}).size() == 3);
  CHECK(error_of([&] { parse_json_limited("[1, 2, 3, 4]", "f", TextLimits{100, 4, 4}); }) ==
        "[config] f: more than 4 values");
}

TEST_CASE("untrusted: parse_json_limited refuses a million levels, many values, many bytes") {
  CHECK(error_of([] { parse_json_limited(nested_arrays(1000000), "/c/config.json", kConfigLimits); }) ==
        "[config] /c/config.json: values nest deeper than 64 levels");
  const std::string deep_inside =
      R"({"model_type": "llama", "text_config": {"a": )" + nested_arrays(1000000) + "}}";
  CHECK(error_of([&] { parse_json_limited(deep_inside, "/c/config.json", kConfigLimits); }) ==
        "[config] /c/config.json: values nest deeper than 64 levels");
  std::string keys = "{";
  for (int i = 0; i < (2 << 20); ++i) keys += i ? ",\"\":0" : "\"\":0";
  keys += "}";
  CHECK(error_of([&] { parse_json_limited(keys, "/c/config.json", kConfigLimits); }) ==
        "[config] /c/config.json: more than 1048576 values");
  const std::string big = "\"" + std::string(20u << 20, 'a') + "\"";
  CHECK(error_of([&] { parse_json_limited(big, "/c/config.json", kConfigLimits); }) ==
        "[config] /c/config.json: larger than 16 MiB (20971522 bytes)");
}

TEST_CASE("untrusted: parse_json_limited names the file and the JSON error, printable") {
  const std::string m = error_of([] { parse_json_limited("{\"a\": \x1b[31m}", "/c/config.json", kConfigLimits); });
  CHECK(m.rfind("[config] /c/config.json: not valid JSON (", 0) == 0);
  CHECK_FALSE(has_raw_control(m));
  CHECK(m.find("[json.exception") == std::string::npos);
  // A tag other than config.
  CHECK(error_of([] { parse_json_limited("[", "cache.json", kConfigLimits, "plugins"); })
            .rfind("[plugins] cache.json: not valid JSON (", 0) == 0);
}

TEST_CASE("untrusted: parse_yaml_limited measures flow and block nesting before yaml-cpp runs") {
  // (What the parsed nodes hold is the manifests' business, tested with the plugins; this test
  // program does not link yaml-cpp's accessors.)
  CHECK_NOTHROW(parse_yaml_limited("name: llama\nmodel_types: [llama, mistral]\n", "plugin.yaml",
                                   kManifestLimits));
  CHECK_NOTHROW(parse_yaml_limited("a: " + nested_arrays(16) + "\n", "p.yaml", kManifestLimits));
  CHECK(error_of([] { parse_yaml_limited("a: " + nested_arrays(30000), "p.yaml", kManifestLimits); }) ==
        "[plugin] p.yaml: values nest deeper than 16 levels");
  std::string block;
  for (int i = 0; i < 40; ++i) block += std::string(static_cast<size_t>(i) * 2, ' ') + "k" + std::to_string(i) + ":\n";
  CHECK(error_of([&] { parse_yaml_limited(block, "p.yaml", kManifestLimits); }) ==
        "[plugin] p.yaml: values nest deeper than 16 levels");
  // Brackets inside quotes are text, not nesting.
  CHECK_NOTHROW(parse_yaml_limited("d: '" + std::string(100, '[') + "'\n", "p.yaml", kManifestLimits));
  std::string many = "l: [";
  for (int i = 0; i < 20000; ++i) many += "1,";
  many += "1]\n";
  CHECK(error_of([&] { parse_yaml_limited(many, "p.yaml", kManifestLimits); }) ==
        "[plugin] p.yaml: more than 16384 values");
  CHECK(error_of([] { parse_yaml_limited(std::string(70u << 10, '#'), "p.yaml", kManifestLimits); }) ==
        "[plugin] p.yaml: larger than 64 KiB (71680 bytes)");
  const std::string bad = error_of([] { parse_yaml_limited("a: [\x1b\n", "p.yaml", kManifestLimits); });
  CHECK(bad.rfind("[plugin] p.yaml: not valid YAML (", 0) == 0);
  CHECK_FALSE(has_raw_control(bad));
}
