// nonzero, masked_select, bincount, histc against references computed
// element by element here: every layout, broadcast masks, empty and 0-d,
// gradients where they flow, errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Selection, NonzeroAndMaskedSelectInEveryLayout) {
  manual_seed(3001);
  for (Layout layout : all_layouts()) {
    const Tensor x = make_input({3, 4, 5}, layout, kFloat64);
    const Tensor xs = where(gt(x, wrapped_scalar(0.3)), x, wrapped_scalar(0.0));  // about a third nonzero
    std::vector<double> coords, picked;
    for (int64_t i = 0; i < xs.numel(); ++i) {
      const auto idx = unravel(i, xs.sizes());
      const double v = values(xs.contiguous())[static_cast<size_t>(i)];
      if (v == 0) continue;
      for (int64_t d : idx) coords.push_back(static_cast<double>(d));
      picked.push_back(v);
    }
    const Tensor nz = nonzero(xs);
    EXPECT_EQ(nz.dtype(), kInt64);
    ASSERT_EQ(nz.sizes(), (Shape{static_cast<int64_t>(picked.size()), 3})) << layout_name(layout);
    EXPECT_EQ(values(nz), coords) << layout_name(layout);
    expect_close(masked_select(x, ne(xs, wrapped_scalar(0.0))), picked, 0, 0,
                 std::string("masked_select ") + layout_name(layout));
  }
  // A mask broadcast over rows; bool and integer inputs; all false; 0-d; empty.
  const Tensor m = tensor<float>({1, 2, 3, 4, 5, 6}).reshape({2, 3});
  const Tensor cols = tensor(std::vector<uint8_t>{1, 0, 1}).to(kBool);
  EXPECT_EQ(values(masked_select(m, cols)), (std::vector<double>{1, 3, 4, 6}));
  EXPECT_EQ(values(nonzero(tensor(std::vector<int64_t>{0, 7, 0, -1}))), (std::vector<double>{1, 3}));
  EXPECT_EQ(nonzero(zeros({2, 2})).sizes(), (Shape{0, 2}));
  EXPECT_EQ(nonzero(full({}, 3.0)).sizes(), (Shape{1, 0}));
  EXPECT_EQ(nonzero(empty({0, 4})).sizes(), (Shape{0, 2}));
  EXPECT_EQ(masked_select(empty({0}), empty({0}, kBool)).sizes(), (Shape{0}));
  // masked_select's gradient reaches the selected elements (summed over a broadcast).
  const Tensor a = randn({2, 3}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{masked_select(in[0], cols)}; }, {a}));
  const Tensor r = randn({3}, kFloat64).requires_grad_();
  masked_select(r, tensor(std::vector<uint8_t>{1, 0, 1, 1, 1, 0}).to(kBool).reshape({2, 3})).sum().backward();
  EXPECT_EQ(values(r.grad()), (std::vector<double>{2, 1, 1}));
}

TEST(Selection, BincountAndHistc) {
  manual_seed(3002);
  const Tensor x = randint(0, 9, {200});
  const Tensor w = rand({200}, kFloat64);
  std::vector<double> counts(9, 0.0), sums(9, 0.0);
  const std::vector<double> xv = values(x), wv = values(w);
  for (size_t i = 0; i < xv.size(); ++i) counts[static_cast<size_t>(xv[i])] += 1, sums[static_cast<size_t>(xv[i])] += wv[i];
  const int64_t hi = static_cast<int64_t>(*std::max_element(xv.begin(), xv.end()));
  counts.resize(static_cast<size_t>(hi + 1)), sums.resize(static_cast<size_t>(hi + 1));
  const Tensor bc = bincount(x);
  EXPECT_EQ(bc.dtype(), kInt64);
  EXPECT_EQ(values(bc), counts);
  expect_close(bincount(x, w), sums, 1e-12, 1e-12, "weighted");
  EXPECT_EQ(bincount(x, w.to(kFloat32)).dtype(), kFloat32);
  EXPECT_EQ(bincount(x, randint(0, 3, {200})).dtype(), kFloat64);
  EXPECT_EQ(bincount(x, {}, 20).size(0), 20);
  EXPECT_EQ(bincount(empty({0}, kInt64), {}, 3).sizes(), (Shape{3}));
  EXPECT_EQ(bincount(empty({0}, kInt64)).sizes(), (Shape{0}));

  // histc over a given range (values outside and NaN ignored, max in the last bin) and over the data's range.
  const Tensor v = tensor<float>({0.05f, 0.15f, 0.95f, 1.0f, -0.5f, 1.5f, NAN, 0.5f, 0.55f});
  EXPECT_EQ(values(histc(v, 4, 0, 1)), (std::vector<double>{2, 0, 2, 2}));
  const Tensor d = rand({1000}, kFloat64) * 7 - 2;
  const std::vector<double> dv = values(d);
  const double lo = *std::min_element(dv.begin(), dv.end()), top = *std::max_element(dv.begin(), dv.end());
  std::vector<double> want(10, 0.0);
  for (double e : dv) want[static_cast<size_t>(std::min<double>(9, std::floor((e - lo) * 10 / (top - lo))))] += 1;
  EXPECT_EQ(values(histc(d, 10)), want);
  EXPECT_EQ(values(histc(full({3}, 2.0), 2)), (std::vector<double>{0, 3}));  // min == max: [1, 3]
  EXPECT_EQ(histc(empty({0}), 5).sizes(), (Shape{5}));
}

TEST(Selection, Errors) {
  expect_error([] { masked_select(randn({2, 3}), ones({2, 3})); }, {"[masked_select]", "bool mask", "float32"});
  expect_error([] { masked_select(randn({2, 3}), ones({4}, kBool)); }, {"[2, 3]", "[4]"});
  expect_error([] { bincount(randn({3})); }, {"[bincount]", "1-d tensor of integers", "float32"});
  expect_error([] { bincount(tensor(std::vector<int64_t>{1, -2})); }, {"[bincount]", "non-negative", "-2"});
  expect_error([] { bincount(arange(3), ones({4})); }, {"[bincount]", "weights of the input's shape [3]", "[4]"});
  expect_error([] { histc(arange(3), 4); }, {"[histc]", "floating point", "int64"});
  expect_error([] { histc(randn({3}), 0); }, {"[histc]", "bins must be positive"});
  expect_error([] { histc(randn({3}), 4, 2, 1); }, {"[histc]", "min <= max"});
}

}  // namespace
}  // namespace kiln::test
