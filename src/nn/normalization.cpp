// batch_norm, group_norm and instance_norm as torch.nn.functional's:
// batch_norm's training step through its op and kernel (statistics,
// normalisation and affine in one pass each way), the rest in ops. Statistics are biased
// (divided by n) for normalising; the running variance takes the unbiased
// one, as PyTorch's. Running statistics are updated in place without
// history.
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/nn.h"
#include "nn/spatial.h"
#include "ops/boxing.h"
#include "ops/op_util.h"
#include "ops/spatial_ops.h"

namespace kiln::nn {
namespace {

using spatial::per_channel;

void check_channels(const char* op, const Tensor& t, const char* what, int64_t C) {
  if (t.defined())
    check(t.dim() == 1 && t.size(0) == C, op, "expected ", what, " of shape [", C, "] but got ", shape_text(t.sizes()));
}

// running = (1 - momentum) running + momentum value, in place, no history.
void update_running(const Tensor& running, const Tensor& value, double momentum) {
  if (!running.defined()) return;
  NoGradGuard no_grad;
  running.mul_(1 - momentum).add_(value.detach().to(running.dtype()), momentum);
}

Tensor affine(Tensor y, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (weight.defined()) y = y * per_channel(weight, x);
  if (bias.defined()) y = y + per_channel(bias, x);
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  check(x.dim() >= 2 && is_floating(x.dtype()), op, "expected a floating point input (N, C, ...) but got ", x.dtype(),
        " of shape ", shape_text(x.sizes()));
  const int64_t C = x.size(1);
  check_channels(op, running_mean, "running_mean", C), check_channels(op, running_var, "running_var", C);
  check_channels(op, weight, "weight", C), check_channels(op, bias, "bias", C);
  if (training) {
    const int64_t n = x.numel() / std::max<int64_t>(C, 1);
    check(n > 1, op, "expected more than 1 value per channel when training, got input of shape ",
          shape_text(x.sizes()));
    // The kernel runs float32 and float64; 16-bit floats go through float32.
    const DType t = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
    auto as_t = [t](const Tensor& v) { return v.defined() ? v.to(t) : v; };
    auto [y, batch_mean, batch_var] = ops::batch_norm_training(as_t(x), as_t(weight), as_t(bias), eps);
    update_running(running_mean, batch_mean, momentum);
    update_running(running_var, batch_var * (static_cast<double>(n) / static_cast<double>(n - 1)), momentum);
    return y.to(x.dtype());
  }
  check(running_mean.defined() && running_var.defined(), op,
        "expected running_mean and running_var in evaluation (training=false)");
  // Evaluation: one per-channel scale and shift.
  Tensor scale = rsqrt(running_var.to(x.dtype()) + eps);
  if (weight.defined()) scale = scale * weight;
  Tensor shift = -running_mean.to(x.dtype()) * scale;
  if (bias.defined()) shift = shift + bias;
  return x * per_channel(scale, x) + per_channel(shift, x);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "group_norm";
  check(x.dim() >= 2 && is_floating(x.dtype()), op, "expected a floating point input (N, C, ...) but got ", x.dtype(),
        " of shape ", shape_text(x.sizes()));
  const int64_t N = x.size(0), C = x.size(1);
  check(num_groups > 0 && C % num_groups == 0, op, "expected the ", C, " channels divisible by num_groups (",
        num_groups, ")");
  check_channels(op, weight, "weight", C), check_channels(op, bias, "bias", C);
  const Tensor g = x.reshape({N, num_groups, -1});
  const Tensor y = ((g - g.mean({2}, true)) * rsqrt(var(g, {2}, 0, true) + eps)).reshape(x.sizes());
  return affine(y, x, weight, bias);
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  const char* op = "instance_norm";
  check(x.dim() >= 3 && is_floating(x.dtype()), op, "expected a floating point input (N, C, spatial...) but got ",
        x.dtype(), " of shape ", shape_text(x.sizes()));
  const int64_t C = x.size(1);
  check_channels(op, running_mean, "running_mean", C), check_channels(op, running_var, "running_var", C);
  check_channels(op, weight, "weight", C), check_channels(op, bias, "bias", C);
  Shape dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor y;
  if (use_input_stats) {
    const Tensor mean = x.mean(dims, true), variance = var(x, dims, 0, true);
    y = (x - mean) * rsqrt(variance + eps);
    // Running statistics: the batch mean of the instances' (variance unbiased).
    const int64_t n = shape_numel(Shape(x.sizes().begin() + 2, x.sizes().end()));
    update_running(running_mean, mean.flatten(1).mean({0}), momentum);
    if (n > 1)
      update_running(running_var, variance.flatten(1).mean({0}) * (static_cast<double>(n) / static_cast<double>(n - 1)),
                     momentum);
  } else {
    check(running_mean.defined() && running_var.defined(), op,
          "expected running_mean and running_var when use_input_stats is false");
    y = (x - per_channel(running_mean.to(x.dtype()), x)) * rsqrt(per_channel(running_var.to(x.dtype()), x) + eps);
  }
  return affine(y, x, weight, bias);
}

namespace {
const bool registered = [] {
  ops::def<&batch_norm>(
      "batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, Tensor? weight=None, Tensor? bias=None, "
      "bool training=False, float momentum=0.1, float eps=1e-05) -> Tensor");
  ops::def<&group_norm>(
      "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor");
  ops::def<&instance_norm>(
      "instance_norm(Tensor input, Tensor? running_mean=None, Tensor? running_var=None, Tensor? weight=None, Tensor? "
      "bias=None, bool use_input_stats=True, float momentum=0.1, float eps=1e-05) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
