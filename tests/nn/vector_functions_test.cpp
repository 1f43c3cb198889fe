// glu, prelu, normalize, cosine_similarity, pairwise_distance against
// float64 references computed element by element here, in every layout,
// broadcast, empty and 0-d; gradcheck; errors.
#include <cmath>

#include "kiln/nn.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// The p-norm of the vector of x along dim through idx (idx[dim] ignored).
double norm_along(const Tensor& x, std::vector<int64_t> idx, int64_t dim, double p, double shift = 0) {
  double s = 0, m = 0;
  for (int64_t k = 0; k < x.size(dim); ++k) {
    idx[static_cast<size_t>(dim)] = k;
    const double v = std::abs(at_broadcast(x, idx) + shift);
    s += p == 2 ? v * v : std::pow(v, p);
    m = std::max(m, v);
  }
  return std::isinf(p) ? m : std::pow(s, 1 / p);
}

TEST(VectorFunctions, MatchElementwiseReferences) {
  manual_seed(98);
  for (Layout layout : all_layouts()) {
    const std::string l = layout_name(layout);
    const Tensor x = make_input({3, 4, 5}, layout, kFloat64);
    // glu along dim 1 (size 4): first half * sigmoid(second half).
    std::vector<double> want;
    for (int64_t i = 0; i < 3 * 2 * 5; ++i) {
      const auto idx = unravel(i, {3, 2, 5});
      const double a = at_broadcast(x, idx), b = at_broadcast(x, {idx[0], idx[1] + 2, idx[2]});
      want.push_back(a / (1 + std::exp(-b)));
    }
    expect_close(nn::glu(x, 1), want, 1e-12, 1e-12, "glu " + l);
    // prelu with one slope per channel (dim 1) and with one slope.
    const Tensor w = tensor(std::vector<double>{0.25, -1.5, 2.0, 0.0});
    want.clear();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const auto idx = unravel(i, x.sizes());
      const double v = at_broadcast(x, idx);
      want.push_back(v > 0 ? v : read_at(w, idx[1]) * v);
    }
    expect_close(nn::prelu(x, w), want, 1e-15, 0, "prelu per channel " + l);
    want.clear();
    for (int64_t i = 0; i < x.numel(); ++i) want.push_back(std::max(0.0, at_broadcast(x, unravel(i, x.sizes()))) +
                                                         0.1 * std::min(0.0, at_broadcast(x, unravel(i, x.sizes()))));
    expect_close(nn::prelu(x, full({1}, 0.1, kFloat64)), want, 1e-15, 1e-300, "prelu one slope " + l);
    // normalize along dims 1 and -1, p 2, 1, 3 and inf.
    for (double p : {2.0, 1.0, 3.0, static_cast<double>(INFINITY)})
      for (int64_t dim : {1, -1}) {
        const int64_t d = dim < 0 ? 2 : dim;
        want.clear();
        for (int64_t i = 0; i < x.numel(); ++i) {
          const auto idx = unravel(i, x.sizes());
          want.push_back(at_broadcast(x, idx) / std::max(norm_along(x, idx, d, p), 1e-12));
        }
        expect_close(nn::normalize(x, p, dim), want, 1e-12, 1e-12, "normalize p " + std::to_string(p) + " " + l);
      }
    // cosine_similarity along dim 2 with y broadcast over dim 0; pairwise_distance over the last dim.
    const Tensor y = make_input({1, 4, 5}, layout, kFloat64);
    want.clear();
    std::vector<double> dist;
    for (int64_t i = 0; i < 12; ++i) {
      const auto idx = unravel(i, {3, 4});
      double dot = 0, nx = 0, ny = 0, dd = 0;
      for (int64_t k = 0; k < 5; ++k) {
        const double a = at_broadcast(x, {idx[0], idx[1], k}), b = at_broadcast(y, {0, idx[1], k});
        dot += a * b, nx += a * a, ny += b * b, dd += std::pow(std::abs(a - b + 1e-6), 3);
      }
      want.push_back(dot / (std::max(std::sqrt(nx), 1e-8) * std::max(std::sqrt(ny), 1e-8)));
      dist.push_back(std::cbrt(dd));
    }
    expect_close(nn::cosine_similarity(x, y, 2), want, 1e-12, 1e-12, "cosine_similarity " + l);
    expect_close(nn::pairwise_distance(x, y, 3.0), dist, 1e-12, 1e-12, "pairwise_distance " + l);
    EXPECT_EQ(nn::pairwise_distance(x, y, 2.0, 1e-6, true).sizes(), (Shape{3, 4, 1}));
  }
  // Zero vectors: eps keeps both finite (0 and 0 / eps).
  expect_close(nn::normalize(zeros({2, 3})), {0, 0, 0, 0, 0, 0}, 0, 0, "normalize of zeros");
  expect_close(nn::cosine_similarity(zeros({2, 3}), ones({2, 3})), {0, 0}, 0, 0, "cosine of a zero vector");
  // float32 keeps its dtype; empty inputs give empty results.
  EXPECT_EQ(nn::glu(randn({2, 6})).dtype(), kFloat32);
  EXPECT_EQ(nn::glu(empty({0, 4})).sizes(), (Shape{0, 2}));
  EXPECT_EQ(nn::cosine_similarity(empty({0, 3}), empty({0, 3})).sizes(), (Shape{0}));
  EXPECT_EQ(nn::prelu(full({}, -2.0), full({1}, 0.5)).item<double>(), -1.0);
}

TEST(VectorFunctions, Gradients) {
  manual_seed(99);
  const Tensor x = randn({3, 4, 2}, kFloat64).requires_grad_(), y = randn({3, 4, 2}, kFloat64).requires_grad_();
  const Tensor w = tensor(std::vector<double>{0.3, -0.7, 1.5, 0.1}).requires_grad_();
  auto check1 = [](const char* what, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                   const std::vector<Tensor>& in) {
    EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& t) { return std::vector<Tensor>{f(t)}; }, in)) << what;
  };
  check1("glu", [](auto t) { return nn::glu(t[0], 1); }, {x});
  check1("prelu", [](auto t) { return nn::prelu(t[0], t[1]); }, {x, w});
  check1("normalize", [](auto t) { return nn::normalize(t[0], 2.0, 1); }, {x});
  check1("normalize p=3", [](auto t) { return nn::normalize(t[0], 3.0, -1); }, {x});
  check1("cosine_similarity", [](auto t) { return nn::cosine_similarity(t[0], t[1], 1); }, {x, y});
  check1("pairwise_distance", [](auto t) { return nn::pairwise_distance(t[0], t[1]); }, {x, y});
}

TEST(VectorFunctions, Errors) {
  expect_error([] { nn::glu(randn({2, 3}), 1); }, {"[glu]", "must be even", "size 3"});
  expect_error([] { nn::glu(full({}, 1.0)); }, {"[glu]", "0-d"});
  expect_error([] { nn::prelu(randn({2, 3}), randn({2})); }, {"[prelu]", "one per channel (3", "[2]"});
  expect_error([] { nn::prelu(randint(0, 3, {3}), randn({1})); }, {"[prelu]", "floating", "int64"});
  expect_error([] { nn::normalize(randn({2, 3}), 2.0, 2); }, {"[normalize]", "out of range"});
  expect_error([] { nn::cosine_similarity(randn({2, 3}), randn({4, 3})); }, {"[cosine_similarity]", "[2, 3]", "[4, 3]"});
  expect_error([] { nn::pairwise_distance(randint(0, 3, {3}), randn({3})); }, {"[pairwise_distance]", "int64"});
}

}  // namespace
}  // namespace kiln::test
