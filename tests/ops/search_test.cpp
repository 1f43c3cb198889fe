// searchsorted and bucketize against std::lower_bound / upper_bound and a
// counting reference, with PyTorch's NaN placement, sorters, N-D rows, int32
// output, promotion, empty inputs; unique and unique_consecutive against
// std::map-style references; errors.
#include <algorithm>
#include <cmath>
#include <map>

#include "test_util.h"

namespace kiln::test {
namespace {

// PyTorch's rule as counts: the number of boundaries b with !(b >= v)
// (left) or !(b > v) (right) in a sorted row.
double insertion_point(const std::vector<double>& row, double v, bool right) {
  double n = 0;
  for (double b : row) n += right ? !(b > v) : !(b >= v);
  return n;
}

TEST(Search, SearchsortedMatchesBinarySearchReferences) {
  manual_seed(5101);
  for (DType dt : {kFloat64, kFloat32, kInt64}) {
    // Sorted rows with repeated values, searched for values that hit them.
    const Tensor seq = std::get<0>(sort(round(randn({3, 9}, kFloat64) * 2), -1)).to(dt);
    const Tensor vals = round(randn({3, 7}, kFloat64) * 3).to(dt);
    for (bool right : {false, true}) {
      const Tensor got = searchsorted(seq, vals, false, right);
      EXPECT_EQ(got.dtype(), kInt64);
      std::vector<double> want;
      const auto sv = values(seq), vv = values(vals);
      for (int64_t r = 0; r < 3; ++r) {
        const std::vector<double> row(sv.begin() + r * 9, sv.begin() + (r + 1) * 9);
        for (int64_t i = 0; i < 7; ++i) {
          const double v = vv[static_cast<size_t>(r * 7 + i)];
          want.push_back(static_cast<double>((right ? std::upper_bound(row.begin(), row.end(), v)
                                                    : std::lower_bound(row.begin(), row.end(), v)) - row.begin()));
        }
      }
      expect_close(got, want, 0, 0, std::string("searchsorted ") + dtype_name(dt) + (right ? " right" : " left"));
      // A 1-D sequence serves every value, of any shape (here transposed, 3-d).
      const Tensor row0 = seq.select(0, 0);
      const Tensor many = vals.t().reshape({7, 1, 3});
      std::vector<double> want1;
      for (double v : values(many.contiguous())) want1.push_back(insertion_point(values(row0), v, right));
      const Tensor got1 = bucketize(many, row0, true, right);
      EXPECT_EQ(got1.dtype(), kInt32);
      EXPECT_EQ(got1.sizes(), (Shape{7, 1, 3}));
      expect_close(got1, want1, 0, 0, "bucketize");
      expect_close(searchsorted(row0, many, false, false, right ? "right" : "left"), want1, 0, 0, "side");
    }
  }
  // NaN values go after every boundary, infinities to the ends; a trailing
  // NaN boundary (where sort puts it) is passed only by values above every number.
  const Tensor probe = tensor(std::vector<double>{NAN, -INFINITY, 0, 5, INFINITY});
  for (bool right : {false, true}) {
    expect_close(searchsorted(tensor(std::vector<double>{-1, 0, 2}), probe, false, right),
                 {3, 0, right ? 2.0 : 1.0, 3, 3}, 0, 0, "NaN and infinite values");
    expect_close(searchsorted(tensor(std::vector<double>{-1, 0, 2, NAN}), probe, false, right),
                 {4, 0, right ? 2.0 : 1.0, 4, 4}, 0, 0, "a trailing NaN boundary");
  }
  // A sorter sorts the sequence first; int boundaries with float values promote.
  const Tensor unsorted = tensor(std::vector<int64_t>{5, 1, 3});
  const Tensor sorter = argsort(unsorted);
  expect_close(searchsorted(unsorted, tensor(std::vector<double>{0.5, 1, 3.5, 9}), false, false, std::nullopt, sorter),
               {0, 0, 2, 3}, 0, 0, "sorter");
  // Empty sequence and empty values.
  expect_close(searchsorted(empty({0}), tensor<float>({1, 2})), {0, 0}, 0, 0, "empty boundaries");
  EXPECT_EQ(searchsorted(randn({4}), empty({0, 3})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(searchsorted(tensor<float>({1, 2}), full({}, 1.5)).item<int64_t>(), 1);
}

TEST(Search, UniqueAndUniqueConsecutive) {
  manual_seed(5102);
  const Tensor x = randint(-3, 4, {5, 6});
  const auto [vals, inverse, counts] = unique(x);
  std::map<double, double> count;
  for (double v : values(x)) count[v] += 1;
  std::vector<double> want_vals, want_counts;
  for (const auto& [v, c] : count) want_vals.push_back(v), want_counts.push_back(c);
  expect_close(vals, want_vals, 0, 0, "unique values");
  expect_close(counts, want_counts, 0, 0, "unique counts");
  EXPECT_EQ(inverse.sizes(), x.sizes());
  expect_close(index_select(vals, 0, inverse.reshape({-1})), values(x), 0, 0, "values[inverse] == x");
  EXPECT_EQ(vals.dtype(), kInt64);
  // NaN: each one distinct, after the numbers.
  const auto [fv, fi, fc] = unique(tensor(std::vector<double>{NAN, 2, 1, NAN, 2}));
  const auto fvv = values(fv);
  ASSERT_EQ(fvv.size(), 4u);
  EXPECT_EQ(fvv[0], 1);
  EXPECT_EQ(fvv[1], 2);
  EXPECT_TRUE(std::isnan(fvv[2]) && std::isnan(fvv[3]));
  expect_close(fc, {1, 2, 1, 1}, 0, 0, "NaN counts");
  // unique_consecutive keeps order and merges runs only.
  const auto [cv, ci, cc] = unique_consecutive(tensor(std::vector<int64_t>{4, 4, 1, 1, 1, 4, 2}));
  expect_close(cv, {4, 1, 4, 2}, 0, 0, "consecutive values");
  expect_close(ci, {0, 0, 1, 1, 1, 2, 3}, 0, 0, "consecutive inverse");
  expect_close(cc, {2, 3, 1, 1}, 0, 0, "consecutive counts");
  // Bool, empty and 0-d.
  expect_close(std::get<0>(unique(tensor(std::vector<bool>{true, false, true}))), {0, 1}, 0, 0, "bool");
  const auto [ev, ei, ec] = unique(empty({2, 0}));
  EXPECT_EQ(ev.numel(), 0);
  EXPECT_EQ(ei.sizes(), (Shape{2, 0}));
  EXPECT_EQ(ec.numel(), 0);
  const auto [sv, si, sc] = unique(full({}, 3.0));
  expect_close(sv, {3}, 0, 0, "0-d");
  EXPECT_EQ(si.dim(), 0);
}

TEST(Search, Errors) {
  expect_error([] { searchsorted(full({}, 1.0), randn({2})); }, {"[searchsorted]", "at least 1 dimension", "[]"});
  expect_error([] { searchsorted(randn({2, 3}), randn({3, 3})); }, {"[searchsorted]", "[2, 3]", "[3, 3]"});
  expect_error([] { searchsorted(randn({3}), randn({2}), false, true, "left"); }, {"[searchsorted]", "contradict"});
  expect_error([] { searchsorted(randn({3}), randn({2}), false, false, "middle"); }, {"[searchsorted]", "'middle'"});
  expect_error([] { searchsorted(randn({3}), randn({2}), false, false, std::nullopt, randint(0, 3, {2})); },
               {"[searchsorted]", "sorter", "[2]", "[3]"});
  expect_error([] { bucketize(randn({2}), randn({2, 2})); }, {"[bucketize]", "1-D", "[2, 2]"});
}

}  // namespace
}  // namespace kiln::test
