// interpolate: PyTorch's documented outputs (nn.Upsample's examples), a
// float64 reference written from the definition (every output pixel a
// weighted sum of its 2^d neighbours) on random inputs of every layout,
// up- and down-sampling, sizes and scale factors; gradcheck; errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

// Where output pixel o of a dim samples its input: the two neighbours and
// their weights (nearest: one neighbour, weight 1).
struct Tap {
  int64_t lo, hi;
  double w_lo, w_hi;
};
Tap tap(const std::string& mode, int64_t o, int64_t in, int64_t out, bool align, std::optional<double> factor) {
  if (mode == "nearest" || mode == "nearest-exact") {
    const double s = factor ? static_cast<double>(static_cast<float>(1.0 / *factor))
                            : static_cast<double>(static_cast<float>(in) / static_cast<float>(out));
    const double pos = mode == "nearest" ? o * s : (o + 0.5) * s;
    const int64_t i = std::min(static_cast<int64_t>(std::floor(pos)), in - 1);
    return {i, i, 1, 0};
  }
  const double s = align ? (out > 1 ? double(in - 1) / double(out - 1) : 0) : factor ? 1.0 / *factor : double(in) / out;
  const double pos = std::max(align ? o * s : (o + 0.5) * s - 0.5, 0.0);
  const int64_t i0 = std::min(static_cast<int64_t>(pos), in - 1);
  const double t = std::min(pos - static_cast<double>(i0), 1.0);
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), 1 - t, t};
}

// The float64 reference: sum over the 2^d corners of the product of weights.
std::vector<double> reference(const Tensor& x, const Shape& out, const std::string& mode, bool align,
                              std::optional<double> factor) {
  const Shape in = x.sizes();
  const int64_t spatial = x.dim() - 2;
  Shape full = {in[0], in[1]};
  full.insert(full.end(), out.begin(), out.end());
  const int64_t total = shape_numel(full);
  std::vector<double> r(static_cast<size_t>(total));
  for (int64_t flat = 0; flat < total; ++flat) {
    const std::vector<int64_t> idx = unravel(flat, full);
    std::vector<Tap> taps;
    for (int64_t d = 0; d < spatial; ++d)
      taps.push_back(tap(mode, idx[static_cast<size_t>(d + 2)], in[static_cast<size_t>(d + 2)],
                         out[static_cast<size_t>(d)], align, factor));
    double sum = 0;
    for (int64_t corner = 0; corner < (int64_t{1} << spatial); ++corner) {
      std::vector<int64_t> at = {idx[0], idx[1]};
      double w = 1;
      for (int64_t d = 0; d < spatial; ++d) {
        const Tap& t = taps[static_cast<size_t>(d)];
        const bool high = (corner >> d) & 1;
        at.push_back(high ? t.hi : t.lo);
        w *= high ? t.w_hi : t.w_lo;
      }
      if (w != 0) sum += w * at_broadcast(x, at);
    }
    r[static_cast<size_t>(flat)] = sum;
  }
  return r;
}

TEST(Interpolate, PyTorchsDocumentedOutputs) {
  const Tensor x = arange(1.0, 5.0).reshape({1, 1, 2, 2});
  expect_close(nn::interpolate(x, {}, std::vector<double>{2}), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0, 0,
               "nearest");
  expect_close(nn::interpolate(x, {}, std::vector<double>{2}, "bilinear"),
               {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}, 1e-6, 1e-6, "bilinear");
  const double t = 1.0 / 3, u = 2.0 / 3;
  expect_close(nn::interpolate(x, {}, std::vector<double>{2}, "bilinear", true),
               {1, 1 + t, 1 + u, 2, 1 + u, 2, 2 + t, 2 + u, 2 + t, 2 + u, 3, 3 + t, 3, 3 + t, 3 + u, 4}, 1e-6, 1e-6,
               "bilinear, align_corners");
  // Down from 5 to 3: nearest picks 0, 1, 3; nearest-exact 0, 2, 4.
  const Tensor row = arange(0.0, 5.0).reshape({1, 1, 5});
  expect_close(nn::interpolate(row, Shape{3}), {0, 1, 3}, 0, 0, "nearest 5 -> 3");
  expect_close(nn::interpolate(row, Shape{3}, {}, "nearest-exact"), {0, 2, 4}, 0, 0, "nearest-exact 5 -> 3");
}

TEST(Interpolate, EveryModeAndLayoutMatchesFloat64) {
  manual_seed(5201);
  struct Case {
    std::string mode;
    Shape in, out;
    std::optional<double> factor;
  };
  const std::vector<Case> cases = {
      {"nearest", {2, 3, 5, 7}, {3, 11}, {}},       {"nearest", {2, 3, 4, 6}, {6, 10}, 1.7},
      {"nearest-exact", {2, 2, 7, 5}, {3, 9}, {}},  {"nearest", {2, 3, 9}, {4}, 0.5},
      {"bilinear", {2, 3, 5, 7}, {3, 11}, {}},      {"bilinear", {2, 3, 4, 6}, {6, 10}, 1.7},
      {"bilinear", {1, 2, 6, 6}, {1, 13}, {}},       {"linear", {2, 3, 9}, {4}, 0.5},
      {"linear", {2, 3, 4}, {11}, {}},              {"trilinear", {1, 2, 3, 4, 5}, {5, 2, 7}, {}},
      {"nearest", {1, 2, 3, 4, 5}, {6, 8, 10}, 2.0},
  };
  for (const Case& c : cases)
    for (bool align : {false, true}) {
      const bool nearest = c.mode.rfind("nearest", 0) == 0;
      if (nearest && align) continue;
      for (DType dt : {kFloat64, kFloat32})
        for (Layout layout : all_layouts()) {
          const Tensor x = make_input(c.in, layout, dt);
          std::optional<bool> ac;
          if (!nearest) ac = align;
          const Tensor y = c.factor ? nn::interpolate(x, {}, std::vector<double>{*c.factor}, c.mode, ac)
                                    : nn::interpolate(x, c.out, {}, c.mode, ac);
          Shape want = {c.in[0], c.in[1]};
          want.insert(want.end(), c.out.begin(), c.out.end());
          const std::string what = c.mode + (align ? " align " : " ") + shape_str(c.in) + " -> " + shape_str(c.out) +
                                   " " + layout_name(layout);
          ASSERT_EQ(y.sizes(), want) << what;
          EXPECT_EQ(y.dtype(), dt);
          const Tol tol = tol_for(dt);
          expect_close(y, reference(x, c.out, c.mode, align, c.factor), tol.rtol * 4, tol.atol * 4, what);
        }
    }
  // recompute_scale_factor samples by the sizes: 4 * 1.7 -> 6 pixels at scale 4/6.
  const Tensor x = randn({1, 1, 4}, kFloat64);
  expect_close(nn::interpolate(x, {}, std::vector<double>{1.7}, "linear", false, true),
               reference(x, {6}, "linear", false, {}), 1e-12, 1e-12, "recompute_scale_factor");
  // Per-dim sizes and factors.
  EXPECT_EQ(nn::interpolate(randn({1, 1, 4, 4}), {}, std::vector<double>{0.5, 2}).sizes(), (Shape{1, 1, 2, 8}));
  EXPECT_EQ(nn::interpolate(randn({0, 1, 4, 4}), Shape{2, 3}, {}, "bilinear").sizes(), (Shape{0, 1, 2, 3}));
}

TEST(Interpolate, Gradients) {
  manual_seed(5202);
  auto check = [](const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
    return autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {x});
  };
  const Tensor x4 = randn({2, 2, 3, 4}, kFloat64).requires_grad_();
  EXPECT_TRUE(check(x4, [](const Tensor& t) { return nn::interpolate(t, Shape{5, 3}, {}, "bilinear"); }));
  EXPECT_TRUE(check(x4, [](const Tensor& t) { return nn::interpolate(t, Shape{5, 7}, {}, "bilinear", true); }));
  EXPECT_TRUE(check(x4, [](const Tensor& t) { return nn::interpolate(t, Shape{5, 2}); }));
  EXPECT_TRUE(check(randn({1, 2, 5}, kFloat64).requires_grad_(),
                    [](const Tensor& t) { return nn::interpolate(t, {}, std::vector<double>{1.5}, "linear"); }));
  EXPECT_TRUE(check(randn({1, 1, 2, 3, 2}, kFloat64).requires_grad_(),
                    [](const Tensor& t) { return nn::interpolate(t, Shape{3, 2, 4}, {}, "trilinear"); }));
}

TEST(Interpolate, Errors) {
  const Tensor x = randn({1, 2, 4, 4});
  expect_error([&] { nn::interpolate(x); }, {"[interpolate]", "exactly one of size and scale_factor"});
  expect_error([&] { nn::interpolate(x, Shape{2, 2}, std::vector<double>{2}); }, {"[interpolate]", "exactly one"});
  expect_error([&] { nn::interpolate(x, Shape{2, 2}, {}, "bicubic"); }, {"[interpolate]", "'bicubic'", "not implemented"});
  expect_error([&] { nn::interpolate(x, Shape{2}, {}, "linear"); }, {"[interpolate]", "4-D input", "linear", "3-D"});
  expect_error([&] { nn::interpolate(randn({1, 2, 4}), Shape{2}, {}, "bilinear"); }, {"[interpolate]", "4-D input"});
  expect_error([&] { nn::interpolate(x, Shape{2, 2}, {}, "nearest", true); }, {"[interpolate]", "align_corners"});
  expect_error([&] { nn::interpolate(x, Shape{2, 2, 2}); }, {"[interpolate]", "size of 1 or 2 values", "3"});
  expect_error([&] { nn::interpolate(x, {}, std::vector<double>{-1}); }, {"[interpolate]", "positive finite", "-1"});
  expect_error([&] { nn::interpolate(x, {}, std::vector<double>{0.1}); }, {"[interpolate]", "greater than 0"});
  expect_error([&] { nn::interpolate(randn({4, 4}), Shape{2}); }, {"[interpolate]", "3-D, 4-D or 5-D", "[4, 4]"});
  expect_error([&] { nn::interpolate(ones({1, 1, 4}, kInt64), Shape{2}); }, {"[interpolate]", "floating point", "int64"});
}

}  // namespace
}  // namespace kiln::test
