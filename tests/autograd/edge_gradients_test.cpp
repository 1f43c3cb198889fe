// Gradients at the edges where a composite formula used to give NaN or
// lose precision: cumsum's reversed scan, norm at an all-zero slice,
// cross_entropy with every target ignored; and bool arithmetic.
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

// cumsum's gradient as total - cumsum + g cancelled: 0.8% relative error
// over 1e5 float32 elements. As a reversed scan it is exact to rounding.
TEST(EdgeGradients, CumsumBackwardIsAReversedScan) {
  manual_seed(3);
  const int64_t n = 100000;
  const Tensor x = randn({n}).requires_grad_();
  const Tensor w = randn({n});  // upstream gradient
  (cumsum(x, 0) * w).sum().backward();
  const std::vector<double> got = values(x.grad()), wv = values(w);
  double acc = 0, worst = 0;
  for (int64_t i = n - 1; i >= 0; --i) {
    acc += wv[i];
    worst = std::max(worst, std::fabs(got[i] - acc) / std::max(1.0, std::fabs(acc)));
  }
  EXPECT_LT(worst, 1e-6);
  // Along an inner dim, and the reversed scan's own gradient (gradcheck).
  const Tensor y = (rand({5, 3}, kFloat64) - 0.5).requires_grad_();
  autograd::gradcheck([](const std::vector<Tensor>& v) { return std::vector<Tensor>{cumsum(v[0], 1)}; }, {y});
  autograd::gradcheck([](const std::vector<Tensor>& v) { return std::vector<Tensor>{cumsum_backward(v[0], 0)}; }, {y});
  EXPECT_EQ(values(cumsum_backward(tensor<float>({1, 2, 3}), 0)), std::vector<double>({6, 5, 3}));
}

TEST(EdgeGradients, NormOfAnAllZeroSliceHasZeroGradient) {
  for (double p : {2.0, 3.0, 1.5}) {
    const Tensor x = tensor<double>({0, 0, 0, 1, -2, 2}, {2, 3}).requires_grad_();
    norm(x, p, {1}).sum().backward();
    const std::vector<double> g = values(x.grad());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g[i], 0.0) << "p " << p;
    for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isfinite(g[i]) && g[i] != 0) << "p " << p;
    EXPECT_EQ(values(norm(x.detach(), p, {1}))[0], 0.0);
    // Away from zero the gradient is still right.
    const Tensor y = (rand({2, 4}, kFloat64) + 0.5).requires_grad_();
    autograd::gradcheck([p](const std::vector<Tensor>& v) { return std::vector<Tensor>{norm(v[0], p, {1})}; }, {y});
  }
}

TEST(EdgeGradients, CrossEntropyWithEveryTargetIgnored) {
  const Tensor logits = randn({3, 5}).requires_grad_();
  const Tensor loss = nn::cross_entropy(logits, tensor<int64_t>({-100, -100, -100}));
  EXPECT_TRUE(std::isnan(loss.item<double>()));  // as in PyTorch
  loss.backward();
  for (double g : values(logits.grad())) EXPECT_EQ(g, 0.0);  // PyTorch's, not NaN
  // Some targets ignored: the mean over the others, gradient as before.
  const Tensor l2 = randn({3, 5}, kFloat64).requires_grad_();
  autograd::gradcheck([](const std::vector<Tensor>& v) {
    return std::vector<Tensor>{nn::cross_entropy(v[0], tensor<int64_t>({1, -100, 4}))};
  }, {l2});
}

// PyTorch's maximum/minimum backward: the smaller (larger) input gets 0, a
// tie splits the gradient, and a NaN on either side gives both the whole
// gradient (it was 0 / 0 = NaN, spread by every sum downstream).
TEST(EdgeGradients, MaximumAndMinimumAtTiesAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const bool is_max : {true, false}) {
    const Tensor a = tensor<double>({1, 2, 3, nan, 5}).requires_grad_();
    const Tensor b = tensor<double>({2, 2, 1, 0, nan}).requires_grad_();
    const Tensor y = is_max ? maximum(a, b) : minimum(a, b);
    (y * tensor<double>({1, 2, 4, 8, 16})).sum().backward();
    const std::vector<double> ga = values(a.grad()), gb = values(b.grad());
    EXPECT_EQ(ga, std::vector<double>(is_max ? std::vector<double>{0, 1, 4, 8, 16} : std::vector<double>{1, 1, 0, 8, 16}));
    EXPECT_EQ(gb, std::vector<double>(is_max ? std::vector<double>{1, 1, 0, 8, 16} : std::vector<double>{0, 1, 4, 8, 16}));
  }
  // Broadcast: the row's gradient sums over the rows it was compared with.
  const Tensor x = tensor<double>({1, 5, 3, 0}, {2, 2}).requires_grad_(), r = tensor<double>({2, 2}).requires_grad_();
  maximum(x, r).sum().backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>({0, 1, 1, 0}));
  EXPECT_EQ(values(r.grad()), std::vector<double>({1, 1}));
}

TEST(BoolArithmetic, AddIsOrAndMulIsAnd) {
  const Tensor a = tensor<bool>({true, true, false, false}), b = tensor<bool>({true, false, true, false});
  const Tensor sum_ab = a + b, prod_ab = a * b;
  EXPECT_EQ(sum_ab.dtype(), kBool);
  EXPECT_EQ(prod_ab.dtype(), kBool);
  EXPECT_EQ(values(sum_ab), std::vector<double>({1, 1, 1, 0}));
  EXPECT_EQ(values(prod_ab), std::vector<double>({1, 0, 0, 0}));
  Tensor c = a.clone();
  c.add_(b);
  EXPECT_EQ(values(c), std::vector<double>({1, 1, 1, 0}));
  c.mul_(a);
  EXPECT_EQ(values(c), std::vector<double>({1, 1, 0, 0}));
  EXPECT_EQ(values(a.expand({2, 4}) * b.view({1, 4})), std::vector<double>({1, 0, 0, 0, 1, 0, 0, 0}));
  // bool with a number promotes as before; subtraction and alpha != 1 stay errors.
  EXPECT_EQ((a + 1).dtype(), kInt64);
  expect_error([&] { a - b; }, {"[sub]", "bool"});
  expect_error([&] { add(a, b, 2); }, {"[add]", "alpha", "bool"});
}

}  // namespace
}  // namespace kiln::test
