// Classification losses (cross_entropy, nll_loss and the binary cross
// entropies), composed of ops so autograd differentiates them; formulas and
// normalisations as PyTorch defines them.
#include <limits>

#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/nn.h"
#include "nn/loss_util.h"

namespace kiln::nn {
namespace {

using detail::check_same_shape;
using detail::reduce_loss;

// (N, C, d...) -> (N*d..., C): the class dim last.
Tensor classes_last(const Tensor& x) {
  if (x.dim() == 2) return x;
  Shape to_last{0};
  for (int64_t d = 2; d < x.dim(); ++d) to_last.push_back(d);
  to_last.push_back(1);
  return x.permute(to_last).reshape({-1, x.size(1)});
}

void check_class_weight(const char* op, const Tensor& weight, int64_t C) {
  if (!weight.defined()) return;
  check(weight.dim() == 1 && weight.size(0) == C && is_floating(weight.dtype()), op,
        "expected a floating point weight of shape [", C, "] (one per class) but got ", weight.dtype(), " of shape ",
        shape_text(weight.sizes()));
}

// The loss over log-probabilities `logp` (N, C, d...) of class-index targets
// (N, d...): -w[t] logp[t] per element, with label smoothing mixing in
// -(sum over c of w[c] logp[c]) / C; ignored targets contribute 0, and
// "mean" divides by the summed weights of the targets not ignored.
Tensor class_index_loss(const char* op, const Tensor& logp_nc, const Tensor& target, const Tensor& weight,
                        int64_t ignore_index, double label_smoothing, const std::string& reduction) {
  check(target.dtype() == kInt64 || target.dtype() == kInt32, op, "expected integer class targets but got ",
        target.dtype());
  Shape expect = logp_nc.sizes();
  expect.erase(expect.begin() + 1);
  check(target.sizes() == expect, op, "expected target of shape ", shape_text(expect), " for input ",
        shape_text(logp_nc.sizes()), " but got ", shape_text(target.sizes()));
  const int64_t C = logp_nc.size(1);
  check_class_weight(op, weight, C);
  const Tensor logp = classes_last(logp_nc);
  const Tensor t = target.reshape({-1}).to(kInt64);
  const Tensor valid = ne(t, wrapped_scalar(ignore_index));
  const Tensor safe = where(valid, t, zeros_like(t));
  if (!target.is_meta()) {  // meta targets have no values to check
    // Checked on the targets themselves, with modes off: targets the program
    // passed in are read directly, so kiln::compile does not break the graph
    // here (targets computed inside a traced graph still break it).
    ModesOffGuard concrete;
    const Tensor tc = target.reshape({-1}).to(kInt64);
    const Tensor bad = logical_and(ne(tc, wrapped_scalar(ignore_index)),
                                   logical_or(lt(tc, wrapped_scalar(0)), ge(tc, wrapped_scalar(C))));
    check(!any(bad).item<bool>(), op, "target values must be in [0, ", C, ") or ignore_index");
  }
  Tensor loss = -gather(logp, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor target_weight;  // w[t] per element
  if (weight.defined()) {
    target_weight = index_select(weight.to(loss.dtype()), 0, safe);
    loss = loss * target_weight;
  }
  if (label_smoothing > 0) {
    const Tensor smooth = weight.defined() ? -sum(logp * weight.to(logp.dtype()), {1}) / static_cast<double>(C)
                                           : -mean(logp, {1});
    loss = loss * (1 - label_smoothing) + smooth * label_smoothing;
  }
  const Tensor vf = valid.to(loss.dtype());
  loss = loss * vf;
  if (reduction == "mean") {
    // NaN when every target is ignored (or weighs 0), with a zero gradient
    // (dividing by the zero total would send inf * 0 = NaN into every
    // logit's gradient, and so into every weight).
    const Tensor total = weight.defined() ? sum(target_weight * vf) : sum(vf), none = eq(total, wrapped_scalar(0));
    const Tensor mean_loss = sum(loss) / where(none, ones_like(total), total);
    return where(none, full_like(mean_loss, std::numeric_limits<double>::quiet_NaN()), mean_loss);
  }
  return reduce_loss(loss.reshape(target.sizes()), reduction, op);
}

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                const std::string& reduction) {
  check(is_floating(input.dtype()), "nll_loss", "expected floating point log-probabilities but got ", input.dtype());
  check(input.dim() >= 2, "nll_loss", "expected input of shape (N, C, ...) but got ", shape_text(input.sizes()));
  return class_index_loss("nll_loss", input, target, weight, ignore_index, 0.0, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     const std::string& reduction) {
  return cross_entropy(logits, target, Tensor(), ignore_index, label_smoothing, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     double label_smoothing, const std::string& reduction) {
  check(is_floating(logits.dtype()), "cross_entropy", "expected floating point logits but got ", logits.dtype());
  check(logits.dim() >= 2, "cross_entropy", "expected logits of shape (N, C, ...) but got ", shape_text(logits.sizes()));
  check(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy", "label_smoothing must be in [0, 1] but got ",
        label_smoothing);
  if (target.sizes() != logits.sizes() || !is_floating(target.dtype()))
    return class_index_loss("cross_entropy", log_softmax(logits, 1), target, weight, ignore_index, label_smoothing,
                            reduction);
  // Class probabilities: -(sum over c of w[c] p[c] logp[c]) per element,
  // p smoothed towards uniform; "mean" divides by the number of elements.
  check(ignore_index < 0, "cross_entropy", "ignore_index is not supported for class-probability targets (got ",
        ignore_index, ")");
  const int64_t C = logits.size(1);
  check_class_weight("cross_entropy", weight, C);
  Tensor p = target.to(logits.dtype());
  if (label_smoothing > 0) p = p * (1 - label_smoothing) + label_smoothing / static_cast<double>(C);
  Tensor prod = log_softmax(logits, 1) * p;
  if (weight.defined()) {
    Shape along_classes(static_cast<size_t>(logits.dim()), 1);
    along_classes[1] = C;
    prod = prod * weight.to(logits.dtype()).view(along_classes);
  }
  return reduce_loss(-sum(prod, {1}), reduction, "cross_entropy");
}

// -w (t log x + (1 - t) log(1 - x)), each log clamped at -100 as PyTorch
// does, so x = 0 or 1 gives a finite loss.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            const std::string& reduction) {
  check_same_shape("binary_cross_entropy", input, target);
  if (!input.is_meta()) {
    ModesOffGuard concrete;
    check(!any(logical_or(lt(input, wrapped_scalar(0.0)), gt(input, wrapped_scalar(1.0)))).item<bool>(),
          "binary_cross_entropy", "all elements of input should be between 0 and 1");
  }
  const Tensor log_x = clamp(log(input), -100.0, std::nullopt);
  const Tensor log_1mx = clamp(log(1.0 - input), -100.0, std::nullopt);
  Tensor loss = -(target * log_x + (1.0 - target) * log_1mx);
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction, "binary_cross_entropy");
}

// (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), softplus(-x) as
// max(-x, 0) + log1p(e^-|x|) so no exponential overflows.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, const std::string& reduction) {
  check_same_shape("binary_cross_entropy_with_logits", input, target);
  const Tensor softplus_neg = relu(-input) + log1p(exp(-abs(input)));
  const Tensor log_weight = pos_weight.defined() ? (pos_weight - 1.0) * target + 1.0 : Tensor();
  Tensor loss = (1.0 - target) * input + (log_weight.defined() ? log_weight * softplus_neg : softplus_neg);
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction, "binary_cross_entropy_with_logits");
}

}  // namespace kiln::nn
