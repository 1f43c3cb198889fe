// The pieces the tiled attention kernels share: block lists, operand
// strides and shapes, one query row against one KV block, the elementwise
// steps, the small GEMM, and the tile bookkeeping.
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include "kiln/detail/attention_mods.h"

namespace kiln::attention_detail {

// The blocks (partial first) of one (b, h, row-block) of a block mask.
struct BlockList {
  const int32_t* partial;
  int64_t n_partial;
  const int32_t* full;
  int64_t n_full;
};
inline BlockList block_list(const Tensor& num, const Tensor& idx, const Tensor& fnum, const Tensor& fidx, int64_t B,
                            int64_t H, int64_t b, int64_t h, int64_t blk) {
  const int64_t bb = B == 1 ? 0 : b, hh = H == 1 ? 0 : h;
  const int64_t nrows = num.size(2), width = idx.size(3);
  const int64_t row = (bb * H + hh) * nrows + blk;
  return {idx.data_ptr<int32_t>() + row * width, num.data_ptr<int32_t>()[row], fidx.data_ptr<int32_t>() + row * width,
          fnum.data_ptr<int32_t>()[row]};
}

// Element strides of a (B, H, rows, dim) operand whose last dim is
// contiguous: the tiled kernels read rows of q, k, v, out and grad_out in
// place, so the heads of a fused projection need no copy.
struct RowStrides {
  int64_t b = 0, h = 0, l = 0;
  template <class T>
  T* row(T* base, int64_t bi, int64_t hi, int64_t i) const {
    return base + bi * b + hi * h + i * l;
  }
};
RowStrides row_strides(const Tensor& t);  // t 4-D with stride(3) == 1

struct Shapes {
  int64_t B, Hq, Hkv, L, S, E, Ev, group;
  double scale;
  int64_t Bkv;  // B, or 1 when k and v broadcast over the batch (a shared or paged cache)
  // Contiguous unless a caller sets them (forward / backward only; flash
  // decoding and the paged kernels read contiguous tensors; both write
  // out through o_st).
  RowStrides q_st, k_st, v_st, o_st, do_st;  // o / do: out and the backward's grad_out
  RowStrides dq_st, dk_st, dv_st;             // where the backward writes (dk / dv: per q batch)
  int64_t kv_batch(int64_t b) const { return Bkv == 1 ? 0 : b; }
};

Shapes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m, const FlexOptions& o);

// One query row meets one KV block: score_mod on every raw score of `row`
// (skipped for NoScoreMod), mask_mod on a partial block (-inf where masked).
// `bits`: the row's mask bits in this block (BlockMaskData::partial_bits),
// used instead of mask_mod when given.
template <class T, class ScoreMod, class MaskMod>
void apply_mods(T* row, int64_t cols, bool partial, int64_t b, int64_t h, int64_t i, int64_t k0,
                const ScoreMod& score_mod, const MaskMod& mask_mod, const uint64_t* bits = nullptr) {
  if constexpr (!std::is_same_v<ScoreMod, NoScoreMod>)
    for (int64_t j = 0; j < cols; ++j) row[j] = score_mod(row[j], b, h, i, k0 + j);
  if (!partial) return;
  if (bits) {
    if constexpr (std::is_same_v<T, float>) {
      attention_simd::mask_row(row, cols, bits);
    } else {
      for (int64_t j = 0; j < cols; ++j)
        if (!((bits[j / 64] >> (j % 64)) & 1)) row[j] = -std::numeric_limits<T>::infinity();
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j)
    if (!mask_mod(b, h, i, k0 + j)) row[j] = -std::numeric_limits<T>::infinity();
}

// The elementwise steps of the kernels: SIMD for float32 (attention_simd.h
// says what each does), the same in plain loops for float64 (tests).
template <class T>
void online_softmax(T* s, int64_t rows, int64_t cols, int64_t ld, T* mx, T* l, T* corr) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::online_softmax(s, rows, cols, ld, mx, l, corr);
  } else {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * ld;
      const T bmax = cols ? *std::max_element(row, row + cols) : kNegInf;
      if (bmax == kNegInf) {
        std::fill(row, row + cols, T(0));
        corr[r] = T(1);
        continue;
      }
      const T nmax = std::max(mx[r], bmax);
      corr[r] = mx[r] == kNegInf ? T(0) : std::exp(mx[r] - nmax);
      T sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += (row[j] = std::exp(row[j] - nmax));
      l[r] = l[r] * corr[r] + sum;
      mx[r] = nmax;
    }
  }
}

template <class T>
void scale_rows(T* a, int64_t rows, int64_t n, int64_t lda, const T* f) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::scale_rows(a, rows, n, lda, f);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < n; ++e) a[r * lda + e] *= f[r];
  }
}

template <class T>
void softmax_grad(T* p, T* dp, const T* deriv, int64_t rows, int64_t cols, int64_t ld, const T* lse, const T* delta,
                  T scale) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::softmax_grad(p, dp, deriv, rows, cols, ld, lse, delta, scale);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        T& pv = p[r * ld + j];
        T& g = dp[r * ld + j];
        if (lse[r] == -std::numeric_limits<T>::infinity()) {
          pv = g = 0;
          continue;
        }
        pv = std::exp(pv - lse[r]);
        g = pv * (g - delta[r]) * scale * (deriv ? deriv[r * ld + j] : T(1));
      }
  }
}

// C (M x N) = alpha * A @ B (+ C): the SIMD micro-kernel for float32, plain
// loops for float64 (tests). Strides as in attention_simd::gemm.
template <class T>
void gemm(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb,
          T* C, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::gemm(M, N, K, alpha, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
  } else {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        T t = 0;
        for (int64_t k = 0; k < K; ++k) t += A[i * a_rs + k * a_cs] * B[k * ldb + j];
        C[i * ldc + j] = accumulate ? C[i * ldc + j] + alpha * t : alpha * t;
      }
  }
}

// Copies rows x cols of `src` (row stride ld) to dst transposed (cols x ld_dst).
template <class T>
void transpose_block(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst, int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld + c];
}

// Calls f(a, e, written) for the runs [a, e) of [lo, hi) whose kFlexTile
// tiles share one `written` flag (flags: one per tile), then flags them all:
// the kernels' products overwrite what no earlier product wrote.
template <class F>
void for_written_runs(char* flags, int64_t lo, int64_t hi, F f) {
  for (int64_t a = lo; a < hi;) {
    const char written = flags[a / kFlexTile];
    int64_t e = std::min(hi, (a / kFlexTile + 1) * kFlexTile);
    while (e < hi && flags[e / kFlexTile] == written) e = std::min(hi, e + kFlexTile);
    f(a, e, written != 0);
    a = e;
  }
  for (int64_t t = lo / kFlexTile; t * kFlexTile < hi; ++t) flags[t] = 1;
}

}  // namespace kiln::attention_detail

KILN_API_END
