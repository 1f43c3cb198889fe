// scatter_reduce (every reduction, with and without self), scatter with
// reduce=, index_put and masked_scatter against float64 references computed
// element by element here; gradcheck (prod through zeros, amax ties);
// errors.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

// The reference: per position of x, its contributors (self unless excluded
// where anything arrives, then src's elements in index order) reduced.
std::vector<double> scatter_reduce_ref(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                                       const std::string& reduce, bool include_self) {
  std::vector<std::vector<double>> parts(static_cast<size_t>(x.numel()));
  const Shape steps = [&] {
    Shape s(static_cast<size_t>(x.dim()), 1);
    for (int64_t d = x.dim() - 2; d >= 0; --d) s[d] = s[d + 1] * x.size(d + 1);
    return s;
  }();
  std::vector<bool> reached(parts.size(), false);
  std::vector<std::vector<double>> arrivals(parts.size());
  for (int64_t e = 0; e < index.numel(); ++e) {
    std::vector<int64_t> at = unravel(e, index.sizes());
    const double v = at_broadcast(src, at);
    at[static_cast<size_t>(dim)] = static_cast<int64_t>(at_broadcast(index, unravel(e, index.sizes())));
    int64_t pos = 0;
    for (int64_t d = 0; d < x.dim(); ++d) pos += at[d] * steps[d];
    reached[pos] = true;
    arrivals[pos].push_back(v);
  }
  std::vector<double> out;
  for (int64_t p = 0; p < x.numel(); ++p) {
    const double self = at_broadcast(x, unravel(p, x.sizes()));
    if (!reached[p]) {
      out.push_back(self);
      continue;
    }
    std::vector<double> all = arrivals[p];
    if (include_self) all.insert(all.begin(), self);
    double r = reduce == "prod" ? 1 : reduce == "amax" ? -INFINITY : reduce == "amin" ? INFINITY : 0;
    bool nan = false;
    for (double v : all) {
      nan = nan || std::isnan(v);
      if (reduce == "prod") r *= v;
      else if (reduce == "amax") r = std::max(r, v);
      else if (reduce == "amin") r = std::min(r, v);
      else r += v;
    }
    if (reduce == "mean") r /= static_cast<double>(all.size());
    if (nan && (reduce == "amax" || reduce == "amin")) r = NAN;
    out.push_back(r);
  }
  return out;
}

TEST(ScatterReduce, EveryReductionMatchesFloat64) {
  manual_seed(6101);
  for (Layout layout : all_layouts())
    for (int64_t dim : {0, 1})
      for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
        for (bool include_self : {true, false}) {
          const Tensor x = make_input({4, 5}, layout, kFloat64);
          const Tensor src = make_input({5, 6}, layout, kFloat64);
          const Tensor index = randint(0, dim == 0 ? 4 : 5, {3, 4});  // repeats; src larger than index
          const std::string what = std::string(reduce) + (include_self ? " self " : " no-self ") + layout_name(layout) +
                                   " dim " + std::to_string(dim);
          expect_close(scatter_reduce(x, dim, index, src, reduce, include_self),
                       scatter_reduce_ref(x, dim, index, src, reduce, include_self), 1e-14, 1e-14, what);
        }
  // float32 and integers (mean floors), NaN wins amax/amin, scatter's reduce=.
  const Tensor xi = tensor(std::vector<int64_t>{10, -7, 3});
  const Tensor ii = tensor(std::vector<int64_t>{1, 1, 0});
  const Tensor si = tensor(std::vector<int64_t>{2, 2, 4});
  expect_close(scatter_reduce(xi, 0, ii, si, "mean"), {7, -1, 3}, 0, 0, "int mean floors");  // (10+4)/2, (-7+2+2)/3
  expect_close(scatter_reduce(xi, 0, ii, si, "prod", false), {4, 4, 3}, 0, 0, "int prod without self");
  const Tensor xf = tensor<float>({1, 2});
  expect_close(scatter_reduce(xf, 0, tensor(std::vector<int64_t>{0, 0}), tensor<float>({NAN, 5}), "amax"),
               {NAN, 2}, 0, 0, "NaN wins");
  expect_close(scatter(xf, 0, tensor(std::vector<int64_t>{1, 1}), tensor<float>({3, 4}), "multiply"), {1, 24}, 0, 0,
               "reduce multiply");
  expect_close(scatter(xf, 0, tensor(std::vector<int64_t>{1, 1}), tensor<float>({3, 4}), "add"), {1, 9}, 0, 0,
               "reduce add");
  EXPECT_EQ(scatter_reduce(empty({0, 3}), 1, empty({0, 2}, kInt64), empty({0, 2}), "sum").sizes(), (Shape{0, 3}));
}

TEST(ScatterReduce, Gradients) {
  manual_seed(6102);
  const Tensor index = tensor(std::vector<int64_t>{0, 2, 0, 2, 1, 0}).reshape({2, 3});
  for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
    for (bool include_self : {true, false}) {
      const Tensor x = randn({3, 3}, kFloat64).requires_grad_();
      const Tensor src = randn({2, 4}, kFloat64).requires_grad_();
      EXPECT_TRUE(autograd::gradcheck(
          [&](const std::vector<Tensor>& t) {
            return std::vector<Tensor>{scatter_reduce(t[0], 0, index, t[1], reduce, include_self)};
          },
          {x, src}))
          << reduce << " " << include_self;
    }
  // prod through zeros: one zero at a position, two zeros at another.
  Tensor x = randn({3, 3}, kFloat64);
  Tensor src = randn({2, 4}, kFloat64);
  x.select(0, 0).narrow(0, 0, 1).fill_(0.0);
  src.select(0, 1).narrow(0, 1, 1).fill_(0.0);  // goes to row 0, column 1 ... with self nonzero
  src.select(0, 0).narrow(0, 0, 1).fill_(0.0);  // row 0, column 0: a second zero there
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{scatter_reduce(t[0], 0, index, t[1], "prod")}; },
      {x.requires_grad_(), src.requires_grad_()}));
  // amax ties share the gradient evenly (PyTorch's rule).
  const Tensor a = tensor(std::vector<double>{1, 5}).requires_grad_();
  const Tensor b = tensor(std::vector<double>{5, 5, 2}).requires_grad_();
  scatter_reduce(a, 0, tensor(std::vector<int64_t>{1, 1, 0}), b, "amax").sum().backward();
  expect_close(a.grad(), {0, 1.0 / 3}, 1e-15, 0, "self's share");
  expect_close(b.grad(), {1.0 / 3, 1.0 / 3, 1}, 1e-15, 0, "src's shares");
}

TEST(ScatterReduce, IndexPutAndMaskedScatter) {
  manual_seed(6103);
  const Tensor x = randn({4, 3, 5}, kFloat64);
  const Tensor rows = tensor(std::vector<int64_t>{3, -4, 1});  // -4 is row 0
  const Tensor cols = tensor(std::vector<int64_t>{2, 0, 2});
  // x[rows, cols] = v (v broadcast over the last dim) and += with repeats.
  const Tensor v = randn({3, 5}, kFloat64);
  for (bool accumulate : {false, true}) {
    std::vector<double> want = values(x);
    const auto vv = values(v);
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t r = (values(rows)[k] + 4) - (values(rows)[k] >= 0 ? 4 : 0);
      const int64_t c = static_cast<int64_t>(values(cols)[k]);
      for (int64_t j = 0; j < 5; ++j) {
        double& w = want[static_cast<size_t>((r * 3 + c) * 5 + j)];
        w = accumulate ? w + vv[k * 5 + j] : vv[k * 5 + j];
      }
    }
    expect_close(index_put(x, {rows, cols}, v, accumulate), want, 1e-15, 0, accumulate ? "index_put +=" : "index_put");
  }
  // Repeated indices accumulate; a full slice first (x[:, cols] += 1); a bool mask.
  const Tensor twice = index_put(zeros({3}, kFloat64), {tensor(std::vector<int64_t>{1, 1, 2})}, ones({3}, kFloat64), true);
  expect_close(twice, {0, 2, 1}, 0, 0, "repeats sum");
  const Tensor m = zeros({2, 3}, kFloat64);
  expect_close(index_put(m, {Tensor(), tensor(std::vector<int64_t>{2})}, full({}, 7.0, kFloat64)), {0, 0, 7, 0, 0, 7}, 0,
               0, "full slice then index");
  const Tensor mask = gt(x, zeros_like(x));
  expect_close(index_put(x, {mask}, full({}, 0.0, kFloat64)), values(where(mask, zeros_like(x), x)), 0, 0, "bool mask");
  // masked_scatter: source's leading elements into the true positions, in order.
  const Tensor pick = tensor(std::vector<bool>{true, false, true, true});
  const Tensor target = tensor(std::vector<double>{1, 2, 3, 4});
  const Tensor source = tensor(std::vector<double>{10, 20, 30, 40, 50});
  expect_close(masked_scatter(target, pick, source), {10, 2, 20, 30}, 0, 0, "masked_scatter");
  expect_close(masked_scatter(zeros({2, 2}, kFloat64), tensor(std::vector<bool>{false, true}), source), {0, 10, 0, 20},
               0, 0, "broadcast mask");
  expect_close(masked_scatter(target, zeros({4}, kBool), empty({0}, kFloat64)), values(target), 0, 0, "nothing picked");
  // Gradients flow to x's unwritten places and to the used values.
  const Tensor xg = randn({3, 4}, kFloat64).requires_grad_(), vg = randn({2, 4}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{index_put(t[0], {tensor(std::vector<int64_t>{2, 0})}, t[1], true)};
      },
      {xg, vg}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{masked_scatter(t[0], gt(xg.detach(), zeros_like(xg)), t[1])};
      },
      {xg, randn({12}, kFloat64).requires_grad_()}));
}

TEST(ScatterReduce, Errors) {
  const Tensor x = randn({3, 4});
  const Tensor idx = randint(0, 3, {2, 4});
  expect_error([&] { scatter_reduce(x, 0, idx, randn({2, 4}), "median"); }, {"[scatter_reduce]", "'median'"});
  expect_error([&] { scatter_reduce(x, 0, idx, randn({2, 4}, kFloat64), "sum"); }, {"[scatter_reduce]", "float64"});
  expect_error([&] { scatter_reduce(x, 0, randint(0, 3, {2}), randn({2}), "sum"); }, {"[scatter_reduce]", "as many dims"});
  expect_error([&] { scatter_reduce(x, 0, full({1, 1}, int64_t{5}), randn({1, 1}), "sum"); },
               {"[scatter_reduce]", "index 5 is out of bounds"});
  expect_error([&] { scatter(x, 0, idx, randn({2, 4}), "max"); }, {"[scatter]", "'add' or 'multiply'"});
  expect_error([&] { index_put(x, {tensor(std::vector<int64_t>{3})}, zeros({4})); }, {"[index_put]", "out of range", "size 3"});
  expect_error([&] { index_put(x, {}, zeros({4})); }, {"[index_put]", "at least one index"});
  expect_error([&] { index_put(randn({2, 3, 4}), {tensor(std::vector<int64_t>{0}), Tensor(), tensor(std::vector<int64_t>{0})}, zeros({})); },
               {"[index_put]", "adjacent"});
  // A bool mask must match the dims it covers (it once indexed their prefix:
  // index_put(zeros({6}), {[true, false]}, ones({1})) set element 0).
  const Tensor short_mask = tensor(std::vector<bool>{true, false});
  expect_error([&] { index_put(zeros({6}), {short_mask}, ones({1})); },
               {"[index_put]", "shape of the mask [2] at index 0", "indexed tensor [6] at index 0"});
  expect_error([&] { index_put(x, {Tensor(), tensor(std::vector<bool>{true, false, true})}, zeros({})); },
               {"[index_put]", "mask [3] at index 0", "[3, 4] at index 1"});
  expect_error([&] { index_put(x, {ones({3, 4, 1}, kBool)}, zeros({})); }, {"[index_put]", "too many indices", "[3, 4, 1]"});
  expect_error([&] { masked_scatter(x, gt(x, zeros_like(x)), empty({0})); }, {"[masked_scatter]", "source has only 0"});
  expect_error([&] { masked_scatter(x, ones({3, 4}), x); }, {"[masked_scatter]", "bool mask"});
}

}  // namespace
}  // namespace kiln::test
