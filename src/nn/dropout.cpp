// torch.nn.functional's dropout (per element), dropout1d / 2d / 3d (whole channels
// zeroed: one draw per (sample, channel), broadcast over the spatial dims)
// and alpha_dropout / feature_alpha_dropout (SELU's self-normalising
// dropout: dropped values set to SELU's negative saturation, then an affine
// map that keeps mean 0 and variance 1). Composites of rand and arithmetic.
#include <cmath>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln::nn {
namespace {

// A keep mask (1 kept, 0 dropped) in x's dtype: per element (channel_dim
// -1), or per channel (x's sizes with every dim after channel_dim set to 1).
Tensor keep_mask(const Tensor& x, double p, int64_t channel_dim) {
  Shape s = x.sizes();
  if (channel_dim >= 0)
    for (size_t d = static_cast<size_t>(channel_dim) + 1; d < s.size(); ++d) s[d] = 1;
  return (rand(s, x.options()) >= wrapped_scalar(p)).to(x.dtype());
}

// What every dropout shares: p checked, x itself in eval mode or for p = 0,
// zeros for p = 1, else apply(keep mask).
template <class Apply>
Tensor dropout_with(const Tensor& x, double p, bool training, int64_t channel_dim, const char* op, Apply apply) {
  check(p >= 0 && p <= 1, op, "probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0;
  return apply(keep_mask(x, p, channel_dim));
}

Tensor scaled_dropout(const Tensor& x, double p, bool training, int64_t channel_dim, const char* op) {
  return dropout_with(x, p, training, channel_dim, op, [&](const Tensor& keep) { return x * keep * (1.0 / (1.0 - p)); });
}

// The channel dim of a batched (spatial + 2 dims) or unbatched (spatial + 1) input.
int64_t channel_dim_of(const Tensor& x, int64_t spatial, const char* op) {
  check(x.dim() == spatial + 1 || x.dim() == spatial + 2, op, "expected a ", spatial + 1, "-D (unbatched) or ",
        spatial + 2, "-D (batched) input but got shape ", shape_text(x.sizes()));
  return x.dim() == spatial + 2 ? 1 : 0;
}

// SELU's negative saturation, -lambda alpha; dropped values take it, then
// a x + b restores a unit normal's mean and variance.
constexpr double kAlphaPrime = -1.7580993408473766;

Tensor alpha_dropout_with(const Tensor& x, double p, bool training, int64_t channel_dim, const char* op) {
  return dropout_with(x, p, training, channel_dim, op, [&](const Tensor& keep) {
    const double a = 1.0 / std::sqrt((1 - p) * (1 + p * kAlphaPrime * kAlphaPrime));
    const double b = -a * kAlphaPrime * p;
    return (x * keep + (1.0 - keep) * kAlphaPrime) * a + b;
  });
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training) { return scaled_dropout(x, p, training, -1, "dropout"); }
Tensor dropout1d(const Tensor& x, double p, bool training) {
  return scaled_dropout(x, p, training, channel_dim_of(x, 1, "dropout1d"), "dropout1d");
}
Tensor dropout2d(const Tensor& x, double p, bool training) {
  return scaled_dropout(x, p, training, channel_dim_of(x, 2, "dropout2d"), "dropout2d");
}
Tensor dropout3d(const Tensor& x, double p, bool training) {
  return scaled_dropout(x, p, training, channel_dim_of(x, 3, "dropout3d"), "dropout3d");
}

Tensor alpha_dropout(const Tensor& x, double p, bool training) {
  return alpha_dropout_with(x, p, training, -1, "alpha_dropout");
}

Tensor feature_alpha_dropout(const Tensor& x, double p, bool training) {
  check(x.dim() >= 2, "feature_alpha_dropout", "expected an input of at least 2 dims (channels and more) but got shape ",
        shape_text(x.sizes()));
  return alpha_dropout_with(x, p, training, x.dim() >= 3 ? 1 : 0, "feature_alpha_dropout");
}

namespace {
const bool registered = [] {
  ops::def<&dropout1d>("dropout1d(Tensor input, float p=0.5, bool train=True) -> Tensor");
  ops::def<&dropout2d>("dropout2d(Tensor input, float p=0.5, bool train=True) -> Tensor");
  ops::def<&dropout3d>("dropout3d(Tensor input, float p=0.5, bool train=True) -> Tensor");
  ops::def<&alpha_dropout>("alpha_dropout(Tensor input, float p, bool train) -> Tensor");
  ops::def<&feature_alpha_dropout>("feature_alpha_dropout(Tensor input, float p, bool train) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
