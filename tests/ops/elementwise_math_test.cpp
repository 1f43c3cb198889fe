// The elementwise ops of the user's toolbox declared with their backward
// beside them (log2, log10, exp2, trunc, frac, log_sigmoid, selu, copysign,
// remainder, floor_divide) and the composites isnan / isinf / isfinite:
// against float64 definitions on random values in float32 and float64,
// non-contiguous, broadcast and zero-size operands, special values, Python's
// sign rules for // and %, integer inputs, gradients (gradcheck) and errors.
// Float32 at the edges: tests/kernels/special_values_test.cpp.
#include <cfloat>
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

struct Unary {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // the random inputs' range
};

constexpr double kSeluAlpha = 1.6732632423543772848170429916717, kSeluScale = 1.0507009873554804934193349852946;
double log_sigmoid_ref(double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); }

std::vector<Unary> unaries() {
  return {
      {"log2", [](const Tensor& x) { return log2(x); }, [](double x) { return std::log2(x); }, 1e-3, 1e3},
      {"log10", [](const Tensor& x) { return log10(x); }, [](double x) { return std::log10(x); }, 1e-3, 1e3},
      {"exp2", [](const Tensor& x) { return exp2(x); }, [](double x) { return std::exp2(x); }, -60, 60},
      {"trunc", [](const Tensor& x) { return trunc(x); }, [](double x) { return std::trunc(x); }, -50, 50},
      {"frac", [](const Tensor& x) { return frac(x); }, [](double x) { return x - std::trunc(x); }, -50, 50},
      {"log_sigmoid", [](const Tensor& x) { return logsigmoid(x); }, log_sigmoid_ref, -40, 40},
      {"selu", [](const Tensor& x) { return selu(x); },
       [](double x) { return kSeluScale * (x > 0 ? x : kSeluAlpha * std::expm1(x)); }, -20, 20},
      {"tan", [](const Tensor& x) { return tan(x); }, [](double x) { return std::tan(x); }, -20, 20},
      {"asin", [](const Tensor& x) { return asin(x); }, [](double x) { return std::asin(x); }, -1, 1},
      {"acos", [](const Tensor& x) { return acos(x); }, [](double x) { return std::acos(x); }, -1, 1},
      {"atan", [](const Tensor& x) { return atan(x); }, [](double x) { return std::atan(x); }, -1e3, 1e3},
      {"sinh", [](const Tensor& x) { return sinh(x); }, [](double x) { return std::sinh(x); }, -80, 80},
      {"cosh", [](const Tensor& x) { return cosh(x); }, [](double x) { return std::cosh(x); }, -80, 80},
      {"asinh", [](const Tensor& x) { return asinh(x); }, [](double x) { return std::asinh(x); }, -1e4, 1e4},
      {"acosh", [](const Tensor& x) { return acosh(x); }, [](double x) { return std::acosh(x); }, 1, 1e4},
      {"atanh", [](const Tensor& x) { return atanh(x); }, [](double x) { return std::atanh(x); }, -1, 1},
  };
}

Tensor uniform(const Shape& s, double lo, double hi, DType dt) { return rand(s, dt) * (hi - lo) + lo; }

TEST(ElementwiseMath, UnaryOpsMatchTheirDefinitionsInEveryLayout) {
  manual_seed(2811);
  for (const Unary& u : unaries())
    for (DType dt : {kFloat32, kFloat64}) {
      const double tol = dt == kFloat32 ? 6e-7 : 1e-14;  // float32: ~5 ulp
      const Tensor x = uniform({7, 5}, u.lo, u.hi, dt);
      for (const Tensor& in : {x, x.t(), x.narrow(1, 1, 3), empty({0, 3}, dt)}) {
        const Tensor got = u.op(in);
        EXPECT_EQ(got.dtype(), dt) << u.name;
        EXPECT_EQ(got.sizes(), in.sizes()) << u.name;
        std::vector<double> want;
        for (double v : values(in.contiguous())) want.push_back(u.ref(v));
        // frac's result near 0 carries the input's rounding: absolute there.
        expect_close(got, want, tol, std::string(u.name) == "frac" ? tol * 64 : 0,
                     std::string(u.name) + " " + shape_str(in.sizes()));
      }
    }
}

TEST(ElementwiseMath, ExactWherePyTorchIsExact) {
  // Powers of two, integers, and the special values.
  expect_close(log2(tensor<float>({1, 2, 1024, 0.125f, 0x1p-149f, 0x1p127f})), {0, 1, 10, -3, -149, 127}, 0, 0, "log2");
  expect_close(exp2(tensor<float>({0, 1, 10, -3, -149, 127, 128, -151})),
               {1, 2, 1024, 0.125, 0x1p-149, 0x1p127, INFINITY, 0}, 0, 0, "exp2");
  expect_close(log10(tensor<float>({1, 10, 100, 0.1f})), {0, 1, 2, -1}, 1.2e-7, 0, "log10");
  const Tensor s = tensor<float>({0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN});
  expect_close(log2(s), {-INFINITY, -INFINITY, NAN, INFINITY, NAN, NAN}, 0, 0, "log2 specials");
  expect_close(log10(s), {-INFINITY, -INFINITY, NAN, INFINITY, NAN, NAN}, 0, 0, "log10 specials");
  expect_close(exp2(s), {1, 1, 0.5, INFINITY, 0, NAN}, 0, 0, "exp2 specials");
  expect_close(trunc(s), {0, -0.0, -1, INFINITY, -INFINITY, NAN}, 0, 0, "trunc specials");
  expect_close(frac(s), {0, 0, 0, NAN, NAN, NAN}, 0, 0, "frac specials");
  expect_close(logsigmoid(s), {-M_LN2, -M_LN2, log_sigmoid_ref(-1), 0, -INFINITY, NAN}, 1.2e-7, 0, "log_sigmoid");
  expect_close(logsigmoid(tensor<float>({-200.0f, 200.0f})), {-200, 0}, 1.2e-7, 1e-44, "no overflow");
  EXPECT_TRUE(std::signbit(values(trunc(tensor<float>({-0.5f})))[0]));
  // Integers: trunc keeps them, the others promote.
  EXPECT_EQ(trunc(arange(-3, 3)).dtype(), kInt64);
  EXPECT_EQ(values(trunc(arange(-3, 3))), values(arange(-3, 3)));
  EXPECT_EQ(log2(arange(1, 5)).dtype(), kFloat32);
}

// Python's // and % on doubles (the reference): the quotient rounded down.
double py_floordiv(double a, double b) {
  if (b == 0) return a / b;
  const double m = std::fmod(a, b);
  double d = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0)) d -= 1;
  if (d == 0) return std::copysign(0.0, a / b);
  double f = std::floor(d);
  if (d - f > 0.5) f += 1;
  return f;
}
double py_mod(double a, double b) {
  const double m = std::fmod(a, b);
  return m != 0 && (b < 0) != (m < 0) ? m + b : m;
}

TEST(ElementwiseMath, Atan2TakesTheQuadrantFromBothSigns) {
  manual_seed(2814);
  const std::vector<float> a = {1, 1, -1, -1, 0.0f, -0.0f, 0.0f, -0.0f, INFINITY, -INFINITY, 3, NAN, 1e-30f, 1e30f};
  const std::vector<float> b = {1, -1, 1, -1, 1, 1, -1, -1, INFINITY, -INFINITY, 0.0f, 1, 1e30f, 1e-30f};
  std::vector<double> want;
  for (size_t i = 0; i < a.size(); ++i) want.push_back(static_cast<float>(std::atan2(double(a[i]), double(b[i]))));
  expect_close(atan2(tensor<float>(a), tensor<float>(b)), want, 0, 0, "atan2 quadrants and specials");
  EXPECT_TRUE(std::signbit(atan2(tensor<float>({-0.0f}), tensor<float>({1})).item<float>()));
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor y = randn({4, 5}, dt).t(), x = randn({4}, dt);
    const Tensor got = atan2(y, x);
    const std::vector<double> yv = values(y.contiguous()), xv = values(x);
    std::vector<double> w;
    for (size_t i = 0; i < yv.size(); ++i) w.push_back(std::atan2(yv[i], xv[i % 4]));
    expect_close(got, w, dt == kFloat32 ? 6e-8 : 1e-15, 0, "atan2 broadcast");
  }
  EXPECT_EQ(atan2(arange(3), arange(3)).dtype(), kFloat32);  // integers promote, as in PyTorch
}

TEST(ElementwiseMath, ClampWithTensorBounds) {
  manual_seed(2815);
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = randn({5, 4}, dt).t() * 2, lo = randn({4, 1}, dt) - 1, hi = randn({5}, dt) + 1;
    const Tensor got = clamp(x, lo, hi);
    ASSERT_EQ(got.sizes(), (Shape{4, 5}));
    const std::vector<double> xv = values(x.contiguous()), lv = values(lo), hv = values(hi);
    std::vector<double> want, only_lo;
    for (size_t i = 0; i < xv.size(); ++i) {
      want.push_back(std::min(std::max(xv[i], lv[i / 5]), hv[i % 5]));
      only_lo.push_back(std::max(xv[i], lv[i / 5]));
    }
    expect_close(got, want, 0, 0, "clamp tensor bounds");
    expect_close(clamp(x, lo, Tensor()), only_lo, 0, 0, "clamp min only");
    EXPECT_EQ(clamp(empty({0, 5}, dt), lo.narrow(0, 0, 0), hi).sizes(), (Shape{0, 5}));
  }
  // NaN in x stays; min above max gives max (as std::min(std::max(x, min), max)).
  expect_close(clamp(tensor<float>({NAN, 5, -5}), tensor<float>({0, 2, 2}), tensor<float>({1, 1, 1})), {NAN, 1, 1}, 0,
               0, "NaN and crossed bounds");
  EXPECT_EQ(values(clamp(tensor(std::vector<int64_t>{-3, 0, 9}), tensor(std::vector<int64_t>{-1}),
                         tensor(std::vector<int64_t>{4}))),
            (std::vector<double>{-1, 0, 4}));
  const Tensor x = (randn({3, 4}, kFloat64) * 2).requires_grad_(), lo = (randn({4}, kFloat64) - 1).requires_grad_(),
               hi = (randn({3, 1}, kFloat64) + 1.5).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{clamp(in[0], in[1], in[2])}; }, {x, lo, hi}));
  expect_error([] { clamp(randn({2}), Tensor(), Tensor()); }, {"[clamp]", "at least one of 'min' or 'max'"});
  expect_error([] { clamp(randn({2}), randn({3}), Tensor()); }, {"[2]", "[3]"});
  EXPECT_EQ(values(sgn(tensor<float>({-2, 0, 3}))), (std::vector<double>{-1, 0, 1}));
}

TEST(ElementwiseMath, FloorDivideAndRemainderFollowPython) {
  manual_seed(2812);
  // Every sign combination, exact multiples, zero divisors, infinities.
  const std::vector<float> a = {7, -7, 7, -7, 6, -6, 0.5f, -0.5f, 5, 5, INFINITY, 3, -0.0f, 1e7f};
  const std::vector<float> b = {2, 2, -2, -2, 3, 3, 1, 1, 0, -0.0f, 2, INFINITY, 3, -3};
  std::vector<double> fd, rm;
  for (size_t i = 0; i < a.size(); ++i) fd.push_back(py_floordiv(a[i], b[i])), rm.push_back(py_mod(a[i], b[i]));
  expect_close(floor_divide(tensor<float>(a), tensor<float>(b)), fd, 0, 0, "floor_divide");
  expect_close(remainder(tensor<float>(a), tensor<float>(b)), rm, 0, 0, "remainder");
  EXPECT_EQ(values(floor_divide(tensor<float>({7, -7}), tensor<float>({2, 2}))), (std::vector<double>{3, -4}));
  EXPECT_EQ(values(remainder(tensor<float>({-7, 7}), tensor<float>({2, -2}))), (std::vector<double>{1, -1}));
  // Random operands, float32 and float64, broadcast and transposed.
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = randn({4, 6}, dt) * 20, y = randn({6}, dt) * 3, xt = randn({6, 4}, dt).t() * 20;
    for (const auto& [p, q] : {std::pair{x, y}, std::pair{xt, y}, std::pair{x, xt}}) {
      const Tensor pb = p.expand({4, 6}).contiguous(), qb = q.expand({4, 6}).contiguous();
      std::vector<double> wfd, wrm;
      const auto pv = values(pb), qv = values(qb);
      for (size_t i = 0; i < pv.size(); ++i) wfd.push_back(py_floordiv(pv[i], qv[i])), wrm.push_back(py_mod(pv[i], qv[i]));
      expect_close(floor_divide(p, q), wfd, 0, 0, "floor_divide random");
      // The float32 remainder is fmod's (exact) plus b once: one rounding.
      expect_close(remainder(p, q), wrm, dt == kFloat32 ? 6e-8 : 1e-16, 1e-6, "remainder random");
    }
    EXPECT_EQ(floor_divide(empty({0, 2}, dt), randn({2}, dt)).sizes(), Shape({0, 2}));
  }
  // Integers stay integers, with Python's signs; dividing by zero is an error.
  const Tensor ia = tensor<int64_t>({7, -7, 7, -7, INT64_MIN}), ib = tensor<int64_t>({2, 2, -2, -2, -1});
  EXPECT_EQ(floor_divide(ia, ib).dtype(), kInt64);
  EXPECT_EQ(values(floor_divide(ia, ib)), (std::vector<double>{3, -4, -4, 3, static_cast<double>(INT64_MIN)}));
  EXPECT_EQ(values(remainder(ia, ib)), (std::vector<double>{1, 1, -1, -1, 0}));
  EXPECT_EQ(values(remainder(tensor<int32_t>({-7}), tensor<int32_t>({3}))), (std::vector<double>{2}));
  expect_error([] { floor_divide(arange(3), zeros({3}, kInt64)); }, {"[floor_divide]", "division by zero"});
  expect_error([] { remainder(arange(3), zeros({3}, kInt64)); }, {"[remainder]", "division by zero"});
  expect_error([] { remainder(randn({2, 3}), randn({4})); }, {"[remainder]", "[2, 3]", "[4]"});
  expect_error([] { floor_divide(tensor<bool>({true}), tensor<bool>({true})); }, {"[floor_divide]", "bool"});
}

TEST(ElementwiseMath, CopysignTakesTheSignOfTheSecond) {
  const Tensor a = tensor<float>({1, -2, 3, 0, NAN, INFINITY}), b = tensor<float>({-1, 5, -0.0f, -3, -1, -2});
  const std::vector<double> got = values(copysign(a, b));
  const std::vector<double> want = {-1, 2, -3, -0.0, -NAN, -INFINITY};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
    EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]) << i;
  }
  EXPECT_EQ(copysign(arange(3), tensor<int64_t>({-1})).dtype(), kFloat32);  // integers promote
  EXPECT_EQ(copysign(randn({3, 1}, kFloat64), randn({4})).sizes(), Shape({3, 4}));
}

TEST(ElementwiseMath, IsnanIsinfIsfinite) {
  const Tensor x = tensor<float>({0, NAN, INFINITY, -INFINITY, -1e38f, FLT_MIN});
  EXPECT_EQ(isnan(x).dtype(), kBool);
  EXPECT_EQ(values(isnan(x)), (std::vector<double>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(values(isinf(x)), (std::vector<double>{0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(values(isfinite(x)), (std::vector<double>{1, 0, 0, 0, 1, 1}));
  EXPECT_EQ(values(isnan(x.to(kFloat64).view({2, 3}).t())), (std::vector<double>{0, 0, 1, 0, 0, 0}));
  // Integers are never NaN or infinite.
  EXPECT_EQ(values(isnan(arange(3))), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(isinf(arange(3))), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(isfinite(arange(3))), (std::vector<double>{1, 1, 1}));
}

TEST(ElementwiseMath, NanToNum) {
  const Tensor x = tensor<float>({1.5f, NAN, INFINITY, -INFINITY, -0.0f});
  expect_close(nan_to_num(x), {1.5, 0, FLT_MAX, -FLT_MAX, 0}, 0, 0, "defaults");
  expect_close(nan_to_num(x, 2.0, 3.0, -4.0), {1.5, 2, 3, -4, 0}, 0, 0, "given");
  expect_close(nan_to_num(x.to(kFloat64).view({5, 1}).t(), std::nullopt, 7.0), {1.5, 0, 7, -DBL_MAX, 0}, 0, 0, "float64");
  expect_close(nan_to_num(x.to(kFloat16)), {1.5, 0, 65504, -65504, 0}, 0, 0, "float16");
  EXPECT_EQ(nan_to_num(x.to(kFloat16)).dtype(), kFloat16);
  EXPECT_EQ(values(nan_to_num(arange(3))), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(nan_to_num(empty({0, 2})).sizes(), Shape({0, 2}));
  // The gradient flows where x is finite.
  const Tensor l = tensor<double>({1.0, NAN, INFINITY, 2.0}).requires_grad_();
  nan_to_num(l).sum().backward();
  EXPECT_EQ(values(l.grad()), (std::vector<double>{1, 0, 0, 1}));
}

TEST(ElementwiseMath, Gradients) {
  manual_seed(2813);
  auto leaf = [](const Tensor& t) { return t.detach().requires_grad_(); };
  auto check1 = [&](const char* name, Tensor (*f)(const Tensor&), const Tensor& x) {
    EXPECT_TRUE(autograd::gradcheck([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; },
                                   {leaf(x)}))
        << name;
  };
  const Tensor pos = rand({3, 4}, kFloat64) * 5 + 0.1, any = randn({3, 4}, kFloat64) * 3;
  check1("log2", log2, pos);
  check1("log10", log10, pos);
  check1("exp2", exp2, any);
  check1("frac", frac, any);
  check1("log_sigmoid", log_sigmoid, any * 10);
  check1("selu", selu, any);
  const Tensor unit = rand({3, 4}, kFloat64) * 1.8 - 0.9;  // inside (-1, 1)
  check1("tan", tan, unit);
  check1("asin", asin, unit);
  check1("acos", acos, unit);
  check1("atan", atan, any);
  check1("sinh", sinh, any);
  check1("cosh", cosh, any);
  check1("asinh", asinh, any);
  check1("acosh", acosh, pos + 1.0);
  check1("atanh", atanh, unit);
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{atan2(in[0], in[1])}; },
      {leaf(any), leaf(randn({4}, kFloat64) + 3.0)}));
  // trunc's gradient is zero (a step function).
  const Tensor t = leaf(any);
  trunc(t).sum().backward();
  EXPECT_EQ(values(t.grad()), std::vector<double>(12, 0.0));
  // copysign and remainder against both operands, broadcast; b away from 0
  // and a away from multiples of b (where remainder jumps).
  const Tensor b = leaf(rand({4}, kFloat64) + 1.0);
  const Tensor a = leaf(floor(any) + 0.5);
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{copysign(in[0], in[1])}; }, {a, leaf(any)}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{remainder(in[0], in[1])}; }, {leaf(any * 0.01 + 0.5), b}));
  // floor_divide has none (integer-valued), as in PyTorch.
  EXPECT_FALSE(floor_divide(leaf(any), b).requires_grad());
}

}  // namespace
}  // namespace kiln::test
