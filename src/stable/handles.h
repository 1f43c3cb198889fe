// What the stable C ABI's opaque handles are on the runtime's side, and the
// per-thread message of the last failure (kiln_last_error), shared by the
// shim and the extension registry.
#pragma once
#include <string>

#include "kiln/tensor.h"

struct KilnTensorOpaque {
  kiln::Tensor t;
};

namespace kiln::stable_abi {
std::string& last_error();
}
