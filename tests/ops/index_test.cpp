// Joining, splitting, indexing, sorting and sampling ops against references.
#include <algorithm>
#include <numeric>

#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Index, CatStackSplitChunk) {
  Tensor a = arange(6, kFloat32).view({2, 3}), b = arange(6, 10, 1, kInt32).view({2, 2});
  Tensor c = cat({a, b}, 1);
  EXPECT_EQ(c.dtype(), kFloat32);
  expect_close(c, {0, 1, 2, 6, 7, 3, 4, 5, 8, 9}, 0, 0, "cat dim 1 with promotion");
  expect_close(cat({a.t(), a.t()}, 0).select(1, 1), {3, 4, 5, 3, 4, 5}, 0, 0, "cat of transposed inputs");
  EXPECT_EQ(cat({zeros({0}), a}).sizes(), Shape({2, 3}));  // legacy empty input skipped
  Tensor s = stack({a, a * 2}, 1);
  EXPECT_EQ(s.sizes(), Shape({2, 2, 3}));
  expect_close(s.select(1, 1).select(0, 1), {6, 8, 10}, 0, 0, "stack");
  auto parts = split(arange(7), 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].numel(), 1);
  auto sized = split(arange(7), Shape{2, 5});
  expect_close(sized[1], {2, 3, 4, 5, 6}, 0, 0, "split by sizes");
  auto ch = chunk(arange(10), 3);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[0].numel(), 4);
  EXPECT_EQ(ch[2].numel(), 2);
  EXPECT_EQ(ch[0].impl()->storage, ch[1].impl()->storage);
}

TEST(Index, GatherScatterIndexSelect) {
  Tensor x = arange(12, kFloat32).view({3, 4});
  Tensor idx = tensor<int64_t>({3, 0, 1, 1, 2, 2}, {3, 2});
  expect_close(gather(x, 1, idx), {3, 0, 5, 5, 10, 10}, 0, 0, "gather dim 1");
  Tensor idx0 = tensor<int64_t>({2, 0, 1, 0}, {1, 4});
  expect_close(gather(x, 0, idx0), {8, 1, 6, 3}, 0, 0, "gather dim 0");
  expect_close(gather(x.t(), 0, tensor<int64_t>({1, 2}, {1, 2})), {1, 6}, 0, 0, "gather from a transpose");
  Tensor src = ones({3, 2});
  expect_close(scatter(zeros({3, 4}), 1, idx, src), {1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0}, 0, 0, "scatter");
  expect_close(scatter_add(zeros({3, 4}), 1, idx, src), {1, 0, 0, 1, 0, 2, 0, 0, 0, 0, 2, 0}, 0, 0, "scatter_add");
  expect_close(index_select(x, 0, tensor<int64_t>({2, 0})), {8, 9, 10, 11, 0, 1, 2, 3}, 0, 0, "index_select 0");
  // Negative indices are refused, as in PyTorch (they used to wrap, and -11 on a size of 10 to error).
  expect_error([&] { index_select(x, 1, tensor<int32_t>({-1})); }, {"[index_select]", "index -1", "[0, 4)"});
  expect_error([&] { gather(x, 1, tensor<int64_t>({-1}, {1, 1})); }, {"[gather]", "index -1", "[0, 4)"});
  expect_error([&] { embedding(ones({10, 3}), tensor<int64_t>({2, -1})); }, {"[embedding]", "index -1", "[0, 10)"});
  expect_error([&] { gather(x, 1, tensor<int64_t>({4}, {1, 1})); }, {"[gather]", "index 4", "size 4"});
  expect_error([&] { index_select(x, 0, tensor<int64_t>({3})); }, {"[index_select]", "index 3", "size 3"});
  expect_error([&] { scatter(x, 0, tensor<int64_t>({-4}, {1, 1}), ones({1, 1})); }, {"[scatter]", "index -4"});
}

// scatter_add runs groups of lines in parallel, positions outer: large
// cases against a float64 loop, with repeated indices (the embedding
// backward's shape: 2000 rows of 100 into 37, index expanded along the
// columns), along dim 1 of a 3-D tensor, and with a transposed source.
TEST(Index, ScatterAddOfManyLinesMatchesFloat64Loop) {
  manual_seed(11);
  auto reference = [](const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
    Tensor ref = x.to(kFloat64).contiguous();
    const Tensor i64 = index.to(kInt64).contiguous(), s64 = src.to(kFloat64).contiguous();
    const Shape is = i64.sizes();
    std::vector<int64_t> pos(is.size(), 0);
    for (int64_t n = 0; n < i64.numel(); ++n) {
      int64_t rem = n, ioff = 0, soff = 0, ooff = 0;
      for (int64_t d = static_cast<int64_t>(is.size()) - 1; d >= 0; --d) {
        pos[d] = rem % is[d];
        rem /= is[d];
      }
      for (size_t d = 0; d < is.size(); ++d) {
        ioff += pos[d] * i64.stride(static_cast<int64_t>(d));
        soff += pos[d] * s64.stride(static_cast<int64_t>(d));
      }
      for (size_t d = 0; d < is.size(); ++d) {
        const int64_t at = static_cast<int64_t>(d) == dim ? i64.data_ptr<int64_t>()[ioff] : pos[d];
        ooff += at * ref.stride(static_cast<int64_t>(d));
      }
      ref.data_ptr<double>()[ooff] += s64.data_ptr<double>()[soff];
    }
    return values(ref);
  };
  const Tensor rows = randint(0, 37, {2000, 1});
  const Tensor src = randn({2000, 100});
  const Tensor expanded = rows.expand({2000, 100});
  expect_close(scatter_add(zeros({37, 100}), 0, expanded, src), reference(zeros({37, 100}), 0, expanded, src), 1e-5,
               1e-5, "embedding-shaped scatter_add");
  // scatter (not add) along rows with unique indices: row k goes to 5k mod 37.
  std::vector<int64_t> to(37), from(37);
  for (int64_t k = 0; k < 37; ++k) to[k] = 5 * k % 37, from[to[k]] = k;
  const Tensor src37 = randn({37, 100});
  expect_close(scatter(zeros({37, 100}), 0, tensor<int64_t>(to, {37, 1}).expand({37, 100}), src37),
               values(index_select(src37, 0, tensor<int64_t>(from))), 0, 0, "scatter of permuted rows");
  const Tensor base = randn({4, 9, 300});
  const Tensor idx3 = randint(0, 9, {4, 500, 300});
  const Tensor src3 = randn({4, 300, 500}).transpose(1, 2);
  expect_close(scatter_add(base, 1, idx3, src3), reference(base, 1, idx3, src3), 1e-5, 1e-5, "dim 1 of 3-D");
}

TEST(Index, EmbeddingAndOneHot) {
  Tensor w = arange(12, kFloat32).view({4, 3});
  Tensor e = embedding(w, tensor<int64_t>({3, 0, 3, 1}, {2, 2}));
  EXPECT_EQ(e.sizes(), Shape({2, 2, 3}));
  expect_close(e.select(0, 0), {9, 10, 11, 0, 1, 2}, 0, 0, "embedding");
  expect_error([&] { embedding(w, tensor<int64_t>({4})); }, {"[embedding]", "index 4", "size 4"});
  Tensor oh = one_hot(tensor<int64_t>({0, 2}));
  EXPECT_EQ(oh.sizes(), Shape({2, 3}));
  expect_close(oh, {1, 0, 0, 0, 0, 1}, 0, 0, "one_hot");
  expect_error([&] { one_hot(tensor<int64_t>({5}), 3); }, {"[one_hot]", "5"});
}

// padding_idx: that row's lookups give no gradient; max_norm: the rows
// looked up are scaled in place to the norm bound, the others untouched.
TEST(Index, EmbeddingPaddingIdxAndMaxNorm) {
  const Tensor w = (arange(12, kFloat64).view({4, 3}) - 5.0).requires_grad_();
  const Tensor idx = tensor<int64_t>({3, 1, 3, 0, 1});
  embedding(w, idx, 1).sum().backward();
  expect_close(w.grad(), {1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2}, 0, 0, "padding row gets none");
  w.set_grad(Tensor());
  embedding(w, idx, -3).sum().backward();  // -3 is row 1
  expect_close(w.grad().select(0, 1), {0, 0, 0}, 0, 0, "negative padding_idx");
  const Tensor m = tensor<double>({3, 4, 0, 0.3, 0.4, 0, 6, 8, 0}, {3, 3});  // norms 5, 0.5, 10
  const Tensor before = m.clone();
  const Tensor out = embedding(m, tensor<int64_t>({1, 2, 1}), {}, 2.0);
  expect_close(m, {3, 4, 0, 0.3, 0.4, 0, 6 * 2 / (10 + 1e-7), 8 * 2 / (10 + 1e-7), 0}, 1e-15, 0, "renormed in place");
  expect_close(out.select(0, 1), values(m.select(0, 2)), 0, 0, "looked up after the renorm");
  const Tensor l1 = tensor<double>({3, -4}, {1, 2});
  embedding(l1, tensor<int64_t>({0}), {}, 1.0, 1.0);
  expect_close(l1, {3 / (7 + 1e-7), -4 / (7 + 1e-7)}, 1e-15, 0, "norm_type 1");
  // On a parameter (a leaf that requires grad) under grad mode, as nn::Embedding does.
  const Tensor leaf = m.clone().requires_grad_();
  embedding(leaf, tensor<int64_t>({2}), {}, 1.0).sum().backward();
  EXPECT_NEAR(values(norm(leaf.detach().select(0, 2)))[0], 1.0, 1e-6);
  // The module: the padding row starts at zero.
  nn::Embedding emb(5, 3, 2);
  expect_close(emb.weight.select(0, 2), {0, 0, 0}, 0, 0, "Embedding padding row");
  expect_error([&] { embedding(w, idx, 4); }, {"[embedding]", "padding_idx 4", "4 rows"});
  expect_error([&] { embedding(m, idx, {}, -1.0); }, {"[embedding]", "max_norm", "-1"});
  expect_error([] { nn::Embedding(3, 2, 5); }, {"Embedding", "padding_idx 5"});
}

TEST(Index, TrilTriu) {
  Tensor x = ones({2, 3, 3});
  expect_close(tril(x).select(0, 1), {1, 0, 0, 1, 1, 0, 1, 1, 1}, 0, 0, "tril");
  expect_close(triu(x, 1).select(0, 0), {0, 1, 1, 0, 0, 1, 0, 0, 0}, 0, 0, "triu k=1");
  expect_close(tril(ones({2, 4}).t(), -1), {0, 0, 1, 0, 1, 1, 1, 1}, 0, 0, "tril of a transpose");
}

TEST(Index, SortTopkArgsort) {
  manual_seed(12);
  for (Layout l : all_layouts()) {
    Tensor x = make_input({5, 9}, l, kFloat32);
    for (bool desc : {false, true}) {
      auto [v, i] = sort(x, 1, desc);
      const auto xv = values(x), vv = values(v), iv = values(i);
      for (int64_t r = 0; r < 5; ++r) {
        std::vector<double> row(xv.begin() + r * 9, xv.begin() + r * 9 + 9);
        std::vector<double> want = row;
        std::stable_sort(want.begin(), want.end(), [&](double a, double b) { return desc ? a > b : a < b; });
        for (int64_t k = 0; k < 9; ++k) {
          EXPECT_EQ(vv[r * 9 + k], want[k]);
          EXPECT_EQ(row[static_cast<size_t>(iv[r * 9 + k])], vv[r * 9 + k]);
        }
      }
    }
    auto [tv, ti] = topk(x, 3, 0);
    EXPECT_EQ(tv.sizes(), Shape({3, 9}));
    auto [sv, si] = sort(x, 0, true);
    expect_close(tv, values(sv.slice(0, 0, 3)), 0, 0, "topk = head of a descending sort");
    auto [bv, bi] = topk(x, 2, 1, false);
    auto [av, ai] = sort(x, 1);
    expect_close(bv, values(av.slice(1, 0, 2)), 0, 0, "topk smallest");
  }
  Tensor t = tensor<float>({3, NAN, 1, 2});
  expect_close(std::get<0>(sort(t)), {1, 2, 3, NAN}, 0, 0, "NaN sorts last");
  expect_close(argsort(tensor<int64_t>({2, 2, 1})), {2, 0, 1}, 0, 0, "argsort is stable");
}

TEST(Index, MultinomialFollowsTheWeights) {
  manual_seed(13);
  Tensor p = tensor<float>({0.0f, 1.0f, 3.0f});
  Tensor draws = multinomial(p, 8000, true);
  const auto v = values(draws);
  const double twos = std::count(v.begin(), v.end(), 2.0), zeros_ = std::count(v.begin(), v.end(), 0.0);
  EXPECT_EQ(zeros_, 0);
  EXPECT_NEAR(twos / 8000, 0.75, 0.02);
  Tensor perm = multinomial(ones({2, 5}), 5, false);
  for (int64_t r = 0; r < 2; ++r) {
    auto row = values(perm.select(0, r));
    std::sort(row.begin(), row.end());
    EXPECT_EQ(row, std::vector<double>({0, 1, 2, 3, 4}));
  }
  expect_error([&] { multinomial(p, 3, false); }, {"[multinomial]", "without replacement"});
  expect_error([&] { multinomial(tensor<float>({-1.0f, 1.0f}), 1); }, {"[multinomial]", "non-negative"});
}

}  // namespace
}  // namespace kiln::test
