// Note [Checked sizes]: sizes whose element count or byte size does not fit
// are kiln::Errors naming the op and the shape, from every factory, view
// and allocation, never a wrapped product that a kernel then writes past.
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr int64_t k2p40 = int64_t{1} << 40;
constexpr int64_t k2p61 = int64_t{1} << 61;
constexpr int64_t k2p62 = int64_t{1} << 62;

TEST(CheckedSizes, ShapeNumelRefusesOverflowAndNegatives) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0, k2p62, k2p62}), 0);  // a zero size: no element, whatever the others
  EXPECT_EQ(shape_numel({k2p61, 3}), 3 * k2p61);
  expect_error([] { shape_numel({k2p62, 2}, "op"); }, {"[op]", "int64"});
  expect_error([] { shape_numel({k2p40, k2p40}, "op"); }, {"[op]", "[1099511627776, 1099511627776]", "int64"});
  expect_error([] { shape_numel({2, -1}, "op"); }, {"[op]", "negative dimension -1", "[2, -1]"});
  expect_error([] { shape_nbytes({k2p62}, kFloat32, "op"); }, {"[op]", "[4611686018427387904]", "float32", "bytes"});
  EXPECT_EQ(shape_nbytes({k2p40, 3}, kFloat32, "op"), size_t{12} << 40);
  // At most 64 dims, as in PyTorch: views and factories alike.
  EXPECT_EQ(shape_numel(Shape(64, 1)), 1);
  expect_error([] { shape_numel(Shape(65, 1), "op"); }, {"[op]", "a shape of 65 dims", "at most 64"});
  expect_error([] { empty(Shape(65, 1)); }, {"[empty]", "at most 64"});
  expect_error([] { ones({1}).view(Shape(65, 1)); }, {"65 dims", "at most 64"});
}

TEST(CheckedSizes, FactoriesRefuseSizesThatDoNotFit) {
  expect_error([] { randn({k2p62}); }, {"[rand]", "[4611686018427387904]", "bytes"});
  expect_error([] { empty({k2p62}).fill_(1); }, {"[empty]", "[4611686018427387904]"});
  expect_error([] { zeros({k2p40, k2p40}); }, {"[full]", "[1099511627776, 1099511627776]", "int64"});
  expect_error([] { randint(0, 5, {k2p40, k2p40}); }, {"[randint]", "int64"});
  expect_error([] { empty_strided({2, 3}, {k2p62, k2p62}); }, {"[empty_strided]", "int64"});
  // Zero elements, but strides past int64 (a fuzzed IDX header found it).
  expect_error([] { empty({0, k2p40, k2p40}); }, {"[empty]", "[0, 1099511627776, 1099511627776]", "strides", "int64"});
  expect_error([] { empty({0, k2p61}, kUInt8); }, {"[empty]", "strides"});  // 2^61 elements of 8 bytes wrap
  EXPECT_EQ(empty({k2p40, 0, k2p40}).numel(), 0);  // the outermost size never enters a stride
  expect_error([] { empty_strided({0, 2}, {k2p62, 1}); }, {"[empty_strided]", "4611686018427387904", "bytes"});
  EXPECT_EQ(empty({0, int64_t{1} << 59}).to(kFloat64).numel(), 0);  // byte strides of 2^62 still fit
  // (2^61 + 1) bytes fit in int64 but in no machine: refused at once (the
  // allocator's size classes used to loop forever here).
  expect_error([] { empty({k2p61 + 1}, kUInt8); }, {"[empty]", "cannot allocate"});
  expect_error([] { arange(0, 1e30); }, {"[arange]", "not a valid size"});
  expect_error([] { arange(0, std::nan("")); }, {"[arange]"});
  expect_error([] { linspace(0, 1, -1); }, {"[linspace]"});
}

TEST(CheckedSizes, AllocationsLargerThanMemoryAreErrors) {
  // 2^50 bytes (1 PiB) passes every size check and then fails to allocate.
  expect_error([] { empty({int64_t{1} << 50}, kUInt8); }, {"[empty]", "out of memory"});
}

TEST(CheckedSizes, ViewsNeverReachPastTheirStorage) {
  Tensor x = ones({4});
  expect_error([&] { x.view({1, 4}).expand({k2p40, k2p40, 4}); }, {"[expand]", "int64"});
  expect_error([&] { x.as_strided({2, 2}, {k2p62, k2p62}); }, {"[as_strided]", "int64"});
  expect_error([&] { x.as_strided({2}, {3}, 3); }, {"[as_strided]", "needs 7 elements", "has 4"});
  float data[4] = {};
  expect_error([&] { from_blob(data, {2, 2}, {k2p62, k2p62}, kFloat32); }, {"[from_blob]", "int64"});
  expect_error([&] { from_blob(data, {-2}, kFloat32); }, {"[from_blob]", "negative"});
  // A 0-size expansion of any width is fine.
  EXPECT_EQ(x.view({1, 4}).expand({0, 4}).numel(), 0);
}

}  // namespace
}  // namespace kiln::test
