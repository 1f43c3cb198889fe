// Bad input raises kiln::Error naming the op, the shapes or dtypes, and what
// was expected.
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Errors, ShapesThatDoNotBroadcast) {
  expect_error([] { add(ones({2, 3}), ones({4})); }, {"[add]", "[2, 3]", "[4]", "broadcast"});
  expect_error([] { where(ones({2}) > 0, ones({3}), ones({2})); }, {"[where]"});
  expect_error([] { ones({2, 2}).add_(ones({2, 2, 2})); }, {"[add]", "[2, 2]", "broadcast shape"});
  expect_error([] { ones({3}).copy_(ones({4})); }, {"[copy_]", "[4]", "[3]"});
}

TEST(Errors, DimsOutOfRange) {
  expect_error([] { sum(ones({2, 3}), {2}); }, {"[sum]", "dimension out of range", "got 2"});
  expect_error([] { softmax(ones({2}), -2); }, {"[softmax]", "[-1, 0]"});
  expect_error([] { ones({2}).select(0, 2); }, {"[select]", "index 2", "size 2"});
  expect_error([] { ones({2}).transpose(0, 1); }, {"[transpose]"});
  expect_error([] { sum(ones({2, 3}), {1, -1}); }, {"[sum]", "multiple times"});
  expect_error([] { ones({2, 3}).size(3); }, {"[size]"});
}

TEST(Errors, ViewsAndShapes) {
  expect_error([] { ones({6}).view({4, -1}); }, {"[view]", "[4, -1]", "size 6"});
  expect_error([] { ones({6}).view({-1, -1}); }, {"[view]", "one dimension"});
  expect_error([] { ones({2, 3}).expand({4, 3, 4}); }, {"[expand]", "(3)", "(2)", "[4, 3, 4]"});
  expect_error([] { ones({2, 3}).permute({0, 0}); }, {"[permute]", "repeated"});
  expect_error([] { ones({2}).slice(0, 0, 2, 0); }, {"[slice]", "step"});
  expect_error([] { ones({4}).unfold(0, 5, 1); }, {"[unfold]"});
  expect_error([] { empty({-1}); }, {"[empty]", "negative"});
  expect_error([] { zeros({2, -3}); }, {"[full]", "negative"});
}

TEST(Errors, MatmulAndNN) {
  expect_error([] { matmul(ones({2, 3}), ones({4, 5})); }, {"[matmul]", "[2, 3]", "[4, 5]"});
  expect_error([] { mm(ones({2, 3, 4}), ones({4, 5})); }, {"[mm]", "2-D"});
  expect_error([] { bmm(ones({2, 3, 4}), ones({3, 4, 5})); }, {"[bmm]", "batch"});
  expect_error([] { matmul(ones({2, 3}), ones({3, 2}, kFloat64)); }, {"[matmul]", "float32", "float64"});
  expect_error([] { matmul(scalar_tensor(1.0), ones({2})); }, {"[matmul]", "1 dimension"});
  expect_error([] { linear(ones({2, 3}), ones({4, 5})); }, {"[linear]", "[2, 3]", "[4, 5]"});
  expect_error([] { layer_norm(ones({2, 3}), {4}); }, {"[layer_norm]", "[4]", "[2, 3]"});
  expect_error([] { layer_norm(ones({2, 3}), {3}, ones({2})); }, {"[layer_norm]", "[3]", "[2]"});
  expect_error([] { softmax(ones({2}, kInt64), 0); }, {"[softmax]", "int64"});
  expect_error([] { embedding(ones({2}), tensor<int64_t>({0})); }, {"[embedding]", "2-D"});
  expect_error([] { embedding(ones({2, 2}), ones({1})); }, {"[embedding]", "float32"});
}

TEST(Errors, DTypes) {
  expect_error([] { neg(ones({2}, kBool)); }, {"[neg]", "bool"});
  expect_error([] { mean(ones({2}, kInt64)); }, {"[mean]", "int64"});
  expect_error([] { where(ones({2}), ones({2}), ones({2})); }, {"[where]", "bool", "float32"});
  expect_error([] { masked_fill(ones({2}), ones({2}), 0); }, {"[masked_fill]", "bool"});
  expect_error([] { rand({2}, kInt32); }, {"[rand]", "int32"});
  expect_error([] { gelu(ones({2}), "fast"); }, {"[gelu]", "fast"});
  expect_error([] { gather(ones({2}), 0, ones({2})); }, {"[gather]", "float32"});
  expect_error([] { arange(0, 10, 0); }, {"[arange]", "step"});
  expect_error([] { randint(5, 5, {2}); }, {"[randint]", "low=5"});
  expect_error([] { fmod(ones({2}, kInt32), zeros({2}, kInt32)); }, {"[fmod]", "division by zero"});
  expect_error([] { pow(ones({2}, kInt64), full({2}, -1)); }, {"[pow]", "negative"});
  expect_error([] { clamp(ones({2}), std::nullopt, std::nullopt); }, {"[clamp]"});
}

TEST(Errors, IndicesAndJoins) {
  expect_error([] { cat({ones({2, 3}), ones({2, 4})}, 0); }, {"[cat]", "expected size 3", "size 4"});
  expect_error([] { cat({}, 0); }, {"[cat]", "non-empty"});
  expect_error([] { stack({ones({2}), ones({3})}); }, {"[stack]", "[2]", "[3]"});
  expect_error([] { topk(ones({3}), 4); }, {"[topk]", "k (4)"});
  expect_error([] { gather(ones({2, 2}), 1, tensor<int64_t>({0}, {1})); }, {"[gather]", "dims"});
  expect_error([] { chunk(ones({3}), 0); }, {"[chunk]"});
  expect_error([] { split(ones({5}), Shape{2, 2}); }, {"[split]", "sum"});
}

}  // namespace
}  // namespace kiln::test
