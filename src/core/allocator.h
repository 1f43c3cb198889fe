// The CPU allocator behind every kiln-owned Storage: 64-byte aligned, with a
// cache of large blocks. See Note [Caching large blocks] in allocator.cpp.
#pragma once
#include <cstddef>

// Whether AddressSanitizer instruments this build (GCC defines
// __SANITIZE_ADDRESS__, clang only answers __has_feature): the allocator
// then caches nothing, so ASan sees every free.
#if defined(__SANITIZE_ADDRESS__)
#define KILN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_ASAN 1
#endif
#endif
#ifndef KILN_ASAN
#define KILN_ASAN 0
#endif

namespace kiln::core {

void* allocate(size_t nbytes);
void deallocate(void* p, size_t nbytes);

// While alive, this thread's allocations are for storage nobody will write
// (the compile tracer's pending tensors): they take never-written cached
// blocks first and leave new blocks unmapped. See Note [Untouched blocks].
class UnwrittenAllocations {
 public:
  UnwrittenAllocations();
  ~UnwrittenAllocations();
  UnwrittenAllocations(const UnwrittenAllocations&) = delete;
  UnwrittenAllocations& operator=(const UnwrittenAllocations&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln::core
