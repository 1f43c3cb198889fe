// Lookups in sorted data: searchsorted and bucketize (a binary search per
// value, src/kernels/cpu/search_kernels.cpp), unique and unique_consecutive
// (composites of sort, comparisons, cumsum and bincount).
#include <optional>
#include <string>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

std::vector<TensorMeta> searchsorted_shape(std::span<const Tensor> in, const Attrs& a) {
  return ops::one_output(in[1].sizes(), a.get_dtype("dtype"));
}
const OpDef& kSearchsorted = register_op(ops::with_backward(
    OpDef{"searchsorted", "searchsorted(Tensor sorted_sequence, Tensor self, bool right, *, ScalarType dtype) -> Tensor",
          OpKind::Compute, searchsorted_shape},
    &autograd::kNotDifferentiable));

// Groups of equal neighbours in `ordered` (1-d; NaN equals nothing, so each
// NaN is a group of its own): the first of each group, each element's group
// placed back at the position `order` gives it, and each group's size.
std::tuple<Tensor, Tensor, Tensor> groups_of(const Tensor& ordered, const Tensor& order, const Shape& sizes) {
  const int64_t n = ordered.numel();
  if (n == 0) return {ordered.clone(), zeros(sizes, kInt64), zeros({0}, kInt64)};
  const Tensor starts = cat({ones({1}, kBool), ne(ordered.slice(0, 1, n), ordered.slice(0, 0, n - 1))});
  const Tensor group = cumsum(starts.to(kInt64), 0) - 1;
  const Tensor inverse = scatter(zeros({n}, kInt64), 0, order, group).reshape(sizes);
  return {masked_select(ordered, starts), inverse, bincount(group)};
}

}  // namespace

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32, bool right,
                    const std::optional<std::string>& side, const Tensor& sorter) {
  const char* op = "searchsorted";
  check(sorted_sequence.dim() >= 1, op, "expected a boundaries tensor of at least 1 dimension but got shape ",
        shape_text(sorted_sequence.sizes()));
  if (side) {
    check(*side == "left" || *side == "right", op, "side must be 'left' or 'right' but got '", *side, "'");
    check(!(right && *side == "left"), op, "side='left' and right=True contradict each other");
  }
  const bool upper = right || (side && *side == "right");
  if (sorted_sequence.dim() > 1) {
    bool leading_match = values.dim() == sorted_sequence.dim();
    for (int64_t d = 0; leading_match && d + 1 < values.dim(); ++d)
      leading_match = values.size(d) == sorted_sequence.size(d);
    check(leading_match, op, "boundaries of shape ", shape_text(sorted_sequence.sizes()),
          " must be 1-D or share all but the last dimension with the values, of shape ", shape_text(values.sizes()));
  }
  Tensor bounds = sorted_sequence;
  if (sorter.defined()) {
    check(sorter.sizes() == sorted_sequence.sizes(), op, "sorter of shape ", shape_text(sorter.sizes()),
          " must have the boundaries' shape ", shape_text(sorted_sequence.sizes()));
    check(sorter.dtype() == kInt64, op, "expected an int64 sorter but got ", sorter.dtype());
    bounds = take_along_dim(sorted_sequence, sorter, -1);
  }
  const DType common = promote_types(bounds.dtype(), values.dtype());
  return ops::call(kSearchsorted, {bounds.to(common).contiguous(), values.to(common).contiguous()},
                   {{"right", upper}, {"dtype", out_int32 ? kInt32 : kInt64}});
}

Tensor bucketize(const Tensor& x, const Tensor& boundaries, bool out_int32, bool right) {
  check(boundaries.dim() == 1, "bucketize", "expected 1-D boundaries but got shape ", shape_text(boundaries.sizes()));
  return searchsorted(boundaries, x, out_int32, right);
}

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x) {
  const auto [ordered, order] = sort(x.reshape({-1}), 0);
  return groups_of(ordered, order, x.sizes());
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x) {
  const Tensor flat = x.reshape({-1});
  return groups_of(flat, arange(flat.numel()), x.sizes());
}

namespace {
const bool registered = [] {
  ops::def<&searchsorted>(
      "searchsorted(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, "
      "Tensor? sorter=None) -> Tensor");
  ops::def<&bucketize>("bucketize(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor");
  ops::def<&unique>("unique(Tensor self) -> (Tensor values, Tensor inverse, Tensor counts)");
  ops::def<&unique_consecutive>("unique_consecutive(Tensor self) -> (Tensor values, Tensor inverse, Tensor counts)");
  return true;
}();
}  // namespace

}  // namespace kiln
