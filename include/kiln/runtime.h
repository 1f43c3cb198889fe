// Process-wide runtime settings: threads, CPU capability, random seed, and
// what `kiln info` reports.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// ---- threads: one intra-op pool. OpenBLAS runs single-threaded and GEMMs
// are split over this pool, so no second set of threads competes for the
// cores (Note [One thread pool] in src/kernels/cpu/matmul_kernel.cpp).
void set_num_threads(int n);
int get_num_threads();
// Runs fn(begin, end) over [begin, end) in chunks of at least `grain`
// elements. Ranges smaller than two grains run on the calling thread; a
// parallel_for inside another runs serially.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// ---- CPU capability: which SIMD kernel variant runs. The best the CPU has
// by default; KILN_CPU_CAPABILITY=scalar|sse4|avx2|avx512|neon|sve (or
// set_cpu_capability) forces a lower one.
enum class Capability : uint8_t { Scalar, SSE4, AVX2, AVX512, NEON, SVE };
const char* capability_name(Capability c);
Capability cpu_capability();
std::vector<Capability> available_capabilities();  // what this CPU and this build can run
void set_cpu_capability(Capability c);             // kiln::Error if not available
Capability parse_capability(const std::string& name);
// What `kiln info` reports: the architecture ("x86_64", "aarch64"), the
// CPU features kiln's kernels look for that this CPU has (x86: avx2,
// avx512f, avx512vnni, avx512bf16, ...; Arm: asimd, dotprod, i8mm, bf16,
// sve, sve2), Highway's SIMD targets compiled into this build and the one
// dispatch runs now, and the variant each kernel family with its own
// instruction paths runs now ({"int8 gemm", "neon-i8mm"}, ...).
std::string cpu_architecture();
std::vector<std::string> cpu_features();
std::vector<std::string> simd_targets_compiled();
std::string simd_target();
std::vector<std::pair<std::string, std::string>> kernel_variants();

// ---- random numbers: a counter-based (Philox 4x32-10) generator, so a seed
// gives the same stream whatever the thread count. Its whole state is the
// seed and the next unused counter.
class Tensor;
void manual_seed(uint64_t seed);
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed, offset_ = 0; }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Reserves n 128-bit counters and returns the first; callers draw from
  // [returned, returned + n) so streams never overlap.
  uint64_t reserve(uint64_t n) {
    uint64_t o = offset_;
    offset_ += n;
    return o;
  }
  // The state as PyTorch's Generator.get_state gives it: a uint8 tensor,
  // here of 16 bytes (the seed, then the offset, each little-endian), so a
  // checkpoint can store it with the weights; set_state takes one back.
  Tensor get_state() const;
  void set_state(const Tensor& state);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};
Generator& default_generator();
// The default generator's state (torch.get_rng_state / set_rng_state);
// safe beside other threads drawing from it.
Tensor get_rng_state();
void set_rng_state(const Tensor& state);

// ---- memory: freed blocks of 256 KiB or more are cached for reuse
// (KILN_ALLOCATOR_CACHE_MB, default 1024); this returns them to the system.
void empty_cache();
size_t allocator_cached_bytes();

// ---- build and machine facts
std::string version();
std::string blas_info();

}  // namespace kiln

KILN_API_END
