// linalg's decompositions and solvers against LAPACK-free checks written
// here in float64: residuals (A X = B, A A^-1 = I), orthogonality (Q^T Q,
// V^T V, U^T U), reconstructions (Q R, L L^T, V diag(w) V^T, U S Vh), a
// determinant by elimination; every layout, batches, empty matrices,
// float32 and float64; gradcheck through gauge-invariant functions;
// singular, non-finite and misshapen inputs.
#include <cmath>
#include <limits>

#include "kiln/linalg.h"
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The matrices of a (..., r, c) tensor as float64 row-major blocks.
struct Matrices {
  explicit Matrices(const Tensor& t)
      : v(values(t.contiguous())), rows(t.size(-2)), cols(t.size(-1)), count(rows * cols != 0 ? t.numel() / (rows * cols) : 0) {}
  double at(int64_t b, int64_t i, int64_t j) const { return v[static_cast<size_t>((b * rows + i) * cols + j)]; }
  std::vector<double> v;
  int64_t rows, cols, count;
};

// max |(X Y)_ij - Z_ij| over the batch, Y and Z given by functions.
double product_error(const Matrices& X, const Matrices& Y, const std::function<double(int64_t, int64_t, int64_t)>& Z) {
  double worst = 0;
  for (int64_t b = 0; b < X.count; ++b)
    for (int64_t i = 0; i < X.rows; ++i)
      for (int64_t j = 0; j < Y.cols; ++j) {
        double s = 0;
        for (int64_t k = 0; k < X.cols; ++k) s += X.at(b, i, k) * Y.at(b, k, j);
        worst = std::max(worst, std::fabs(s - Z(b, i, j)));
      }
  return worst;
}
double identity(int64_t, int64_t i, int64_t j) { return i == j ? 1.0 : 0.0; }

// Q^T Q = I over the batch (columns orthonormal).
double orthogonality_error(const Tensor& Q) {
  return product_error(Matrices(Q.transpose(-1, -2)), Matrices(Q), identity);
}

// Values of `value` in the layout asked (broadcast repeats the first batch entry).
Tensor laid_out(const Tensor& value, Layout layout) {
  switch (layout) {
    case Layout::Transposed: return value.transpose(-1, -2).contiguous().transpose(-1, -2);
    case Layout::Strided: {
      Shape wide = value.sizes();
      wide.back() = wide.back() * 2 + 1;
      Tensor t = zeros(wide, value.dtype()).slice(-1, 1, std::nullopt, 2).narrow(-1, 0, value.size(-1));
      t.copy_(value);
      return t;
    }
    case Layout::Broadcast: return value.narrow(0, 0, 1).expand(value.sizes());
    default: return value;
  }
}

// Random matrices with eigenvalues pushed away from 0 (well conditioned).
Tensor well_conditioned(const Shape& shape, DType dt) {
  return (randn(shape, kFloat64) + 4 * eye(shape.back(), {}, kFloat64)).to(dt);
}
// Symmetric positive-definite: X X^T + n I.
Tensor spd(const Shape& shape, DType dt) {
  const Tensor X = randn(shape, kFloat64);
  return (matmul(X, X.transpose(-1, -2)) + static_cast<double>(shape.back()) * eye(shape.back(), {}, kFloat64)).to(dt);
}

double tolerance(DType dt) { return dt == kFloat64 ? 1e-10 : 2e-4; }

// det by Gaussian elimination with partial pivoting, in long double.
double reference_det(const Matrices& A, int64_t b) {
  const int64_t n = A.rows;
  std::vector<long double> m(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) m[static_cast<size_t>(i * n + j)] = A.at(b, i, j);
  long double det = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(m[static_cast<size_t>(r * n + c)]) > std::fabs(m[static_cast<size_t>(p * n + c)])) p = r;
    if (p != c) {
      det = -det;
      for (int64_t j = 0; j < n; ++j) std::swap(m[static_cast<size_t>(c * n + j)], m[static_cast<size_t>(p * n + j)]);
    }
    const long double pivot = m[static_cast<size_t>(c * n + c)];
    det *= pivot;
    if (pivot == 0) return 0;
    for (int64_t r = c + 1; r < n; ++r) {
      const long double f = m[static_cast<size_t>(r * n + c)] / pivot;
      for (int64_t j = c; j < n; ++j) m[static_cast<size_t>(r * n + j)] -= f * m[static_cast<size_t>(c * n + j)];
    }
  }
  return static_cast<double>(det);
}

TEST(Linalg, InvAndSolveLeaveSmallResiduals) {
  manual_seed(5101);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts())
      for (int64_t n : {1, 5, 17}) {
        const Tensor A = laid_out(well_conditioned({3, n, n}, dt), layout);
        const std::string what = std::string(layout_name(layout)) + " n=" + std::to_string(n);
        const Tensor X = linalg::inv(A);
        EXPECT_EQ(X.sizes(), A.sizes());
        EXPECT_EQ(X.dtype(), dt);
        EXPECT_LT(product_error(Matrices(A), Matrices(X), identity), tolerance(dt)) << what;
        const Tensor B = laid_out(randn({3, n, 4}, kFloat64).to(dt), layout);
        const Matrices Bm(B);
        const Tensor Y = linalg::solve(A, B);
        EXPECT_LT(product_error(Matrices(A), Matrices(Y), [&](int64_t b, int64_t i, int64_t j) { return Bm.at(b, i, j); }),
                  tolerance(dt) * 10) << what;
      }
}

TEST(Linalg, SolveBroadcastsAndTakesVectorsAndRightSides) {
  manual_seed(5102);
  const Tensor A = well_conditioned({2, 1, 4, 4}, kFloat64);
  const Tensor B = randn({3, 4, 2}, kFloat64);
  const Tensor X = linalg::solve(A, B);
  EXPECT_EQ(X.sizes(), (Shape{2, 3, 4, 2}));
  EXPECT_LT(max(abs(matmul(A, X) - B)).item<double>(), 1e-12);
  // A vector right-hand side: 1-D, or A's dims without the last.
  const Tensor b = randn({4}, kFloat64);
  const Tensor x = linalg::solve(A.select(0, 0).select(0, 0), b);
  EXPECT_EQ(x.sizes(), (Shape{4}));
  EXPECT_LT(max(abs(matmul(A.select(0, 0).select(0, 0), x) - b)).item<double>(), 1e-12);
  const Tensor A3 = well_conditioned({3, 4, 4}, kFloat64), b3 = randn({3, 4}, kFloat64);
  const Tensor x3 = linalg::solve(A3, b3);
  EXPECT_EQ(x3.sizes(), (Shape{3, 4}));
  EXPECT_LT(max(abs(matmul(A3, x3.unsqueeze(-1)).squeeze(-1) - b3)).item<double>(), 1e-12);
  // X A = B.
  const Tensor C = randn({3, 5, 4}, kFloat64);
  const Tensor Z = linalg::solve(A3, C, false);
  EXPECT_LT(max(abs(matmul(Z, A3) - C)).item<double>(), 1e-12);
  // Empty right-hand side and empty batch.
  EXPECT_EQ(linalg::solve(A3, randn({3, 4, 0}, kFloat64)).sizes(), (Shape{3, 4, 0}));
  EXPECT_EQ(linalg::inv(randn({0, 3, 3})).sizes(), (Shape{0, 3, 3}));
  EXPECT_EQ(linalg::inv(randn({2, 0, 0})).sizes(), (Shape{2, 0, 0}));
}

TEST(Linalg, DeterminantsMatchElimination) {
  manual_seed(5103);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts())
      for (int64_t n : {1, 2, 6}) {
        const Tensor A = laid_out(randn({4, n, n}, kFloat64).to(dt), layout);
        const Matrices M(A);
        std::vector<double> want, want_sign, want_log;
        for (int64_t b = 0; b < M.count; ++b) {
          const double d = reference_det(M, b);
          want.push_back(d);
          want_sign.push_back(d > 0 ? 1 : d < 0 ? -1 : 0);
          want_log.push_back(std::log(std::fabs(d)));
        }
        const double rtol = dt == kFloat64 ? 1e-11 : 1e-4;
        expect_close(linalg::det(A), want, rtol, rtol, std::string("det ") + layout_name(layout));
        const auto [sign, logabs] = linalg::slogdet(A);
        expect_close(sign, want_sign, 0, 0, "slogdet sign");
        expect_close(logabs, want_log, rtol, rtol, "slogdet log|det|");
      }
  // Exactly singular, empty, and a determinant past float's range that
  // slogdet still gives.
  const Tensor singular = tensor(std::vector<double>{1, 2, 2, 4}).reshape({2, 2});
  EXPECT_EQ(linalg::det(singular).item<double>(), 0.0);
  EXPECT_EQ(std::get<0>(linalg::slogdet(singular)).item<double>(), 0.0);
  EXPECT_EQ(std::get<1>(linalg::slogdet(singular)).item<double>(), -kInf);
  EXPECT_EQ(linalg::det(zeros({3, 0, 0})).sizes(), (Shape{3}));
  EXPECT_EQ(values(linalg::det(zeros({3, 0, 0}))), (std::vector<double>{1, 1, 1}));
  const Tensor big = 1e3f * eye(20);
  EXPECT_EQ(linalg::det(big).item<double>(), kInf);
  EXPECT_NEAR(std::get<1>(linalg::slogdet(big)).item<double>(), 20 * std::log(1e3), 1e-4);
  // NaN and inf go through.
  EXPECT_TRUE(std::isnan(linalg::det(tensor(std::vector<double>{1, NAN, 0, 1}).reshape({2, 2})).item<double>()));
  EXPECT_EQ(linalg::det(tensor(std::vector<double>{kInf, 0, 0, 2}).reshape({2, 2})).item<double>(), kInf);
}

TEST(Linalg, CholeskyReconstructs) {
  manual_seed(5104);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts())
      for (int64_t n : {1, 4, 9}) {
        const Tensor A = laid_out(spd({3, n, n}, dt), layout);
        const Tensor L = linalg::cholesky(A);
        const Matrices Lm(L), Am(A);
        for (int64_t b = 0; b < Lm.count; ++b)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = i + 1; j < n; ++j) EXPECT_EQ(Lm.at(b, i, j), 0.0);
        EXPECT_LT(product_error(Lm, Matrices(L.transpose(-1, -2)),
                                [&](int64_t b, int64_t i, int64_t j) { return Am.at(b, i, j); }),
                  tolerance(dt) * n * 4) << layout_name(layout);
        EXPECT_EQ(values(linalg::cholesky(A, true)), values(L.transpose(-1, -2).contiguous()));
      }
  // Only the lower triangle is read.
  const Tensor A = spd({5, 5}, kFloat64);
  EXPECT_EQ(values(linalg::cholesky(A)), values(linalg::cholesky(tril(A) + triu(full({5, 5}, 7.0, kFloat64), 1))));
}

TEST(Linalg, QrIsOrthogonalTimesTriangular) {
  manual_seed(5105);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts())
      for (const auto& [m, n] : {std::pair<int64_t, int64_t>{6, 3}, {3, 6}, {5, 5}, {1, 4}})
        for (const std::string mode : {"reduced", "complete", "r"}) {
          const Tensor A = laid_out(randn({2, m, n}, kFloat64).to(dt), layout);
          const auto [Q, R] = linalg::qr(A, mode);
          const int64_t k = std::min(m, n), r_rows = mode == "complete" ? m : k;
          const std::string what = std::string(layout_name(layout)) + " " + mode + " " + std::to_string(m) + "x" +
                                   std::to_string(n);
          EXPECT_EQ(R.sizes(), (Shape{2, r_rows, n})) << what;
          const Matrices Rm(R), Am(A);
          for (int64_t b = 0; b < 2; ++b)
            for (int64_t i = 0; i < r_rows; ++i)
              for (int64_t j = 0; j < std::min(i, n); ++j) EXPECT_EQ(Rm.at(b, i, j), 0.0) << what;
          if (mode == "r") {
            EXPECT_EQ(Q.numel(), 0);
            EXPECT_EQ(values(R), values(std::get<1>(linalg::qr(A))));
            continue;
          }
          EXPECT_EQ(Q.sizes(), (Shape{2, m, mode == "complete" ? m : k})) << what;
          EXPECT_LT(orthogonality_error(Q), tolerance(dt)) << what;
          EXPECT_LT(product_error(Matrices(Q), Rm, [&](int64_t b, int64_t i, int64_t j) { return Am.at(b, i, j); }),
                    tolerance(dt) * 10) << what;
        }
  // Empty: complete Q is the identity, R zeros.
  const auto [Q, R] = linalg::qr(zeros({3, 0}), "complete");
  EXPECT_EQ(values(Q), values(eye(3)));
  EXPECT_EQ(R.sizes(), (Shape{3, 0}));
}

TEST(Linalg, EighDiagonalises) {
  manual_seed(5106);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts())
      for (int64_t n : {1, 3, 8}) {
        const Tensor X = randn({3, n, n}, kFloat64);
        const Tensor A = laid_out((X + X.transpose(-1, -2)).to(dt), layout);
        const auto [w, V] = linalg::eigh(A);
        EXPECT_EQ(w.sizes(), (Shape{3, n}));
        const Matrices Vm(V), Am(A);
        const std::vector<double> wv = values(w);
        for (int64_t b = 0; b < 3; ++b)
          for (int64_t i = 1; i < n; ++i) EXPECT_LE(wv[static_cast<size_t>(b * n + i - 1)], wv[static_cast<size_t>(b * n + i)]);
        EXPECT_LT(orthogonality_error(V), tolerance(dt) * 10) << layout_name(layout);
        // A V = V diag(w).
        EXPECT_LT(product_error(Am, Vm, [&](int64_t b, int64_t i, int64_t j) { return Vm.at(b, i, j) * wv[static_cast<size_t>(b * n + j)]; }),
                  tolerance(dt) * 40) << layout_name(layout);
        // Without vectors LAPACK takes another route: equal to rounding.
        expect_close(linalg::eigvalsh(A), wv, tolerance(dt), tolerance(dt), "eigvalsh");
      }
  // UPLO picks the triangle read.
  const Tensor X = randn({4, 4}, kFloat64), S = X + X.t();
  const Tensor junk_below = triu(S) + tril(full({4, 4}, 9.0, kFloat64), -1);
  expect_close(linalg::eigvalsh(junk_below, "U"), values(linalg::eigvalsh(S)), 1e-12, 1e-12, "UPLO U");
  EXPECT_EQ(std::get<0>(linalg::eigh(zeros({2, 0, 0}))).sizes(), (Shape{2, 0}));
}

TEST(Linalg, SvdReconstructs) {
  manual_seed(5107);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts())
      for (const auto& [m, n] : {std::pair<int64_t, int64_t>{6, 3}, {3, 6}, {4, 4}, {1, 1}})
        for (bool full : {false, true}) {
          const Tensor A = laid_out(randn({2, m, n}, kFloat64).to(dt), layout);
          const auto [U, S, Vh] = linalg::svd(A, full);
          const int64_t k = std::min(m, n);
          const std::string what = std::string(layout_name(layout)) + (full ? " full " : " reduced ") +
                                   std::to_string(m) + "x" + std::to_string(n);
          EXPECT_EQ(U.sizes(), (Shape{2, m, full ? m : k})) << what;
          EXPECT_EQ(Vh.sizes(), (Shape{2, full ? n : k, n})) << what;
          EXPECT_LT(orthogonality_error(U), tolerance(dt) * 10) << what;
          EXPECT_LT(orthogonality_error(Vh.transpose(-1, -2)), tolerance(dt) * 10) << what;
          const std::vector<double> s = values(S);
          for (int64_t b = 0; b < 2; ++b)
            for (int64_t i = 0; i < k; ++i) {
              EXPECT_GE(s[static_cast<size_t>(b * k + i)], 0.0);
              if (i > 0) {
                EXPECT_LE(s[static_cast<size_t>(b * k + i)], s[static_cast<size_t>(b * k + i - 1)]);
              }
            }
          const Tensor US = U.narrow(-1, 0, k) * S.unsqueeze(-2);
          const Matrices Am(A);
          EXPECT_LT(product_error(Matrices(US), Matrices(Vh.narrow(-2, 0, k)),
                                  [&](int64_t b, int64_t i, int64_t j) { return Am.at(b, i, j); }),
                    tolerance(dt) * 20) << what;
          expect_close(linalg::svdvals(A), s, dt == kFloat64 ? 1e-12 : 1e-5, 1e-6, "svdvals " + what);
        }
  const auto [U, S, Vh] = linalg::svd(zeros({2, 3, 0}));
  EXPECT_EQ(S.sizes(), (Shape{2, 0}));
  EXPECT_EQ(values(U), values(eye(3).expand({2, 3, 3})));
  EXPECT_EQ(Vh.sizes(), (Shape{2, 0, 0}));
}

// 2 x 2 singular values in closed form: s^2 = (T +- sqrt(T^2 - 4 D^2)) / 2,
// T the sum of squares, D the determinant.
std::pair<double, double> singular_values_2x2(double a, double b, double c, double d) {
  const double T = a * a + b * b + c * c + d * d, D = a * d - b * c;
  const double root = std::sqrt(std::max(T * T - 4 * D * D, 0.0));
  return {std::sqrt((T + root) / 2), std::sqrt(std::max((T - root) / 2, 0.0))};
}

TEST(Linalg, NormsMatchTheirDefinitions) {
  manual_seed(5108);
  const Tensor A = randn({3, 2, 2}, kFloat64);
  const Matrices M(A);
  std::vector<double> fro, one, minus_one, inf, minus_inf, two, minus_two, nuc;
  for (int64_t b = 0; b < 3; ++b) {
    double squares = 0;
    std::vector<double> col(2, 0), row(2, 0);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        squares += M.at(b, i, j) * M.at(b, i, j);
        col[static_cast<size_t>(j)] += std::fabs(M.at(b, i, j));
        row[static_cast<size_t>(i)] += std::fabs(M.at(b, i, j));
      }
    fro.push_back(std::sqrt(squares));
    one.push_back(std::max(col[0], col[1])), minus_one.push_back(std::min(col[0], col[1]));
    inf.push_back(std::max(row[0], row[1])), minus_inf.push_back(std::min(row[0], row[1]));
    const auto [s1, s2] = singular_values_2x2(M.at(b, 0, 0), M.at(b, 0, 1), M.at(b, 1, 0), M.at(b, 1, 1));
    two.push_back(s1), minus_two.push_back(s2), nuc.push_back(s1 + s2);
  }
  expect_close(linalg::matrix_norm(A), fro, 1e-12, 1e-12, "fro");
  expect_close(linalg::matrix_norm(A, "nuc"), nuc, 1e-10, 1e-10, "nuc");
  expect_close(linalg::matrix_norm(A, 1.0), one, 1e-12, 1e-12, "1");
  expect_close(linalg::matrix_norm(A, -1.0), minus_one, 1e-12, 1e-12, "-1");
  expect_close(linalg::matrix_norm(A, kInf), inf, 1e-12, 1e-12, "inf");
  expect_close(linalg::matrix_norm(A, -kInf), minus_inf, 1e-12, 1e-12, "-inf");
  expect_close(linalg::matrix_norm(A, 2.0), two, 1e-10, 1e-10, "2");
  expect_close(linalg::matrix_norm(A, -2.0), minus_two, 1e-8, 1e-8, "-2");
  // Other dims, keepdim: the batch dim moved to the end.
  const Tensor moved = A.permute({1, 2, 0});
  EXPECT_EQ(linalg::matrix_norm(moved, 1.0, {0, 1}, true).sizes(), (Shape{1, 1, 3}));
  expect_close(linalg::matrix_norm(moved, 1.0, {0, 1}), one, 1e-12, 1e-12, "1 over dims (0, 1)");
  expect_close(linalg::matrix_norm(moved, "nuc", {0, 1}, true), nuc, 1e-10, 1e-10, "nuc keepdim");
  EXPECT_EQ(linalg::matrix_norm(moved, 2.0, {1, 0}, true).sizes(), (Shape{1, 1, 3}));
  // Vector norms and linalg.norm's choice.
  const Tensor v = randn({7}, kFloat64);
  double s1 = 0, s2 = 0, s3 = 0, amax_v = 0;
  for (double x : values(v)) s1 += std::fabs(x), s2 += x * x, s3 += std::pow(std::fabs(x), 3), amax_v = std::max(amax_v, std::fabs(x));
  EXPECT_NEAR(linalg::vector_norm(v).item<double>(), std::sqrt(s2), 1e-12);
  EXPECT_NEAR(linalg::vector_norm(v, 1).item<double>(), s1, 1e-12);
  EXPECT_NEAR(linalg::vector_norm(v, 3).item<double>(), std::cbrt(s3), 1e-12);
  EXPECT_EQ(linalg::vector_norm(v, kInf).item<double>(), amax_v);
  EXPECT_NEAR(linalg::norm(v).item<double>(), std::sqrt(s2), 1e-12);
  EXPECT_NEAR(linalg::norm(v, 1.0).item<double>(), s1, 1e-12);
  EXPECT_NEAR(linalg::norm(A).item<double>(), std::sqrt(fro[0] * fro[0] + fro[1] * fro[1] + fro[2] * fro[2]), 1e-12);
  expect_close(linalg::norm(A, 2.0, Shape{1, 2}), two, 1e-10, 1e-10, "norm ord 2 dims (1, 2)");
  expect_close(linalg::norm(A, "nuc", Shape{-2, -1}), nuc, 1e-10, 1e-10, "norm nuc");
  EXPECT_NEAR(linalg::norm(A.select(0, 0), kInf).item<double>(), inf[0], 1e-12);  // 2-D: the matrix norm
  EXPECT_EQ(linalg::norm(A, 1.0, Shape{2}).sizes(), (Shape{3, 2}));
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

TEST(Linalg, Gradients) {
  manual_seed(5109);
  const Tensor A = well_conditioned({2, 4, 4}, kFloat64).requires_grad_();
  const Tensor B = randn({2, 4, 3}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::inv(in[0])}; }, {A}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::solve(in[0], in[1])}; }, {A, B}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::solve(in[0], in[1], false)}; },
      {A, randn({2, 3, 4}, kFloat64).requires_grad_()}));
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::det(in[0])}; }, {A}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{std::get<1>(linalg::slogdet(in[0]))}; }, {A}));
  EXPECT_TRUE(autograd::gradgradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::inv(in[0])}; }, {A}));
  EXPECT_TRUE(autograd::gradgradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::det(in[0])}; }, {A}));
  // det at a singular matrix: the cofactors, not NaN.
  const Tensor S = tensor(std::vector<double>{1, 2, 2, 4}).reshape({2, 2}).requires_grad_();
  linalg::det(S).backward();
  expect_close(S.grad(), {4, -2, -2, 1}, 1e-12, 1e-12, "det's gradient at a singular matrix");
  // Symmetric inputs through X X^T + n I and X + X^T: the symmetric
  // gradient convention is what these see.
  const Tensor X = randn({2, 4, 4}, kFloat64).requires_grad_();
  auto spd_of = [](const Tensor& x) { return matmul(x, x.transpose(-1, -2)) + 4 * eye(4, {}, kFloat64); };
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::cholesky(spd_of(in[0]))}; }, {X}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::cholesky(spd_of(in[0]), true)}; }, {X}));
  EXPECT_TRUE(autograd::gradgradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::cholesky(spd_of(in[0]))}; }, {X}));
  // Gauge-invariant functions of eigenvectors and singular vectors (their
  // signs are arbitrary): V diag(c) V^T, U diag(c) Vh, U diag(c) U^T.
  const Tensor c4 = randn({4}, kFloat64), c3 = randn({3}, kFloat64);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        const auto [w, V] = linalg::eigh(in[0] + in[0].transpose(-1, -2));
        return std::vector<Tensor>{w, matmul(V * c4, V.transpose(-1, -2))};
      },
      {X}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::eigvalsh(in[0] + in[0].transpose(-1, -2))}; },
      {X}));
  for (const Shape& shape : {Shape{2, 5, 3}, Shape{2, 3, 5}, Shape{2, 4, 3, 3}}) {
    const Tensor Y = randn(shape, kFloat64).requires_grad_();
    const Tensor c = shape == Shape{2, 4, 3, 3} ? c3 : c3;
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          const auto [U, s, Vh] = linalg::svd(in[0], false);
          return std::vector<Tensor>{s, matmul(U * c, Vh), matmul(U * c, U.transpose(-1, -2)),
                                     matmul(Vh.transpose(-1, -2) * c, Vh)};
        },
        {Y})) << shape_text(shape);
    EXPECT_TRUE(autograd::gradcheck(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::svdvals(in[0])}; }, {Y}));
    // Full matrices: S alone carries a gradient.
    EXPECT_TRUE(autograd::gradcheck(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{std::get<1>(linalg::svd(in[0], true))}; }, {Y}));
    EXPECT_TRUE(autograd::gradcheck(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::matrix_norm(in[0], "nuc")}; }, {Y}));
  }
  for (const std::string mode : {"reduced", "r"}) {
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          const auto [Q, R] = linalg::qr(in[0], mode);
          return mode == "r" ? std::vector<Tensor>{R} : std::vector<Tensor>{Q, R};
        },
        {randn({2, 5, 3}, kFloat64).requires_grad_()})) << mode;
  }
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const auto [Q, R] = linalg::qr(in[0], "complete");
        return std::vector<Tensor>{Q, R};
      },
      {randn({4, 4}, kFloat64).requires_grad_()}));
  for (double ord : {1.0, -1.0, 2.0, kInf})
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linalg::matrix_norm(in[0], ord)}; },
        {randn({3, 4}, kFloat64).requires_grad_()})) << ord;
}

TEST(Linalg, Errors) {
  const Tensor singular = tensor(std::vector<double>{1, 2, 2, 4}).reshape({2, 2});
  expect_error([&] { linalg::inv(singular); }, {"[linalg.inv]", "singular", "diagonal element 2"});
  expect_error([&] { linalg::inv(stack({eye(2, {}, kFloat64), singular})); }, {"[linalg.inv]", "(batch element 1)"});
  expect_error([&] { linalg::solve(singular, ones({2, 1}, kFloat64)); }, {"[linalg.solve]", "singular"});
  expect_error([] { linalg::inv(randn({2, 3})); }, {"[linalg.inv]", "square", "[2, 3]"});
  expect_error([] { linalg::det(randn({3})); }, {"[linalg.det]", "2 or more dims", "[3]"});
  expect_error([] { linalg::inv(eye(2, {}, kInt64)); }, {"[linalg.inv]", "float32 or float64", "int64"});
  expect_error([] { linalg::inv(eye(2, {}, kFloat16)); }, {"[linalg.inv]", "float16"});
  expect_error([] { linalg::solve(eye(3), ones({2, 1})); }, {"[linalg.solve]", "[3, 3]", "[2, 1]", "(..., 3, k)"});
  expect_error([] { linalg::solve(eye(3), ones({3, 1}, kFloat64)); }, {"[linalg.solve]", "dtype", "float64"});
  expect_error([] { linalg::solve(eye(2).expand({2, 2, 2}), ones({3, 2, 1})); }, {"broadcast"});
  expect_error([&] { linalg::cholesky(-eye(3, {}, kFloat64)); }, {"[linalg.cholesky]", "positive-definite", "order 1"});
  expect_error([&] { linalg::cholesky(singular); }, {"[linalg.cholesky]", "order 2"});
  expect_error([] { linalg::qr(randn({3, 3}), "economic"); }, {"[linalg.qr]", "'economic'", "'reduced'"});
  expect_error([] { linalg::eigh(randn({3, 3}), "X"); }, {"[linalg.eigh]", "UPLO", "'X'"});
  expect_error([] { linalg::eigh(full({2, 2}, NAN)); }, {"[linalg.eigh]", "non-finite"});
  expect_error([] { linalg::svd(tensor(std::vector<float>{1, INFINITY, 0, 1}).reshape({2, 2})); },
               {"[linalg.svd]", "non-finite"});
  expect_error([] { linalg::svdvals(tensor(std::vector<float>{1, NAN}).reshape({1, 2})); }, {"[linalg.svd]", "non-finite"});
  expect_error([] { linalg::matrix_norm(randn({3, 3}), 3.0); }, {"[linalg.matrix_norm]", "expected ord", "3"});
  expect_error([] { linalg::matrix_norm(randn({3, 3}), "abs"); }, {"[linalg.matrix_norm]", "'abs'"});
  expect_error([] { linalg::matrix_norm(randn({3}), "fro"); }, {"[linalg.matrix_norm]", "2 or more dims"});
  expect_error([] { linalg::matrix_norm(randn({3, 3}), "fro", {1, -1}); }, {"[linalg.matrix_norm]", "two different dims"});
  expect_error([] { linalg::norm(randn({2, 3, 3}), 2.0); }, {"[linalg.norm]", "1-D or 2-D", "[2, 3, 3]"});
  expect_error([] { linalg::norm(randn({2, 3, 3}), "fro"); }, {"[linalg.norm]", "'fro'", "2-D"});
  expect_error([] { linalg::vector_norm(arange(3)); }, {"[linalg.vector_norm]", "floating point", "int64"});
  // Derivatives that do not exist.
  expect_error([] {
    const Tensor A = randn({4, 2}, kFloat64).requires_grad_();
    std::get<0>(linalg::svd(A, true)).sum().backward();
  }, {"[linalg.svd]", "full_matrices=True", "[4, 2]"});
  expect_error([] {
    const Tensor A = randn({2, 4}, kFloat64).requires_grad_();
    std::get<1>(linalg::qr(A)).sum().backward();
  }, {"[linalg.qr]", "rows >= columns", "[2, 4]"});
}

}  // namespace
}  // namespace kiln::test
