// Scratch arrays aligned to the cache line, for kernels that load their
// rows with SIMD: a 512-bit load at a 16-byte-aligned address (what
// std::vector gives) straddles two lines and costs about two loads. On Zen 5
// the decode kernel's dots ran at 4.1 instead of 5.5 G FMA/s with misaligned
// query rows (hand-written micro-benchmark, K aligned in both).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

namespace kiln {

inline constexpr std::size_t kCacheLine = 64;

// Memory from kiln's CPU allocator (src/core/allocator.cpp): 64-byte
// aligned (its blocks' alignment is kCacheLine), blocks of 64 KiB and more
// kept for reuse. Kernel scratch is sized per call; handed back to glibc at
// each call's end, the flex_attention backward's three 64 KiB score blocks
// (block size 128) made it trim its heap and fault the pages in again on
// the next call.
void* scratch_allocate(std::size_t nbytes);
void scratch_deallocate(void* p, std::size_t nbytes) noexcept;

template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  CacheAlignedAllocator() = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(scratch_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { scratch_deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const {
    return true;
  }
};

// A std::vector (zero-initialised like one) whose data() is 64-byte aligned.
template <class T>
using aligned_vector = std::vector<T, CacheAlignedAllocator<T>>;

// n elements left uninitialised (for buffers written before they are read,
// where zero-filling megabytes per call would show), 64-byte aligned.
template <class T>
struct CacheAlignedDelete {
  std::size_t bytes = 0;
  void operator()(T* p) const { scratch_deallocate(p, bytes); }
};
template <class T>
std::unique_ptr<T[], CacheAlignedDelete<T>> uninitialized_aligned(std::size_t n) {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  return std::unique_ptr<T[], CacheAlignedDelete<T>>(static_cast<T*>(scratch_allocate(n * sizeof(T))),
                                                     CacheAlignedDelete<T>{n * sizeof(T)});
}

}  // namespace kiln

KILN_API_END
