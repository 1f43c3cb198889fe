// SIMD building blocks of the FlexAttention float32 kernels, compiled
// per CPU target inside libkiln (src/attention/attention_simd.cpp).
#pragma once
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::attention_simd {

// Rows of the next key or value block to prefetch while the current one
// computes (decoding streams K and V once from memory): n rows, row_bytes
// apart. n = 0 prefetches nothing.
struct Prefetch {
  const void* rows = nullptr;
  int64_t n = 0, row_bytes = 0;
};

// Cache lines per row, and prefetches (to L2) of lines [lo, hi) of row j.
// always_inline: GCC 12 otherwise finds prefetch_lines free of side effects
// and deletes its calls, prefetches and all.
inline int64_t row_lines(const Prefetch& pf) { return (pf.row_bytes + 63) / 64; }
inline __attribute__((always_inline)) void prefetch_lines(const Prefetch& pf, int64_t j, int64_t lo, int64_t hi) {
  if (j >= pf.n) return;
  const char* row = static_cast<const char*>(pf.rows) + j * pf.row_bytes;
  for (int64_t c = lo; c < hi; ++c) __builtin_prefetch(row + 64 * c, 0, 2);
}
inline __attribute__((always_inline)) void prefetch_row(const Prefetch& pf, int64_t j) { prefetch_lines(pf, j, 0, row_lines(pf)); }

// Online-softmax update of rows x cols scores s (row stride ld) whose mods
// are applied (-inf where masked), per row r: m = max(mx[r], row max);
// s = exp(s - m) in place (0 where -inf); l[r] = l[r] * c + sum of the row;
// mx[r] = m; corr[r] = c = exp(old mx[r] - m), the factor the row's
// accumulator must be scaled by. A row with nothing visible keeps its state
// (c = 1, zeros in s).
void online_softmax(float* s, int64_t rows, int64_t cols, int64_t ld, float* mx, float* l, float* corr);
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
// Row j of `pf` is prefetched alongside key row j (also in accumulate_rows).
void dots_rows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf = {});
// acc[r] = acc[r] * corr[r] + sum_j p[r * n + j] * v[j], for r < rows.
void accumulate_rows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev,
                     const Prefetch& pf = {});
// The same reading a bfloat16 cache directly (widened in registers).
void dots_rows(const float* q, int64_t rows, const BFloat16* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf = {});
void accumulate_rows(float* acc, const float* corr, const float* p, int64_t rows, const BFloat16* v, int64_t n,
                     int64_t Ev, const Prefetch& pf = {});

// The bfloat16 forms above with the CPU's bfloat16 dot-product instruction
// (AVX512-BF16, src/attention/attention_bf16dot_x86.cpp, x86 builds only;
// the AVX-512 Highway target tries them first): false, having done nothing,
// when this CPU or the shapes (E, Ev not multiples of 32) do not allow it. q holds bfloat16
// values (it was a bfloat16 tensor), so the dots are exact products summed
// in float32; P V rounds the probabilities to bfloat16 first, as PyTorch's
// CPU flash attention does for reduced-precision inputs.
// K and V are the bf16 bits.
bool dots_rows_bf16dot(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                       const Prefetch& pf);
bool accumulate_rows_bf16dot(float* acc, const float* corr, const float* p, int64_t rows, const uint16_t* v, int64_t n,
                             int64_t Ev, const Prefetch& pf);

// C (M x N, row stride ldc) = alpha * A @ B, plus C when accumulate. A is
// M x K with element (i, k) at A[i * a_rs + k * a_cs] (a transpose is just
// swapped strides); B is K x N with rows ldb apart. The tiled forward and
// backward kernels are built from it.
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate);

}  // namespace kiln::attention_simd
