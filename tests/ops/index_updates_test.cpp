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

// The in-place forms write the functional result into x, through views
// too, and keep autograd's rules for in-place ops.
TEST(IndexUpdates, InPlaceFormsWriteTheFunctionalResult) {
  manual_seed(97);
  const Tensor idx = tensor(std::vector<int64_t>{2, 0, 2});
  const Tensor src = randn({3, 4}, kFloat64);
  const Tensor x = randn({3, 4}, kFloat64);
  auto fresh = [&] { return x.clone(); };
  Tensor a = fresh();
  EXPECT_EQ(&a.index_add_(0, idx, src, 0.5), &a);
  expect_close(a, values(index_add(x, 0, idx, src, 0.5)), 0, 0, "index_add_");
  Tensor b = fresh();
  b.index_copy_(1, tensor(std::vector<int64_t>{3, 1}), src.narrow(1, 0, 2));
  expect_close(b, values(index_copy(x, 1, tensor(std::vector<int64_t>{3, 1}), src.narrow(1, 0, 2))), 0, 0, "index_copy_");
  Tensor c = fresh();
  c.index_fill_(1, idx, -2.0);
  expect_close(c, values(index_fill(x, 1, idx, -2.0)), 0, 0, "index_fill_");
  const Tensor where_to = randint(0, 3, {2, 4});
  Tensor d = fresh();
  d.scatter_(0, where_to, src.narrow(0, 0, 2));
  expect_close(d, values(scatter(x, 0, where_to, src.narrow(0, 0, 2))), 0, 0, "scatter_");
  Tensor e = fresh();
  e.scatter_add_(0, where_to, src.narrow(0, 0, 2));
  expect_close(e, values(scatter_add(x, 0, where_to, src.narrow(0, 0, 2))), 0, 0, "scatter_add_");
  // Into a transposed view: the base sees the write.
  Tensor base = fresh();
  base.t().index_fill_(0, tensor(std::vector<int64_t>{1}), 9.0);
  expect_close(base.select(1, 1), {9, 9, 9}, 0, 0, "index_fill_ through a view");
  // Gradients flow as through the functional op: to x where not overwritten, to source.
  const Tensor leaf = randn({3, 4}, kFloat64).requires_grad_(), s = randn({3, 4}, kFloat64).requires_grad_();
  Tensor y = leaf * 1.0;
  y.index_copy_(0, tensor(std::vector<int64_t>{1}), s.narrow(0, 0, 1));
  y.sum().backward();
  expect_close(leaf.grad().select(0, 1), {0, 0, 0, 0}, 0, 0, "overwritten row gets no gradient");
  expect_close(s.grad().select(0, 0), {1, 1, 1, 1}, 0, 0, "source row gets the gradient");
  // A leaf that requires grad refuses in-place writes, as every in-place op.
  expect_error([&] { leaf.index_fill_(0, idx, 1.0); }, {"in-place"});
}

// normal_, uniform_ and bernoulli_: the right moments and ranges, the same
// stream as the factories from the same generator state, dtype kept.
TEST(IndexUpdates, InPlaceRandomFills) {
  Generator g(123);
  const Tensor x = empty({200000});
  x.normal_(2.0, 3.0, &g);
  EXPECT_EQ(x.dtype(), kFloat32);
  EXPECT_NEAR(mean(x).item<double>(), 2.0, 0.03);
  EXPECT_NEAR(std(x).item<double>(), 3.0, 0.03);
  Generator h(123);
  expect_close(x, values((randn({200000}, h, kFloat64) * 3.0 + 2.0).to(kFloat32)), 0, 0, "normal_ stream");
  const Tensor u = empty({100000}, kFloat64);
  u.uniform_(-1.5, 0.5);
  EXPECT_GE(amin(u).item<double>(), -1.5);
  EXPECT_LT(amax(u).item<double>(), 0.5);
  EXPECT_NEAR(mean(u).item<double>(), -0.5, 0.01);
  const Tensor bits = empty({100000}, kInt64);
  bits.bernoulli_(0.25);
  EXPECT_EQ(sum(logical_or(eq(bits, wrapped_scalar(0)), eq(bits, wrapped_scalar(1)))).item<int64_t>(), 100000);
  EXPECT_NEAR(mean(bits.to(kFloat64)).item<double>(), 0.25, 0.01);
  expect_close(empty({3}).bernoulli_(0.0), {0, 0, 0}, 0, 0, "p = 0");
  expect_close(empty({3}).bernoulli_(1.0), {1, 1, 1}, 0, 0, "p = 1");
  // Through a strided view; other elements untouched.
  const Tensor m = zeros({4, 6});
  m.slice(1, 0, 6, 2).uniform_(1, 2);
  EXPECT_EQ(sum(eq(m.slice(1, 1, 6, 2), wrapped_scalar(0.0))).item<int64_t>(), 12);
  EXPECT_GE(amin(m.slice(1, 0, 6, 2)).item<double>(), 1.0);
  expect_error([] { empty({2}, kInt64).normal_(); }, {"[normal_]", "floating point", "int64"});
  expect_error([] { empty({2}).normal_(0, -1); }, {"[normal_]", "std >= 0", "-1"});
  expect_error([] { empty({2}).uniform_(1, 0); }, {"[uniform_]", "from <= to"});
  expect_error([] { empty({2}).bernoulli_(1.5); }, {"[bernoulli_]", "0 <= p <= 1", "1.5"});
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
