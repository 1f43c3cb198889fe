// linalg's norms, composed of reductions and svdvals (their gradients come
// with them): vector_norm, matrix_norm, and norm choosing between the two
// as torch.linalg.norm does.
#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/linalg.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln::linalg {
namespace {

void check_float_input(const char* op, const Tensor& x) {
  check(is_floating(x.dtype()), op, "expected a floating point tensor but got ", x.dtype());
}

// dim's two dims wrapped, for a matrix norm of A.
std::pair<int64_t, int64_t> matrix_dims(const Tensor& A, const Shape& dim) {
  check_float_input("linalg.matrix_norm", A);
  check(A.dim() >= 2, "linalg.matrix_norm", "expected a tensor of 2 or more dims but got shape ", shape_text(A.sizes()));
  check(dim.size() == 2, "linalg.matrix_norm", "expected dim to name 2 dims but got ", shape_text(dim));
  const int64_t d0 = ops::wrap_dim(dim[0], A.dim(), "linalg.matrix_norm");
  const int64_t d1 = ops::wrap_dim(dim[1], A.dim(), "linalg.matrix_norm");
  check(d0 != d1, "linalg.matrix_norm", "expected two different dims but got ", shape_text(dim));
  return {d0, d1};
}

// A reduction of the singular values of the matrices in dims (d0, d1).
template <class Reduce>
Tensor singular_value_norm(const Tensor& A, int64_t d0, int64_t d1, bool keepdim, Reduce reduce) {
  Tensor r = reduce(svdvals(movedim(A, {d0, d1}, {-2, -1})));
  return keepdim ? r.unsqueeze(std::min(d0, d1)).unsqueeze(std::max(d0, d1)) : r;
}

}  // namespace

Tensor vector_norm(const Tensor& x, double ord, Shape dim, bool keepdim) {
  check_float_input("linalg.vector_norm", x);
  return kiln::norm(x, ord, std::move(dim), keepdim);
}

Tensor matrix_norm(const Tensor& A, const std::string& ord, Shape dim, bool keepdim) {
  const auto [d0, d1] = matrix_dims(A, dim);
  if (ord == "fro") return kiln::norm(A, 2.0, {d0, d1}, keepdim);
  check(ord == "nuc", "linalg.matrix_norm", "expected ord 'fro' or 'nuc' (or a number) but got '", ord, "'");
  return singular_value_norm(A, d0, d1, keepdim, [](const Tensor& s) { return sum(s, {-1}); });
}

Tensor matrix_norm(const Tensor& A, double ord, Shape dim, bool keepdim) {
  const auto [d0, d1] = matrix_dims(A, dim);
  const bool largest = ord > 0;
  if (std::fabs(ord) == 2)
    return singular_value_norm(A, d0, d1, keepdim,
                               [&](const Tensor& s) { return largest ? amax(s, {-1}) : amin(s, {-1}); });
  check(std::fabs(ord) == 1 || std::isinf(ord), "linalg.matrix_norm",
        "expected ord 1, -1, 2, -2, inf, -inf, 'fro' or 'nuc' but got ", ord);
  // ord 1: the extreme column sum (summed over rows, d0); inf: row sums.
  const int64_t summed = std::isinf(ord) ? d1 : d0, across = std::isinf(ord) ? d0 : d1;
  const Tensor sums = sum(abs(A), {summed}, true);
  const Tensor r = largest ? amax(sums, {across}, true) : amin(sums, {across}, true);
  return keepdim ? r : r.squeeze(std::max(d0, d1)).squeeze(std::min(d0, d1));
}

Tensor norm(const Tensor& A, std::optional<double> ord, std::optional<Shape> dim, bool keepdim) {
  if (dim) {
    check(dim->size() == 1 || dim->size() == 2, "linalg.norm", "expected dim to name 1 or 2 dims but got ",
          shape_text(*dim));
    if (dim->size() == 1) return vector_norm(A, ord.value_or(2.0), *dim, keepdim);
    return ord ? matrix_norm(A, *ord, *dim, keepdim) : matrix_norm(A, "fro", *dim, keepdim);
  }
  if (!ord) return vector_norm(A, 2.0, {}, keepdim);  // every element
  check(A.dim() == 1 || A.dim() == 2, "linalg.norm", "a number ord without dim needs a 1-D or 2-D input but got shape ",
        shape_text(A.sizes()));
  return A.dim() == 1 ? vector_norm(A, *ord, {}, keepdim) : matrix_norm(A, *ord, {-2, -1}, keepdim);
}

Tensor norm(const Tensor& A, const std::string& ord, std::optional<Shape> dim, bool keepdim) {
  check(dim || A.dim() == 2, "linalg.norm", "ord '", ord, "' without dim needs a 2-D input but got shape ",
        shape_text(A.sizes()));
  return matrix_norm(A, ord, dim.value_or(Shape{-2, -1}), keepdim);
}

namespace {
const bool registered = [] {
  ops::def<&vector_norm>("linalg_vector_norm(Tensor x, float ord=2, int[] dim=[], bool keepdim=False) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, const std::string&, Shape, bool)>(&matrix_norm)>(
      "linalg_matrix_norm.str_ord(Tensor A, str ord='fro', int[] dim=[-2,-1], bool keepdim=False) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, double, Shape, bool)>(&matrix_norm)>(
      "linalg_matrix_norm(Tensor A, float ord, int[] dim=[-2,-1], bool keepdim=False) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, std::optional<double>, std::optional<Shape>, bool)>(&norm)>(
      "linalg_norm(Tensor A, float? ord=None, int[]? dim=None, bool keepdim=False) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, const std::string&, std::optional<Shape>, bool)>(&norm)>(
      "linalg_norm.ord_str(Tensor A, str ord, int[]? dim=None, bool keepdim=False) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::linalg
