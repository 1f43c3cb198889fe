// index_add, index_copy, index_fill (PyTorch's functional forms):
// composites of scatter / scatter_add, so autograd and kiln::compile come
// with them.
#include <algorithm>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

// Checks the index and returns dim wrapped.
int64_t check_index_along(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  check(index.dtype() == kInt64 || index.dtype() == kInt32, op, "expected an int64 or int32 index but got ",
        index.dtype());
  check(index.dim() <= 1, op, "expected a 0-d or 1-d index but got shape ", shape_text(index.sizes()));
  return ops::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
}

// index along dim, broadcast to `sizes` (whose dim has the index's length):
// the scatter index that sends slice i to slice index[i].
Tensor spread_index(const Tensor& index, int64_t dim, const Shape& sizes) {
  Shape view(sizes.size(), 1);
  view[static_cast<size_t>(dim)] = index.numel();
  return index.to(kInt64).reshape(view).expand(sizes);
}

// source laid out as x with dim resized to the index's length, else an error.
Tensor checked_source(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  check(source.dtype() == x.dtype(), op, "expected source of x's dtype ", x.dtype(), " but got ", source.dtype());
  Shape want = ops::at_least_1d(x).sizes();
  want[static_cast<size_t>(dim)] = index.numel();
  const Tensor s = ops::at_least_1d(source);
  check(s.sizes() == want, op, "expected source of shape ", shape_text(want), " (x ", shape_text(x.sizes()),
        " with dim ", dim, " of the index's length ", index.numel(), ") but got ", shape_text(source.sizes()));
  return s;
}

// Runs a scatter, naming `op` in its errors (an index out of range).
template <class F>
Tensor scattering(const char* op, const Tensor& x, F f) {
  try {
    const Tensor r = f();
    return x.dim() == 0 ? r.reshape({}) : r;
  } catch (const Error& e) {
    fail(op, e.what());
  }
}

}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  const char* op = "index_add";
  const int64_t d = check_index_along(op, x, dim, index);
  const Tensor s = checked_source(op, x, d, index, source);
  return scattering(op, x, [&] { return scatter_add(ops::at_least_1d(x), d, spread_index(index, d, s.sizes()), s * alpha); });
}

Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const char* op = "index_copy";
  const int64_t d = check_index_along(op, x, dim, index);
  const Tensor s = checked_source(op, x, d, index, source);
  return scattering(op, x, [&] { return scatter(ops::at_least_1d(x), d, spread_index(index, d, s.sizes()), s); });
}

Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, Scalar value) {
  const char* op = "index_fill";
  const int64_t d = check_index_along(op, x, dim, index);
  Shape sizes = ops::at_least_1d(x).sizes();
  sizes[static_cast<size_t>(d)] = index.numel();
  const Tensor fill = full(sizes, value, TensorOptions(x.dtype()).device(x.device()));
  return scattering(op, x, [&] { return scatter(ops::at_least_1d(x), d, spread_index(index, d, sizes), fill); });
}

namespace {
const bool registered = [] {
  ops::def<&index_add>("index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor");
  ops::def<&index_copy>("index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor");
  ops::def<&index_fill>("index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor");
  return true;
}();
}  // namespace

// The in-place forms write the functional result back (copy_: autograd
// treats them as PyTorch treats its in-place ops).
const Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha,
                                 SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(index_add(*this, dim, index, source, alpha));
}
const Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source, SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(index_copy(*this, dim, index, source));
}
const Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, Scalar value, SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(index_fill(*this, dim, index, value));
}
const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src, SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(scatter(*this, dim, index, src));
}
const Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(scatter_add(*this, dim, index, src));
}

}  // namespace kiln
