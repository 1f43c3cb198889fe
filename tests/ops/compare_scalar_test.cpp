// Comparisons of a tensor with a number on either side, against the same
// comparison of float64 values, special values included.
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

TEST(CompareScalar, EveryOperatorOnEitherSide) {
  manual_seed(70);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor specials = tensor<double>({0.0, -0.0, 1.0, -1.0, 0.5, nan, inf, -inf});
  for (const Tensor& x : {specials.to(kFloat32), randn({4, 5}).t(), randint(-2, 3, {7}), specials}) {
    const auto xv = values(x);
    for (double s : {0.0, 1.0, -1.0, 0.5}) {
      auto expect = [&](const Tensor& got, auto cmp, const char* what) {
        ASSERT_EQ(got.dtype(), kBool) << what;
        ASSERT_EQ(got.sizes(), x.sizes()) << what;
        const auto gv = values(got);
        for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(gv[i] != 0, cmp(xv[i], s)) << what << " x=" << xv[i] << " s=" << s;
      };
      expect(x < s, [](double a, double b) { return a < b; }, "x < s");
      expect(x > s, [](double a, double b) { return a > b; }, "x > s");
      expect(x <= s, [](double a, double b) { return a <= b; }, "x <= s");
      expect(x >= s, [](double a, double b) { return a >= b; }, "x >= s");
      expect(x == s, [](double a, double b) { return a == b; }, "x == s");
      expect(x != s, [](double a, double b) { return a != b; }, "x != s");
      expect(s < x, [](double a, double b) { return b < a; }, "s < x");
      expect(s > x, [](double a, double b) { return b > a; }, "s > x");
      expect(s <= x, [](double a, double b) { return b <= a; }, "s <= x");
      expect(s >= x, [](double a, double b) { return b >= a; }, "s >= x");
      expect(s == x, [](double a, double b) { return b == a; }, "s == x");
      expect(s != x, [](double a, double b) { return b != a; }, "s != x");
    }
  }
  EXPECT_EQ((zeros({0, 3}) >= 1).sizes(), (Shape{0, 3}));
  // An int tensor against a fractional number compares as PyTorch does (promoted), not truncated.
  EXPECT_EQ(values(tensor<int64_t>({0, 1}) < 0.5), (std::vector<double>{1, 0}));
}

}  // namespace
}  // namespace kiln::test
