// logaddexp against log(e^a + e^b) in float64 (in its stable form) on random
// values with +-0, +-inf, NaN and huge ones, broadcast and non-contiguous
// operands; its gradients (gradcheck, and 1/2 each at a == b); its errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

double reference(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b && std::isinf(a)) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

TEST(Logaddexp, MatchesItsDefinitionOnSpecialAndRandomValues) {
  const std::vector<float> special = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -3e38f, 3e38f, 88.0f, -100.0f, 1.5f};
  std::vector<float> as, bs;
  for (float a : special)
    for (float b : special) as.push_back(a), bs.push_back(b);
  const Tensor a = tensor<float>(as), b = tensor<float>(bs);
  std::vector<double> want;
  for (size_t i = 0; i < as.size(); ++i) want.push_back(reference(as[i], bs[i]));
  expect_close(logaddexp(a, b), want, 1e-6, 1e-6, "special values");
  // Random, broadcast (3, 1) with (4), and a transposed operand.
  const Tensor x = randn({4, 3}).t() * 30, y = randn({4}) * 30, z = randn({3, 1}) * 30;
  for (const auto& [p, q] : {std::pair{x, y}, std::pair{z, y}, std::pair{x, z}}) {
    const Tensor got = logaddexp(p, q);
    const Tensor pb = p.expand(got.sizes()).contiguous(), qb = q.expand(got.sizes()).contiguous();
    std::vector<double> w;
    const std::vector<double> pv = values(pb), qv = values(qb);
    for (size_t i = 0; i < pv.size(); ++i) w.push_back(reference(pv[i], qv[i]));
    expect_close(got, w, 2e-6, 1e-6, "random " + shape_str(got.sizes()));
  }
  EXPECT_EQ(logaddexp(randn({2}, kFloat64), randn({2})).dtype(), kFloat64);
}

TEST(Logaddexp, GradientsAreTheSoftmaxWeights) {
  const Tensor a = randn({3, 4}, kFloat64).requires_grad_(), b = randn({4}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{logaddexp(in[0], in[1])}; },
                                  {a, b}));
  const Tensor c = tensor<double>({0.5, -2.0}).requires_grad_(), d = tensor<double>({0.5, -2.0}).requires_grad_();
  logaddexp(c, d).sum().backward();
  expect_close(c.grad(), {0.5, 0.5}, 1e-12, 0, "equal sides: 1/2 each");
  expect_close(d.grad(), {0.5, 0.5}, 1e-12, 0, "equal sides: 1/2 each");
}

TEST(Logaddexp, IntegersAreRefused) {
  expect_error([] { logaddexp(arange(3), arange(3)); }, {"[logaddexp]", "floating point", "int64"});
}

}  // namespace
}  // namespace kiln::test
