// dropout1d/2d/3d and alpha / feature-alpha dropout: whole channels dropped
// or kept (and scaled), the fraction dropped near p, identity in eval mode,
// SELU's dropout keeping a unit normal input's mean and variance, the values
// of dropped and kept elements exactly, gradients, errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Dropout, ChannelDropoutDropsWholeChannels) {
  manual_seed(9101);
  struct Case {
    Shape shape;
    int64_t spatial;
  };
  for (const Case& c : {Case{{40, 50, 7}, 1}, Case{{50, 7}, 1}, Case{{20, 50, 3, 4}, 2}, Case{{50, 3, 4}, 2},
                        Case{{10, 40, 2, 3, 2}, 3}, Case{{40, 2, 3, 2}, 3}}) {
    const Tensor x = rand(c.shape, kFloat64) + 0.5;  // no zeros of its own
    const Tensor y = c.spatial == 1 ? nn::dropout1d(x, 0.3) : c.spatial == 2 ? nn::dropout2d(x, 0.3) : nn::dropout3d(x, 0.3);
    // Per channel: every element dropped, or every element x / 0.7.
    const int64_t per = [&] {
      int64_t n = 1;
      for (int64_t d = x.dim() - c.spatial; d < x.dim(); ++d) n *= x.size(d);
      return n;
    }();
    const auto xv = values(x), yv = values(y);
    int64_t dropped = 0, channels = static_cast<int64_t>(xv.size()) / per;
    for (int64_t ch = 0; ch < channels; ++ch) {
      const bool gone = yv[static_cast<size_t>(ch * per)] == 0;
      dropped += gone;
      for (int64_t k = 0; k < per; ++k) {
        const size_t i = static_cast<size_t>(ch * per + k);
        EXPECT_NEAR(yv[i], gone ? 0.0 : xv[i] / 0.7, 1e-15) << shape_text(c.shape) << " element " << i;
      }
    }
    // Within 4 standard deviations of a binomial fraction.
    EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(channels), 0.3,
                4 * std::sqrt(0.3 * 0.7 / static_cast<double>(channels)))
        << shape_text(c.shape);
  }
  // Eval mode and p = 0 give x itself; p = 1 zeros.
  const Tensor x = randn({2, 3, 4});
  EXPECT_EQ(nn::dropout1d(x, 0.5, false).data_ptr<float>(), x.data_ptr<float>());
  EXPECT_EQ(nn::dropout2d(x, 0.0).data_ptr<float>(), x.data_ptr<float>());
  expect_close(nn::dropout1d(x, 1.0), std::vector<double>(24, 0.0), 0, 0, "p = 1");
  // The gradient is the mask, scaled.
  const Tensor leaf = (rand({4, 6, 5}, kFloat64) + 1).requires_grad_();
  const Tensor out = nn::dropout1d(leaf, 0.5);
  out.sum().backward();
  expect_close(leaf.grad(), values(ne(out, zeros_like(out)).to(kFloat64) * 2.0), 0, 0, "gradient");
  expect_error([] { nn::dropout2d(randn({2, 3}), 0.5); }, {"dropout2d", "3-D (unbatched) or 4-D (batched)", "[2, 3]"});
  expect_error([] { nn::dropout1d(randn({2, 3}), 1.5); }, {"dropout1d", "between 0 and 1", "1.5"});
}

TEST(Dropout, AlphaDropoutKeepsMeanAndVarianceOfAUnitNormal) {
  manual_seed(9102);
  const double p = 0.2, alpha = -1.7580993408473766;
  const double a = 1.0 / std::sqrt((1 - p) * (1 + p * alpha * alpha)), b = -a * alpha * p;
  const Tensor x = randn({400000}, kFloat64);
  const Tensor y = nn::alpha_dropout(x, p, true);
  EXPECT_NEAR(mean(y).item<double>(), 0.0, 0.01);
  EXPECT_NEAR(std(y).item<double>(), 1.0, 0.01);
  // Each element is a x + b (kept) or a alpha + b (dropped); about p dropped.
  const auto xv = values(x), yv = values(y);
  int64_t dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool gone = std::fabs(yv[i] - (a * alpha + b)) < 1e-12 && std::fabs(xv[i] - alpha) > 1e-9;
    dropped += gone;
    if (!gone) {
      ASSERT_NEAR(yv[i], a * xv[i] + b, 1e-12) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(xv.size()), p, 0.005);
  // Feature alpha dropout: whole channels of (N, C, L) take the dropped value.
  const Tensor f = nn::feature_alpha_dropout(randn({30, 40, 6}, kFloat64), 0.5, true);
  const auto fv = values(f);
  int64_t whole = 0;
  for (int64_t ch = 0; ch < 30 * 40; ++ch) {
    int64_t at_drop = 0;
    for (int64_t k = 0; k < 6; ++k) at_drop += std::fabs(fv[static_cast<size_t>(ch * 6 + k)] - (1.0 / std::sqrt(0.5 * (1 + 0.5 * alpha * alpha)) * alpha * 0.5)) < 1e-12;
    EXPECT_TRUE(at_drop == 0 || at_drop == 6) << ch;
    whole += at_drop == 6;
  }
  EXPECT_NEAR(static_cast<double>(whole) / 1200.0, 0.5, 4 * std::sqrt(0.25 / 1200.0));
  const Tensor z = randn({3, 4});
  EXPECT_EQ(nn::alpha_dropout(z, 0.5, false).data_ptr<float>(), z.data_ptr<float>());
  expect_error([] { nn::alpha_dropout(randn({2}), -0.1, true); }, {"alpha_dropout", "between 0 and 1"});
  expect_error([] { nn::feature_alpha_dropout(randn({4}), 0.1, true); }, {"feature_alpha_dropout", "at least 2 dims"});
}

}  // namespace
}  // namespace kiln::test
