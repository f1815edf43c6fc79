// mobius/error.hpp - the exception type every host module throws; its message is user-facing.
#pragma once

#include <stdexcept>
#include <string>

namespace mobius {

// An error a user can act on: the message names the file, tensor or key and the reason,
// e.g. "[safetensors] model.safetensors: tensor 'x' offsets [10, 8) out of order".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mobius
