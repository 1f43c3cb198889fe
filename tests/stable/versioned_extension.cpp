// An extension claiming to be built against stable ABI KILN_TEST_ABI
// (major << 16 | minor): what an extension from another kiln looks like to
// the loader. Its registrations define one op, so a load that should have
// been refused would be visible.
#include "kiln/stable/c/shim.h"

extern "C" __attribute__((visibility("default"))) uint32_t kiln_extension_abi_version() { return KILN_TEST_ABI; }

extern "C" __attribute__((visibility("default"))) KilnError kiln_extension_init() {
  return kiln_library_define(KILN_TEST_NAMESPACE, "noop(Tensor x) -> Tensor");
}
