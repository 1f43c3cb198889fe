// A downstream program: kiln's C++ API from the installed headers, and an
// extension built against the installed stable headers, loaded at run time.
#include <kiln/call_op.h>
#include <kiln/extension.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace kiln;
  manual_seed(0);
  const Tensor x = randn({4, 8}), y = randn({4, 8});
  const Tensor want = x + y * 0.5;
#ifdef EXTENSION_PATH
  load_extension(EXTENSION_PATH);
  load_extension(EXTENSION_V1_0_PATH);  // built against the frozen 1.0 headers
  const Tensor got = std::get<Tensor>(call_op("testext::scale_add", {x, y, 0.5})[0]);
  const Tensor got_v1_0 = std::get<Tensor>(call_op("testext_v1_0::scale_add", {x, y, 0.5})[0]);
  if (!got_v1_0.is_same(got) && (got_v1_0 - got).abs().max().item<double>() != 0.0) return 1;
#else
  const Tensor got = add(x, y, 0.5);  // (the pkg-config build: no extension)
#endif
  const double err = (got - want).abs().max().item<double>();
  const Tensor p = softmax(matmul(x, y.t()), -1);
  const double row = p.sum({-1}).mean().item<double>();
  std::printf("downstream: max error %.3g, softmax rows sum to %.6f\n", err, row);
  return err < 1e-6 && std::fabs(row - 1.0) < 1e-5 ? 0 : 1;
}
