// unfold / fold against loops over every patch in float64, with padding,
// dilation, stride, batched and unbatched; fold as unfold's adjoint
// (<unfold(x), c> == <x, fold(c)>); gradcheck; errors.
#include "test_util.h"

namespace kiln::test {
namespace {

// The column entry (c kh kw + i kw + j, block) of an unfolded (C, H, W) image.
std::vector<double> unfold_ref(const Tensor& x, int64_t kh, int64_t kw, int64_t dh, int64_t dw, int64_t ph, int64_t pw,
                               int64_t sh, int64_t sw) {
  const int64_t C = x.size(0), H = x.size(1), W = x.size(2);
  const int64_t oh = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  std::vector<double> out;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j)
        for (int64_t bh = 0; bh < oh; ++bh)
          for (int64_t bw = 0; bw < ow; ++bw) {
            const int64_t y = bh * sh - ph + i * dh, xx = bw * sw - pw + j * dw;
            out.push_back(y >= 0 && y < H && xx >= 0 && xx < W ? at_broadcast(x, {c, y, xx}) : 0.0);
          }
  return out;
}

TEST(Im2col, UnfoldMatchesPatchLoopsAndFoldIsItsAdjoint) {
  manual_seed(8101);
  struct Geometry {
    int64_t kh, kw, dh, dw, ph, pw, sh, sw;
  };
  for (const Geometry& g : {Geometry{3, 3, 1, 1, 1, 1, 1, 1}, Geometry{2, 3, 2, 1, 0, 2, 2, 1}, Geometry{1, 1, 1, 1, 0, 0, 3, 2},
                            Geometry{3, 2, 1, 2, 2, 0, 1, 3}})
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      const Tensor x = make_input({2, 3, 7, 6}, layout, kFloat64);
      const Tensor cols = nn::unfold(x, {g.kh, g.kw}, {g.dh, g.dw}, {g.ph, g.pw}, {g.sh, g.sw});
      std::vector<double> want;
      for (int64_t n = 0; n < 2; ++n) {
        const auto one = unfold_ref(x.select(0, n), g.kh, g.kw, g.dh, g.dw, g.ph, g.pw, g.sh, g.sw);
        want.insert(want.end(), one.begin(), one.end());
      }
      const std::string what = "kernel " + std::to_string(g.kh) + "x" + std::to_string(g.kw) + " " + layout_name(layout);
      expect_close(cols, want, 0, 0, "unfold " + what);
      EXPECT_EQ(cols.size(1), 3 * g.kh * g.kw);
      // Adjoint: <unfold(x), c> == <x, fold(c)> for random c.
      const Tensor c = randn(cols.sizes(), kFloat64);
      const Tensor back = nn::fold(c, {7, 6}, {g.kh, g.kw}, {g.dh, g.dw}, {g.ph, g.pw}, {g.sh, g.sw});
      EXPECT_EQ(back.sizes(), x.sizes());
      EXPECT_NEAR(sum(cols * c).item<double>(), sum(x * back).item<double>(), 1e-10) << what;
      // Unbatched forms.
      expect_close(nn::unfold(x.select(0, 1), {g.kh, g.kw}, {g.dh, g.dw}, {g.ph, g.pw}, {g.sh, g.sw}),
                   values(cols.select(0, 1)), 0, 0, "unbatched unfold " + what);
      expect_close(nn::fold(c.select(0, 0), {7, 6}, {g.kh, g.kw}, {g.dh, g.dw}, {g.ph, g.pw}, {g.sh, g.sw}),
                   values(back.select(0, 0)), 0, 0, "unbatched fold " + what);
    }
  // fold(unfold(ones)) counts the patches covering each pixel.
  expect_close(nn::fold(nn::unfold(ones({1, 1, 3, 3}), {2, 2}), {3, 3}, {2, 2}), {1, 2, 1, 2, 4, 2, 1, 2, 1}, 0, 0,
               "overlap counts");
}

TEST(Im2col, GradientsAndErrors) {
  manual_seed(8102);
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& t) { return std::vector<Tensor>{nn::unfold(t[0], {2, 2}, {1, 2}, {1, 0}, {2, 1})}; },
      {randn({1, 2, 4, 5}, kFloat64).requires_grad_()}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& t) { return std::vector<Tensor>{nn::fold(t[0], {4, 4}, {2, 2}, {1, 1}, {0, 0}, {1, 1})}; },
      {randn({1, 8, 9}, kFloat64).requires_grad_()}));
  expect_error([] { nn::unfold(randn({2, 3}), {2, 2}); }, {"unfold", "3-D or 4-D", "[2, 3]"});
  expect_error([] { nn::unfold(randn({1, 1, 3, 3}), {4, 4}); }, {"unfold", "larger than the padded input"});
  expect_error([] { nn::unfold(randn({1, 1, 3, 3}), {2}); }, {"unfold", "2 values"});
  expect_error([] { nn::unfold(randn({1, 1, 3, 3}), {2, 2}, {1, 1}, {0, 0}, {0, 1}); }, {"unfold", "positive"});
  expect_error([] { nn::fold(randn({1, 7, 9}), {4, 4}, {2, 2}); }, {"fold", "divisible", "4"});
  expect_error([] { nn::fold(randn({1, 8, 10}), {4, 4}, {2, 2}); }, {"fold", "9 blocks", "10"});
}

}  // namespace
}  // namespace kiln::test
