// Reductions. sum/prod/amax/amin/all/any are kernels; mean, var, std,
// logsumexp and norm are compositions of them (so autograd and the tracer
// get them for free).
#include <cmath>
#include <limits>

#include "ops/op_util.h"

namespace kiln {
namespace {


std::vector<TensorMeta> reduce_shape(std::span<const Tensor> in, const Attrs& a) {
  return ops::one_output(ops::reduced_shape(in[0].sizes(), a.get_shape("dims"), a.get_bool("keepdim")), a.get_dtype("dtype"));
}

// The backward formulas, written with ordinary ops.
using autograd::kSaveBoth;
using autograd::kSaveNone;
using autograd::kSaveOutputs;
using Ctx = autograd::BackwardContext;
using Grads = std::vector<Tensor>;
const Shape& in_shape(const Ctx& c) { return c.input_meta[0].sizes; }

// g of a reduction (keepdim or not) reshaped so it broadcasts against the input.
Tensor keepdim_grad(const Tensor& g, const Shape& input, const Shape& dims) {
  Shape s = input;
  for (int64_t d : dims) s[d] = 1;
  if (input.empty()) s = {};
  return g.reshape(s);
}

constexpr autograd::BackwardDef kSumGrad{[](const Ctx& c) -> Grads {
                                           return {keepdim_grad(c.grads[0], in_shape(c), c.attrs.get_shape("dims"))
                                                       .expand(in_shape(c))
                                                       .to(c.input_meta[0].dtype)};
                                         },
                                         kSaveNone};
// d(prod)/dx_i = prod / x_i; inputs with zeros use a where() to avoid 0/0.
constexpr autograd::BackwardDef kProdGrad{
    [](const Ctx& c) -> Grads {
      const Shape& dims = c.attrs.get_shape("dims");
      const Tensor& x = c.inputs[0];
      const Tensor y = keepdim_grad(c.outputs[0], in_shape(c), dims);
      const Tensor g = keepdim_grad(c.grads[0], in_shape(c), dims);
      const Tensor is_zero = eq(x, wrapped_scalar(0));
      const Tensor safe = where(is_zero, ones_like(x), x);
      const Tensor others = prod(safe, dims, true);  // product of the non-zero entries
      const Tensor zero_count = sum(is_zero.to(x.dtype()), dims, true);
      // One zero: its gradient is the product of the others; two or more: all zero.
      const Tensor when_zero = where(eq(zero_count, wrapped_scalar(1)), others, zeros_like(others));
      return {g * where(is_zero, when_zero.expand(x.sizes()), y / safe)};
    },
    kSaveBoth};
// amax / amin: shared evenly by the inputs equal to the result.
constexpr autograd::BackwardDef kExtremeGrad{
    [](const Ctx& c) -> Grads {
      const Shape& dims = c.attrs.get_shape("dims");
      const Tensor& x = c.inputs[0];
      const Tensor y = keepdim_grad(c.outputs[0], in_shape(c), dims);
      const Tensor mask = eq(x, y).to(x.dtype());
      return {keepdim_grad(c.grads[0], in_shape(c), dims) * mask / sum(mask, dims, true)};
    },
    kSaveBoth};
// max.dim / min.dim: the values' gradient scattered at the indices.
constexpr autograd::BackwardDef kExtremeDimGrad{[](const Ctx& c) -> Grads {
                                                  const int64_t dim = c.attrs.get_int("dim");
                                                  if (in_shape(c).empty()) return {c.grads[0]};
                                                  const bool kept = c.attrs.get_bool("keepdim");
                                                  const Tensor index =
                                                      kept ? c.outputs[1] : c.outputs[1].unsqueeze(dim);
                                                  const Tensor g = kept ? c.grads[0] : c.grads[0].unsqueeze(dim);
                                                  return {scatter(zeros(in_shape(c), g.options()), dim, index, g)};
                                                },
                                                kSaveOutputs};
// A scan the other way: cumsum's gradient is a reversed cumsum, and a reversed one's a forward one.
constexpr autograd::BackwardDef kCumsumGrad{
    [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor g = c.grads[0].to(c.input_meta[0].dtype);
      return {c.attrs.get_bool("reverse") ? cumsum(g, dim) : cumsum_backward(g, dim)};
    },
    kSaveNone};

OpDef reduce_def(const char* name, const autograd::BackwardDef* backward) {
  return ops::with_backward(
      OpDef{name, std::string(name) + "(Tensor self, int[] dims, bool keepdim, *, ScalarType dtype) -> Tensor",
            OpKind::Compute, reduce_shape},
      backward);
}
const OpDef& kSum = register_op(reduce_def("sum", &kSumGrad));
const OpDef& kProd = register_op(reduce_def("prod", &kProdGrad));
const OpDef& kAmax = register_op(reduce_def("amax", &kExtremeGrad));
const OpDef& kAmin = register_op(reduce_def("amin", &kExtremeGrad));
const OpDef& kAll = register_op(reduce_def("all", &autograd::kNotDifferentiable));
const OpDef& kAny = register_op(reduce_def("any", &autograd::kNotDifferentiable));

std::vector<TensorMeta> extreme_dim_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  if (!s.empty()) {
    const auto d = static_cast<size_t>(a.get_int("dim"));
    if (a.get_bool("keepdim")) s[d] = 1;
    else s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
  }
  return {{s, in[0].dtype()}, {s, kInt64}};
}
const OpDef& kMaxDim = register_op(ops::with_backward(
    OpDef{"max.dim", "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
          OpKind::Compute, extreme_dim_shape},
    &kExtremeDimGrad));
const OpDef& kMinDim = register_op(ops::with_backward(
    OpDef{"min.dim", "min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
          OpKind::Compute, extreme_dim_shape},
    &kExtremeDimGrad));

std::vector<TensorMeta> cumsum_shape(std::span<const Tensor> in, const Attrs& a) {
  return ops::one_output(in[0].sizes(), a.get_dtype("dtype"));
}
const OpDef& kCumsum = register_op(
    ops::with_backward(OpDef{"cumsum", "cumsum(Tensor self, int dim, bool reverse, *, ScalarType dtype) -> Tensor",
                             OpKind::Compute, cumsum_shape},
                       &kCumsumGrad));

Tensor reduce(const OpDef& op, const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype) {
  const Shape d = ops::reduction_dims(x, dims, op.name.c_str());
  return ops::call(op, {x}, {{"dims", d}, {"keepdim", keepdim}, {"dtype", out_dtype}});
}

// max/min style reductions have no identity: an empty reduced extent is an error.
void check_nonempty(const Tensor& x, const Shape& dims, const char* op) {
  for (int64_t d : ops::reduction_dims(x, dims, op))
    check(x.dim() == 0 || x.size(d) != 0, op, "cannot reduce over a zero-size dimension ", d, " of a tensor of shape ",
          ops::shape_text(x.sizes()));
  check(x.numel() != 0 || (!dims.empty() && x.dim() > 0), op, "cannot reduce an empty tensor of shape ",
        ops::shape_text(x.sizes()));
}

int64_t reduced_count(const Tensor& x, const Shape& dims, const char* op) {
  int64_t n = 1;
  for (int64_t d : ops::reduction_dims(x, dims, op)) n *= x.size(d);
  return n;
}

void check_float(const Tensor& x, const char* op) {
  check(is_floating(x.dtype()), op, "could not infer output dtype: input dtype must be floating point but got ",
        x.dtype());
}

}  // namespace

Tensor sum(const Tensor& x, Shape dims, bool keepdim, std::optional<DType> dtype) {
  const Tensor in = dtype ? x.to(*dtype) : x;
  const DType out = is_floating(in.dtype()) ? in.dtype() : kInt64;
  return reduce(kSum, in, dims, keepdim, out);
}

Tensor prod(const Tensor& x, Shape dims, bool keepdim) {
  return reduce(kProd, x, dims, keepdim, is_floating(x.dtype()) ? x.dtype() : kInt64);
}

Tensor amax(const Tensor& x, Shape dims, bool keepdim) {
  check_nonempty(x, dims, "amax");
  return reduce(kAmax, x, dims, keepdim, x.dtype());
}
Tensor amin(const Tensor& x, Shape dims, bool keepdim) {
  check_nonempty(x, dims, "amin");
  return reduce(kAmin, x, dims, keepdim, x.dtype());
}
Tensor all(const Tensor& x, Shape dims, bool keepdim) { return reduce(kAll, x, dims, keepdim, kBool); }
Tensor any(const Tensor& x, Shape dims, bool keepdim) { return reduce(kAny, x, dims, keepdim, kBool); }

Tensor mean(const Tensor& x, Shape dims, bool keepdim) {
  check_float(x, "mean");
  const int64_t n = reduced_count(x, dims, "mean");
  return sum(x, dims, keepdim) / static_cast<double>(n);
}

Tensor var(const Tensor& x, Shape dims, int64_t correction, bool keepdim) {
  check_float(x, "var");
  const int64_t n = reduced_count(x, dims, "var");
  const Tensor centred = x - mean(x, dims, true);
  // n <= correction gives inf or nan, as in PyTorch.
  return sum(centred * centred, dims, keepdim) / static_cast<double>(std::max<int64_t>(n - correction, 0));
}

Tensor std(const Tensor& x, Shape dims, int64_t correction, bool keepdim) {
  return sqrt(var(x, std::move(dims), correction, keepdim));
}

Tensor logsumexp(const Tensor& x, Shape dims, bool keepdim) {
  const Tensor xf = is_floating(x.dtype()) ? x : x.to(default_dtype());
  if (xf.numel() == 0) return log(sum(exp(xf), dims, keepdim));
  // Shift by the max; an all -inf slice keeps shift 0 so the result is -inf, not nan.
  Tensor m = amax(xf, dims, true);
  m = where(eq(abs(m), wrapped_scalar(std::numeric_limits<double>::infinity())), zeros_like(m), m);
  const Tensor m_out = m.reshape(ops::reduced_shape(xf.sizes(), ops::reduction_dims(xf, dims, "logsumexp"), keepdim));
  return log(sum(exp(xf - m), dims, keepdim)) + m_out;
}

// s^(1/p) whose gradient at s = 0 is 0, as PyTorch's norm backward has it
// (the plain root's derivative there is infinite, times a zero gradient of
// s: NaN). The root is taken of s with its zeros replaced by 1 and the
// result masked back to 0, so no branch of the where differentiates the
// root at 0: the "double where".
Tensor root_with_zero_gradient_at_zero(const Tensor& s, double p) {
  const Tensor zero = eq(s, wrapped_scalar(0));
  const Tensor safe = where(zero, ones_like(s), s);
  const Tensor root = p == 2.0 ? sqrt(safe) : pow(safe, 1.0 / p);
  return where(zero, zeros_like(root), root);
}

Tensor norm(const Tensor& x, double p, Shape dims, bool keepdim) {
  check_float(x, "norm");
  if (p == 2.0) return root_with_zero_gradient_at_zero(sum(x * x, dims, keepdim), 2.0);
  if (p == 1.0) return sum(abs(x), dims, keepdim);
  if (std::isinf(p)) return p > 0 ? amax(abs(x), dims, keepdim) : amin(abs(x), dims, keepdim);
  if (p == 0.0) return sum(ne(x, wrapped_scalar(0)).to(x.dtype()), dims, keepdim);
  return root_with_zero_gradient_at_zero(sum(pow(abs(x), p), dims, keepdim), p);
}

Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }

static std::tuple<Tensor, Tensor> extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool largest,
                                              const char* op) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), op);
  check(x.dim() == 0 || x.size(d) > 0, op, "cannot reduce over the zero-size dimension ", d, " of shape ",
        ops::shape_text(x.sizes()));
  auto r = dispatch(largest ? kMaxDim : kMinDim, std::span<const Tensor>(&x, 1), {{"dim", d}, {"keepdim", keepdim}});
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, true, "max");
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, false, "min");
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) {
    check(x.numel() > 0, "argmax", "cannot take the argmax of an empty tensor");
    return std::get<1>(extreme_dim(x.reshape({-1}), 0, false, true, "argmax"));
  }
  return std::get<1>(extreme_dim(x, *dim, keepdim, true, "argmax"));
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) {
    check(x.numel() > 0, "argmin", "cannot take the argmin of an empty tensor");
    return std::get<1>(extreme_dim(x.reshape({-1}), 0, false, false, "argmin"));
  }
  return std::get<1>(extreme_dim(x, *dim, keepdim, false, "argmin"));
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "cumsum");
  const DType out = is_floating(x.dtype()) ? x.dtype() : kInt64;
  if (x.dim() == 0) return x.to(out).clone();
  return ops::call(kCumsum, {x}, {{"dim", d}, {"reverse", false}, {"dtype", out}});
}

Tensor cumsum_backward(const Tensor& grad, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, grad.dim(), "cumsum_backward");
  if (grad.dim() == 0) return grad.clone();
  return ops::call(kCumsum, {grad}, {{"dim", d}, {"reverse", true}, {"dtype", grad.dtype()}});
}

}  // namespace kiln
