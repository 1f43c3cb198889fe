// The linalg kernels: inv, solve, det, slogdet, cholesky, qr, eigh, svd.
// Each matrix of the batch is copied column-major into a buffer (LAPACK
// overwrites its input, and a strided or broadcast input is read through
// its strides), factorised by LAPACK (lapack.h), and the results written
// into the contiguous outputs. float32 runs LAPACK's single-precision
// routines, as PyTorch does. The front ends (src/ops/linalg_lapack.cpp)
// checked dtypes, shapes, and sizes that fit LAPACK's 32-bit integers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/lapack.h"
#include "kiln/error.h"

namespace kiln::cpu {
namespace {

int64_t batch_count(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 0; d + 2 < t.dim(); ++d) n *= t.size(d);
  return n;
}

// The element offset of matrix b of the batch held in t's leading dims.
int64_t matrix_offset(const Tensor& t, int64_t b) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    offset += (b % t.size(d)) * t.stride(d);
    b /= t.size(d);
  }
  return offset;
}

// Matrix b of t, column-major with leading dimension rows (at least 1).
template <class T>
std::vector<T> load_columns(const Tensor& t, int64_t b) {
  const int64_t rows = t.size(-2), cols = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  const T* p = t.data_ptr<T>() + matrix_offset(t, b);
  std::vector<T> m(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)));
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) m[static_cast<size_t>(i + j * rows)] = p[i * sr + j * sc];
  return m;
}

// Writes column-major m (leading dimension ld), or its transpose, into
// matrix b of the contiguous out.
template <class T>
void store_columns(const Tensor& out, int64_t b, const T* m, int64_t ld, bool transposed = false) {
  const int64_t rows = out.size(-2), cols = out.size(-1);
  T* o = out.data_ptr<T>() + b * rows * cols;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) o[i * cols + j] = transposed ? m[j + i * ld] : m[i + j * ld];
}

// "(batch element 3) " for a batched input, so an error names the matrix.
std::string batch_element(const Tensor& t, int64_t b) {
  return t.dim() > 2 ? "(batch element " + std::to_string(b) + ") " : std::string();
}

// LAPACK's answer to a workspace query (lwork = -1) as a size.
template <class T>
int workspace(T answer) {
  return std::max(1, static_cast<int>(answer));
}

// QR's, eigh's and SVD's iterations do not end on NaN or inf; PyTorch
// refuses such inputs with this error too.
template <class T>
void check_finite(const std::vector<T>& m, const char* op, const Tensor& t, int64_t b) {
  for (T v : m)
    check(std::isfinite(v), op, batch_element(t, b), "the input contains non-finite values (NaN or inf); ",
          "the algorithm cannot converge on them");
}

void fill_identity_columns(const Tensor& out, int64_t b) {
  visit_f32_f64(out.dtype(), "linalg", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = out.size(-2), cols = out.size(-1);
    T* o = out.data_ptr<T>() + b * rows * cols;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) o[i * cols + j] = i == j ? T(1) : T(0);
  });
}

// One LU factorisation P A = L U: the (possibly) singular matrix is
// factorised all the same (info > 0 names the first zero pivot).
template <class T>
int lu_factor(std::vector<T>& m, int n, std::vector<int>& ipiv) {
  int info = 0;
  lapack::getrf(n, n, m.data(), n, ipiv.data(), info);
  return info;
}

}  // namespace

void linalg_inv_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const Tensor& out = c.outputs[0];
  visit_f32_f64(A.dtype(), "linalg.inv", [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(A.size(-1));
    if (n == 0) return;
    std::vector<int> ipiv(static_cast<size_t>(n));
    std::vector<T> work;
    for (int64_t b = 0; b < batch_count(A); ++b) {
      std::vector<T> m = load_columns<T>(A, b);
      int info = lu_factor(m, n, ipiv);
      check(info == 0, "linalg.inv", batch_element(A, b), "the diagonal element ", info,
            " of U in A = P L U is zero: the matrix is singular and has no inverse");
      if (work.empty()) {
        T size{};
        lapack::getri(n, m.data(), n, ipiv.data(), &size, -1, info);
        work.resize(static_cast<size_t>(workspace(size)));
      }
      lapack::getri(n, m.data(), n, ipiv.data(), work.data(), static_cast<int>(work.size()), info);
      store_columns(out, b, m.data(), n);
    }
  });
}

// A X = B for B of shape (..., n, k) with A's batch dims.
void linalg_solve_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const Tensor& B = c.inputs[1];
  const Tensor& out = c.outputs[0];
  visit_f32_f64(A.dtype(), "linalg.solve", [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(A.size(-1)), k = static_cast<int>(B.size(-1));
    if (n == 0 || k == 0) return;
    std::vector<int> ipiv(static_cast<size_t>(n));
    for (int64_t b = 0; b < batch_count(A); ++b) {
      std::vector<T> m = load_columns<T>(A, b), x = load_columns<T>(B, b);
      int info = 0;
      lapack::gesv(n, k, m.data(), n, ipiv.data(), x.data(), n, info);
      check(info == 0, "linalg.solve", batch_element(A, b), "the diagonal element ", info,
            " of U in A = P L U is zero: A is singular and the system has no unique solution");
      store_columns(out, b, x.data(), n);
    }
  });
}

// det and slogdet from one LU factorisation: the product of U's diagonal,
// its sign flipped by every row exchange.
void linalg_det_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const bool log = c.outputs.size() == 2;  // slogdet: sign and log|det|
  visit_f32_f64(A.dtype(), "linalg.det", [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(A.size(-1));
    std::vector<int> ipiv(static_cast<size_t>(std::max(n, 1)));
    T* det = c.outputs[0].data_ptr<T>();  // det, or slogdet's sign
    T* logabs = log ? c.outputs[1].data_ptr<T>() : nullptr;
    for (int64_t b = 0; b < batch_count(A); ++b) {
      std::vector<T> m = load_columns<T>(A, b);
      if (n > 0) lu_factor(m, n, ipiv);
      T product = 1, sign = 1, sum_log = 0;  // sign: the permutation's, then det's
      for (int i = 0; i < n; ++i)
        if (ipiv[static_cast<size_t>(i)] != i + 1) sign = -sign;
      if (!log) {
        for (int i = 0; i < n; ++i) product *= m[static_cast<size_t>(i + i * n)];
        det[b] = sign * product;
        continue;
      }
      for (int i = 0; i < n; ++i) {
        const T u = m[static_cast<size_t>(i + i * n)];
        sign *= u > 0 ? T(1) : u < 0 ? T(-1) : u == 0 ? T(0) : u;  // NaN stays NaN
        sum_log += std::log(std::fabs(u));
      }
      det[b] = sign;
      logabs[b] = sign == 0 ? -std::numeric_limits<T>::infinity() : sum_log;
    }
  });
}

// L with A = L L^T (zeros above the diagonal), or U = L^T when upper.
void linalg_cholesky_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const bool upper = c.attrs.get_bool("upper");
  visit_f32_f64(A.dtype(), "linalg.cholesky", [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(A.size(-1));
    if (n == 0) return;
    for (int64_t b = 0; b < batch_count(A); ++b) {
      std::vector<T> m = load_columns<T>(A, b);
      int info = 0;
      lapack::potrf('L', n, m.data(), n, info);
      check(info == 0, "linalg.cholesky", batch_element(A, b), "the leading minor of order ", info,
            " is not positive-definite: the input is not positive-definite");
      for (int j = 1; j < n; ++j)
        for (int i = 0; i < j; ++i) m[static_cast<size_t>(i + j * n)] = 0;
      store_columns(out, b, m.data(), n, upper);
    }
  });
}

// Householder QR: outputs Q (m x q, q = k or m; 0 elements for mode "r")
// and R (r x n, r = k or m), k = min(m, n).
void linalg_qr_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const Tensor& Q = c.outputs[0];
  const Tensor& R = c.outputs[1];
  const bool want_q = Q.dim() == A.dim();
  visit_f32_f64(A.dtype(), "linalg.qr", [&](auto tag) {
    using T = decltype(tag);
    const int m = static_cast<int>(A.size(-2)), n = static_cast<int>(A.size(-1)), k = std::min(m, n);
    const int64_t r_rows = R.size(-2), q_cols = want_q ? Q.size(-1) : 0;
    std::vector<T> tau(static_cast<size_t>(std::max(k, 1))), work;
    for (int64_t b = 0; b < batch_count(A); ++b) {
      T* r = R.data_ptr<T>() + b * r_rows * n;
      std::fill(r, r + r_rows * n, T(0));
      if (k == 0) {
        if (want_q) fill_identity_columns(Q, b);
        continue;
      }
      std::vector<T> a = load_columns<T>(A, b);
      int info = 0;
      if (work.empty()) {
        T size_qr{}, size_q{};
        lapack::geqrf(m, n, a.data(), m, tau.data(), &size_qr, -1, info);
        lapack::orgqr(m, static_cast<int>(std::max<int64_t>(q_cols, k)), k, a.data(), m, tau.data(), &size_q, -1,
                      info);
        work.resize(static_cast<size_t>(std::max(workspace(size_qr), workspace(size_q))));
      }
      const int lwork = static_cast<int>(work.size());
      lapack::geqrf(m, n, a.data(), m, tau.data(), work.data(), lwork, info);
      for (int64_t i = 0; i < r_rows; ++i)
        for (int64_t j = i; j < n; ++j) r[i * n + j] = a[static_cast<size_t>(i + j * m)];
      if (!want_q) continue;
      // The reflectors sit in a's first k columns; Q's further columns
      // (mode "complete") start from anything and come out orthonormal.
      std::vector<T> q(static_cast<size_t>(m * q_cols));
      std::copy(a.begin(), a.begin() + static_cast<int64_t>(m) * std::min<int64_t>(n, q_cols), q.begin());
      lapack::orgqr(m, static_cast<int>(q_cols), k, q.data(), m, tau.data(), work.data(), lwork, info);
      store_columns(Q, b, q.data(), m);
    }
  });
}

// Eigenvalues in ascending order and, when the second output has A's
// rank, the orthonormal eigenvectors as its columns; attrs: UPLO, the
// triangle read.
void linalg_eigh_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const Tensor& V = c.outputs[1];
  const bool vectors = V.dim() == A.dim();
  const char uplo = c.attrs.get_string("UPLO")[0];
  visit_f32_f64(A.dtype(), "linalg.eigh", [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(A.size(-1));
    if (n == 0) return;
    T* w = c.outputs[0].data_ptr<T>();
    std::vector<T> work;
    std::vector<int> iwork;
    const char job = vectors ? 'V' : 'N';
    for (int64_t b = 0; b < batch_count(A); ++b) {
      std::vector<T> m = load_columns<T>(A, b);
      check_finite(m, "linalg.eigh", A, b);
      int info = 0;
      if (work.empty()) {
        T size{};
        int isize = 0;
        lapack::syevd(job, uplo, n, m.data(), n, w, &size, -1, &isize, -1, info);
        work.resize(static_cast<size_t>(workspace(size)));
        iwork.resize(static_cast<size_t>(std::max(isize, 1)));
      }
      lapack::syevd(job, uplo, n, m.data(), n, w + b * n, work.data(), static_cast<int>(work.size()), iwork.data(),
                    static_cast<int>(iwork.size()), info);
      check(info == 0, "linalg.eigh", batch_element(A, b), "the algorithm failed to converge (",
            info, " off-diagonal elements did not reach zero)");
      if (vectors) store_columns(V, b, m.data(), n);
    }
  });
}

// A = U diag(S) Vh by divide and conquer (gesdd). U and Vh are full
// (m x m, n x n), reduced (m x k, k x n) or not computed (0 elements).
void linalg_svd_kernel(const OpCall& c) {
  const Tensor& A = c.inputs[0];
  const Tensor& U = c.outputs[0];
  const Tensor& S = c.outputs[1];
  const Tensor& Vh = c.outputs[2];
  const bool vectors = U.dim() == A.dim();
  visit_f32_f64(A.dtype(), "linalg.svd", [&](auto tag) {
    using T = decltype(tag);
    const int m = static_cast<int>(A.size(-2)), n = static_cast<int>(A.size(-1)), k = std::min(m, n);
    const int u_cols = vectors ? static_cast<int>(U.size(-1)) : 1, vh_rows = vectors ? static_cast<int>(Vh.size(-2)) : 1;
    const char job = !vectors ? 'N' : u_cols == m && vh_rows == n ? 'A' : 'S';
    std::vector<T> u(static_cast<size_t>(vectors ? std::max(m * u_cols, 1) : 1));
    std::vector<T> vt(static_cast<size_t>(vectors ? std::max(vh_rows * n, 1) : 1));
    std::vector<T> work;
    std::vector<int> iwork(static_cast<size_t>(std::max(8 * k, 1)));
    for (int64_t b = 0; b < batch_count(A); ++b) {
      if (k == 0) {  // no singular values; full U and Vh are identities
        if (vectors) fill_identity_columns(U, b), fill_identity_columns(Vh, b);
        continue;
      }
      std::vector<T> a = load_columns<T>(A, b);
      check_finite(a, "linalg.svd", A, b);
      int info = 0;
      if (work.empty()) {
        T size{};
        lapack::gesdd(job, m, n, a.data(), m, S.data_ptr<T>(), u.data(), m, vt.data(), std::max(vh_rows, 1), &size,
                      -1, iwork.data(), info);
        work.resize(static_cast<size_t>(workspace(size)));
      }
      lapack::gesdd(job, m, n, a.data(), m, S.data_ptr<T>() + b * k, u.data(), m, vt.data(), std::max(vh_rows, 1),
                    work.data(), static_cast<int>(work.size()), iwork.data(), info);
      check(info == 0, "linalg.svd", batch_element(A, b), "the algorithm failed to converge (error code ", info, ")");
      if (vectors) {
        store_columns(U, b, u.data(), m);
        store_columns(Vh, b, vt.data(), vh_rows);
      }
    }
  });
}

}  // namespace kiln::cpu
