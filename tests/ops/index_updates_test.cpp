// index_add, index_copy, index_fill and diagonal against references
// computed element by element here, in every layout, empty and 0-d;
// gradcheck; errors.
#include "test_util.h"

namespace kiln::test {
namespace {

// The reference of an index update along dim: per element of x, its value
// after the slices of source (or value) that the index sends to it.
enum class Update { Add, Copy, Fill };
std::vector<double> reference(Update u, const Tensor& x, int64_t dim, const std::vector<int64_t>& index,
                              const Tensor& source, double alpha) {
  std::vector<double> want;
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, x.sizes());
    double v = at_broadcast(x, idx);
    for (size_t k = 0; k < index.size(); ++k) {
      if (index[k] != idx[static_cast<size_t>(dim)]) continue;
      std::vector<int64_t> s = idx;
      s[static_cast<size_t>(dim)] = static_cast<int64_t>(k);
      if (u == Update::Add) v += alpha * at_broadcast(source, s);
      else if (u == Update::Copy) v = at_broadcast(source, s);
      else v = alpha;
    }
    want.push_back(v);
  }
  return want;
}

TEST(IndexUpdates, AddCopyFillMatchElementwiseReferences) {
  manual_seed(95);
  for (Layout layout : all_layouts())
    for (int64_t dim : {0, 1, -1}) {
      const Tensor x = make_input({4, 5, 3}, layout, kFloat64);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape ss = {4, 5, 3};
      const std::vector<int64_t> add_index = {2, 0, 2};  // repeated: index_add sums
      const std::vector<int64_t> copy_index = {2, 0};    // distinct: index_copy is defined
      ss[static_cast<size_t>(d)] = 3;
      const Tensor src = make_input(ss, layout, kFloat64);
      const std::string what = std::string(layout_name(layout)) + " dim " + std::to_string(dim);
      expect_close(index_add(x, dim, tensor(add_index), src, 2.5),
                   reference(Update::Add, x, d, add_index, src, 2.5), 1e-12, 1e-12, "index_add " + what);
      const Tensor src2 = src.narrow(d, 0, 2);
      expect_close(index_copy(x, dim, tensor(copy_index).to(kInt32), src2),
                   reference(Update::Copy, x, d, copy_index, src2, 0), 0, 0, "index_copy " + what);
      expect_close(index_fill(x, dim, tensor(add_index), -4.0), reference(Update::Fill, x, d, add_index, src, -4.0),
                   0, 0, "index_fill " + what);
    }
  // float32 and integers keep their dtype; an empty index changes nothing; 0-d x.
  const Tensor xi = tensor(std::vector<int64_t>{1, 2, 3});
  const Tensor ri = index_add(xi, 0, tensor(std::vector<int64_t>{1, 1}), tensor(std::vector<int64_t>{10, 20}), 2);
  EXPECT_EQ(ri.dtype(), kInt64);
  EXPECT_EQ(values(ri), (std::vector<double>{1, 62, 3}));
  const Tensor xf = randn({3, 2});
  EXPECT_EQ(index_fill(xf, 1, tensor(std::vector<int64_t>{1}), 7).dtype(), kFloat32);
  expect_close(index_add(xf, 0, empty({0}, kInt64), empty({0, 2})), values(xf), 0, 0, "empty index");
  expect_close(index_copy(full({}, 1.0), 0, tensor(std::vector<int64_t>{0}), full({}, 5.0)), {5}, 0, 0, "0-d");
  EXPECT_EQ(index_fill(full({}, 1.0), 0, tensor(std::vector<int64_t>{0}), 2).dim(), 0);
  EXPECT_EQ(index_add(empty({0, 3}), 1, tensor(std::vector<int64_t>{2}), empty({0, 1})).sizes(), (Shape{0, 3}));
}

TEST(IndexUpdates, Gradients) {
  manual_seed(96);
  const Tensor x = randn({4, 3}, kFloat64).requires_grad_(), s = randn({3, 3}, kFloat64).requires_grad_();
  const Tensor idx = tensor(std::vector<int64_t>{3, 0, 3});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{index_add(t[0], 0, idx, t[1], -1.5)}; }, {x, s}));
  const Tensor s2 = randn({2, 3}, kFloat64).requires_grad_();
  const Tensor idx2 = tensor(std::vector<int64_t>{3, 1});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{index_copy(t[0], 0, idx2, t[1])}; }, {x, s2}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{index_fill(t[0], 1, tensor(std::vector<int64_t>{2, 0}), 2.0)}; },
      {x}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{diagonal(t[0], -1)}; }, {x}));
}

TEST(IndexUpdates, DiagonalIsAViewOfEachPlane) {
  manual_seed(97);
  for (Layout layout : all_layouts()) {
    const Tensor x = make_input({3, 4, 5}, layout, kFloat64);
    for (int64_t offset : {0, 2, -1, 4, -3, 9})
      for (auto [d1, d2] : {std::pair<int64_t, int64_t>{0, 1}, {2, 0}, {-1, 1}}) {
        const Tensor g = diagonal(x, offset, d1, d2);
        const int64_t a = d1 < 0 ? d1 + 3 : d1, b = d2 < 0 ? d2 + 3 : d2, other = 3 - a - b;
        const int64_t n = std::max<int64_t>(0, std::min(x.size(a) - std::max<int64_t>(-offset, 0),
                                                        x.size(b) - std::max<int64_t>(offset, 0)));
        ASSERT_EQ(g.sizes(), (Shape{x.size(other), n})) << offset;
        std::vector<double> want;
        for (int64_t o = 0; o < x.size(other); ++o)
          for (int64_t k = 0; k < n; ++k) {
            std::vector<int64_t> idx(3);
            idx[static_cast<size_t>(other)] = o;
            idx[static_cast<size_t>(a)] = k + std::max<int64_t>(-offset, 0);
            idx[static_cast<size_t>(b)] = k + std::max<int64_t>(offset, 0);
            want.push_back(at_broadcast(x, idx));
          }
        expect_close(g, want, 0, 0, std::string(layout_name(layout)) + " offset " + std::to_string(offset));
      }
  }
  const Tensor m = zeros({3, 3});
  diagonal(m).fill_(1.0);  // a view: writes reach m
  expect_close(m, {1, 0, 0, 0, 1, 0, 0, 0, 1}, 0, 0, "written through the view");
}

TEST(IndexUpdates, Errors) {
  const Tensor x = randn({4, 3});
  expect_error([&] { index_add(x, 0, tensor(std::vector<int64_t>{4}), randn({1, 3})); }, {"[index_add]", "4"});
  expect_error([&] { index_add(x, 0, tensor(std::vector<int64_t>{0}), randn({2, 3})); },
               {"[index_add]", "expected source of shape [1, 3]", "[2, 3]"});
  expect_error([&] { index_copy(x, 0, tensor(std::vector<int64_t>{0}), randn({1, 3}, kFloat64)); },
               {"[index_copy]", "float32", "float64"});
  expect_error([&] { index_fill(x, 2, tensor(std::vector<int64_t>{0}), 1); }, {"[index_fill]", "dimension out of range", "got 2"});
  expect_error([&] { index_fill(x, 0, randn({1}), 1); }, {"[index_fill]", "int64 or int32", "float32"});
  expect_error([&] { index_copy(x, 0, zeros({1, 1}, kInt64), randn({1, 3})); }, {"[index_copy]", "0-d or 1-d", "[1, 1]"});
  expect_error([&] { diagonal(randn({3})); }, {"[diagonal]", "at least 2 dims", "[3]"});
  expect_error([&] { diagonal(x, 0, 1, -1); }, {"[diagonal]", "dim1 and dim2 must differ"});
}

}  // namespace
}  // namespace kiln::test
