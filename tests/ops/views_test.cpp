// View ops never copy: they share storage with their base, so writes through
// either side are seen by the other.
#include "test_util.h"

namespace kiln::test {
namespace {

bool shares(const Tensor& a, const Tensor& b) { return a.impl()->storage == b.impl()->storage; }

TEST(Views, ViewReshapeAndFlatten) {
  Tensor a = arange(24, kFloat32);
  Tensor v = a.view({2, 3, 4});
  EXPECT_TRUE(shares(a, v));
  EXPECT_EQ(v.strides(), Shape({12, 4, 1}));
  EXPECT_EQ(a.view({-1, 6}).sizes(), Shape({4, 6}));
  Tensor t = v.transpose(0, 2);  // (4, 3, 2), not viewable as (24)
  EXPECT_THROW(t.view({24}), Error);
  Tensor r = t.reshape({24});
  EXPECT_FALSE(shares(r, a));  // reshape copied
  expect_close(r.slice(0, 0, 4), {0, 12, 4, 16}, 0, 0, "reshape of a transpose");
  EXPECT_TRUE(shares(v.reshape({6, 4}), a));  // and did not copy when it could view
  EXPECT_EQ(v.flatten(1).sizes(), Shape({2, 12}));
  EXPECT_EQ(scalar_tensor(1.0).flatten().sizes(), Shape({1}));
  // A view that splits a dim of a non-contiguous tensor.
  Tensor w = arange(12, kFloat32).view({3, 4}).slice(1, 0, std::nullopt, 2);  // (3, 2), strides (4, 2)
  Tensor wv = w.view({3, 2, 1});
  EXPECT_TRUE(shares(wv, w));
  expect_close(wv, {0, 2, 4, 6, 8, 10}, 0, 0, "view of a strided tensor");
}

TEST(Views, WritesGoThroughBothWays) {
  Tensor base = zeros({3, 4});
  base.select(0, 1).fill_(5);
  base.slice(1, 0, std::nullopt, 3).add_(1);
  base.t().select(0, 2).mul_(0);
  expect_close(base, {1, 0, 0, 1, 6, 5, 0, 6, 1, 0, 0, 1}, 0, 0, "writes through views");
  Tensor e = base.select(0, 0).expand({2, 4});
  EXPECT_EQ(e.strides(), Shape({0, 1}));
  base.fill_(2);
  expect_close(e, std::vector<double>(8, 2), 0, 0, "expand sees base writes");
}

TEST(Views, PermuteSliceSelectSqueezeUnsqueeze) {
  Tensor a = arange(24, kFloat32).view({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), Shape({4, 2, 3}));
  EXPECT_EQ(p.strides(), Shape({1, 12, 4}));
  Tensor s = a.slice(2, 1, 4, 2);
  EXPECT_EQ(s.sizes(), Shape({2, 3, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  expect_close(s.select(0, 1).select(0, 2), {21, 23}, 0, 0, "slice with step then select");
  EXPECT_EQ(a.slice(0, -1).sizes(), Shape({1, 3, 4}));
  EXPECT_EQ(a.slice(1, 5, 9).sizes(), Shape({2, 0, 4}));
  EXPECT_EQ(a.select(1, -1).sizes(), Shape({2, 4}));
  Tensor u = a.unsqueeze(1).unsqueeze(-1);
  EXPECT_EQ(u.sizes(), Shape({2, 1, 3, 4, 1}));
  EXPECT_EQ(u.squeeze().sizes(), Shape({2, 3, 4}));
  EXPECT_EQ(u.squeeze(1).sizes(), Shape({2, 3, 4, 1}));
  EXPECT_EQ(u.squeeze(0).sizes(), u.sizes());  // not size 1: unchanged
  EXPECT_TRUE(shares(u, a));
  EXPECT_EQ(a.narrow(2, 1, 2).sizes(), Shape({2, 3, 2}));
}

TEST(Views, UnfoldAndAsStrided) {
  Tensor a = arange(7, kFloat32);
  Tensor u = a.unfold(0, 3, 2);
  EXPECT_EQ(u.sizes(), Shape({3, 3}));
  expect_close(u, {0, 1, 2, 2, 3, 4, 4, 5, 6}, 0, 0, "unfold");
  Tensor s = a.as_strided({2, 2}, {1, 2}, 1);
  expect_close(s, {1, 3, 2, 4}, 0, 0, "as_strided");
  EXPECT_TRUE(shares(s, a));
  expect_error([&] { a.as_strided({4}, {3}); }, {"[as_strided]", "needs 10 elements", "has 7"});
}

TEST(Views, SliceAndSelectBackwardPlaceGradIntoZeros) {
  manual_seed(25);
  // A non-contiguous float64 gradient of the slice a[:, 1:6:2, :] of a (3, 7, 2) input.
  const Tensor g = randn({2, 3, 3}, kFloat64).permute({1, 2, 0});
  const Tensor r = slice_backward(g, {3, 7, 2}, 1, 1, 6, 2);
  ASSERT_EQ(r.sizes(), Shape({3, 7, 2}));
  std::vector<double> want(42, 0.0);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k) want[(i * 7 + 1 + 2 * j) * 2 + k] = g.select(0, i).select(0, j).select(0, k).item<double>();
  expect_close(r, want, 0, 0, "slice_backward");
  const Tensor gs = randn({3, 2}, kFloat32);
  const Tensor s = select_backward(gs, {3, 4, 2}, 1, -1);
  std::vector<double> want_s(24, 0.0);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 2; ++k) want_s[(i * 4 + 3) * 2 + k] = gs.select(0, i).select(0, k).item<float>();
  expect_close(s, want_s, 0, 0, "select_backward");
  EXPECT_EQ(slice_backward(zeros({0, 2}), {4, 2}, 0, 5, 9, 1).sizes(), Shape({4, 2}));  // an empty slice
  expect_error([] { slice_backward(ones({2, 2}), {4, 2}, 0, 0, 3, 1); },
               {"[slice_backward]", "[2, 2]", "slice of [4, 2]", "[3, 2]"});
  expect_error([] { select_backward(ones({2}), {4, 3}, 0, 1); }, {"[select_backward]", "[2]", "[3]"});
  expect_error([] { select_backward(ones({3}), {4, 3}, 0, 4); }, {"[select]", "out of range"});
}

TEST(Views, DetachSharesStorage) {
  Tensor a = ones({3});
  Tensor d = a.detach();
  EXPECT_TRUE(shares(a, d));
  EXPECT_FALSE(d.is_same(a));
}

}  // namespace
}  // namespace kiln::test
