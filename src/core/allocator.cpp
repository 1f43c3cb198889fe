// Note [Caching large blocks]
// glibc serves large allocations with fresh mmap pages and unmaps them on
// free, so every op that allocates a multi-megabyte output pays a page fault
// per 4 KiB on first touch: measured here, that made `x + x` on 32 MiB take
// several times as long as the same add into an existing tensor. Blocks of at least
// 64 KiB are therefore rounded to a size class (four per power of two) and
// kept on free lists when released, up to KILN_ALLOCATOR_CACHE_MB (default
// 1024) in total; kiln::empty_cache() hands them back. Under AddressSanitizer
// the cache is off so use-after-free is still caught.
// The bound was 256 KiB until the GPT step's 64 KiB and 192 KiB tensors
// (gradients of the 128x128 and 384x128 attention weights, and their
// temporaries) showed up as glibc's heap growing and being trimmed every
// step: the 64 KiB bound cut the page faults per compiled step to a third,
// and made both steps faster (alternating runs; figures in its commit).
//
// Note [Untouched blocks]
// The compile tracer gives every pending tensor a real block that nothing
// writes. Such a block, back in the cache, used to be handed to an op that
// then paid its page faults (in whichever op drew it). The cache therefore keeps never-written blocks apart: pending
// allocations (UnwrittenAllocations) draw those first and leave new ones
// unmapped; every other allocation draws written blocks first, and maps an
// unwritten or new block's pages (one write per page) before handing it
// out. Mapping every new block instead (the first version) made the cold
// compile of the GPT step over half as slow again (alternating bench runs):
// the backward recorder's pending values are never written either.
#include "core/allocator.h"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/detail/aligned_buffer.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln::core {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = 64 << 10;
constexpr size_t kPage = 4096;
// 2^57 bytes: beyond the address space of any x86-64 or AArch64 machine
// (57 bits with 5-level paging), and far from wrapping any size class.
constexpr size_t kMaxBytes = size_t{1} << 57;

thread_local bool unwritten_allocations = false;

constexpr bool kCacheEnabled = !KILN_ASAN;

// Smallest of 2^k, 1.25 * 2^k, 1.5 * 2^k, 1.75 * 2^k that holds n
// (n <= kMaxBytes, so 2^(k+1) cannot wrap).
size_t size_class(size_t n) {
  size_t p = kCacheMin;
  while (p <= n / 2) p *= 2;
  for (size_t q = 0; q <= 4; ++q) {
    const size_t c = p + q * (p / 4);
    if (c >= n) return c;
  }
  return p * 2;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;       // written at some point
  std::unordered_map<size_t, std::vector<void*>> unwritten_blocks;  // never handed to a writer
  std::unordered_set<void*> unwritten;  // every block, cached or in use, never handed to a writer
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

// Blocks under kCacheMin (0-dim scalars, norm weights, small activations:
// most of a step's allocations) come from malloc with room to align, the
// offset to malloc's pointer kept in the byte before the block.
// aligned_alloc bypasses glibc's thread cache: several times slower per
// 512-byte allocate + free than this, and its memalign path (with the
// consolidations it triggers) was a third of the compile tracer's time in
// the GPT step.
void* small_alloc(size_t n) {
  char* raw = static_cast<char*>(std::malloc(n + kAlign));
  if (!raw) fail("empty", "out of memory allocating ", n, " bytes");
  char* p = raw + (kAlign - reinterpret_cast<uintptr_t>(raw) % kAlign);  // 1 to kAlign bytes past raw
  p[-1] = static_cast<char>(p - raw);
  return p;
}
void small_free(void* block) {
  char* p = static_cast<char*>(block);
  std::free(p - static_cast<unsigned char>(p[-1]));
}

// Pops a block of class c from `lists`, or null.
void* pop(std::unordered_map<size_t, std::vector<void*>>& lists, size_t c) {
  auto it = lists.find(c);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

// Blocks above kMapMax stay lazily mapped: a large buffer filled only in
// part (a preallocated KV cache) should not take its whole size in memory.
constexpr size_t kMapMax = size_t{16} << 20;
void map_pages(void* p, size_t c) {
  if (c > kMapMax) return;
  for (size_t i = 0; i < c; i += kPage) static_cast<char*>(p)[i] = 0;
}

}  // namespace

UnwrittenAllocations::UnwrittenAllocations() : prev_(std::exchange(unwritten_allocations, true)) {}
UnwrittenAllocations::~UnwrittenAllocations() { unwritten_allocations = prev_; }

void* allocate(size_t nbytes) {
  if (nbytes == 0) nbytes = kAlign;
  check(nbytes <= kMaxBytes, "empty", "cannot allocate ", nbytes, " bytes: more than any machine's address space");
  if (nbytes < kCacheMin) return small_alloc(nbytes);
  if (!kCacheEnabled) return raw_alloc(nbytes);
  const size_t c = size_class(nbytes);
  Cache& k = cache();
  const bool unwritten = unwritten_allocations;
  void* p = nullptr;
  bool needs_mapping = false;
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (unwritten) {
      p = pop(k.unwritten_blocks, c);
      if (!p) p = pop(k.free_blocks, c);
    } else {
      p = pop(k.free_blocks, c);
      if (!p && (p = pop(k.unwritten_blocks, c))) {
        k.unwritten.erase(p);
        needs_mapping = true;
      }
    }
    if (p) k.cached_bytes -= c;
  }
  if (!p) {
    p = raw_alloc(c);
    if (unwritten) {
      std::lock_guard<std::mutex> lock(k.mu);
      k.unwritten.insert(p);
    } else {
      needs_mapping = true;
    }
  }
  if (needs_mapping) map_pages(p, c);
  return p;
}

void deallocate(void* p, size_t nbytes) {
  if (nbytes == 0) nbytes = kAlign;
  if (nbytes < kCacheMin) return small_free(p);
  if (!kCacheEnabled) {
    std::free(p);
    return;
  }
  const size_t c = size_class(nbytes);
  Cache& k = cache();
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (k.cached_bytes + c <= k.limit) {
      (k.unwritten.count(p) ? k.unwritten_blocks : k.free_blocks)[c].push_back(p);
      k.cached_bytes += c;
      return;
    }
    k.unwritten.erase(p);
  }
  std::free(p);
}

}  // namespace kiln::core

namespace kiln {

void* scratch_allocate(size_t nbytes) { return core::allocate(nbytes); }
void scratch_deallocate(void* p, size_t nbytes) noexcept { core::deallocate(p, nbytes); }

void empty_cache() {
  core::Cache& k = core::cache();
  std::lock_guard<std::mutex> lock(k.mu);
  for (auto* lists : {&k.free_blocks, &k.unwritten_blocks}) {
    for (auto& [size, blocks] : *lists)
      for (void* p : blocks) {
        k.unwritten.erase(p);
        std::free(p);
      }
    lists->clear();
  }
  k.cached_bytes = 0;
}

size_t allocator_cached_bytes() {
  core::Cache& k = core::cache();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.cached_bytes;
}

}  // namespace kiln
