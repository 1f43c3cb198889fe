// torch.linalg's basics: decompositions and solvers through LAPACK, and the
// vector and matrix norms. Inputs are float32 or float64 matrices with any
// leading batch dims (..., m, n); every function is differentiable (the
// decompositions where their derivative exists: distinct eigenvalues,
// distinct nonzero singular values, full rank for QR).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <optional>
#include <string>
#include <tuple>

#include "kiln/tensor.h"

namespace kiln::linalg {

// A^{-1}; a singular matrix is an error naming the zero pivot.
Tensor inv(const Tensor& A);
// X with A X = B (left) or X A = B; B is (..., n, k) or a vector (..., n)
// when its batch dims are A's (PyTorch's rule); batch dims broadcast.
Tensor solve(const Tensor& A, const Tensor& B, bool left = true);
// The determinant; (sign, log |det|) for large or small determinants.
Tensor det(const Tensor& A);
std::tuple<Tensor, Tensor> slogdet(const Tensor& A);
// L, lower triangular with A = L L^T, for symmetric positive-definite A
// (its lower triangle is read); upper: U = L^T, A = U^T U.
Tensor cholesky(const Tensor& A, bool upper = false);
// A = Q R; mode "reduced" (Q m x k, R k x n, k = min(m, n)), "complete"
// (Q m x m, R m x n) or "r" (R only; Q empty).
std::tuple<Tensor, Tensor> qr(const Tensor& A, const std::string& mode = "reduced");
// Eigenvalues (ascending) and orthonormal eigenvectors (columns) of
// symmetric A, reading its lower ("L") or upper ("U") triangle.
std::tuple<Tensor, Tensor> eigh(const Tensor& A, const std::string& UPLO = "L");
Tensor eigvalsh(const Tensor& A, const std::string& UPLO = "L");
// A = U diag(S) Vh, S descending; full_matrices: U m x m and Vh n x n,
// else m x k and k x n.
std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& A, bool full_matrices = true);
Tensor svdvals(const Tensor& A);

// The ord-norm over dim (empty: all elements): sum |x|^ord ^ (1/ord); inf,
// -inf: max, min |x|; 0: the count of nonzeros.
Tensor vector_norm(const Tensor& x, double ord = 2, Shape dim = {}, bool keepdim = false);
// Over the two dims of dim: "fro" or "nuc" (the sum of singular values),
// or a number: 1, -1 (max, min column sum of |a|), inf, -inf (row sums),
// 2, -2 (largest, smallest singular value).
Tensor matrix_norm(const Tensor& A, const std::string& ord = "fro", Shape dim = {-2, -1}, bool keepdim = false);
Tensor matrix_norm(const Tensor& A, double ord, Shape dim = {-2, -1}, bool keepdim = false);
// A vector norm when dim has one dim, or when neither is given (of all
// elements, ord 2); a matrix norm when dim has two dims or ord is given
// for a 2-D input. The string form takes a matrix norm's "fro" or "nuc".
Tensor norm(const Tensor& A, std::optional<double> ord = {}, std::optional<Shape> dim = {}, bool keepdim = false);
Tensor norm(const Tensor& A, const std::string& ord, std::optional<Shape> dim = {}, bool keepdim = false);

}  // namespace kiln::linalg

KILN_API_END
