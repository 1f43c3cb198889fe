// The machine baselines the benchmarks compare against, measured in the
// same run: parallel memcpy bandwidth and OpenBLAS sgemm called directly.
#pragma once
#include <cblas.h>

#include <atomic>
#include <cstring>

#include "bench_util.h"
#include "kiln/kiln.h"

namespace kiln::bench {

// The common start of every bench: --json from the command line, the
// thread count all baselines and peers share, a fixed seed.
inline constexpr int kBenchThreads = 2;
inline Reporter start_bench(int argc, char** argv) {
  Reporter rep;
  for (int i = 1; i < argc; ++i) rep.json = rep.json || std::strcmp(argv[i], "--json") == 0;
  set_num_threads(kBenchThreads);
  manual_seed(0);
  return rep;
}

// A parallel memcpy of n floats (the copy-bandwidth baseline).
inline void parallel_copy(const float* src, float* dst, int64_t n) {
  parallel_for(0, n, 1 << 18, [&](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(float));
  });
}

// c = a @ b for square float32 matrices, straight into OpenBLAS with its own
// threads (one per kiln thread); kiln keeps OpenBLAS single-threaded and
// splits GEMMs itself, so the count is set back after the call.
inline void sgemm_direct(const Tensor& a, const Tensor& b, const Tensor& c) {
  const OpenBlasThreads threads(get_num_threads());
  const int n = static_cast<int>(a.size(0));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(),
              n, 0.0f, c.data_ptr<float>(), n);
}

// Reads n floats (n a multiple of 16) in parallel, the read-bandwidth
// baseline: a line at a time, prefetching 4 KiB ahead as the decode
// kernels do, the bits summed as 64-bit integers (which the compiler
// vectorises) and returned so that the reads are not dropped.
inline uint64_t parallel_read(const float* src, int64_t n) {
  std::atomic<uint64_t> total{0};
  parallel_for(0, n / 16, 1 << 14, [&](int64_t b, int64_t e) {
    uint64_t sum = 0;
    for (int64_t line = b; line < e; ++line) {
      const float* p = src + 16 * line;
      __builtin_prefetch(p + 1024, 0, 3);
      uint64_t words[8];
      std::memcpy(words, p, sizeof words);
      for (uint64_t w : words) sum += w;
    }
    total += sum;
  });
  return total.load();
}

// Bytes read + written per second (GB/s) of parallel_copy over 64 MiB.
inline double copy_bandwidth_gbs() {
  const int64_t n = 16 << 20;
  Tensor src = randn({n}), dst = empty({n});
  const double t = time_best([&] { parallel_copy(src.data_ptr<float>(), dst.data_ptr<float>(), n); });
  return 2.0 * static_cast<double>(n) * sizeof(float) / t / 1e9;
}

// sgemm GFLOP/s at n x n x n.
inline double sgemm_gflops(int64_t n) {
  Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n});
  const double t = time_best([&] { sgemm_direct(a, b, c); }, 3);
  return 2.0 * static_cast<double>(n * n * n) / t / 1e9;
}

}  // namespace kiln::bench
