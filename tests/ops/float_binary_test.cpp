// The binary ops defined on floating point only (logaddexp, hypot) against
// float64 references on special values (+-0, +-inf, NaN, huge, tiny) and
// random ones, broadcast, non-contiguous and zero-size operands; their
// gradients (gradcheck); their errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

double logaddexp_ref(double a, double b) {
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
  for (size_t i = 0; i < as.size(); ++i) want.push_back(logaddexp_ref(as[i], bs[i]));
  expect_close(logaddexp(a, b), want, 1e-6, 1e-6, "special values");
  // Random, broadcast (3, 1) with (4), and a transposed operand.
  const Tensor x = randn({4, 3}).t() * 30, y = randn({4}) * 30, z = randn({3, 1}) * 30;
  for (const auto& [p, q] : {std::pair{x, y}, std::pair{z, y}, std::pair{x, z}}) {
    const Tensor got = logaddexp(p, q);
    const Tensor pb = p.expand(got.sizes()).contiguous(), qb = q.expand(got.sizes()).contiguous();
    std::vector<double> w;
    const std::vector<double> pv = values(pb), qv = values(qb);
    for (size_t i = 0; i < pv.size(); ++i) w.push_back(logaddexp_ref(pv[i], qv[i]));
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

const std::vector<float> kSpecial = {0.0f,   -0.0f, INFINITY, -INFINITY, NAN,   1e30f, -3e38f, 3e38f,
                                    1e-30f, 1e-45f, -1e-40f, 88.0f,     -3.0f, 4.0f,  1.5f};

// Every pair of special values, then random operands in several layouts:
// broadcast (3, 1) with (4), transposed, a narrowed (strided) slice, zero-size.
void check_against(const std::function<Tensor(const Tensor&, const Tensor&)>& op, double (*ref)(double, double),
                   double rtol, double atol) {
  std::vector<float> as, bs;
  for (float a : kSpecial)
    for (float b : kSpecial) as.push_back(a), bs.push_back(b);
  std::vector<double> want;
  for (size_t i = 0; i < as.size(); ++i) want.push_back(static_cast<float>(ref(as[i], bs[i])));  // float's rounding
  expect_close(op(tensor<float>(as), tensor<float>(bs)), want, rtol, atol, "special values");
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = randn({4, 3}, dt).t() * 30, y = randn({4}, dt) * 1e3, z = randn({3, 1}, dt) * 1e-3;
    const Tensor strided = randn({3, 8}, dt).narrow(1, 1, 4);
    for (const auto& [p, q] : {std::pair{x, y}, std::pair{z, y}, std::pair{x, z}, std::pair{strided, x}}) {
      const Tensor got = op(p, q);
      EXPECT_EQ(got.dtype(), dt);
      const Tensor pb = p.expand(got.sizes()).contiguous(), qb = q.expand(got.sizes()).contiguous();
      std::vector<double> w;
      const std::vector<double> pv = values(pb), qv = values(qb);
      for (size_t i = 0; i < pv.size(); ++i) w.push_back(ref(pv[i], qv[i]));
      expect_close(got, w, dt == kFloat64 ? 1e-14 : rtol, dt == kFloat64 ? 0 : atol, "random " + shape_str(got.sizes()));
    }
    EXPECT_EQ(op(randn({0, 3}, dt), randn({3}, dt)).sizes(), Shape({0, 3}));
  }
}

double hypot_ref(double a, double b) { return std::hypot(a, b); }

TEST(Hypot, MatchesStdHypotWithoutOverflowOrUnderflow) {
  check_against([](const Tensor& a, const Tensor& b) { return hypot(a, b); }, hypot_ref, 1.2e-7, 0);
  // Where a^2 + b^2 in float would overflow or vanish.
  expect_close(hypot(tensor<float>({3e30f, 3e-30f, 2e38f, 3e38f}), tensor<float>({4e30f, 4e-30f, 1e38f, 3e38f})),
               {5e30, 5e-30, std::hypot(2e38f, 1e38f), INFINITY}, 1.2e-7, 0, "huge and tiny");
  expect_close(hypot(tensor<float>({INFINITY, NAN}), tensor<float>({NAN, -INFINITY})), {INFINITY, INFINITY}, 0, 0,
               "an infinity wins over NaN");
}

TEST(Hypot, GradientsAndErrors) {
  const Tensor a = randn({3, 4}, kFloat64).requires_grad_(), b = randn({4}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{hypot(in[0], in[1])}; },
                                  {a, b}));
  expect_error([] { hypot(arange(3), arange(3)); }, {"[hypot]", "floating point", "int64"});
  EXPECT_EQ(hypot(arange(3), tensor<float>({1, 2, 3})).dtype(), kFloat32);  // promoted, as in PyTorch
  expect_error([] { hypot(randn({2, 3}), randn({4})); }, {"[hypot]", "[2, 3]", "[4]"});
}

TEST(Logaddexp, MatchesItsDefinitionInEveryLayout) {
  check_against([](const Tensor& a, const Tensor& b) { return logaddexp(a, b); }, logaddexp_ref, 2.5e-7, 1e-7);  // atol: e^a + e^b near 1
}

}  // namespace
}  // namespace kiln::test
