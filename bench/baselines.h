// The machine baselines the benchmarks compare against, measured in the
// same run: parallel memcpy bandwidth and OpenBLAS sgemm called directly.
#pragma once
#include <cblas.h>

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
