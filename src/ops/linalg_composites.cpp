// Products composed of matmul/bmm and elementwise ops (autograd and
// compile come with them): outer, dot, vdot, addmm, addbmm, baddbmm,
// tensordot, kron, cross, cdist, with PyTorch's argument checks.
#include <algorithm>
#include <numeric>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"

namespace kiln {
namespace {

void check_vectors(const char* op, const Tensor& a, const Tensor& b) {
  check(a.dim() == 1 && b.dim() == 1, op, "expected 1-D tensors but got shapes ", shape_text(a.sizes()), " and ",
        shape_text(b.sizes()));
}

// beta * input + alpha * product; beta = 0 ignores input (its NaN and inf
// too), as PyTorch does.
Tensor scaled_sum(const Tensor& input, const Tensor& product, double beta, double alpha) {
  const Tensor p = alpha == 1 ? product : product * alpha;
  if (beta == 0) return p + zeros_like(input).expand(p.sizes());  // the broadcast shape, input's values unread
  return (beta == 1 ? input : input * beta) + p;
}

}  // namespace

Tensor outer(const Tensor& a, const Tensor& b) {
  check_vectors("outer", a, b);
  return a.unsqueeze(1) * b.unsqueeze(0);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_vectors("dot", a, b);
  check(a.size(0) == b.size(0), "dot", "expected tensors of the same length but got ", a.size(0), " and ", b.size(0));
  check(a.dtype() == b.dtype(), "dot", "expected both tensors of one dtype but got ", a.dtype(), " and ", b.dtype());
  return sum(a * b);
}

Tensor vdot(const Tensor& a, const Tensor& b) { return dot(a, b); }  // real tensors: no conjugate

Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta, double alpha) {
  check(m1.dim() == 2 && m2.dim() == 2, "addmm", "expected 2-D matrices but got ", shape_text(m1.sizes()), " and ",
        shape_text(m2.sizes()));
  check(m1.size(1) == m2.size(0), "addmm", "shapes ", shape_text(m1.sizes()), " and ", shape_text(m2.sizes()),
        " cannot be multiplied");
  return scaled_sum(input, matmul(m1, m2), beta, alpha);
}

Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  check(b1.dim() == 3 && b2.dim() == 3 && b1.size(0) == b2.size(0) && b1.size(2) == b2.size(1), "baddbmm",
        "expected batches (b, n, m) and (b, m, p) but got ", shape_text(b1.sizes()), " and ", shape_text(b2.sizes()));
  return scaled_sum(input, bmm(b1, b2), beta, alpha);
}

Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  check(b1.dim() == 3 && b2.dim() == 3 && b1.size(0) == b2.size(0) && b1.size(2) == b2.size(1), "addbmm",
        "expected batches (b, n, m) and (b, m, p) but got ", shape_text(b1.sizes()), " and ", shape_text(b2.sizes()));
  return scaled_sum(input, sum(bmm(b1, b2), {0}), beta, alpha);
}

Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b) {
  check(dims_a.size() == dims_b.size(), "tensordot", "dims ", shape_text(dims_a), " and ", shape_text(dims_b),
        " must have the same length");
  Shape da, db;
  int64_t contracted = 1;
  for (size_t i = 0; i < dims_a.size(); ++i) {
    da.push_back(dims_a[i] < 0 ? dims_a[i] + a.dim() : dims_a[i]);
    db.push_back(dims_b[i] < 0 ? dims_b[i] + b.dim() : dims_b[i]);
    check(da.back() >= 0 && da.back() < a.dim() && db.back() >= 0 && db.back() < b.dim(), "tensordot", "dims ",
          shape_text(dims_a), " / ", shape_text(dims_b), " are out of range for shapes ", shape_text(a.sizes()),
          " and ", shape_text(b.sizes()));
    check(std::count(da.begin(), da.end(), da.back()) == 1 && std::count(db.begin(), db.end(), db.back()) == 1,
          "tensordot", "a dim appears twice in ", shape_text(dims_a), " / ", shape_text(dims_b));
    check(a.size(da.back()) == b.size(db.back()), "tensordot", "contracted dims differ in size: ", a.size(da.back()),
          " (dim ", da.back(), " of ", shape_text(a.sizes()), ") and ", b.size(db.back()), " (dim ", db.back(), " of ",
          shape_text(b.sizes()), ")");
    contracted *= a.size(da.back());
  }
  // a as (free, contracted), b as (contracted, free): one matmul.
  Shape perm_a, perm_b, out_shape;
  int64_t free_a = 1, free_b = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (std::find(da.begin(), da.end(), d) == da.end()) perm_a.push_back(d), out_shape.push_back(a.size(d)), free_a *= a.size(d);
  perm_a.insert(perm_a.end(), da.begin(), da.end());
  perm_b = db;
  for (int64_t d = 0; d < b.dim(); ++d)
    if (std::find(db.begin(), db.end(), d) == db.end()) perm_b.push_back(d), out_shape.push_back(b.size(d)), free_b *= b.size(d);
  const Tensor product = matmul(a.permute(perm_a).reshape({free_a, contracted}), b.permute(perm_b).reshape({contracted, free_b}));
  return product.reshape(out_shape);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  check(dims >= 0 && dims <= a.dim() && dims <= b.dim(), "tensordot", "cannot contract ", dims, " dims of shapes ",
        shape_text(a.sizes()), " and ", shape_text(b.sizes()));
  Shape da, db;
  for (int64_t i = 0; i < dims; ++i) da.push_back(a.dim() - dims + i), db.push_back(i);
  return tensordot(a, b, da, db);
}

Tensor kron(const Tensor& a, const Tensor& b) {
  const int64_t n = std::max(a.dim(), b.dim());
  // Both with n dims (leading 1s); a as (a0, 1, a1, 1, ...) times b as (1, b0, 1, b1, ...).
  Shape as(static_cast<size_t>(n - a.dim()), 1), bs(static_cast<size_t>(n - b.dim()), 1);
  as.insert(as.end(), a.sizes().begin(), a.sizes().end());
  bs.insert(bs.end(), b.sizes().begin(), b.sizes().end());
  Shape av, bv, out;
  for (int64_t i = 0; i < n; ++i) {
    av.insert(av.end(), {as[i], 1});
    bv.insert(bv.end(), {1, bs[i]});
    out.push_back(as[i] * bs[i]);
  }
  return (a.reshape(av) * b.reshape(bv)).reshape(out);
}

Tensor cross(const Tensor& a, const Tensor& b, int64_t dim) {
  const char* op = "cross";
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  const Tensor x = a.expand(shape), y = b.expand(shape);
  const int64_t n = static_cast<int64_t>(shape.size());
  check(dim >= -n && dim < n, op, "dim ", dim, " is out of range for ", n, "-d inputs");
  const int64_t d = dim < 0 ? dim + n : dim;
  check(shape[static_cast<size_t>(d)] == 3, op, "expected size 3 at dim ", d, " but got inputs ",
        shape_text(a.sizes()), " and ", shape_text(b.sizes()));
  // c_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1} (indices mod 3).
  auto shifted = [&](const Tensor& t, int64_t k) { return roll(t, {-k}, {d}); };
  return shifted(x, 1) * shifted(y, 2) - shifted(x, 2) * shifted(y, 1);
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  const char* op = "cdist";
  check(x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1), op,
        "expected (..., P, M) and (..., R, M) inputs but got ", shape_text(x1.sizes()), " and ", shape_text(x2.sizes()));
  check(p >= 0, op, "p must be non-negative but got ", p);
  check(is_floating(x1.dtype()) && is_floating(x2.dtype()), op, "expected floating inputs but got ", x1.dtype(),
        " and ", x2.dtype());
  // Every pair's difference, then its p-norm (exact: no |a|^2 + |b|^2 - 2ab cancellation).
  return norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, {-1});
}

namespace {
const bool registered = [] {
  ops::def<&outer>("outer(Tensor self, Tensor vec2) -> Tensor");
  ops::def<&dot>("dot(Tensor self, Tensor tensor) -> Tensor");
  ops::def<&vdot>("vdot(Tensor self, Tensor other) -> Tensor");
  ops::def<&addmm>("addmm(Tensor self, Tensor mat1, Tensor mat2, *, float beta=1, float alpha=1) -> Tensor");
  ops::def<&addbmm>("addbmm(Tensor self, Tensor batch1, Tensor batch2, *, float beta=1, float alpha=1) -> Tensor");
  ops::def<&baddbmm>("baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, float beta=1, float alpha=1) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, const Tensor&, const Shape&, const Shape&)>(&tensordot)>(
      "tensordot(Tensor self, Tensor other, int[] dims_self, int[] dims_other) -> Tensor");
  ops::def<&kron>("kron(Tensor self, Tensor other) -> Tensor");
  ops::def<&cross>("linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> Tensor");
  ops::def<&cdist>("cdist(Tensor x1, Tensor x2, float p=2.0) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
