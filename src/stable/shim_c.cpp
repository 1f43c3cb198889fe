// The exported functions of the stable C ABI (kiln/stable/c/shim.h), each
// forwarding to its implementation (shim_impl.h). Compiled with debug
// information in every build type, for the ABI check.
#include "kiln/stable/c/shim.h"
#include "stable/shim_impl.h"

extern "C" {

#define KILN_SHIM_FORWARD(ret, name, params, args) \
  ret name params { return kiln::stable_abi::impl::name args; }
KILN_SHIM_FUNCTIONS(KILN_SHIM_FORWARD)
#undef KILN_SHIM_FORWARD

}  // extern "C"
