// Extensions: shared objects built against the stable ABI (kiln/stable/)
// whose ops join kiln's registry under "namespace::name", callable by name
// (call_op) from C++, from the C shim and from other extensions.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <string>

namespace kiln {

// Loads the extension at `path` (once; a second call does nothing): checks
// the stable ABI version it was built against (same major, minor at most
// the runtime's; otherwise a kiln::Error naming both versions and the path)
// and runs its registrations.
void load_extension(const std::string& path);
// Loads every path of KILN_EXTENSIONS (colon-separated). call_op does this
// itself the first time it meets a name no op has.
void load_extensions_from_environment();

}  // namespace kiln

KILN_API_END
