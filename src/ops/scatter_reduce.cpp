// scatter_reduce (sum, prod, mean, amax, amin; include_self) and scatter
// with PyTorch's older reduce= argument ("add", "multiply"). One kernel
// (src/kernels/cpu/index_kernels.cpp); the gradients are PyTorch's, written
// with ops: amax/amin share the gradient evenly among every contributor
// equal to the result, prod's holds for zeros (no division by a zero).
#include <string>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

enum Reduce : int64_t { kSum, kProd, kMean, kAmax, kAmin };

int64_t reduce_code(const std::string& reduce) {
  const char* names[] = {"sum", "prod", "mean", "amax", "amin"};
  for (int64_t i = 0; i < 5; ++i)
    if (reduce == names[i]) return i;
  fail("scatter_reduce", "reduce must be one of sum, prod, mean, amax, amin but got '", reduce, "'");
}

// For each contributor v at a position (self, or a src element), the product
// of the position's other contributors, from the position's count of zeros
// and product of nonzero values.
Tensor product_of_others(const Tensor& v, const Tensor& zeros_here, const Tensor& nonzero_product) {
  const Tensor is_zero = eq(v, zeros_like(v));
  const Tensor safe_v = where(is_zero, ones_like(v), v);
  const Tensor none = zeros_like(v);
  return where(is_zero, where(eq(zeros_here, ones_like(zeros_here)), nonzero_product, none),
               where(eq(zeros_here, zeros_like(zeros_here)), nonzero_product / safe_v, none));
}

Grads scatter_reduce_backward(const BackwardContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const Tensor src = ops::leading_block(c.inputs[2], index);
  const Tensor& result = c.outputs[0];
  const Tensor& g = c.grads[0];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t reduce = c.attrs.get_int("reduce");
  const bool include_self = c.attrs.get_bool("include_self");
  const Tensor arrivals = scatter_add(zeros_like(g), dim, index, ones_like(src));
  const Tensor reached = gt(arrivals, zeros_like(arrivals));
  // Without include_self, a reached position's old value took no part.
  const Tensor self_takes_part = include_self ? ones_like(reached) : logical_not(reached);
  Tensor gx, gsrc;
  if (reduce == kSum) {
    gx = where(self_takes_part, g, zeros_like(g));
    gsrc = gather(g, dim, index);
  } else if (reduce == kMean) {
    const Tensor n = arrivals + (include_self ? 1.0 : 0.0);
    const Tensor g_each = g / where(gt(n, zeros_like(n)), n, ones_like(n));
    gx = where(self_takes_part, g_each, zeros_like(g));
    gsrc = gather(g_each, dim, index);
  } else if (reduce == kProd) {
    const Tensor self_part = where(self_takes_part, x, ones_like(x));  // 1: no part
    const Tensor zeros_here = scatter_add(eq(self_part, zeros_like(x)).to(g.dtype()), dim, index,
                                          eq(src, zeros_like(src)).to(g.dtype()));
    const Tensor nonzero_product =
        scatter_reduce(where(eq(self_part, zeros_like(x)), ones_like(x), self_part), dim, index,
                       where(eq(src, zeros_like(src)), ones_like(src), src), "prod");
    gx = where(self_takes_part, g * product_of_others(x, zeros_here, nonzero_product), zeros_like(g));
    gsrc = gather(g, dim, index) *
           product_of_others(src, gather(zeros_here, dim, index), gather(nonzero_product, dim, index));
  } else {  // amax, amin: evenly among the contributors equal to the result
    const Tensor self_hit = logical_and(self_takes_part, eq(x, result));
    const Tensor src_hit = eq(src, gather(result, dim, index));
    const Tensor ties = scatter_add(self_hit.to(g.dtype()), dim, index, src_hit.to(g.dtype()));
    const Tensor g_each = g / where(gt(ties, zeros_like(ties)), ties, ones_like(ties));
    gx = where(self_hit, g_each, zeros_like(g));
    gsrc = where(src_hit, gather(g_each, dim, index), zeros_like(src));
  }
  return {gx, Tensor(), ops::block_in_zeros(gsrc, c.input_meta[2].sizes, index)};
}

constexpr autograd::BackwardDef kScatterReduceBackward{scatter_reduce_backward, autograd::kSaveBoth};
const OpDef& kScatterReduce = register_op(ops::with_backward(
    OpDef{"scatter_reduce",
          "scatter_reduce(Tensor self, int dim, Tensor index, Tensor src, int reduce, bool include_self) -> Tensor",
          OpKind::Compute, ops::same_as_first},
    &kScatterReduceBackward));

}  // namespace

Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self) {
  const char* op = "scatter_reduce";
  const int64_t code = reduce_code(reduce);
  const int64_t d = ops::check_scatter(x, dim, index, src, op);
  check(x.dtype() != kBool, op, "bool tensors are not supported");
  check(src.dtype() == x.dtype(), op, "expected src of self's dtype ", x.dtype(), " but got ", src.dtype());
  return ops::call(kScatterReduce, {x, index, src},
                   {{"dim", d}, {"reduce", code}, {"include_self", include_self}});
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce) {
  check(reduce == "add" || reduce == "multiply", "scatter", "reduce must be 'add' or 'multiply' but got '", reduce,
        "'");
  if (reduce == "add") return scatter_add(x, dim, index, src);
  return scatter_reduce(x, dim, index, src.to(x.dtype()), "prod");
}

namespace {
const bool registered = [] {
  ops::def<&scatter_reduce>(
      "scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> "
      "Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, int64_t, const Tensor&, const Tensor&, const std::string&)>(&scatter)>(
      "scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
