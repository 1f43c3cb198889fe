// Regression and ranking losses, pointwise in input and target, composed of
// ops so autograd differentiates them; formulas as PyTorch defines them.
#include "kiln/nn.h"
#include "nn/loss_util.h"

namespace kiln::nn {

using detail::check_same_shape;
using detail::reduce_loss;

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  check(input.sizes() == target.sizes(), "mse_loss", "input of shape ", shape_text(input.sizes()),
        " and target of shape ", shape_text(target.sizes()), " differ");
  const Tensor d = input - target;
  return reduce_loss(d * d, reduction, "mse_loss");
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  check_same_shape("l1_loss", input, target);
  return reduce_loss(abs(input - target), reduction, "l1_loss");
}

// 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere; beta = 0 is l1.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction, double beta) {
  check_same_shape("smooth_l1_loss", input, target);
  check(beta >= 0, "smooth_l1_loss", "beta must be non-negative but got ", beta);
  const Tensor d = abs(input - target);
  if (beta == 0) return reduce_loss(d, reduction, "smooth_l1_loss");
  const Tensor loss = where(lt(d, wrapped_scalar(beta)), square(d) * (0.5 / beta), d - 0.5 * beta);
  return reduce_loss(loss, reduction, "smooth_l1_loss");
}

// 0.5 d^2 where |d| <= delta, delta (|d| - 0.5 delta) elsewhere.
Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction, double delta) {
  check_same_shape("huber_loss", input, target);
  check(delta > 0, "huber_loss", "delta must be positive but got ", delta);
  const Tensor d = abs(input - target);
  const Tensor loss = where(le(d, wrapped_scalar(delta)), square(d) * 0.5, (d - 0.5 * delta) * delta);
  return reduce_loss(loss, reduction, "huber_loss");
}

// target (log target - input), 0 where the target is 0 (xlogy); with
// log_target the target is given as its log. "batchmean" divides the sum by
// the batch size (the KL divergence per sample); "mean" by every element.
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction, bool log_target) {
  check_same_shape("kl_div", input, target);
  Tensor loss;
  if (log_target) {
    loss = exp(target) * (target - input);
  } else {
    const Tensor zero = eq(target, wrapped_scalar(0.0));
    loss = where(zero, zeros_like(target), target * log(where(zero, ones_like(target), target))) - target * input;
  }
  if (reduction == "batchmean") return input.dim() == 0 ? sum(loss) : sum(loss) / static_cast<double>(input.size(0));
  return reduce_loss(loss, reduction, "kl_div");
}

// max(0, -y (x1 - x2) + margin) with y = 1 or -1 (x1 should rank higher, or lower).
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                           const std::string& reduction) {
  check_same_shape("margin_ranking_loss", input1, input2);
  check(target.sizes() == input1.sizes(), "margin_ranking_loss", "target of shape ", shape_text(target.sizes()),
        " differs from the inputs' ", shape_text(input1.sizes()));
  return reduce_loss(relu(-target * (input1 - input2) + margin), reduction, "margin_ranking_loss");
}

// 1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1;
// cos over the last dim of 1-d or 2-d inputs with PyTorch's 1e-12 added to
// each squared norm.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                             const std::string& reduction) {
  const char* op = "cosine_embedding_loss";
  check_same_shape(op, input1, input2);
  check(input1.dim() == 1 || input1.dim() == 2, op, "expected 1-D or 2-D inputs but got shape ",
        shape_text(input1.sizes()));
  const Shape rows = input1.dim() == 2 ? Shape{input1.size(0)} : Shape{};
  check(target.sizes() == rows, op, "target of shape ", shape_text(target.sizes()), " must have shape ",
        shape_text(rows), " for inputs of shape ", shape_text(input1.sizes()));
  constexpr double kEps = 1e-12;
  const Tensor dot = sum(input1 * input2, {-1});
  const Tensor cos = dot / sqrt((sum(input1 * input1, {-1}) + kEps) * (sum(input2 * input2, {-1}) + kEps));
  const Tensor t = target.to(cos.dtype());
  const Tensor zero = zeros_like(cos);
  const Tensor loss = where(eq(t, ones_like(t)), 1.0 - cos, zero) + where(eq(t, -ones_like(t)), relu(cos - margin), zero);
  return reduce_loss(loss, reduction, op);
}

}  // namespace kiln::nn
