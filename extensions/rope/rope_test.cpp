// The RoPE extension against the same math in kiln ops: forward values on
// odd and non-contiguous shapes, the backward against autograd's gradient
// of the ops version, and its refusal of bad input.
#include <kiln/call_op.h>
#include <kiln/extension.h>

#include <cstdio>

#include "rope_reference.h"

int main() {
  using namespace kiln;
  load_extension(KILN_ROPE_EXTENSION);
  manual_seed(3);
  int failures = 0;
  auto expect_near = [&](const Tensor& got, const Tensor& want, double tol, const char* what) {
    const double err = (got.to(kFloat64) - want.to(kFloat64)).abs().max().item<double>();
    if (!(err <= tol)) {
      std::printf("%s: max error %g > %g\n", what, err, tol);
      ++failures;
    }
  };
  for (const Shape& s : {Shape{1, 1, 5, 6}, Shape{2, 3, 17, 64}, Shape{7, 10}}) {
    const Tensor x = randn(s);
    const Tensor got = std::get<Tensor>(call_op("rope::rope", {x})[0]);
    expect_near(got, rope_in_ops(x.to(kFloat64), 10000.0), 1e-5, "forward");
    // Non-contiguous input, another base.
    const Tensor xt = randn({s.back(), s[s.size() - 2]}).t();
    const Tensor got_t = std::get<Tensor>(call_op("rope::rope", {xt, 500.0})[0]);
    expect_near(got_t, rope_in_ops(xt.to(kFloat64), 500.0), 1e-5, "forward, transposed input");
    // Backward: the gradient of sum(rope(x) * g) with respect to x, by the
    // backward op and through autograd (kiln_library_backward).
    const Tensor x64 = x.to(kFloat64).requires_grad_(), g = randn(s);
    (rope_in_ops(x64, 10000.0) * g.to(kFloat64)).sum().backward();
    expect_near(std::get<Tensor>(call_op("rope::rope_backward", {g, x})[0]), x64.grad(), 1e-5, "backward op");
    const Tensor xr = x.detach().requires_grad_();
    (std::get<Tensor>(call_op("rope::rope", {xr})[0]) * g).sum().backward();
    expect_near(xr.grad(), x64.grad(), 1e-5, "autograd through the extension");
  }
  try {
    call_op("rope::rope", {randn({4, 5})});
    std::printf("odd D: no error\n");
    ++failures;
  } catch (const Error& e) {
    if (std::string(e.what()).find("even D") == std::string::npos) {
      std::printf("odd D: unexpected message %s\n", e.what());
      ++failures;
    }
  }
  std::printf(failures ? "rope extension: %d failures\n" : "rope extension: all checks hold\n", failures);
  return failures ? 1 : 0;
}
