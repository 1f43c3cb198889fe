// Rotary position embedding (RoPE, rotate-half form) as a kiln extension,
// written against the stable headers only. For x (..., T, D), D even, and
// position t of each row, pair i < D/2 of a row rotates by t * base^(-2i/D):
//   out[i]       = x[i] cos - x[i + D/2] sin
//   out[i + D/2] = x[i + D/2] cos + x[i] sin
// The backward rotates the gradient back (by -angle). One pass over x, on
// kiln's threads, where the same math in ops takes a slice, a negation, a
// cat and three elementwise passes.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kiln/stable/library.h"

using kiln::stable::Tensor;

namespace {

// sign +1: forward; -1: backward (the inverse rotation).
Tensor rotate(const Tensor& input, double base, float sign) {
  if (input.scalar_type() != kiln::stable::dtype_code<float>())
    throw std::invalid_argument("rope: expected a float32 tensor");
  if (input.dim() < 2 || input.size(-1) % 2 != 0)
    throw std::invalid_argument("rope: expected (..., T, D) with an even D");
  const Tensor x = kiln::stable::call("contiguous", input);
  const int64_t T = x.size(-2), D = x.size(-1), half = D / 2, rows = x.numel() / D;
  // cos and sin per (position, pair), computed once per call in double.
  std::vector<float> cs(static_cast<size_t>(T * half)), sn(cs.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      cs[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
      sn[static_cast<size_t>(t * half + i)] = sign * static_cast<float>(std::sin(angle));
    }
  Tensor out = kiln::stable::empty_like(x);
  const float* px = x.data_ptr<float>();
  float* po = out.data_ptr<float>();
  kiln::stable::parallel_for(0, rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* c = cs.data() + (r % T) * half;
      const float* s = sn.data() + (r % T) * half;
      const float* a = px + r * D;
      float* o = po + r * D;
      for (int64_t i = 0; i < half; ++i) {
        const float lo_v = a[i], hi_v = a[i + half];
        o[i] = lo_v * c[i] - hi_v * s[i];
        o[i + half] = hi_v * c[i] + lo_v * s[i];
      }
    }
  });
  return out;
}

Tensor rope(Tensor x, double base) { return rotate(x, base, 1.0f); }
// The gradient of rope(x, base) from that of its result (x itself is not
// needed: the op is linear in x).
Tensor rope_backward(Tensor grad, Tensor, double base) { return rotate(grad, base, -1.0f); }

}  // namespace

KILN_STABLE_LIBRARY(rope, m) {
  m.def("rope(Tensor x, float base=10000.0) -> Tensor");
  m.def("rope_backward(Tensor grad, Tensor x, float base=10000.0) -> Tensor");
  m.def_backward("rope", "rope_backward");
}

KILN_STABLE_LIBRARY_IMPL(rope, CPU, m) {
  m.impl<&rope>("rope");
  m.impl<&rope_backward>("rope_backward");
}
