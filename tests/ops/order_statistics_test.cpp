// median, kthvalue, quantile, var_mean, std_mean against references from
// sorted float64 rows computed here: every layout, NaN rows, 0-d, gradients,
// errors.
#include <algorithm>
#include <cmath>
#include <map>

#include "test_util.h"

namespace kiln::test {
namespace {

// The rows of a 2-d tensor along dim 1, as float64 vectors.
std::vector<std::vector<double>> rows_of(const Tensor& x) {
  std::vector<std::vector<double>> r;
  const std::vector<double> v = values(x.contiguous());
  for (int64_t i = 0; i < x.size(0); ++i)
    r.emplace_back(v.begin() + i * x.size(1), v.begin() + (i + 1) * x.size(1));
  return r;
}

double quantile_ref(std::vector<double> row, double q, const std::string& mode) {
  if (std::any_of(row.begin(), row.end(), [](double v) { return std::isnan(v); })) return NAN;
  std::sort(row.begin(), row.end());
  const double pos = q * static_cast<double>(row.size() - 1);
  const double a = row[static_cast<size_t>(std::floor(pos))], b = row[static_cast<size_t>(std::ceil(pos))];
  if (mode == "lower") return a;
  if (mode == "higher") return b;
  if (mode == "midpoint") return (a + b) / 2;
  if (mode == "nearest") return std::nearbyint(pos) == std::floor(pos) ? a : b;
  return a + (b - a) * (pos - std::floor(pos));
}

TEST(OrderStatistics, MedianKthvalueQuantileMatchSortedRows) {
  manual_seed(3101);
  for (Layout layout : all_layouts())
    for (int64_t n : {7, 6}) {
      Tensor x = make_input({5, n}, layout, kFloat64);
      const std::string what = std::string(layout_name(layout)) + " n " + std::to_string(n);
      const auto rows = rows_of(x);
      const auto [med, med_i] = median(x, 1);
      const auto [kth, kth_i] = kthvalue(x, 3, -1, true);
      EXPECT_EQ(kth.sizes(), (Shape{5, 1}));
      std::vector<double> want_med, want_kth;
      for (size_t r = 0; r < rows.size(); ++r) {
        std::vector<double> s = rows[r];
        std::sort(s.begin(), s.end());
        want_med.push_back(s[static_cast<size_t>((n - 1) / 2)]);
        want_kth.push_back(s[2]);
        // The index names an element holding the value.
        EXPECT_EQ(rows[r][static_cast<size_t>(values(med_i)[r])], want_med.back()) << what;
        EXPECT_EQ(rows[r][static_cast<size_t>(values(kth_i)[r])], want_kth.back()) << what;
      }
      expect_close(med, want_med, 0, 0, "median " + what);
      expect_close(kth, want_kth, 0, 0, "kthvalue " + what);
      for (const char* mode : {"linear", "lower", "higher", "midpoint", "nearest"}) {
        const Tensor q = tensor(std::vector<double>{0.0, 0.25, 0.5, 0.9, 1.0});
        const Tensor got = quantile(x, q, 1, false, mode);
        ASSERT_EQ(got.sizes(), (Shape{5, 5}));
        std::vector<double> want;
        for (double qv : values(q))
          for (const auto& row : rows) want.push_back(quantile_ref(row, qv, mode));
        expect_close(got, want, 1e-14, 1e-14, std::string("quantile ") + mode + " " + what);
      }
    }
  // NaN rows: median names the NaN, quantile is NaN, kthvalue counts NaN last.
  const Tensor x = tensor(std::vector<double>{3, NAN, 1, 2, 4, 5}).reshape({2, 3});
  const auto [m, mi] = median(x, 1);
  EXPECT_TRUE(std::isnan(values(m)[0]));
  EXPECT_EQ(values(mi)[0], 1);
  EXPECT_EQ(values(m)[1], 4);
  EXPECT_TRUE(std::isnan(values(quantile(x, 0.5, 1))[0]));
  EXPECT_EQ(values(std::get<0>(kthvalue(x, 2, 1)))[0], 3);
  // Global forms and 0-d.
  EXPECT_EQ(median(tensor(std::vector<double>{5, 1, 4, 2})).item<double>(), 2);
  EXPECT_NEAR(quantile(tensor(std::vector<double>{5, 1, 4, 2}), 0.5).item<double>(), 3, 1e-15);
  EXPECT_EQ(quantile(randn({2, 3}), 0.5, std::nullopt, true).sizes(), (Shape{1, 1}));
  EXPECT_EQ(std::get<0>(median(full({}, 7.0), 0)).item<double>(), 7);
  EXPECT_EQ(median(tensor<float>({1, 2, 3})).dtype(), kFloat32);
  // var_mean and std_mean give var/std and mean.
  const Tensor y = randn({4, 6}, kFloat64);
  const auto [v, mu] = var_mean(y, {1}, 0, true);
  expect_close(v, values(var(y, {1}, 0, true)), 0, 0, "var_mean var");
  expect_close(mu, values(mean(y, {1}, true)), 0, 0, "var_mean mean");
  expect_close(std::get<0>(std_mean(y)), values(std(y)), 0, 0, "std_mean std");
}

TEST(OrderStatistics, ModeIsTheSmallestMostFrequentValueAtItsLastPlace) {
  manual_seed(3103);
  for (Layout layout : all_layouts()) {
    const Tensor x = round(make_input({6, 9}, layout, kFloat64) * 1.5);  // few distinct values: ties
    for (bool keepdim : {false, true}) {
      const auto [v, i] = mode(x, 1, keepdim);
      EXPECT_EQ(v.sizes(), keepdim ? (Shape{6, 1}) : (Shape{6}));
      const auto rows = rows_of(x);
      for (size_t r = 0; r < rows.size(); ++r) {
        std::map<double, int> count;
        for (double e : rows[r]) ++count[e];
        double best = 0;
        int best_n = 0;
        for (const auto& [val, n] : count)
          if (n > best_n) best = val, best_n = n;
        int64_t last = 0;
        for (size_t j = 0; j < rows[r].size(); ++j)
          if (rows[r][j] == best) last = static_cast<int64_t>(j);
        EXPECT_EQ(values(v)[r], best) << layout_name(layout) << " row " << r;
        EXPECT_EQ(values(i)[r], last) << layout_name(layout) << " row " << r;
      }
    }
  }
  // Along dim 0, integers, NaN (each counts once), 0-d.
  const Tensor ints = tensor(std::vector<int64_t>{3, 1, 3, 1, 2, 1}).reshape({6, 1});
  const auto [iv, ii] = mode(ints, 0);
  EXPECT_EQ(iv.item<int64_t>(), 1);
  EXPECT_EQ(ii.item<int64_t>(), 5);
  EXPECT_EQ(std::get<0>(mode(tensor(std::vector<double>{NAN, 2, NAN, 3}))).item<double>(), 2);
  EXPECT_EQ(std::get<0>(mode(full({}, 4.0), 0)).item<double>(), 4);
  expect_error([] { mode(empty({2, 0}), 1); }, {"[mode]", "empty dim 1"});
}

TEST(OrderStatistics, Gradients) {
  manual_seed(3102);
  const Tensor x = randn({3, 5}, kFloat64).requires_grad_();  // distinct values: no ties
  auto g = [&](const std::function<Tensor(const Tensor&)>& f) {
    return autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {x});
  };
  EXPECT_TRUE(g([](const Tensor& t) { return std::get<0>(median(t, 1)); }));
  EXPECT_TRUE(g([](const Tensor& t) { return std::get<0>(kthvalue(t, 4, 1)); }));
  EXPECT_TRUE(g([](const Tensor& t) { return quantile(t, tensor(std::vector<double>{0.3, 0.8}), 1); }));
  EXPECT_TRUE(g([](const Tensor& t) { return std::get<0>(var_mean(t, {0})) + std::get<1>(std_mean(t, {0})); }));
}

TEST(OrderStatistics, Errors) {
  expect_error([] { median(empty({2, 0}), 1); }, {"[median]", "empty dim 1", "[2, 0]"});
  expect_error([] { median(empty({0})); }, {"[median]", "empty tensor"});
  expect_error([] { kthvalue(randn({2, 3}), 4, 1); }, {"[kthvalue]", "k (4) is out of range", "size 3"});
  expect_error([] { quantile(randn({4}), 1.5); }, {"[quantile]", "[0, 1]", "1.5"});
  expect_error([] { quantile(arange(4), 0.5); }, {"[quantile]", "floating point", "int64"});
  expect_error([] { quantile(randn({4}), 0.5, std::nullopt, false, "cubic"); }, {"[quantile]", "interpolation", "cubic"});
}

}  // namespace
}  // namespace kiln::test
