// mobius/error.hpp - the host's exception type: a user-facing message and whose fault it is.
//
// Plugins have their own error type (the SDK's error.hpp); nothing but a status, a kind and a
// message crosses the C ABI between them.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "mobius/plugin.h"

namespace mobius {

// Whose fault a failure is. The kinds a plugin reports keep their MOBIUS_ERROR_KIND_* values.
enum class ErrorKind : int32_t {
  General = 0,  // the host's own checks (options, source folder, registry, save, ...)
  Config = MOBIUS_ERROR_KIND_CONFIG,
  Checkpoint = MOBIUS_ERROR_KIND_CHECKPOINT,
  Plugin = MOBIUS_ERROR_KIND_PLUGIN,
  Io = MOBIUS_ERROR_KIND_IO,
  Internal = MOBIUS_ERROR_KIND_INTERNAL,
};

inline const char* to_string(ErrorKind k) {
  switch (k) {
    case ErrorKind::Config: return "config";
    case ErrorKind::Checkpoint: return "checkpoint";
    case ErrorKind::Plugin: return "plugin";
    case ErrorKind::Io: return "io";
    case ErrorKind::Internal: return "internal";
    case ErrorKind::General: break;
  }
  return "general";
}

// The kind a plugin reported through the ABI; a value this host does not know is a plugin error.
inline ErrorKind error_kind_from_abi(mobius_error_kind k) {
  switch (k) {
    case MOBIUS_ERROR_KIND_CONFIG: return ErrorKind::Config;
    case MOBIUS_ERROR_KIND_CHECKPOINT: return ErrorKind::Checkpoint;
    case MOBIUS_ERROR_KIND_IO: return ErrorKind::Io;
    case MOBIUS_ERROR_KIND_INTERNAL: return ErrorKind::Internal;
    default: return ErrorKind::Plugin;
  }
}

// An error a user can act on: the message names the file, tensor or key and the reason,
// e.g. "[safetensors] model.safetensors: tensor 'x' offsets [10, 8) out of order".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_ = ErrorKind::General;
};

}  // namespace mobius
