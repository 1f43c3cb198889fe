// Note [Caching large blocks]
// glibc serves large allocations with fresh mmap pages and unmaps them on
// free, so every op that allocates a multi-megabyte output pays a page fault
// per 4 KiB on first touch: measured here, that made `x + x` on 32 MiB take
// 2.7x as long as the same add into an existing tensor. Blocks of at least
// 64 KiB are therefore rounded to a size class (four per power of two) and
// kept on free lists when released, up to KILN_ALLOCATOR_CACHE_MB (default
// 1024) in total; kiln::empty_cache() hands them back. Under AddressSanitizer
// the cache is off so use-after-free is still caught.
// The bound was 256 KiB until the GPT step's 64 KiB and 192 KiB tensors
// (gradients of the 128x128 and 384x128 attention weights, and their
// temporaries) showed up as glibc's heap growing and being trimmed every
// step: 332 page faults per compiled step, 99 with the 64 KiB bound; with
// the clip_grad_norm_ change of the same commit the compiled step ~5%
// faster, the eager one ~3.5% (alternating runs).
#include "core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln::core {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = 64 << 10;
constexpr size_t kPage = 4096;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheEnabled = false;
#else
constexpr bool kCacheEnabled = true;
#endif

// Smallest of 2^k, 1.25 * 2^k, 1.5 * 2^k, 1.75 * 2^k that holds n.
size_t size_class(size_t n) {
  size_t p = kCacheMin;
  while (p * 2 <= n) p *= 2;
  for (size_t q = 0; q <= 4; ++q) {
    const size_t c = p + q * (p / 4);
    if (c >= n) return c;
  }
  return p * 2;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  size_t cached_bytes = 0;
  size_t limit = [] {
    const char* env = std::getenv("KILN_ALLOCATOR_CACHE_MB");
    return (env ? static_cast<size_t>(std::strtoull(env, nullptr, 10)) : size_t{1024}) << 20;
  }();
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: storages may outlive static destruction
  return *c;
}

void* raw_alloc(size_t n) {
  void* p = std::aligned_alloc(kAlign, (n + kAlign - 1) / kAlign * kAlign);
  if (!p) fail("empty", "out of memory allocating ", n, " bytes");
  return p;
}

}  // namespace

void* allocate(size_t nbytes) {
  if (nbytes == 0) nbytes = kAlign;
  if (!kCacheEnabled || nbytes < kCacheMin) return raw_alloc(nbytes);
  const size_t c = size_class(nbytes);
  Cache& k = cache();
  {
    std::lock_guard<std::mutex> lock(k.mu);
    auto it = k.free_blocks.find(c);
    if (it != k.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      k.cached_bytes -= c;
      return p;
    }
  }
  // A new block enters the cache with its pages mapped (one write per
  // page): blocks are also handed to storages nobody writes (the compile
  // tracer's pending tensors), and an untouched block would otherwise
  // circulate and make some later op pay its page faults, step after step.
  char* p = static_cast<char*>(raw_alloc(c));
  for (size_t i = 0; i < c; i += kPage) p[i] = 0;
  return p;
}

void deallocate(void* p, size_t nbytes) {
  if (nbytes == 0) nbytes = kAlign;
  if (!kCacheEnabled || nbytes < kCacheMin) {
    std::free(p);
    return;
  }
  const size_t c = size_class(nbytes);
  Cache& k = cache();
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (k.cached_bytes + c <= k.limit) {
      k.free_blocks[c].push_back(p);
      k.cached_bytes += c;
      return;
    }
  }
  std::free(p);
}

}  // namespace kiln::core

namespace kiln {

void empty_cache() {
  core::Cache& k = core::cache();
  std::lock_guard<std::mutex> lock(k.mu);
  for (auto& [size, blocks] : k.free_blocks)
    for (void* p : blocks) std::free(p);
  k.free_blocks.clear();
  k.cached_bytes = 0;
}

size_t allocator_cached_bytes() {
  core::Cache& k = core::cache();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.cached_bytes;
}

}  // namespace kiln
