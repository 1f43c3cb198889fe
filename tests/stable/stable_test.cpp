// The header-only stable C++ API (kiln/stable/tensor.h) as an extension uses
// it: this file includes nothing else from kiln, so everything goes through
// the C ABI. Values are checked against plain arithmetic on the same data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kiln/stable/tensor.h"

namespace kiln::stable {
namespace {

// A (rows, cols) float32 tensor holding 0.5 * i - 1 at flat index i.
Tensor ramp(int64_t rows, int64_t cols) {
  Tensor t = call("empty", std::vector<int64_t>{rows, cols}, kw("dtype", scalar_type<float>()));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = 0.5f * static_cast<float>(i) - 1.0f;
  return t;
}

TEST(Stable, TensorMetadataThroughTheCAbi) {
  const Tensor t = ramp(3, 4);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(t.element_size(), 4);
  EXPECT_EQ(t.scalar_type(), dtype_code<float>());
  EXPECT_TRUE(t.is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  const Tensor tt = transpose(t, 0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.strides(), (std::vector<int64_t>{1, 4}));
  const Tensor n = narrow(t, 1, 1, 2);
  EXPECT_EQ(n.storage_offset(), 1);
  EXPECT_FALSE(Tensor().defined());
  Tensor copy = t;  // a second reference to the same tensor
  EXPECT_EQ(copy.data_ptr(), t.data_ptr());
}

TEST(Stable, AccessorsReadThroughStrides) {
  const Tensor t = ramp(3, 4);
  const Tensor tt = transpose(t, 0, 1);  // (4, 3), strides (1, 4)
  Tensor::Layout layout;
  const auto a = tt.accessor<float, 2>(layout);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(a[i][j], t.data_ptr<float>()[j * 4 + i]);
  EXPECT_EQ(a.size(0), 4);
  Tensor::Layout other;
  EXPECT_THROW((void)(t.accessor<float, 3>(other)), Error);
  EXPECT_THROW((void)(t.accessor<double, 2>(other)), Error);
}

TEST(Stable, OpsByNameGiveTheArithmeticsResults) {
  const Tensor a = ramp(3, 4), b = ramp(4, 2);
  const Tensor c = matmul(a, b);
  ASSERT_EQ(c.sizes(), (std::vector<int64_t>{3, 2}));
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      double want = 0;
      for (int64_t k = 0; k < 4; ++k) want += double(pa[i * 4 + k]) * pb[k * 2 + j];
      EXPECT_NEAR(c.data_ptr<float>()[i * 2 + j], want, 1e-5 * (1 + std::fabs(want)));
    }
  const Tensor s = call("add", a, a, kw("alpha", 2.0));
  EXPECT_FLOAT_EQ(s.data_ptr<float>()[5], 3 * pa[5]);
  const Tensor m = amax(a, {1});
  EXPECT_FLOAT_EQ(m.data_ptr<float>()[2], pa[11]);
  EXPECT_FLOAT_EQ(call("sum", a).item<float>(), 21.0f);  // 0.5 (0 + ... + 11) - 12
  EXPECT_EQ(call("argmax", a).item<int64_t>(), 11);
  const std::vector<Tensor> parts = call<std::vector<Tensor>>("split", a, int64_t{3}, int64_t{1});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].sizes(), (std::vector<int64_t>{3, 1}));
  const Tensor z = new_zeros(a, {2, 2});
  EXPECT_EQ(z.scalar_type(), dtype_code<float>());
  EXPECT_EQ(z.data_ptr<float>()[3], 0.0f);
  Tensor f = full({2}, 1.5, scalar_type<double>());
  EXPECT_EQ(f.data_ptr<double>()[1], 1.5);
  fill_(f, -2.0);
  EXPECT_EQ(f.data_ptr<double>()[0], -2.0);
  zero_(f);
  EXPECT_EQ(f.data_ptr<double>()[0], 0.0);
  Tensor dst = empty_like(a);
  copy_(dst, a);
  EXPECT_EQ(std::memcmp(dst.data_ptr<float>(), pa, 12 * sizeof(float)), 0);
  const Tensor cl = clone(transpose(a, 0, 1));
  EXPECT_TRUE(cl.is_contiguous());
  EXPECT_EQ(flatten(a).sizes(), (std::vector<int64_t>{12}));
  const Tensor padded = pad(a, {1, 2}, "constant", 7.0);
  EXPECT_EQ(padded.sizes(), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(padded.data_ptr<float>()[0], 7.0f);
  EXPECT_EQ(padded.data_ptr<float>()[1], pa[0]);
  EXPECT_EQ(pad(a, {2, 0}, "circular").data_ptr<float>()[0], pa[2]);
  EXPECT_EQ(call("sum", arange(5)).item<int64_t>(), 10);
}

TEST(Stable, DeviceGuardSetsWhereFactoriesAllocateAndStreamsAreTyped) {
  {
    DeviceGuard meta(meta_device());
    const Tensor m = call("zeros", std::vector<int64_t>{2, 3});
    EXPECT_EQ(m.device_type(), kiln_device_type_meta());
    EXPECT_EQ(m.data_ptr(), nullptr);  // no data on meta
  }
  EXPECT_TRUE(call("zeros", std::vector<int64_t>{2}).is_cpu());
  const Stream s = current_stream(cpu_device());
  EXPECT_EQ(s.id(), 0);
  EXPECT_EQ(s.device().type, kiln_device_type_cpu());
  EXPECT_THROW(current_stream(Device{99}), Error);
}

TEST(Stable, ParallelForCoversTheRangeOnKilnsThreads) {
  EXPECT_GE(num_threads(), 1);
  std::vector<int> hits(1000, 0);
  parallel_for(0, 1000, 7, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (int h : hits) ASSERT_EQ(h, 1);
  try {
    parallel_for(0, 100, 1, [](int64_t lo, int64_t hi) {
      if (lo <= 42 && 42 < hi) throw std::runtime_error("the chunk of 42 failed");
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the chunk of 42 failed"), std::string::npos) << e.what();
  }
}

TEST(Stable, FailuresArriveAsExceptionsNamingWhatWentWrong) {
  const Tensor a = ramp(2, 3);
  try {
    (void)a.data_ptr<double>();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("dtype"), std::string::npos);
  }
  try {
    (void)call("no_such_op", a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_UNKNOWN_OP);
    EXPECT_NE(std::string(e.what()).find("no_such_op"), std::string::npos);
  }
  try {
    (void)matmul(a, a);  // (2, 3) @ (2, 3): kiln's own check, with its message
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_RUNTIME);
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
  try {
    (void)Tensor().numel();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_ARGUMENT);
  }
  EXPECT_THROW((void)a.item<float>(), Error);  // 6 elements
}

}  // namespace
}  // namespace kiln::stable
