// Batched matrix multiply through OpenBLAS. A matrix whose strides BLAS can
// describe (row-major with a leading dimension, or its transpose) is passed
// as is with the matching transpose flag; only other layouts are copied.
// float16/bfloat16 are multiplied in float32 (bfloat16 with the CPU's bf16
// matrix instruction where it has one: bf16_gemm.h); integers use a plain loop.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/detail/aligned_buffer.h"
#include "core/convert.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {
namespace {

struct BlasView {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// How BLAS can read a rows x cols matrix with these element strides, if at all.
bool blas_view(int64_t rows, int64_t cols, int64_t srow, int64_t scol, BlasView& v) {
  if ((scol == 1 || cols <= 1) && srow >= std::max<int64_t>(cols, 1)) {
    v = {CblasNoTrans, srow};
    return true;
  }
  if ((srow == 1 || rows <= 1) && scol >= std::max<int64_t>(rows, 1)) {
    v = {CblasTrans, scol};
    return true;
  }
  return false;
}

// Element offsets of batch `bi`'s matrices in a and b (batch dims of out).
std::pair<int64_t, int64_t> batch_offsets(const Tensor& out, const Tensor& a, const Tensor& b, int64_t bi) {
  int64_t oa = 0, ob = 0;
  for (int64_t d = out.dim() - 3; d >= 0; --d) {
    const int64_t i = bi % out.size(d);
    bi /= out.size(d);
    oa += i * a.stride(d);
    ob += i * b.stride(d);
  }
  return {oa, ob};
}

// C = A B, or C += A B when accumulate (beta = 1).
template <typename T>
void gemm(const BlasView& va, const BlasView& vb, int64_t M, int64_t N, int64_t K, const T* a, const T* b, T* c,
          int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, va.trans, vb.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0f, a, static_cast<int>(va.ld), b, static_cast<int>(vb.ld), accumulate ? 1.0f : 0.0f, c,
                static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, va.trans, vb.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0, a, static_cast<int>(va.ld), b, static_cast<int>(vb.ld), accumulate ? 1.0 : 0.0, c,
                static_cast<int>(ldc));
  }
}

// A product whose inner dimension is long against C's sides (the weight
// gradients of a layer: 128 x 512 over 2048 tokens) is split along K
// instead: each thread reads half of both operands rather than all of one,
// and the other threads' partial products are added into C: faster than
// OpenBLAS alone on two threads for the GPT's weight-gradient shapes
// (128 x 512 x 2048 and 128 x 128 x 2048 TN; figures in this line's commit).
template <typename T>
void k_split_gemm(const BlasView& va, const BlasView& vb, int64_t M, int64_t N, int64_t K, const T* a, const T* b,
                  T* c, int64_t ldc, bool accumulate, int64_t parts) {
  parts = std::min(parts, K);  // every share non-empty
  const auto partial = uninitialized_aligned<T>(static_cast<size_t>((parts - 1) * M * N));
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t k0 = K * p / parts, kn = K * (p + 1) / parts - k0;
      T* out = p == 0 ? c : partial.get() + (p - 1) * M * N;
      // (i, k) of A and (k, n) of B from k0 on.
      const T* ak = a + k0 * (va.trans == CblasNoTrans ? 1 : va.ld);
      const T* bk = b + k0 * (vb.trans == CblasNoTrans ? vb.ld : 1);
      gemm(va, vb, M, N, kn, ak, bk, out, p == 0 ? ldc : N, p == 0 && accumulate);
    }
  });
  parallel_for(0, M, std::max<int64_t>(1, 32768 / std::max<int64_t>(N, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t p = 1; p < parts; ++p) {
        const T* src = partial.get() + (p - 1) * M * N + i * N;
        T* dst = c + i * ldc;
        for (int64_t j = 0; j < N; ++j) dst[j] += src[j];
      }
  });
}

// Note [One thread pool]
// OpenBLAS runs single-threaded (src/core/parallel.cpp) and a GEMM is split
// here over kiln's own pool: C in one block of rows (or of columns, when N
// is the larger side) per thread, or K in one share per thread when it is
// long (k_split_gemm above). With OpenBLAS's threads, which spin in
// sched_yield for a while after each call, every elementwise op after a
// GEMM shared the cores with them (a sixth of a training step's samples).
// Small products run on the calling thread.
template <typename T>
void parallel_gemm(const BlasView& va, const BlasView& vb, int64_t M, int64_t N, int64_t K, const T* a, const T* b,
                   T* c, int64_t ldc, bool accumulate) {
  const int64_t parts = get_num_threads();
  if (parts == 1 || M * N * K < (int64_t{1} << 18)) return gemm(va, vb, M, N, K, a, b, c, ldc, accumulate);
  if (K >= 4 * std::max(M, N)) return k_split_gemm(va, vb, M, N, K, a, b, c, ldc, accumulate, parts);
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t chunk = ((extent + parts - 1) / parts + 15) / 16 * 16;  // whole register tiles
  parallel_for(0, (extent + chunk - 1) / chunk, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t i0 = p * chunk, n = std::min(extent, i0 + chunk) - i0;
      if (by_rows) gemm(va, vb, n, N, K, a + i0 * (va.trans == CblasNoTrans ? va.ld : 1), b, c + i0 * ldc, ldc, accumulate);
      else gemm(va, vb, M, n, K, a, b + i0 * (vb.trans == CblasNoTrans ? 1 : vb.ld), c + i0, ldc, accumulate);
    }
  });
}

// Contiguous copy of one matrix (rows x cols) read with element strides.
template <typename T>
std::vector<T> pack(const T* p, int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) out[r * cols + k] = p[r * sr + k * sc];
  return out;
}

// out = a @ b, or out += a @ b when accumulate.
template <typename T>
void blas_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate = false) {
  const int64_t nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  const int64_t batch = shape_numel(Shape(out.sizes().begin(), out.sizes().end() - 2));
  T* c = out.data_ptr<T>();  // contiguous, see matmul_kernel
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {
    if (!accumulate) std::fill(c, c + out.numel(), T(0));
    return;
  }
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  const int64_t sam = a.stride(nd - 2), sak = a.stride(nd - 1), sbk = b.stride(nd - 2), sbn = b.stride(nd - 1);

  // b shared by every batch and a row-major across batches: one GEMM of
  // (batch*M) x K by K x N (the shape of a linear layer).
  bool b_shared = true, a_folds = sak == 1 || K == 1;
  int64_t expect = M * sam;
  for (int64_t d = nd - 3; d >= 0; --d) {
    b_shared = b_shared && (b.stride(d) == 0 || b.size(d) == 1);
    a_folds = a_folds && (a.size(d) == 1 || a.stride(d) == expect);
    expect *= a.size(d);
  }
  if (BlasView vb; b_shared && a_folds && batch > 1 && sam >= K && blas_view(K, N, sbk, sbn, vb)) {
    parallel_gemm<T>(BlasView{CblasNoTrans, sam}, vb, batch * M, N, K, pa, pb, c, N, accumulate);
    return;
  }
  // Many products: one per thread at a time; few: each split over the pool.
  const bool per_product = batch >= get_num_threads();
  auto product = [&](int64_t bi) {
    const auto [oa, ob] = batch_offsets(out, a, b, bi);
    const T* ma = pa + oa;
    const T* mb = pb + ob;
    std::vector<T> ca, cb;
    BlasView va, vb;  // per product: products run in parallel
    if (!blas_view(M, K, sam, sak, va)) {
      ca = pack(ma, M, K, sam, sak);
      ma = ca.data();
      va = {CblasNoTrans, K};
    }
    if (!blas_view(K, N, sbk, sbn, vb)) {
      cb = pack(mb, K, N, sbk, sbn);
      mb = cb.data();
      vb = {CblasNoTrans, N};
    }
    if (per_product) gemm<T>(va, vb, M, N, K, ma, mb, c + bi * M * N, N, accumulate);
    else parallel_gemm<T>(va, vb, M, N, K, ma, mb, c + bi * M * N, N, accumulate);
  };
  if (!per_product) {
    for (int64_t bi = 0; bi < batch; ++bi) product(bi);
    return;
  }
  parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bi = lo; bi < hi; ++bi) product(bi);
  });
}

template <typename T>
void loop_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  const int64_t batch = shape_numel(Shape(out.sizes().begin(), out.sizes().end() - 2));
  T* c = out.data_ptr<T>();
  parallel_for(0, batch * M, std::max<int64_t>(1, kGrain / std::max<int64_t>(N * K, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t m = row % M;
      const auto [oa, ob] = batch_offsets(out, a, b, row / M);
      const T* ma = a.data_ptr<T>() + oa + m * a.stride(nd - 2);
      const T* mb = b.data_ptr<T>() + ob;
      for (int64_t n = 0; n < N; ++n) {
        T acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += ma[k * a.stride(nd - 1)] * mb[k * b.stride(nd - 2) + n * b.stride(nd - 1)];
        c[row * N + n] = acc;
      }
    }
  });
}

// bfloat16 operands through the CPU's bf16 matrix instruction
// (bf16_gemm.h), in float32, rounded to bfloat16 once as the float32 path.
void bf16_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  const int64_t batch = shape_numel(Shape(out.sizes().begin(), out.sizes().end() - 2));
  Tensor o32 = empty(out.sizes(), kFloat32);
  const auto* pa = reinterpret_cast<const uint16_t*>(a.data_ptr<BFloat16>());
  const auto* pb = reinterpret_cast<const uint16_t*>(b.data_ptr<BFloat16>());
  for (int64_t bi = 0; bi < batch; ++bi) {
    const auto [oa, ob] = batch_offsets(out, a, b, bi);
    gemm_bf16(pa + oa, a.stride(nd - 2), a.stride(nd - 1), pb + ob, b.stride(nd - 2), b.stride(nd - 1),
              o32.data_ptr<float>() + bi * M * N, M, N, K);
  }
  copy_into(out, o32);
}

}  // namespace

void matmul_kernel(const OpCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor& out = c.outputs[0];
  if (!out.is_contiguous()) {  // an out= tensor with gaps: compute, then copy in
    Tensor tmp = empty(out.sizes(), out.dtype());
    Tensor outs[] = {tmp};
    matmul_kernel(OpCall{c.inputs, c.attrs, outs});
    copy_into(out, tmp);
    return;
  }
  switch (out.dtype()) {
    case kFloat32: return blas_matmul<float>(a, b, out);
    case kFloat64: return blas_matmul<double>(a, b, out);
    case kBFloat16:
      if (a.dtype() == kBFloat16 && b.dtype() == kBFloat16 && bf16_gemm_path() == BF16GemmPath::BFMMLA)
        return bf16_matmul(a, b, out);
      [[fallthrough]];
    case kFloat16: {
      Tensor a32 = converted(a, kFloat32), b32 = converted(b, kFloat32), o32 = empty(out.sizes(), kFloat32);
      blas_matmul<float>(a32, b32, o32);
      copy_into(out, o32);
      return;
    }
    default:
      visit_dtype(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) loop_matmul<T>(a, b, out);
        else fail("matmul", "dtype ", out.dtype(), " is not supported");
      });
  }
}

// Note [Bias in the GEMM]
// bmm_bias: matmul (float32, float64) plus a bias row added to every
// row of the result, for kiln::compile (a linear layer's bias add that no
// loop takes).
// C starts as the bias rows and sgemm runs with beta = 1: the fill replaces
// the zero-fill OpenBLAS does for beta = 0, and the separate add's pass
// over C is gone.
void matmul_bias_kernel(const OpCall& c) {
  const Tensor& out = c.outputs[0];
  const Tensor bias = contiguous(c.inputs[2]);
  const DType dt = out.dtype();
  const int64_t N = out.dim() ? out.size(-1) : 0;
  check((dt == kFloat32 || dt == kFloat64) && c.inputs[0].dtype() == dt && c.inputs[1].dtype() == dt &&
            bias.dtype() == dt && bias.dim() == 1 && bias.size(0) == N && out.is_contiguous(),
        "bmm_bias", "expected float32 or float64 operands of one dtype, a contiguous result and a bias of ", N,
        " values but got ", dt, " and bias ", shape_text(bias.sizes()), " ", bias.dtype());
  if (out.numel() == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data_ptr<T>();
    const T* bp = bias.data_ptr<T>();
    parallel_for(0, out.numel() / N, std::max<int64_t>(1, 32768 / N), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) std::memcpy(o + r * N, bp, static_cast<size_t>(N) * sizeof(T));
    });
    blas_matmul<T>(c.inputs[0], c.inputs[1], out, true);
  };
  if (dt == kFloat32) run(float{});
  else run(double{});
}

}  // namespace kiln::cpu
