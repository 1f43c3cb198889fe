// The CPU allocator behind every kiln-owned Storage: 64-byte aligned, with a
// cache of large blocks. See Note [Caching large blocks] in allocator.cpp.
#pragma once
#include <cstddef>

namespace kiln::core {

void* allocate(size_t nbytes);
void deallocate(void* p, size_t nbytes);

}  // namespace kiln::core
