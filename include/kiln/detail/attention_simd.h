// SIMD building blocks of the FlexAttention float32 kernels, compiled
// per CPU target inside libkiln (src/attention/attention_simd.cpp).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <utility>

#include "kiln/dtype.h"

namespace kiln::attention_simd {

// Rows of the next key or value block, read after the current one
// (decoding streams K and V once from memory): n rows, row_bytes apart.
// n = 0 names nothing.
struct Prefetch {
  const void* rows = nullptr;
  int64_t n = 0, row_bytes = 0;
};

// Software prefetch of the stream a kernel reads: the rows of its own block
// (n rows, row_bytes apart) followed by the rows of `next`. Reading row j,
// the kernel prefetches row j + ahead into L1. On one Zen 5 core a plain
// read in the dots' order (four rows interleaved) ran much faster with
// prefetcht0 4 KiB ahead than with prefetcht1 or a whole block ahead (what
// this replaced). In the decode kernel itself the change is within noise on
// one core: there the FMAs' time adds to the memory's instead of
// overlapping it.
// The hint is non-temporal (prefetchnta): K and V are read once per call.
// Against prefetcht0, decoding on two threads was faster for float32 and
// bfloat16 (medians of 8 alternating runs, and in the bench). Fewer
// prefetches (every other line), more (one line 8-64 KiB further on, to L1
// or L2) or prefetcht1 throughout were all slower. (The figures of these
// experiments are in this comment's commits.)
// always_inline: GCC 12 otherwise finds the prefetching free of side effects
// and deletes its calls, prefetches and all.
struct StreamAhead {
  static constexpr int64_t kAheadBytes = 4096;
  const char* rows;
  int64_t n, row_bytes;
  Prefetch next;
  int64_t ahead;
  StreamAhead(const void* rows_, int64_t n_, int64_t row_bytes_, const Prefetch& next_,
              int64_t ahead_bytes = kAheadBytes)
      : rows(static_cast<const char*>(rows_)), n(n_), row_bytes(row_bytes_), next(next_),
        ahead((ahead_bytes + row_bytes_ - 1) / row_bytes_) {}
  int64_t lines() const { return (row_bytes + 63) / 64; }
  // Lines [lo, hi) of the row `ahead` rows past j.
  __attribute__((always_inline)) void prefetch_lines(int64_t j, int64_t lo, int64_t hi) const {
    j += ahead;
    const char* row;
    if (j < n) {
      row = rows + j * row_bytes;
    } else {
      if (j - n >= next.n) return;
      row = static_cast<const char*>(next.rows) + (j - n) * next.row_bytes;
    }
    for (int64_t c = lo; c < hi; ++c) __builtin_prefetch(row + 64 * c, 0, 0);
  }
  __attribute__((always_inline)) void prefetch_row(int64_t j) const { prefetch_lines(j, 0, lines()); }
  // The bytes of rows [j, j + count) of the stream (its own rows, then
  // next's); {nullptr, nullptr} when they straddle the two.
  std::pair<const char*, const char*> span(int64_t j, int64_t count) const {
    if (j + count <= n) return {rows + j * row_bytes, rows + (j + count) * row_bytes};
    if (j >= n && j - n + count <= next.n) {
      const char* first = static_cast<const char*>(next.rows) + (j - n) * next.row_bytes;
      return {first, first + count * next.row_bytes};
    }
    return {nullptr, nullptr};
  }
};

// Prefetches a byte range four lines per step(), in the order a kernel's
// steps run, so that a loop spreads its misses evenly with one compare per
// step and no per-row bounds logic.
struct LineCursor {
  const char* at = nullptr;
  const char* end = nullptr;
  LineCursor() = default;
  explicit LineCursor(std::pair<const char*, const char*> range) : at(range.first), end(range.second) {}
  __attribute__((always_inline)) void step() {
    if (at >= end) return;
    __builtin_prefetch(at, 0, 0), __builtin_prefetch(at + 64, 0, 0);
    __builtin_prefetch(at + 128, 0, 0), __builtin_prefetch(at + 192, 0, 0);
    at += 256;
  }
};

// Online-softmax update of rows x cols scores s (row stride ld) whose mods
// are applied (-inf where masked), per row r: m = max(mx[r], row max);
// s = exp(s - m) in place (0 where -inf); l[r] = l[r] * c + sum of the row;
// mx[r] = m; corr[r] = c = exp(old mx[r] - m), the factor the row's
// accumulator must be scaled by. A row with nothing visible keeps its state
// (c = 1, zeros in s).
void online_softmax(float* s, int64_t rows, int64_t cols, int64_t ld, float* mx, float* l, float* corr);
// row[j] = -inf where bit j % 64 of bits[j / 64] is 0, for j < cols.
void mask_row(float* row, int64_t cols, const uint64_t* bits);
// a[r * lda + e] *= f[r], for e < n.
void scale_rows(float* a, int64_t rows, int64_t n, int64_t lda, const float* f);
// The backward's elementwise step, in place on rows x cols blocks (row
// stride ld): p = P = exp(p - lse[r]), dp = dS = P (dp - delta[r]) scale,
// times deriv (same layout; d score_mod / d score) unless deriv is null.
// Rows with lse -inf (fully masked) get zeros in both.
void softmax_grad(float* p, float* dp, const float* deriv, int64_t rows, int64_t cols, int64_t ld, const float* lse,
                  const float* delta, float scale);
// s[r * n + j] = scale * dot(q row r, k row j), rows of length E, k row-major:
// each key row is loaded once for all query rows (decoding, GQA groups).
// pf: the rows read next (the value block), prefetched in stream (see
// StreamAhead; also in accumulate_rows, whose next rows are the next keys).
void dots_rows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf = {});
// acc[r] = acc[r] * corr[r] + sum_j p[r * n + j] * v[j], for r < rows.
void accumulate_rows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev,
                     const Prefetch& pf = {});
// The same reading a bfloat16 cache directly (widened in registers).
void dots_rows(const float* q, int64_t rows, const BFloat16* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf = {});
// online_softmax's update of rows x n scores s (row stride n; s is
// clobbered; corr as there), then accumulate_rows's P V with those
// corrections.
void softmax_accumulate_rows(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                             const BFloat16* v, int64_t Ev, const Prefetch& pf = {});

// The bfloat16 forms above with the CPU's bfloat16 dot-product instructions
// (x86: AVX512-BF16, src/attention/attention_bf16dot_x86.cpp, tried first by
// the AVX-512 Highway target; Arm: FEAT_BF16's BFMMLA and BFDOT,
// attention_bf16dot_arm.cpp, tried by every Arm target): false, having done
// nothing, when this CPU or the shapes do not allow it (E, Ev multiples of
// 32 on x86, of 8 on Arm). q holds bfloat16
// values (it was a bfloat16 tensor), so the dots are exact products summed
// in float32; P V rounds the probabilities to bfloat16 first, as PyTorch's
// CPU flash attention does for reduced-precision inputs.
// K and V are the bf16 bits. Built for x86-64 and AArch64 only.
bool dots_rows_bf16dot(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                       const Prefetch& pf);
bool softmax_accumulate_rows_bf16dot(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                                     const uint16_t* v, int64_t Ev, const Prefetch& pf);
// Which of them the bf16 decode runs now: "avx512-bf16", "neon-bf16", or
// "widening" (the Highway kernels, bf16 widened to float32 in registers).
const char* bf16_decode_kernel();

// C (M x N, row stride ldc) = alpha * A @ B, plus C when accumulate. A is
// M x K with element (i, k) at A[i * a_rs + k * a_cs] (a transpose is just
// swapped strides); B is K x N with rows ldb apart. The tiled forward and
// backward kernels are built from it.
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate);

}  // namespace kiln::attention_simd

KILN_API_END
