// The max_pool op (kernels: src/kernels/cpu/pool_kernels.cpp): maxima and
// their flat in-plane indices in one pass. Its backward adds each output's
// gradient at its index; that backward's own derivative (with respect to
// the gradient) gathers at the same indices, so max pooling is twice
// differentiable.
#include "kiln/error.h"
#include "ops/op_util.h"
#include "ops/spatial_ops.h"

namespace kiln::ops {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

std::vector<TensorMeta> pooled_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape sizes = {in[0].size(0), in[0].size(1)};
  for (int64_t o : a.get_shape("out")) sizes.push_back(o);
  std::vector<TensorMeta> m = {TensorMeta(sizes, in[0].dtype()), TensorMeta(sizes, kInt64)};
  follow_memory_format(m[0], in[0]), follow_memory_format(m[1], in[0]);
  return m;
}

// (grad, indices) -> the input's gradient, of sizes attrs "input".
std::vector<TensorMeta> unpooled_shape(std::span<const Tensor> in, const Attrs& a) {
  std::vector<TensorMeta> m = one_output(a.get_shape("input"), in[0].dtype());
  follow_memory_format(m[0], in[1]);  // the indices', which is the input's
  return m;
}

// d(backward)/d(grad): the incoming gradient read back at the indices.
constexpr autograd::BackwardDef kMaxPoolBackwardGrad{[](const BackwardContext& c) -> Grads {
  const Tensor& gg = c.grads[0];
  const Tensor& indices = c.inputs[1];
  const int64_t N = indices.size(0), C = indices.size(1);
  const Tensor picked = gather(gg.reshape({N, C, -1}), 2, indices.reshape({N, C, -1}));
  return {picked.reshape(indices.sizes()), Tensor()};
}, autograd::kSaveInputs};

const OpDef& kMaxPoolBackward = register_op(with_backward(
    OpDef{"max_pool_backward", "max_pool_backward(Tensor grad, Tensor indices, int[] input) -> Tensor",
          OpKind::Compute, unpooled_shape},
    &kMaxPoolBackwardGrad));

constexpr autograd::BackwardDef kMaxPoolGrad{[](const BackwardContext& c) -> Grads {
  return {call(kMaxPoolBackward, {c.grads[0], c.outputs[1]}, {{"input", c.input_meta[0].sizes}})};
}, autograd::kSaveOutputs};

const OpDef& kMaxPool = register_op(with_backward(
    OpDef{"max_pool",
          "max_pool(Tensor self, int[] kernel, int[] stride, int[] padding, int[] dilation, int[] out) -> (Tensor, "
          "Tensor)",
          OpKind::Compute, pooled_shape},
    &kMaxPoolGrad));

}  // namespace

std::tuple<Tensor, Tensor> max_pool(const Tensor& x, const Shape& kernel, const Shape& stride, const Shape& padding,
                                    const Shape& dilation, const Shape& out) {
  check(x.dtype() == kFloat32 || x.dtype() == kFloat64, "max_pool", "expected float32 or float64 but got ", x.dtype());
  const Tensor in[] = {x};
  std::vector<Tensor> r = dispatch(
      kMaxPool, in,
      {{"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"out", out}});
  return {r[0], r[1]};
}

}  // namespace kiln::ops
