// cumprod, cummax, cummin and logcumsumexp against float64 scans written
// here, along every dim of every layout; PyTorch's NaN and tie rules for the
// running extremes; integer and 16-bit inputs; empty and 0-d; gradcheck
// (cumprod through zeros); errors.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Applies scan(line) to every line of x along dim, returning the results in
// x's row-major order.
template <class Scan>
std::vector<double> scan_lines(const Tensor& x, int64_t dim, Scan scan) {
  const std::vector<double> v = values(x.contiguous());
  std::vector<double> out(v.size());
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  const int64_t outer = n * inner == 0 ? 0 : x.numel() / (n * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<double> line;
      for (int64_t r = 0; r < n; ++r) line.push_back(v[static_cast<size_t>((o * n + r) * inner + i)]);
      const std::vector<double> res = scan(line);
      for (int64_t r = 0; r < n; ++r) out[static_cast<size_t>((o * n + r) * inner + i)] = res[static_cast<size_t>(r)];
    }
  return out;
}

std::vector<double> prod_scan(std::vector<double> v) {
  for (size_t i = 1; i < v.size(); ++i) v[i] *= v[i - 1];
  return v;
}
std::vector<double> logsumexp_scan(std::vector<double> v) {
  double s = 0;  // a sum of e^x in long double would do too; the inputs are small
  for (double& x : v) x = std::log(s += std::exp(x));
  return v;
}
// PyTorch's CPU rule: NaN takes over (a later NaN moves the index), ties move it.
template <bool kMax>
std::vector<double> extreme_scan(const std::vector<double>& v, bool want_index) {
  std::vector<double> out(v.size());
  double best = 0;
  size_t at = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 0 || std::isnan(v[i]) || (!std::isnan(best) && (kMax ? v[i] >= best : v[i] <= best))) best = v[i], at = i;
    out[i] = want_index ? static_cast<double>(at) : best;
  }
  return out;
}

TEST(Scans, EveryDimOfEveryLayoutMatchesFloat64) {
  manual_seed(4101);
  for (DType dt : {kFloat64, kFloat32})
    for (Layout layout : all_layouts()) {
      const Tensor x = make_input({3, 4, 5}, layout, dt, 0.8);
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        const std::string what = std::string(dtype_name(dt)) + " " + layout_name(layout) + " dim " + std::to_string(dim);
        const Tol t = tol_for(dt);
        expect_close(cumprod(x, dim), scan_lines(x, d, prod_scan), t.rtol, t.atol, "cumprod " + what);
        expect_close(logcumsumexp(x, dim), scan_lines(x, d, logsumexp_scan), t.rtol, t.atol, "logcumsumexp " + what);
        const auto [mx, mxi] = cummax(x, dim);
        const auto [mn, mni] = cummin(x, dim);
        expect_close(mx, scan_lines(x, d, [](auto v) { return extreme_scan<true>(v, false); }), 0, 0, "cummax " + what);
        expect_close(mxi, scan_lines(x, d, [](auto v) { return extreme_scan<true>(v, true); }), 0, 0, "cummax i " + what);
        expect_close(mn, scan_lines(x, d, [](auto v) { return extreme_scan<false>(v, false); }), 0, 0, "cummin " + what);
        expect_close(mni, scan_lines(x, d, [](auto v) { return extreme_scan<false>(v, true); }), 0, 0, "cummin i " + what);
        EXPECT_EQ(mx.dtype(), dt);
        EXPECT_EQ(mxi.dtype(), kInt64);
      }
    }
}

TEST(Scans, SpecialValuesTiesIntegersAndShapes) {
  // NaN takes over; a later NaN moves the index; ties take the later index.
  const Tensor x = tensor(std::vector<double>{1, 3, 3, NAN, 5, NAN, 2, 0, -kInf, kInf});
  for (bool want_index : {false, true}) {
    const auto xs = values(x);
    const auto [mx, mxi] = cummax(x, 0);
    const auto [mn, mni] = cummin(x, 0);
    expect_close(want_index ? mxi : mx, extreme_scan<true>(xs, want_index), 0, 0, "cummax specials");
    expect_close(want_index ? mni : mn, extreme_scan<false>(xs, want_index), 0, 0, "cummin specials");
  }
  expect_close(std::get<1>(cummax(tensor(std::vector<double>{2, 2, 1, 2}), 0)), {0, 1, 1, 3}, 0, 0, "ties");
  // logcumsumexp: -inf adds nothing, +inf stays, huge values do not overflow, NaN propagates.
  expect_close(logcumsumexp(tensor(std::vector<double>{-kInf, -kInf, 0, kInf, 1}), 0),
               {-kInf, -kInf, 0, kInf, kInf}, 0, 0, "logcumsumexp infinities");
  expect_close(logcumsumexp(tensor<float>({1000, 1000, -1000}), 0),
               {1000, 1000 + std::log(2.0), 1000 + std::log(2.0)}, 1e-7, 0, "logcumsumexp huge");
  EXPECT_TRUE(std::isnan(values(logcumsumexp(tensor(std::vector<double>{0, NAN, 1}), 0))[2]));
  // cumprod: zeros and infinities as products.
  expect_close(cumprod(tensor(std::vector<double>{2, 0, kInf, 3}), 0), {2, 0, NAN, NAN}, 0, 0, "cumprod 0 * inf");
  // Integers and bool give int64 products (wrapping as PyTorch's); extremes keep the dtype.
  const Tensor ints = tensor(std::vector<int32_t>{3, -2, 5, 4});
  EXPECT_EQ(cumprod(ints, 0).dtype(), kInt64);
  expect_close(cumprod(ints, 0), {3, -6, -30, -120}, 0, 0, "cumprod int32");
  EXPECT_EQ(values(cumprod(full({64}, int64_t{2}), 0))[63], 0.0);  // 2^64 wraps to 0
  EXPECT_EQ(cumprod(tensor(std::vector<bool>{true, true, false}), 0).dtype(), kInt64);
  const auto [imx, imxi] = cummax(ints, 0);
  EXPECT_EQ(imx.dtype(), kInt32);
  expect_close(imx, {3, 3, 5, 5}, 0, 0, "cummax int32");
  expect_close(imxi, {0, 0, 2, 2}, 0, 0, "cummax int32 index");
  // 16-bit floats compute in float and round once per element.
  const Tensor h = tensor<float>({0.5f, 1.5f, -2.0f, 0.25f}).to(kBFloat16);
  expect_close(cumprod(h, 0), {0.5, 0.75, -1.5, -0.375}, 0, 0, "cumprod bfloat16");
  EXPECT_EQ(logcumsumexp(h, 0).dtype(), kBFloat16);
  // Empty lines and empty tensors; 0-d inputs are one element.
  EXPECT_EQ(cumprod(empty({3, 0}), 1).sizes(), (Shape{3, 0}));
  EXPECT_EQ(std::get<1>(cummin(empty({0, 2}), 0)).sizes(), (Shape{0, 2}));
  EXPECT_EQ(logcumsumexp(empty({0}), 0).numel(), 0);
  const Tensor s = full({}, 3.0);
  EXPECT_EQ(cumprod(s, 0).dim(), 0);
  EXPECT_EQ(cumprod(s, -1).item<double>(), 3.0);
  EXPECT_EQ(std::get<1>(cummax(s, 0)).item<int64_t>(), 0);
  EXPECT_EQ(logcumsumexp(s, 0).item<double>(), 3.0);
}

TEST(Scans, Gradients) {
  manual_seed(4102);
  auto check = [](const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
    return autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {x});
  };
  const Tensor x = randn({3, 6}, kFloat64).requires_grad_();
  for (int64_t dim : {0, 1}) {
    EXPECT_TRUE(check(x, [&](const Tensor& t) { return cumprod(t, dim); })) << dim;
    EXPECT_TRUE(check(x, [&](const Tensor& t) { return std::get<0>(cummax(t, dim)); })) << dim;
    EXPECT_TRUE(check(x, [&](const Tensor& t) { return std::get<0>(cummin(t, dim)); })) << dim;
    EXPECT_TRUE(check(x, [&](const Tensor& t) { return logcumsumexp(t, dim); })) << dim;
  }
  // cumprod through zeros (one and two in a line): no division by x.
  Tensor z = randn({2, 7}, kFloat64);
  z.select(0, 0).narrow(0, 2, 1).fill_(0.0);
  z.select(0, 1).narrow(0, 1, 1).fill_(0.0);
  z.select(0, 1).narrow(0, 4, 1).fill_(0.0);
  EXPECT_TRUE(check(z.requires_grad_(), [](const Tensor& t) { return cumprod(t, 1); }));
  // logcumsumexp's gradient for large inputs stays finite (log-space formula).
  const Tensor big = (randn({5}, kFloat64) * 3 + 800).requires_grad_();
  logcumsumexp(big, 0).sum().backward();
  for (double v : values(big.grad())) EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{logcumsumexp(in[0], 0)}; },
      {randn({4}, kFloat64).requires_grad_()}));
  // 0-d.
  EXPECT_TRUE(check(full({}, 1.5, kFloat64).requires_grad_(), [](const Tensor& t) { return cumprod(t, 0); }));
}

TEST(Scans, Errors) {
  expect_error([] { cumprod(randn({2, 3}), 2); }, {"[cumprod]", "dimension out of range", "[-2, 1]", "2"});
  expect_error([] { cummax(randn({2}), -2); }, {"[cummax]", "dimension out of range"});
  expect_error([] { cummin(full({}, 1.0), 1); }, {"[cummin]", "dimension out of range", "[-1, 0]"});
  expect_error([] { logcumsumexp(arange(3), 0); }, {"[logcumsumexp]", "floating-point", "int64"});
}

}  // namespace
}  // namespace kiln::test
