// Helpers of the spatial layers (convolution, pooling): PyTorch's
// int-or-tuple arguments, the optional batch dim, and window views.
#pragma once
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::nn::spatial {

// One value per spatial dim from 1 or d values (PyTorch's int-or-tuple).
inline Shape per_dim(const char* op, const char* what, const Shape& v, int64_t d) {
  check(static_cast<int64_t>(v.size()) == d || v.size() == 1, op, "expected ", what, " of 1 or ", d,
        " values but got ", shape_text(v));
  return v.size() == 1 ? Shape(static_cast<size_t>(d), v[0]) : v;
}

struct BatchedInput {
  Tensor x;          // batched: (N, C, spatial...)
  bool unbatched;
};

inline BatchedInput batched(const char* op, const Tensor& input, int64_t d) {
  check(input.dim() == d + 2 || input.dim() == d + 1, op, "expected a ", d + 2, "-D (batched) or ", d + 1,
        "-D (unbatched) input but got shape ", shape_text(input.sizes()));
  check(is_floating(input.dtype()), op, "expected a floating point input but got ", input.dtype());
  const bool unbatched = input.dim() == d + 1;
  return {unbatched ? input.unsqueeze(0) : input, unbatched};
}

// The windows of x (N, C, spatial...) already padded: (N, C, out..., k...),
// every dilation-th element of each window (views, no copy).
inline Tensor windows(const Tensor& x, const Shape& kernel, const Shape& stride, const Shape& dilation) {
  const int64_t d = static_cast<int64_t>(kernel.size());
  Tensor w = x;
  for (int64_t i = 0; i < d; ++i) {
    const size_t k = static_cast<size_t>(i);
    const int64_t span = dilation[k] * (kernel[k] - 1) + 1;
    w = w.unfold(2 + i, span, stride[k]);  // appends the window dim
    if (dilation[k] > 1) w = w.slice(-1, 0, std::nullopt, dilation[k]);
  }
  return w;
}

// t's C values as (1, C, 1, ...) beside x (N, C, ...): per-channel weights,
// biases and statistics.
inline Tensor per_channel(const Tensor& t, const Tensor& x) {
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[1] = t.numel();
  return t.reshape(s);
}

}  // namespace kiln::nn::spatial
