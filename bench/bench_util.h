// Shared pieces of the benchmark programs: timing, the JSON-lines report
// format, and the machine baselines (memory copy bandwidth, direct sgemm).
#pragma once
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

namespace kiln::bench {

// OpenBLAS with its own threads while alive. kiln keeps OpenBLAS
// single-threaded (Note [One thread pool]); baselines and peers that call
// it (direct sgemm, libtorch's GEMMs) get the thread count they would have.
struct OpenBlasThreads {
  explicit OpenBlasThreads(int threads) { openblas_set_num_threads(threads); }
  ~OpenBlasThreads() { openblas_set_num_threads(1); }
  OpenBlasThreads(const OpenBlasThreads&) = delete;
  OpenBlasThreads& operator=(const OpenBlasThreads&) = delete;
};

// Best-of-n wall time of fn in seconds, after one warm-up call.
inline double time_best(const std::function<void()>& fn, int n = 5) {
  fn();
  double best = 1e30;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// The same, repeated past n until the timed calls add up to `seconds`: for
// cases of a few milliseconds, where the best of 3 moved by 2x from run to
// run (kiln-bench-vision's LeNet convolution, both libraries).
inline double time_best_for(const std::function<void()>& fn, int n, double seconds) {
  fn();
  double best = 1e30, total = 0;
  for (int i = 0; i < n || total < seconds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t), total += t;
  }
  return best;
}

// Best-of-n times of a and b, run alternately so both see the same machine
// state (this host's bandwidth drifts by 20% from one second to the next).
inline std::pair<double, double> time_pair(const std::function<void()>& a, const std::function<void()>& b,
                                           int n = 7) {
  a(), b();
  double ba = 1e30, bb = 1e30;
  for (int i = 0; i < n; ++i) {
    ba = std::min(ba, time_best(a, 1));
    bb = std::min(bb, time_best(b, 1));
  }
  return {ba, bb};
}

// One result line. `higher_is_better` decides the ratio's direction so that
// ratio > 1 always means kiln is better.
struct Reporter {
  bool json = false;
  void report(const std::string& bench, const std::string& cas, const std::string& unit, double kiln,
              const std::string& baseline, double baseline_value, bool higher_is_better = true) const {
    const double ratio = higher_is_better ? kiln / baseline_value : baseline_value / kiln;
    if (json) {
      std::printf(
          "{\"bench\":\"%s\",\"case\":\"%s\",\"unit\":\"%s\",\"kiln\":%.4g,\"baseline\":\"%s\","
          "\"baseline_value\":%.4g,\"ratio\":%.3f}\n",
          bench.c_str(), cas.c_str(), unit.c_str(), kiln, baseline.c_str(), baseline_value, ratio);
    } else {
      std::printf("%-10s %-26s kiln %10.3f %-8s  %-14s %10.3f  ratio %.3f\n", bench.c_str(), cas.c_str(), kiln,
                  unit.c_str(), baseline.c_str(), baseline_value, ratio);
    }
    std::fflush(stdout);
  }
};

}  // namespace kiln::bench
