// Tensor basics: factories, conversions, item/data_ptr checks, from_blob.
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Tensor, FactoriesFillWhatTheySay) {
  expect_close(zeros({2, 3}), std::vector<double>(6, 0), 0, 0, "zeros");
  expect_close(ones({4}, kInt32), std::vector<double>(4, 1), 0, 0, "ones");
  Tensor f = full({2}, 2.5);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_close(f, {2.5, 2.5}, 0, 0, "full");
  EXPECT_EQ(full({1}, 3).dtype(), kInt64);
  expect_close(arange(5), {0, 1, 2, 3, 4}, 0, 0, "arange");
  EXPECT_EQ(arange(5).dtype(), kInt64);
  expect_close(arange(1, 2, 0.25), {1, 1.25, 1.5, 1.75}, 0, 0, "arange float step");
  EXPECT_EQ(arange(1, 2, 0.25).dtype(), kFloat32);
  expect_close(arange(5, 0, -2), {5, 3, 1}, 0, 0, "arange negative step");
  expect_close(linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1}, 0, 0, "linspace");
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  expect_close(eye(2, 3), {1, 0, 0, 0, 1, 0}, 0, 0, "eye");
  EXPECT_EQ(empty({0, 3}).numel(), 0);
  EXPECT_EQ(tensor({1.0, 2.0}).dtype(), kFloat64);
  EXPECT_EQ(tensor<float>({1, 2, 3, 4}, {2, 2}).sizes(), Shape({2, 2}));
}

TEST(Tensor, ConversionsBetweenAllDTypes) {
  Tensor x = tensor<double>({-2.0, 0.0, 1.0, 3.0});
  for (int a = 0; a < kNumDTypes; ++a) {
    const DType t = DType(a);
    Tensor y = x.to(t);
    EXPECT_EQ(y.dtype(), t);
    std::vector<double> want = {-2, 0, 1, 3};
    if (t == kBool) want = {1, 0, 1, 1};
    if (t == kUInt8) want = {254, 0, 1, 3};
    expect_close(y, want, 0, 0, dtype_name(t));
    Tensor back = y.to(kFloat64);
    expect_close(back, want, 0, 0, std::string("back from ") + dtype_name(t));
  }
  Tensor f = tensor<float>({1.75f, -1.75f});
  expect_close(f.to(kInt32), {1, -1}, 0, 0, "float to int truncates");
  EXPECT_TRUE(x.to(kFloat64).is_same(x));  // no copy when the dtype matches
}

TEST(Tensor, CloneAndContiguousCopy) {
  Tensor a = arange(6, kFloat32).view({2, 3});
  Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  expect_close(c, {0, 3, 1, 4, 2, 5}, 0, 0, "contiguous of a transpose");
  EXPECT_TRUE(a.contiguous().is_same(a));
  Tensor k = a.clone();
  k.fill_(7);
  expect_close(a, {0, 1, 2, 3, 4, 5}, 0, 0, "clone does not share storage");
}

TEST(Tensor, ItemAndDataPtrCheckDType) {
  Tensor s = scalar_tensor(3.5);
  EXPECT_EQ(s.item<float>(), 3.5f);
  EXPECT_EQ(s.item<int64_t>(), 3);
  EXPECT_EQ(s.item().to_double(), 3.5);
  EXPECT_NE(s.data_ptr<float>(), nullptr);
  expect_error([&] { s.data_ptr<double>(); }, {"[data_ptr]", "float64", "float32"});
  expect_error([&] { ones({2}).item<float>(); }, {"[item]", "2 elements"});
}

TEST(Tensor, FromBlobSharesMemoryAndCallsDeleter) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  bool deleted = false;
  {
    Tensor t = from_blob(buf, {2, 3}, kFloat32, [&](void*) { deleted = true; });
    t.mul_(2);
    Tensor strided = from_blob(buf, {3}, {2}, kFloat32);
    expect_close(strided, {2, 6, 10}, 0, 0, "from_blob with strides");
  }
  EXPECT_TRUE(deleted);
  EXPECT_EQ(buf[5], 12);
}

TEST(Tensor, VersionCounterIsSharedWithViews) {
  Tensor a = zeros({4});
  Tensor v = a.slice(0, 1, 3);
  const uint64_t v0 = a.version();
  v.fill_(1);
  EXPECT_EQ(a.version(), v0 + 1);
  EXPECT_EQ(v.version(), a.version());
  a.add_(1);
  EXPECT_EQ(v.version(), v0 + 2);
  expect_close(a, {1, 2, 2, 1}, 0, 0, "write through a view");
}

}  // namespace
}  // namespace kiln::test
