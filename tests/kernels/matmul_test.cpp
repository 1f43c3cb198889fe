// matmul / mm / bmm / linear against a float64 triple loop, with BLAS
// transpose flags, packed (unBLASable) layouts, batch broadcasting and
// 1-D operands.
#include "test_util.h"

namespace kiln::test {
namespace {

// Reference for (..., M, K) x (..., K, N) with broadcast batch dims.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, const Shape& out) {
  const int64_t nd = static_cast<int64_t>(out.size());
  const int64_t M = out[nd - 2], N = out[nd - 1], K = a.size(-1);
  std::vector<double> r;
  for (int64_t i = 0; i < shape_numel(out); ++i) {
    auto idx = unravel(i, out);
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) {
      auto ia = idx, ib = idx;
      ia[nd - 1] = k;
      ib[nd - 2] = k;
      acc += at_broadcast(a, ia) * at_broadcast(b, ib);
    }
    r.push_back(acc);
    (void)M, (void)N;
  }
  return r;
}

Tensor layout2d(int64_t r, int64_t c, int mode, DType dt) {
  switch (mode) {
    case 0: return randn({r, c}, kFloat64).to(dt);                                 // row-major
    case 1: return randn({c, r}, kFloat64).to(dt).t();                             // transposed: BLAS flag
    default: return randn({r, 2 * c}, kFloat64).to(dt).slice(1, 0, std::nullopt, 2);  // step 2: packed
  }
}

TEST(Matmul, TwoDimensionalLayoutsAndDTypes) {
  manual_seed(7);
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (int ma = 0; ma < 3; ++ma)
      for (int mb = 0; mb < 3; ++mb) {
        Tensor a = layout2d(17, 33, ma, dt), b = layout2d(33, 9, mb, dt);
        Tensor y = matmul(a, b);
        ASSERT_EQ(y.sizes(), Shape({17, 9}));
        ASSERT_EQ(y.dtype(), dt);
        const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : dt == kFloat16 ? 4e-3 : 3e-2;
        expect_close(y, ref_matmul(a, b, {17, 9}), tol, tol * 6, std::string("mm ") + dtype_name(dt));
      }
  }
}

TEST(Matmul, BatchBroadcastAndOneDimensionalOperands) {
  manual_seed(8);
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{2, 1, 4, 5}, {3, 5, 6}}, {{3, 4, 5}, {5, 6}}, {{4, 5}, {2, 5, 6}}, {{2, 3, 4, 5}, {2, 3, 5, 2}},
      {{5}, {5, 3}},             {{4, 5}, {5}},        {{5}, {5}},         {{2, 4, 5}, {5}},
      {{5}, {3, 5, 2}},          {{0, 4, 5}, {5, 3}},  {{4, 0}, {0, 3}},
  };
  for (const auto& [sa, sb] : pairs) {
    Tensor a = randn(sa), b = randn(sb);
    Tensor y = matmul(a, b);
    // Reference through explicit unsqueeze of 1-D operands.
    Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a, b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Shape ba(a2.sizes().begin(), a2.sizes().end() - 2), bb(b2.sizes().begin(), b2.sizes().end() - 2);
    Shape out = broadcast_shapes(ba, bb);
    out.push_back(a2.size(-2));
    out.push_back(b2.size(-1));
    Shape final_shape = out;
    if (a.dim() == 1) final_shape.erase(final_shape.end() - 2);
    if (b.dim() == 1) final_shape.erase(final_shape.end() - 1);
    ASSERT_EQ(y.sizes(), final_shape);
    expect_close(y, ref_matmul(a2, b2, out), 1e-5, 1e-5, "batched matmul");
  }
}

TEST(Matmul, BatchedTransposedAndLinearFold) {
  manual_seed(9);
  Tensor a = randn({3, 7, 4}).transpose(1, 2);  // (3, 4, 7), transposed matrices
  Tensor b = randn({3, 7, 5});
  expect_close(bmm(a, b), ref_matmul(a, b, {3, 4, 5}), 1e-5, 1e-5, "bmm transposed");
  Tensor x = randn({2, 6, 8}), w = randn({5, 8}), bias = randn({5});
  Tensor y = linear(x, w, bias);
  auto r = ref_matmul(x, w.t(), {2, 6, 5});
  const auto bv = values(bias);
  for (size_t i = 0; i < r.size(); ++i) r[i] += bv[i % 5];
  expect_close(y, r, 1e-5, 1e-5, "linear");
}

// A long inner dimension against C's sides is split along K across the
// threads (weight gradients): every BLAS layout, an uneven thread count, a
// bias (the product accumulates into C) and the batch-folded linear.
TEST(Matmul, LongInnerDimensionsSplitAcrossThreads) {
  manual_seed(10);
  const int threads = get_num_threads();
  for (int n : {2, 3}) {
    set_num_threads(n);
    for (DType dt : {kFloat32, kFloat64})
      for (int ma = 0; ma < 3; ++ma)
        for (int mb = 0; mb < 2; ++mb) {
          Tensor a = layout2d(17, 1001, ma, dt), b = layout2d(1001, 23, mb, dt);
          const double tol = dt == kFloat64 ? 1e-12 : 1e-4;
          expect_close(matmul(a, b), ref_matmul(a, b, {17, 23}), tol, tol, "K split " + std::to_string(n));
        }
    Tensor x = randn({2, 9, 1100}), w = randn({15, 1100}), bias = randn({15});
    auto r = ref_matmul(x, w.t(), {2, 9, 15});
    const auto bv = values(bias);
    for (size_t i = 0; i < r.size(); ++i) r[i] += bv[i % 15];
    expect_close(linear(x, w, bias), r, 1e-4, 1e-4, "linear with K split");
  }
  set_num_threads(threads);
}

TEST(Matmul, IntegersAndOutForm) {
  Tensor a = tensor<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor<int64_t>({1, 0, 0, 1, 1, 1}, {3, 2});
  expect_close(matmul(a, b), {4, 5, 10, 11}, 0, 0, "int matmul");
  Tensor out = empty({2, 2}, kInt64);
  matmul_out(out, a, b);
  expect_close(out, {4, 5, 10, 11}, 0, 0, "matmul_out");
  Tensor ff = zeros({4, 2}).slice(0, 0, std::nullopt, 2);  // a non-contiguous out= tensor
  matmul_out(ff, a.to(kFloat32), b.to(kFloat32));
  expect_close(ff, {4, 5, 10, 11}, 0, 0, "matmul_out into a strided tensor");
}

// bfloat16 products: on Arm CPUs with FEAT_BF16 (the arm64 suite's SVE runs
// on qemu's max CPU) through BFMMLA (src/kernels/cpu/bf16_gemm.cpp), else
// widened for the float32 GEMM; either way exact products summed in
// float32, then rounded to bf16. Against float64 on the same bf16 values,
// within the final rounding (2^-9, here 2^-8) and float32 sums
// (1e-5 of sum |a b|): sizes around the 8 x 8 tiles, K not a multiple of
// the 4-groups, transposed and strided operands, a broadcast batch, zero
// sizes, and inf / NaN entries (NaN where the reference has one, inf
// with its sign).
TEST(Matmul, BFloat16ProductsMatchFloat64) {
  manual_seed(11);
  auto check = [](const Tensor& a, const Tensor& b, const std::string& what) {
    const Tensor y = matmul(a, b);
    ASSERT_EQ(y.dtype(), kBFloat16) << what;
    const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a, b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Shape ba(a2.sizes().begin(), a2.sizes().end() - 2), bb(b2.sizes().begin(), b2.sizes().end() - 2);
    Shape out = broadcast_shapes(ba, bb);
    out.push_back(a2.size(-2));
    out.push_back(b2.size(-1));
    const auto want = ref_matmul(a2, b2, out);
    const auto scale = ref_matmul(abs(a2.to(kFloat64)), abs(b2.to(kFloat64)), out);
    const auto got = values(y.reshape(out));
    ASSERT_EQ(got.size(), want.size()) << what;
    int misses = 0;
    for (size_t i = 0; i < got.size() && misses < 5; ++i)
      if (!close(got[i], want[i], std::ldexp(1.0, -8), 1e-5 * scale[i] + 1e-30)) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
        ++misses;
      }
  };
  for (const auto& [M, K, N] : {std::tuple{1, 1, 1}, std::tuple{1, 5, 3}, std::tuple{7, 13, 5}, std::tuple{8, 16, 8},
                                std::tuple{9, 33, 17}, std::tuple{16, 64, 24}, std::tuple{19, 100, 37},
                                std::tuple{3, 0, 4}, std::tuple{0, 6, 5}, std::tuple{4, 6, 0}})
    for (int ma = 0; ma < 3; ++ma)
      for (int mb = 0; mb < 3; ++mb)
        check(layout2d(M, K, ma, kBFloat16), layout2d(K, N, mb, kBFloat16),
              "bf16 " + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) + " layouts " +
                  std::to_string(ma) + std::to_string(mb));
  check(randn({2, 1, 5, 9}).to(kBFloat16), randn({3, 9, 6}).to(kBFloat16), "bf16 broadcast batch");
  check(randn({9}).to(kBFloat16), randn({4, 9, 3}).to(kBFloat16), "bf16 vector times batch");
  Tensor a = randn({6, 11}), b = randn({11, 10});
  a.data_ptr<float>()[3] = std::numeric_limits<float>::infinity();
  a.data_ptr<float>()[14] = -std::numeric_limits<float>::infinity();
  a.data_ptr<float>()[40] = std::numeric_limits<float>::quiet_NaN();
  b.data_ptr<float>()[25] = std::numeric_limits<float>::infinity();
  b.data_ptr<float>()[51] = -0.0f;
  check(a.to(kBFloat16), b.to(kBFloat16), "bf16 special values");
}

}  // namespace
}  // namespace kiln::test
