// The CPU allocator behind every kiln-owned Storage: 64-byte aligned, with a
// cache of large blocks. See Note [Caching large blocks] in allocator.cpp.
#pragma once
#include <cstddef>

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
