// Scans beside cumsum (reduce.cpp): cumprod, cummax and cummin (the running
// extreme and the index it came from), logcumsumexp. Each is an op with its
// kernel (src/kernels/cpu/scan_kernels.cpp) and its backward declared here;
// a 0-d input is scanned as one element.
#include <limits>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

std::vector<TensorMeta> scan_shape(std::span<const Tensor> in, const Attrs& a) {
  return ops::one_output(in[0].sizes(), a.get_dtype("dtype"));
}
std::vector<TensorMeta> extreme_scan_shape(std::span<const Tensor> in, const Attrs&) {
  return {{in[0].sizes(), in[0].dtype()}, {in[0].sizes(), kInt64}};
}

const OpDef& kCumprodBackward = register_op(
    ops::with_backward(OpDef{"cumprod_backward", "cumprod_backward(Tensor grad, Tensor self, int dim) -> Tensor",
                             OpKind::Compute, ops::same_as_first},
                       &autograd::kNotDifferentiable));

constexpr autograd::BackwardDef kCumprodGrad{[](const BackwardContext& c) -> Grads {
  const Tensor g = c.grads[0].to(c.input_meta[0].dtype);
  return {ops::call(kCumprodBackward, {g, c.inputs[0]}, {{"dim", c.attrs.get_int("dim")}})};
}, autograd::kSaveInputs};
const OpDef& kCumprod = register_op(ops::with_backward(
    OpDef{"cumprod", "cumprod(Tensor self, int dim, *, ScalarType dtype) -> Tensor", OpKind::Compute, scan_shape},
    &kCumprodGrad));

// The gradient goes back to the position each running extreme came from.
constexpr autograd::BackwardDef kExtremeScanGrad{[](const BackwardContext& c) -> Grads {
  const Tensor& g = c.grads[0];
  return {scatter_add(zeros(c.input_meta[0].sizes, g.options()), c.attrs.get_int("dim"), c.outputs[1], g)};
}, autograd::kSaveOutputs};
const OpDef& kCummax = register_op(ops::with_backward(
    OpDef{"cummax", "cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)", OpKind::Compute,
          extreme_scan_shape},
    &kExtremeScanGrad));
const OpDef& kCummin = register_op(ops::with_backward(
    OpDef{"cummin", "cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)", OpKind::Compute,
          extreme_scan_shape},
    &kExtremeScanGrad));

Tensor logcumsumexp_reversed(const Tensor& x, int64_t dim) { return flip(logcumsumexp(flip(x, {dim}), dim), {dim}); }

// The most negative finite value of a float dtype.
double lowest_of(DType dt) {
  switch (dt) {
    case kFloat64: return std::numeric_limits<double>::lowest();
    case kFloat16: return -65504.0;
    case kBFloat16: return -3.3895313892515355e38;
    default: return std::numeric_limits<float>::lowest();
  }
}

// d out_i / d x_j = e^(x_j - out_i) for i >= j, summed against g in log
// space with g's positive and negative parts apart (PyTorch's formula), so
// no e^x or e^-out overflows. A part's missing entries are the dtype's
// lowest value, not -inf: -inf - -inf would make the double backward NaN
// (or, masked by where, wrong).
constexpr autograd::BackwardDef kLogcumsumexpGrad{[](const BackwardContext& c) -> Grads {
  const Tensor& g = c.grads[0];
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const Tensor none = full_like(g, lowest_of(g.dtype()));
  const Tensor zero = zeros_like(g);
  const Tensor log_pos = where(gt(g, zero), log(g), none), log_neg = where(lt(g, zero), log(-g), none);
  return {exp(logcumsumexp_reversed(log_pos - out, dim) + x) - exp(logcumsumexp_reversed(log_neg - out, dim) + x)};
}, autograd::kSaveBoth};
const OpDef& kLogcumsumexp = register_op(ops::with_backward(
    OpDef{"logcumsumexp", "logcumsumexp(Tensor self, int dim) -> Tensor", OpKind::Compute, ops::same_as_first},
    &kLogcumsumexpGrad));

std::tuple<Tensor, Tensor> extreme_scan(const OpDef& op, const Tensor& x, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), op.name.c_str());
  const std::vector<Tensor> r = dispatch(op, std::vector<Tensor>{ops::at_least_1d(x)}, {{"dim", d}});
  if (x.dim() == 0) return {r[0].reshape({}), r[1].reshape({})};
  return {r[0], r[1]};
}

}  // namespace

Tensor cumprod(const Tensor& x, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "cumprod");
  const DType out = is_floating(x.dtype()) ? x.dtype() : kInt64;
  const Tensor y = ops::call(kCumprod, {ops::at_least_1d(x)}, {{"dim", d}, {"dtype", out}});
  return x.dim() == 0 ? y.reshape({}) : y;
}

std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) { return extreme_scan(kCummax, x, dim); }
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) { return extreme_scan(kCummin, x, dim); }

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "logcumsumexp");
  check(is_floating(x.dtype()), "logcumsumexp", "expected a floating-point tensor, got ", x.dtype());
  const Tensor y = ops::call(kLogcumsumexp, {ops::at_least_1d(x)}, {{"dim", d}});
  return x.dim() == 0 ? y.reshape({}) : y;
}

namespace {
const bool registered = [] {
  ops::def<&cumprod>("cumprod(Tensor self, int dim) -> Tensor");
  ops::def<&cummax>("cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)");
  ops::def<&cummin>("cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)");
  ops::def<&logcumsumexp>("logcumsumexp(Tensor self, int dim) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
