// mobius/sdk/error.hpp - the exception type of the SDK and of plugin code; its message is
// user-facing and its kind says whose fault the failure is.
//
// Plugin code writes mobius::Error. The type is mobius::sdk::Error: a program that also includes
// the host's mobius/error.hpp (which declares the host's own mobius::Error) names this one
// mobius::sdk::Error. The two never meet: the SDK's callbacks turn it into a status, a
// MOBIUS_ERROR_KIND_* and a message before anything returns to the host.
#pragma once

#include <stdexcept>
#include <string>

#include "mobius/plugin.h"

namespace mobius {
namespace sdk {

class Error : public std::runtime_error {
 public:
  // The kind follows the SDK's message convention: "[config] ..." is MOBIUS_ERROR_KIND_CONFIG,
  // "[checkpoint] ..." MOBIUS_ERROR_KIND_CHECKPOINT; anything else is left to the callback that
  // reports it (a config error while parsing config.json, a plugin error while building).
  explicit Error(const std::string& message)
      : std::runtime_error(message), kind_(kind_of(message)) {}
  explicit Error(const char* message) : Error(std::string(message)) {}
  Error(mobius_error_kind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  // A MOBIUS_ERROR_KIND_* value, or 0 when the message did not say.
  mobius_error_kind kind() const noexcept { return kind_; }

 private:
  static mobius_error_kind kind_of(const std::string& m) {
    if (m.rfind("[config]", 0) == 0) return MOBIUS_ERROR_KIND_CONFIG;
    if (m.rfind("[checkpoint]", 0) == 0) return MOBIUS_ERROR_KIND_CHECKPOINT;
    return 0;
  }
  mobius_error_kind kind_;
};

}  // namespace sdk

// Plugin code names it mobius::Error (or Error inside namespace mobius).
using namespace sdk;

}  // namespace mobius
