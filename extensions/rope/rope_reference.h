// RoPE in kiln ops (rotate-half form), the reference the extension is
// checked and benchmarked against.
#pragma once
#include <kiln/kiln.h>

#include <cmath>

inline kiln::Tensor rope_in_ops(const kiln::Tensor& x, double base) {
  using namespace kiln;
  const int64_t T = x.size(-2), D = x.size(-1), half = D / 2;
  // angle[t, i] = t * base^(-2i/D), as (T, D/2), then repeated for both halves.
  const Tensor inv = exp(arange(0, half, 1, TensorOptions(kFloat64)) * (-2.0 * std::log(base) / static_cast<double>(D)));
  const Tensor angle = matmul(arange(0, T, 1, TensorOptions(kFloat64)).unsqueeze(1), inv.unsqueeze(0));
  const Tensor c = cat({cos(angle), cos(angle)}, 1).to(x.dtype());
  const Tensor s = cat({sin(angle), sin(angle)}, 1).to(x.dtype());
  const Tensor rotated = cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * c + rotated * s;
}
