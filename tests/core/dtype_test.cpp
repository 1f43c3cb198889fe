// dtype facts, PyTorch's promotion table, and 16-bit float conversions.
#include <cmath>
#include <cstring>

#include "test_util.h"

namespace kiln::test {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(element_size(kBFloat16), 2u);
  EXPECT_EQ(element_size(kInt64), 8u);
  EXPECT_STREQ(dtype_name(kFloat16), "float16");
  EXPECT_TRUE(is_floating(kBFloat16));
  EXPECT_FALSE(is_integral(kBool));
  EXPECT_TRUE(is_integral(kBool, true));
}

TEST(DType, PromotionTableMatchesPyTorch) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kUInt8, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt8, kInt16), kInt16);
  EXPECT_EQ(promote_types(kBool, kUInt8), kUInt8);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBFloat16, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kInt32, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kBool, kBool), kBool);
  for (int a = 0; a < kNumDTypes; ++a)
    for (int b = 0; b < kNumDTypes; ++b)
      EXPECT_EQ(promote_types(DType(a), DType(b)), promote_types(DType(b), DType(a)));
}

TEST(DType, HalfRoundTripsEveryBitPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    Half h;
    h.bits = static_cast<uint16_t>(bits);
    const float f = h;
    if (std::isnan(f)) continue;
    EXPECT_EQ(Half(f).bits, h.bits) << bits;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(Half(1.0f + 1.0f / 2048)), 1.0f);           // tie: to even
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie: to even (up)
  EXPECT_EQ(static_cast<float>(Half(65520.0f)), INFINITY);
  EXPECT_EQ(static_cast<float>(Half(65519.0f)), 65504.0f);
  EXPECT_EQ(static_cast<float>(Half(5.96e-8f)), 5.9604644775390625e-8f);  // smallest subnormal
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(NAN))));
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3.0f / 256)), 1.0f + 2.0f / 128);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(NAN))));
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    BFloat16 b;
    b.bits = static_cast<uint16_t>(bits);
    const float f = b;
    if (std::isnan(f)) continue;
    EXPECT_EQ(BFloat16(f).bits, b.bits);
  }
}

TEST(DType, ScalarKinds) {
  EXPECT_EQ(Scalar(1).dtype(), kInt64);
  EXPECT_EQ(Scalar(1.5).dtype(), kFloat32);
  EXPECT_EQ(Scalar(true).dtype(), kBool);
}

}  // namespace
}  // namespace kiln::test
