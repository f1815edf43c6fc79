// fuzz_limits.cpp - libFuzzer target: JSON and YAML parsing within limits (configs, manifests),
// and message quoting, on arbitrary bytes. The first byte picks the parser.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mobius/error.hpp"
#include "util/untrusted.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Small limits, so that short inputs reach them.
  const mobius::TextLimits limits{4096, 8, 256};
  try {
    if (data[0] & 1) {
      const nlohmann::json j = mobius::parse_json_limited(text, "fuzz.json", limits);
      // Whatever is accepted can be written back (dump recurses once per level).
      if (j.dump().empty()) __builtin_trap();
    } else {
      const YAML::Node n = mobius::parse_yaml_limited(text, "fuzz.yaml", limits);
      YAML::Emitter out;
      out << n;
    }
  } catch (const mobius::Error&) {
    // Refusals are the expected outcome for most inputs.
  } catch (const YAML::Exception&) {
    // The emitter may refuse what the parser accepted; not a crash.
  }
  // Quoting never lets a control byte through.
  for (char c : mobius::printable(text)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) __builtin_trap();
  }
  return 0;
}
