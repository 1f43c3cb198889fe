// torch.nn.functional's glu, prelu, normalize, cosine_similarity and
// pairwise_distance: composites of ops, so autograd and kiln::compile
// come with them.
#include <cmath>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln::nn {

Tensor glu(const Tensor& x, int64_t dim) {
  check(x.dim() > 0, "glu", "glu does not support 0-d tensors");
  const int64_t d = ops::wrap_dim(dim, x.dim(), "glu");
  const int64_t n = x.size(d);
  check(n % 2 == 0, "glu", "halving dimension must be even, but dimension ", d, " of shape ", shape_text(x.sizes()),
        " is size ", n);
  return x.narrow(d, 0, n / 2) * sigmoid(x.narrow(d, n / 2, n / 2));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  check(is_floating(x.dtype()), "prelu", "expected a floating input but got ", x.dtype());
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  check(weight.dim() <= 1 && (weight.numel() == 1 || weight.numel() == channels), "prelu",
        "expected weight with 1 element or one per channel (", channels, ", dim 1 of input ", shape_text(x.sizes()),
        ") but got shape ", shape_text(weight.sizes()));
  Tensor w = weight.reshape({weight.numel()});
  if (weight.numel() > 1) {  // one slope per channel, along dim 1
    Shape s(static_cast<size_t>(x.dim()), 1);
    s[1] = channels;
    w = w.reshape(s);
  } else {
    w = w.reshape({});
  }
  // x > 0 picks x; elsewhere (0 included, as PyTorch's gradient) the slope.
  return where(x > 0.0, x, w * x);
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "normalize");
  const Tensor n = norm(x, p, {d}, true);
  return x / clamp(n, eps, std::nullopt);
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  check(is_floating(x1.dtype()) && is_floating(x2.dtype()), "cosine_similarity",
        "expected floating inputs but got ", x1.dtype(), " and ", x2.dtype());
  const Shape shape = broadcast_shapes(x1.sizes(), x2.sizes(), "cosine_similarity");
  const Tensor a = x1.expand(shape), b = x2.expand(shape);
  const int64_t d = ops::wrap_dim(dim, static_cast<int64_t>(shape.size()), "cosine_similarity");
  // x1 . x2 / (max(|x1|, eps) max(|x2|, eps)), PyTorch 2's definition.
  const Tensor n1 = clamp(norm(a, 2.0, {d}), eps, std::nullopt), n2 = clamp(norm(b, 2.0, {d}), eps, std::nullopt);
  return sum(a * b, {d}) / (n1 * n2);
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  check(is_floating(x1.dtype()) && is_floating(x2.dtype()), "pairwise_distance",
        "expected floating inputs but got ", x1.dtype(), " and ", x2.dtype());
  const Tensor diff = x1 - x2 + eps;
  // The last dim holds the vectors (0-d: the difference itself).
  if (diff.dim() == 0) return abs(diff);
  return norm(diff, p, {-1}, keepdim);
}

namespace {
const bool registered = [] {
  ops::def<&glu>("glu(Tensor self, int dim=-1) -> Tensor");
  ops::def<&prelu>("prelu(Tensor self, Tensor weight) -> Tensor");
  ops::def<&normalize>("normalize(Tensor input, float p=2.0, int dim=1, float eps=1e-12) -> Tensor");
  ops::def<&cosine_similarity>("cosine_similarity(Tensor x1, Tensor x2, int dim=1, float eps=1e-08) -> Tensor");
  ops::def<&pairwise_distance>(
      "pairwise_distance(Tensor x1, Tensor x2, float p=2.0, float eps=1e-06, bool keepdim=False) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
