// The convolution op and its backward (kernels: src/kernels/cpu/conv_kernels.cpp).
// The backward computes the input's, weight's and bias's gradients in one
// op, only those autograd asks for; it is not itself differentiable (a
// second derivative of a float32 convolution is an error naming it).
#include "ops/spatial_ops.h"

#include "kiln/error.h"
#include "ops/op_util.h"

namespace kiln::ops {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

Shape output_sizes(const Tensor& x, const Tensor& w, const Attrs& a) {
  const Shape &stride = a.get_shape("stride"), &padding = a.get_shape("padding"), &dilation = a.get_shape("dilation");
  Shape out = {x.size(0), w.size(0)};
  for (size_t i = 0; i < stride.size(); ++i) {
    const int64_t span = dilation[i] * (w.size(2 + static_cast<int64_t>(i)) - 1) + 1;
    out.push_back((x.size(2 + static_cast<int64_t>(i)) + 2 * padding[i] - span) / stride[i] + 1);
  }
  return out;
}

// The activations' format: channels-last when the input or the weight is
// (as PyTorch's oneDNN convolution: a model moved to channels_last runs so
// even on a one-channel input, which is both formats at once).
const Tensor& format_source(const Tensor& x, const Tensor& w) {
  return x.dim() >= 4 && x.suggest_memory_format() == MemoryFormat::Contiguous &&
                 w.suggest_memory_format() != MemoryFormat::Contiguous
             ? w
             : x;
}

std::vector<TensorMeta> forward_shape(std::span<const Tensor> in, const Attrs& a) {
  std::vector<TensorMeta> m = one_output(output_sizes(in[0], in[1], a), in[0].dtype());
  follow_memory_format(m[0], format_source(in[0], in[1]));
  return m;
}

// (grad, x, weight) -> grad_input, grad_weight, grad_bias; 0 elements where not asked for.
std::vector<TensorMeta> backward_shape(std::span<const Tensor> in, const Attrs& a) {
  return asked_gradients(a, in[1].dtype(), in[1].sizes(), in[2].sizes(), {in[2].size(0)}, format_source(in[1], in[2]));
}

const OpDef& kConvolutionBackward = register_op(with_backward(
    OpDef{"convolution_backward",
          "convolution_backward(Tensor grad, Tensor input, Tensor weight, int[] stride, int[] padding, int[] dilation, "
          "int groups, bool input_grad, bool weight_grad, bool bias_grad) -> (Tensor, Tensor, Tensor)",
          OpKind::Compute, backward_shape},
    &autograd::kNotDifferentiable));

constexpr autograd::BackwardDef kConvolutionGrad{[](const BackwardContext& c) -> Grads {
  const bool has_bias = c.attrs.get_bool("has_bias");
  Attrs a;
  for (const char* name : {"stride", "padding", "dilation"}) a.set(name, c.attrs.get_shape(name));
  a.set("groups", c.attrs.get_int("groups"));
  a.set("input_grad", c.needs_input_grad[0]), a.set("weight_grad", c.needs_input_grad[1]);
  a.set("bias_grad", has_bias && c.needs_input_grad[2]);
  const Tensor in[] = {c.grads[0].contiguous(format_source(c.inputs[0], c.inputs[1]).suggest_memory_format()),
                       c.inputs[0], c.inputs[1]};
  std::vector<Tensor> g = dispatch(kConvolutionBackward, in, a);
  Grads out = {c.needs_input_grad[0] ? g[0] : Tensor(), c.needs_input_grad[1] ? g[1] : Tensor()};
  if (has_bias) out.push_back(c.needs_input_grad[2] ? g[2] : Tensor());
  return out;
}, autograd::kSaveInputs};

const OpDef& kConvolution = register_op(with_backward(
    OpDef{"convolution",
          "convolution(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, int "
          "groups, bool has_bias) -> Tensor",
          OpKind::Compute, forward_shape},
    &kConvolutionGrad));

}  // namespace

bool convolution_kernel_applies(const Tensor& x, const Tensor& weight) {
  return x.dtype() == kFloat32 && weight.dtype() == kFloat32 && x.device().is_cpu() &&
         weight.device().is_cpu() && x.numel() > 0 && weight.numel() > 0 && x.dim() >= 3 && x.dim() <= 5;
}

Tensor convolution(const Tensor& x, const Tensor& weight, const Tensor& bias, const Shape& stride,
                   const Shape& padding, const Shape& dilation, int64_t groups) {
  check(convolution_kernel_applies(x, weight), "convolution", "expected non-empty float32 CPU tensors with 1 to 3 ",
        "spatial dims but got input ", x.dtype(), " ", shape_text(x.sizes()), " and weight ", weight.dtype(), " ",
        shape_text(weight.sizes()));
  Attrs a{{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups},
          {"has_bias", bias.defined()}};
  if (!bias.defined()) return call(kConvolution, {x, weight}, a);
  return call(kConvolution, {x, weight, bias}, a);
}

}  // namespace kiln::ops
