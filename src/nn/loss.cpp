// Losses, composed of ops so autograd differentiates them.
#include <limits>

#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/nn.h"

namespace kiln::nn {
namespace {

Tensor reduce(const Tensor& loss, const std::string& reduction, const char* op) {
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  check(reduction == "mean", op, "expected reduction 'mean', 'sum' or 'none' but got '", reduction, "'");
  return mean(loss);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     const std::string& reduction) {
  check(is_floating(logits.dtype()), "cross_entropy", "expected floating point logits but got ", logits.dtype());
  check(target.dtype() == kInt64 || target.dtype() == kInt32, "cross_entropy",
        "expected integer class targets but got ", target.dtype());
  check(logits.dim() >= 2, "cross_entropy", "expected logits of shape (N, C, ...) but got ", shape_text(logits.sizes()));
  Shape expect = logits.sizes();
  expect.erase(expect.begin() + 1);
  check(target.sizes() == expect, "cross_entropy", "expected target of shape ", shape_text(expect), " for logits ",
        shape_text(logits.sizes()), " but got ", shape_text(target.sizes()));
  check(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy", "label_smoothing must be in [0, 1] but got ",
        label_smoothing);
  const int64_t C = logits.size(1);
  // (N, C, d...) -> (N*d..., C) so the class dim is last.
  Shape to_last{0};
  for (int64_t d = 2; d < logits.dim(); ++d) to_last.push_back(d);
  to_last.push_back(1);
  Tensor flat = logits.dim() == 2 ? logits : logits.permute(to_last).reshape({-1, C});
  Tensor t = target.reshape({-1}).to(kInt64);
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
    check(!any(bad).item<bool>(), "cross_entropy", "target values must be in [0, ", C, ") or ignore_index");
  }
  const Tensor logp = log_softmax(flat, 1);
  Tensor loss = -gather(logp, 1, safe.unsqueeze(1)).squeeze(1);
  if (label_smoothing > 0) loss = loss * (1 - label_smoothing) - mean(logp, {1}) * label_smoothing;
  const Tensor vf = valid.to(loss.dtype());
  loss = loss * vf;
  if (reduction == "mean") {
    // The mean over non-ignored targets, as PyTorch: NaN when every target is
    // ignored, with a zero gradient (dividing by the zero count would send
    // inf * 0 = NaN into every logit's gradient, and so into every weight).
    const Tensor count = sum(vf), none = eq(count, wrapped_scalar(0));
    const Tensor mean_loss = sum(loss) / where(none, ones_like(count), count);
    return where(none, full_like(mean_loss, std::numeric_limits<double>::quiet_NaN()), mean_loss);
  }
  return reduce(loss.reshape(target.sizes()), reduction, "cross_entropy");
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  check(input.sizes() == target.sizes(), "mse_loss", "input of shape ", shape_text(input.sizes()),
        " and target of shape ", shape_text(target.sizes()), " differ");
  const Tensor d = input - target;
  return reduce(d * d, reduction, "mse_loss");
}

}  // namespace kiln::nn
