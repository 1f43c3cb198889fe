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

// x[indices] = values (or += with accumulate): the indexed dims, which must
// be adjacent (undefined tensors before them are full slices), are moved to
// the front and flattened into one, so the update is an index_copy /
// index_add of rows. Indices broadcast together; negative ones count from
// the end; bool masks select their true positions. values broadcast to
// PyTorch's x[indices] shape: the dims before, the indices' shape, the dims after.
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  const char* op = "index_put";
  std::vector<Tensor> idx;
  int64_t first = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    const Tensor& t = indices[i];
    if (!t.defined()) {
      check(first < 0, op, "the indexed dims must be adjacent (a full slice at dim ", i, " lies between them)");
      continue;
    }
    if (first < 0) first = static_cast<int64_t>(i);
    check(first + static_cast<int64_t>(idx.size()) == static_cast<int64_t>(i), op,
          "the indexed dims must be adjacent (a full slice lies between them)");
    if (t.dtype() == kBool || t.dtype() == kUInt8) {
      // A mask covers as many dims of x as it has, each of the same size
      // (PyTorch's IndexError otherwise; nonzero alone would index a prefix).
      const int64_t at = first + static_cast<int64_t>(idx.size());
      check(at + t.dim() <= x.dim(), op, "too many indices: a mask of shape ", shape_text(t.sizes()), " at dim ", at,
            " of a tensor of shape ", shape_text(x.sizes()));
      for (int64_t d = 0; d < t.dim(); ++d)
        check(t.size(d) == x.size(at + d), op, "the shape of the mask ", shape_text(t.sizes()), " at index ", d,
              " does not match the shape of the indexed tensor ", shape_text(x.sizes()), " at index ", at + d);
      const Tensor coords = nonzero(t);  // one index per masked dim
      for (int64_t k = 0; k < t.dim(); ++k) idx.push_back(coords.select(1, k));
    } else {
      check(t.dtype() == kInt64 || t.dtype() == kInt32, op, "expected int64, int32 or bool indices but got ", t.dtype());
      idx.push_back(t.to(kInt64));
    }
  }
  const int64_t k = static_cast<int64_t>(idx.size());
  check(k > 0, op, "expected at least one index tensor");
  check(first + k <= x.dim(), op, "too many indices (", first + k, ") for a tensor of shape ", shape_text(x.sizes()));
  Shape common = idx[0].sizes();
  for (const Tensor& t : idx) common = broadcast_shapes(common, t.sizes(), op);
  std::vector<Tensor> b;
  for (const Tensor& t : idx) b.push_back(t.expand(common));
  int64_t rows = 1;
  Tensor linear = zeros(b[0].sizes(), kInt64);
  for (int64_t d = 0; d < k; ++d) {
    const int64_t size = x.size(first + d);
    const Tensor i = b[static_cast<size_t>(d)];
    if (i.numel() > 0)
      check(amin(i).item<int64_t>() >= -size && amax(i).item<int64_t>() < size, op, "index out of range for dim ",
            first + d, " of size ", size, " (x of shape ", shape_text(x.sizes()), ")");
    linear = linear * size + where(lt(i, zeros_like(i)), i + size, i);
    rows *= size;
  }
  // x with the indexed dims first and flattened; values likewise.
  Shape dims(static_cast<size_t>(k)), front(static_cast<size_t>(k));
  for (int64_t d = 0; d < k; ++d) dims[d] = first + d, front[d] = d;
  const Tensor moved = movedim(x, dims, front);
  const Tensor rows_of_x = moved.reshape({rows, -1});
  Shape target(x.sizes().begin(), x.sizes().begin() + first);
  const int64_t nb = b[0].dim();
  target.insert(target.end(), b[0].sizes().begin(), b[0].sizes().end());
  target.insert(target.end(), x.sizes().begin() + first + k, x.sizes().end());
  Shape vdims(static_cast<size_t>(nb)), vfront(static_cast<size_t>(nb));
  for (int64_t d = 0; d < nb; ++d) vdims[d] = first + d, vfront[d] = d;
  check(values.dtype() == x.dtype(), op, "expected values of x's dtype ", x.dtype(), " but got ", values.dtype());
  const Tensor v = movedim(broadcast_to(values, target), vdims, vfront).reshape({linear.numel(), rows_of_x.size(1)});
  const Tensor flat_index = linear.reshape({-1});
  const Tensor updated = accumulate ? index_add(rows_of_x, 0, flat_index, v) : index_copy(rows_of_x, 0, flat_index, v);
  return movedim(updated.reshape(moved.sizes()), front, dims);
}

// source's first elements, in order, into x's masked positions (mask
// broadcast to x).
Tensor masked_scatter(const Tensor& x, const Tensor& mask, const Tensor& source) {
  const char* op = "masked_scatter";
  check(mask.dtype() == kBool, op, "expected a bool mask but got ", mask.dtype());
  check(source.dtype() == x.dtype(), op, "expected source of x's dtype ", x.dtype(), " but got ", source.dtype());
  const Tensor m = broadcast_to(mask, x.sizes());
  const Tensor taken = cumsum(m.reshape({-1}).to(kInt64), 0);
  const int64_t count = taken.numel() ? taken.select(0, -1).item<int64_t>() : 0;
  check(count <= source.numel(), op, "the mask selects ", count, " elements but source has only ", source.numel());
  if (count == 0) return x.clone();
  const Tensor picks = index_select(source.reshape({-1}), 0, clamp(taken - 1, 0, std::nullopt)).reshape(x.sizes());
  return where(m, picks, x);
}

namespace {
const bool registered = [] {
  ops::def<&index_add>("index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor");
  ops::def<&index_copy>("index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor");
  ops::def<&index_fill>("index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor");
  ops::def<&index_put>("index_put(Tensor self, Tensor[] indices, Tensor values, bool accumulate=False) -> Tensor");
  ops::def<&masked_scatter>("masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor");
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
