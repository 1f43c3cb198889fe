// A test extension built against the stable headers only: two ops whose
// values the extension test checks against kiln's own arithmetic, and one
// that throws.
#include <stdexcept>
#include <tuple>

#include "kiln/stable/library.h"

using kiln::stable::Tensor;

namespace {

// out = x + alpha * y, float32 of one shape (any layout: made contiguous first).
Tensor scale_add(Tensor x, Tensor y, double alpha) {
  if (x.sizes() != y.sizes() || x.scalar_type() != kiln::stable::dtype_code<float>() ||
      y.scalar_type() != x.scalar_type())
    throw std::invalid_argument("scale_add: x and y must be float32 tensors of one shape");
  const Tensor xc = kiln::stable::call("contiguous", x), yc = kiln::stable::call("contiguous", y);
  Tensor out = kiln::stable::empty_like(xc);
  const float* px = xc.data_ptr<float>();
  const float* py = yc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const float a = static_cast<float>(alpha);
  for (int64_t i = 0; i < xc.numel(); ++i) po[i] = px[i] + a * py[i];
  return out;
}

// The gradients of scale_add: (g, alpha g).
std::tuple<Tensor, Tensor> scale_add_backward(Tensor grad, Tensor, Tensor, double alpha) {
  return {grad, kiln::stable::call("mul", grad, alpha)};
}

// The sum of a float32 tensor (through kiln's own op) and its element count.
std::tuple<Tensor, int64_t> stats(Tensor x) { return {kiln::stable::call("sum", x), x.numel()}; }

}  // namespace

// The namespace: testext, or another for a second build of this file (the
// one against the frozen 1.0 headers) loaded into the same process.
#ifndef KILN_TEST_EXTENSION_NAMESPACE
#define KILN_TEST_EXTENSION_NAMESPACE testext
#endif
#define KILN_TEST_LIBRARY(ns, m) KILN_STABLE_LIBRARY(ns, m)
#define KILN_TEST_LIBRARY_IMPL(ns, m) KILN_STABLE_LIBRARY_IMPL(ns, CPU, m)

KILN_TEST_LIBRARY(KILN_TEST_EXTENSION_NAMESPACE, m) {
  m.def("scale_add(Tensor x, Tensor y, float alpha) -> Tensor");
  m.def("stats(Tensor x) -> (Tensor sum, int numel)");
  // The same kernel declared with a shape function and a backward: it goes
  // through the dispatcher (traced by kiln::compile, recorded by autograd).
  m.def("scale_add_traced(Tensor x, Tensor y, float alpha) -> Tensor");
  m.def("scale_add_backward(Tensor grad, Tensor x, Tensor y, float alpha) -> (Tensor, Tensor)");
  m.def_shape("scale_add_traced", &kiln::stable::same_as_first_tensor);
  m.def_backward("scale_add_traced", "scale_add_backward");
}

KILN_TEST_LIBRARY_IMPL(KILN_TEST_EXTENSION_NAMESPACE, m) {
  m.impl<&scale_add>("scale_add");
  m.impl<&stats>("stats");
  m.impl<&scale_add>("scale_add_traced");
  m.impl<&scale_add_backward>("scale_add_backward");
}
