// The batch_norm op in training (kernels: src/kernels/cpu/batch_norm_kernels.cpp):
// per-channel batch statistics, normalisation and the affine step in one
// op, and one backward op for the input's, weight's and bias's gradients.
// The statistics outputs feed the running averages only (without
// history), so the backward reads the gradient of y alone. The backward is
// not itself differentiable: a second derivative is an error naming it.
#include "kiln/error.h"
#include "ops/op_util.h"
#include "ops/spatial_ops.h"

namespace kiln::ops {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

std::vector<TensorMeta> normalised_shape(std::span<const Tensor> in, const Attrs&) {
  std::vector<TensorMeta> m = {TensorMeta(in[0].sizes(), in[0].dtype()), TensorMeta({in[0].size(1)}, in[0].dtype()),
                               TensorMeta({in[0].size(1)}, in[0].dtype())};
  follow_memory_format(m[0], in[0]);
  return m;
}

// (grad, x, [weight], mean, var) -> grad x, weight, bias (0 elements where not asked for).
std::vector<TensorMeta> gradients_shape(std::span<const Tensor> in, const Attrs& a) {
  const int64_t C = in[1].size(1);
  return asked_gradients(a, in[1].dtype(), in[1].sizes(), {C}, {C}, in[1]);
}

const OpDef& kBatchNormBackward = register_op(with_backward(
    OpDef{"batch_norm_backward",
          "batch_norm_backward(Tensor grad, Tensor input, Tensor? weight, Tensor mean, Tensor var, float eps, bool "
          "has_weight, bool input_grad, bool weight_grad, bool bias_grad) -> (Tensor, Tensor, Tensor)",
          OpKind::Compute, gradients_shape},
    &autograd::kNotDifferentiable));

constexpr autograd::BackwardDef kBatchNormGrad{[](const BackwardContext& c) -> Grads {
  const bool has_weight = c.attrs.get_bool("has_weight"), has_bias = c.attrs.get_bool("has_bias");
  const size_t bias_at = has_weight ? 2 : 1;
  Attrs a{{"eps", c.attrs.get_double("eps")}, {"has_weight", has_weight}, {"input_grad", c.needs_input_grad[0]},
          {"weight_grad", has_weight && c.needs_input_grad[1]},
          {"bias_grad", has_bias && c.needs_input_grad[bias_at]}};
  std::vector<Tensor> in = {c.grads[0].contiguous(c.inputs[0].suggest_memory_format()), c.inputs[0]};
  if (has_weight) in.push_back(c.inputs[1]);
  in.push_back(c.outputs[1]), in.push_back(c.outputs[2]);
  std::vector<Tensor> g = dispatch(kBatchNormBackward, in, a);
  Grads out = {c.needs_input_grad[0] ? g[0] : Tensor()};
  if (has_weight) out.push_back(c.needs_input_grad[1] ? g[1] : Tensor());
  if (has_bias) out.push_back(c.needs_input_grad[bias_at] ? g[2] : Tensor());
  return out;
}, autograd::kSaveBoth};

const OpDef& kBatchNorm = register_op(with_backward(
    OpDef{"batch_norm_training",
          "batch_norm_training(Tensor input, Tensor? weight, Tensor? bias, float eps, bool has_weight, bool has_bias) "
          "-> (Tensor, Tensor, Tensor)",
          OpKind::Compute, normalised_shape},
    &kBatchNormGrad));

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                       double eps) {
  check(x.dtype() == kFloat32 || x.dtype() == kFloat64, "batch_norm", "expected float32 or float64 but got ",
        x.dtype());
  std::vector<Tensor> in = {x.contiguous(x.suggest_memory_format())};
  if (weight.defined()) in.push_back(weight.contiguous());
  if (bias.defined()) in.push_back(bias.contiguous());
  std::vector<Tensor> r = dispatch(
      kBatchNorm, in, {{"eps", eps}, {"has_weight", weight.defined()}, {"has_bias", bias.defined()}});
  return {r[0], r[1], r[2]};
}

}  // namespace kiln::ops
