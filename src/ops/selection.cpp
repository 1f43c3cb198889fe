// Ops whose result size depends on the values: nonzero, masked_select,
// bincount, histc. Each reads one concrete number (a count, a largest
// value), as PyTorch synchronises for them (under kiln::compile: a graph
// break), and is otherwise composed of ops (cumsum, scatter, scatter_add,
// index_select), so autograd and devices come with them.
#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"

namespace kiln {
namespace {

// The positions (int64, ascending) of the true elements of a flat bool tensor.
Tensor true_positions(const Tensor& flat) {
  const TensorOptions int64s = TensorOptions(kInt64).device(flat.device());
  const Tensor as_int = flat.to(kInt64);
  const int64_t count = sum(as_int).item<int64_t>();
  // True element i goes to slot (number of trues before it); the others to
  // a spare slot `count`, dropped after.
  const Tensor slot = where(flat, cumsum(as_int, 0) - 1, full({}, count, int64s));
  return scatter(zeros({count + 1}, int64s), 0, slot, arange(flat.numel(), int64s)).narrow(0, 0, count);
}

Tensor nonzero_mask(const Tensor& x) { return x.dtype() == kBool ? x : ne(x, wrapped_scalar(0)); }

}  // namespace

Tensor nonzero(const Tensor& x) {
  const Tensor flat_index = true_positions(nonzero_mask(x).reshape({-1}));
  // Row-major coordinates of each flat index, one column per dim.
  std::vector<Tensor> columns(static_cast<size_t>(x.dim()));
  int64_t stride = 1;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    columns[static_cast<size_t>(d)] = remainder(floor_divide(flat_index, wrapped_scalar(stride)), wrapped_scalar(x.size(d)));
    stride *= x.size(d);
  }
  if (columns.empty()) return empty({flat_index.size(0), 0}, TensorOptions(kInt64).device(x.device()));
  return stack(columns, 1);
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  check(mask.dtype() == kBool, "masked_select", "expected a bool mask but got ", mask.dtype());
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  return index_select(x.expand(shape).reshape({-1}), 0, true_positions(mask.expand(shape).reshape({-1})));
}

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  const char* op = "bincount";
  check(x.dim() == 1 && !is_floating(x.dtype()) && x.dtype() != kBool, op,
        "expected a 1-d tensor of integers but got ", x.dtype(), " of shape ", shape_text(x.sizes()));
  check(minlength >= 0, op, "minlength must be non-negative but got ", minlength);
  check(!weights.defined() || weights.sizes() == x.sizes(), op, "expected weights of the input's shape ",
        shape_text(x.sizes()), " but got ", shape_text(weights.defined() ? weights.sizes() : Shape{}));
  int64_t bins = minlength;
  if (x.numel() > 0) {
    const int64_t lo = amin(x).item<int64_t>(), hi = amax(x).item<int64_t>();
    check(lo >= 0, op, "expected non-negative values but got ", lo);
    bins = std::max(bins, hi + 1);
  }
  // float32 weights count in float32, other weights in float64 (as PyTorch).
  const DType out = !weights.defined() ? kInt64 : weights.dtype() == kFloat32 ? kFloat32 : kFloat64;
  const Tensor w = weights.defined() ? weights.to(out) : ones(x.sizes(), TensorOptions(kInt64).device(x.device()));
  return scatter_add(zeros({bins}, TensorOptions(out).device(x.device())), 0, x.to(kInt64), w);
}

Tensor histc(const Tensor& x, int64_t bins, Scalar min_value, Scalar max_value) {
  const char* op = "histc";
  double min = min_value.to_double(), max = max_value.to_double();
  check(is_floating(x.dtype()), op, "expected a floating point input but got ", x.dtype());
  check(bins > 0, op, "bins must be positive but got ", bins);
  check(!std::isnan(min) && !std::isnan(max) && min <= max, op, "expected min <= max but got min ", min, " and max ", max);
  if (min == max && x.numel() > 0) min = amin(x).item<double>(), max = amax(x).item<double>();
  if (min == max) min -= 1, max += 1;
  check(std::isfinite(min) && std::isfinite(max), op, "range of [", min, ", ", max, "] is not finite");
  // Elements in [min, max] (NaN never) count in bin floor((x - min) bins / (max - min)), max in the last.
  const Tensor in_range = logical_and(ge(x, wrapped_scalar(min)), le(x, wrapped_scalar(max)));
  const Tensor at = where(in_range, x, wrapped_scalar(min));
  const Tensor bin = clamp(floor((at - min) * (static_cast<double>(bins) / (max - min))), 0, bins - 1).to(kInt64);
  return scatter_add(zeros({bins}, TensorOptions(x.dtype()).device(x.device())), 0, bin.reshape({-1}),
                     in_range.to(x.dtype()).reshape({-1}));
}

namespace {
const bool registered = [] {
  ops::def<&nonzero>("nonzero(Tensor self) -> Tensor");
  ops::def<&masked_select>("masked_select(Tensor self, Tensor mask) -> Tensor");
  ops::def<&bincount>("bincount(Tensor self, Tensor? weights=None, int minlength=0) -> Tensor");
  ops::def<&histc>("histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
