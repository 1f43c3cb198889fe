// Printing matches PyTorch's format.
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Print, LooksLikePyTorch) {
  EXPECT_EQ(tensor<float>({1, 2, 3}).to_string(), "tensor([1., 2., 3.])");
  EXPECT_EQ(tensor<float>({1.5f, -2.25f}).to_string(), "tensor([ 1.5000, -2.2500])");
  EXPECT_EQ(arange(4).view({2, 2}).to_string(), "tensor([[0, 1],\n        [2, 3]])");
  EXPECT_EQ(tensor<int32_t>({1, 2}).to_string(), "tensor([1, 2], dtype=int32)");
  EXPECT_EQ(tensor<bool>({true, false}).to_string(), "tensor([ True, False])");
  EXPECT_EQ(scalar_tensor(2.5).to_string(), "tensor(2.5000)");
  EXPECT_EQ(zeros({0}).to_string(), "tensor([])");
  EXPECT_EQ(zeros({0, 3}).to_string(), "tensor([], size=(0, 3))");
  EXPECT_EQ(tensor<float>({1e-5f, 1.0f}).to_string(), "tensor([1.0000e-05, 1.0000e+00])");
}

TEST(Print, SummarisesLargeTensors) {
  const std::string s = arange(2000).to_string();
  EXPECT_EQ(s, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
}

}  // namespace
}  // namespace kiln::test
