// The C shim's functions as the runtime implements them (shim.cpp,
// extensions.cpp): the same signatures (shim_functions.h's list) in a C++
// namespace. shim_c.cpp defines the exported C functions as one-line
// forwards to these, so the debug information of the ABI (what
// tests/stable/abi_check.sh compares) holds the C types alone, not the
// implementation's C++ ones.
#pragma once
#include "kiln/stable/c/shim.h"
#include "stable/shim_functions.h"

namespace kiln::stable_abi::impl {

#define KILN_SHIM_DECLARE(ret, name, params, args) ret name params;
KILN_SHIM_FUNCTIONS(KILN_SHIM_DECLARE)
#undef KILN_SHIM_DECLARE

}  // namespace kiln::stable_abi::impl
