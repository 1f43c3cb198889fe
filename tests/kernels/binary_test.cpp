// Binary ops, comparisons and where against float64 references, over
// broadcasting shape pairs, layouts and dtypes.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  bool int_ok = true;
  bool positive_rhs = false;
};

std::vector<BinaryCase> cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2); },
       [](double a, double b) { return a + 2 * b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; },
       false, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); },
       [](double a, double b) { return std::pow(std::fabs(a), b); }, false},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); },
       [](double a, double b) { return std::fmod(a, b); }, false, true},
      {"gelu_backward", [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x); },
       [](double g, double x) {
         return g * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI));
       }, false},
      {"gelu_tanh_backward", [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x, "tanh"); },
       [](double g, double x) {
         const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
         return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x));
       }, false},
      {"threshold_backward", [](const Tensor& g, const Tensor& x) { return threshold_backward(g, x, 0.25); },
       [](double g, double x) { return x <= 0.25 ? 0.0 : g; }, false},
  };
}

// (a shape, b shape) pairs: equal, trailing broadcast, both broadcast, 0-dim, zero-size.
const std::vector<std::pair<Shape, Shape>> kPairs = {
    {{5, 37}, {5, 37}}, {{5, 37}, {37}}, {{5, 1}, {1, 37}}, {{}, {4, 9}}, {{4, 9}, {}},
    {{0, 7}, {7}},      {{2, 3, 17}, {3, 1}}, {{}, {}},
};

TEST(Binary, FloatDTypesAllLayoutsMatchFloat64Reference) {
  manual_seed(2);
  for (const auto& c : cases()) {
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (const auto& [sa, sb] : kPairs) {
        for (Layout la : all_layouts()) {
          Tensor a = make_input(sa, la, dt, 2.0);
          Tensor b = make_input(sb, la == Layout::Transposed ? Layout::Strided : Layout::Contiguous, dt, 2.0);
          if (c.positive_rhs) b = (abs(b) + 0.5).to(dt);
          Tensor y = c.op(a, b);
          const Shape out = broadcast_shapes(sa, sb);
          ASSERT_EQ(y.sizes(), out) << c.name;
          ASSERT_EQ(y.dtype(), dt) << c.name;
          std::vector<double> want;
          for (int64_t i = 0; i < shape_numel(out); ++i) {
            const auto idx = unravel(i, out);
            want.push_back(round_to(dt, c.ref(at_broadcast(a, idx), at_broadcast(b, idx))));
          }
          const Tol t = tol_for(dt);
          expect_close(y, want, t.rtol, t.atol, std::string(c.name) + " " + dtype_name(dt) + " " + layout_name(la));
        }
      }
    }
  }
}

// PyTorch's select, not a product with the mask: at self <= threshold the
// result is 0 even for an inf or NaN grad; a NaN self passes grad through.
// Every float32 kernel (the SIMD loop and the scalar tail) agrees.
TEST(Binary, ThresholdBackwardSelects) {
  std::vector<double> gv, xv, want;
  for (int i = 0; i < 5; ++i) {
    gv.insert(gv.end(), {INFINITY, NAN, -2.0, 3.0, NAN, 5.0, -0.0});
    xv.insert(xv.end(), {-1.0, 0.0, 0.0, 0.5, 2.0, NAN, 1.0});
    want.insert(want.end(), {0.0, 0.0, 0.0, 3.0, NAN, 5.0, -0.0});
  }
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    const Tensor g = tensor(gv).to(dt), x = tensor(xv).to(dt);
    expect_close(threshold_backward(g, x, 0.0), want, 0, 0, std::string("threshold_backward ") + dtype_name(dt));
  }
  expect_error([] { threshold_backward(ones({2}, kInt64), ones({2}), 0.0); },
               {"threshold_backward", "floating point", "int64"});
  // relu's gradient is this select on its output.
  const Tensor x = tensor<double>({-1.0, 0.0, 2.0}).requires_grad_();
  relu(x).backward(tensor<double>({INFINITY, 7.0, 3.0}));
  expect_close(x.grad(), {0.0, 0.0, 3.0}, 0, 0, "relu gradient");
}

TEST(Binary, IntegerDTypes) {
  for (const auto& c : cases()) {
    if (!c.int_ok) continue;
    for (DType dt : {kInt32, kInt64, kInt16, kUInt8}) {
      Tensor a = randint(0, 50, {3, 11}, dt);
      Tensor b = randint(1, 9, {11}, dt);
      Tensor y = c.op(a, b);
      ASSERT_EQ(y.dtype(), dt) << c.name;
      std::vector<double> want;
      for (int64_t i = 0; i < 33; ++i) {
        const auto idx = unravel(i, {3, 11});
        double r = c.ref(at_broadcast(a, idx), at_broadcast(b, idx));
        if (dt == kUInt8) r = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(r)));
        want.push_back(r);
      }
      expect_close(y, want, 0, 0, std::string(c.name) + " " + dtype_name(dt));
    }
  }
}

TEST(Binary, TrueDivisionAndPowOfIntegers) {
  Tensor a = tensor<int64_t>({7, -7, 9});
  Tensor b = tensor<int64_t>({2, 2, 3});
  Tensor q = div(a, b);
  EXPECT_EQ(q.dtype(), kFloat32);
  expect_close(q, {3.5, -3.5, 3}, 0, 0, "int / int");
  expect_close(pow(a, b), {49, 49, 729}, 0, 0, "int pow");
  expect_close(fmod(a, b), {1, -1, 0}, 0, 0, "int fmod keeps the dividend's sign");
}

TEST(Binary, TypePromotionWithScalarsAndZeroDim) {
  Tensor i32 = tensor<int32_t>({1, 2});
  EXPECT_EQ((i32 + 1).dtype(), kInt32);
  EXPECT_EQ((i32 + 1.5).dtype(), kFloat32);
  EXPECT_EQ((i32 * tensor<double>({2.0})).dtype(), kFloat64);
  EXPECT_EQ((i32 + scalar_tensor(1, kInt64)).dtype(), kInt32);    // 0-dim of the same category
  EXPECT_EQ((i32 + scalar_tensor(1.0, kFloat64)).dtype(), kFloat64);  // 0-dim of a higher category
  Tensor f16 = ones({2}, kFloat16);
  EXPECT_EQ((f16 + 2.5).dtype(), kFloat16);
  EXPECT_EQ((f16 + ones({2}, kBFloat16)).dtype(), kFloat32);
  EXPECT_EQ((ones({2}, kUInt8) + ones({2}, kInt8)).dtype(), kInt16);
  EXPECT_EQ((ones({2}, kBool) + 1).dtype(), kInt64);
}

// A C++ number enters an op converted to the op's dtype the way _to_copy
// converts (Tensor::to fills a new number tensor instead of dispatching a copy).
TEST(Binary, NumbersConvertToTheOperandsDtypeAsACopyWould) {
  for (double v : {0.1, -2.75, 1e-3, 3.0, 65504.0, 1e300}) {
    const Tensor w = wrapped_scalar(v);
    for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      const Tensor n = w.to(dt), c = scalar_tensor(v, kFloat64).to(dt);
      ASSERT_EQ(n.dtype(), dt);
      EXPECT_EQ(n.dim(), 0);
      EXPECT_EQ(n.to(kFloat64).item<double>(), c.to(kFloat64).item<double>()) << v << " to " << dt;
    }
  }
  const Tensor i = wrapped_scalar(int64_t{-7});
  EXPECT_EQ(i.to(kInt32).item<int64_t>(), -7);
  EXPECT_EQ(i.to(kInt8).item<int64_t>(), -7);
  EXPECT_EQ(i.to(kFloat32).item<double>(), -7.0);
  EXPECT_EQ(wrapped_scalar(true).to(kFloat32).item<double>(), 1.0);
  // In ops: the number's conversion rounds once, as before.
  const Tensor bf = tensor<float>({1.0f, 3.0f}).to(kBFloat16);
  expect_close((bf * 0.1).to(kFloat64), {0.10009765625, 0.30078125}, 0, 0, "bf16 * 0.1 uses bf16(0.1)");
  Tensor acc = tensor<int32_t>({1, 2});
  acc.add_(wrapped_scalar(int64_t{40}));
  expect_close(acc.to(kFloat64), {41, 42}, 0, 0, "int add_ of an int number");
  expect_close((tensor<int32_t>({1, 2}) * 2.5).to(kFloat64), {2.5, 5}, 0, 0, "int * float number");
}

TEST(Binary, ComparisonsAndLogicalOps) {
  manual_seed(3);
  Tensor a = randint(0, 4, {6, 7}, kInt32);
  Tensor b = randint(0, 4, {7}, kInt64);
  const std::vector<std::pair<std::function<Tensor(const Tensor&, const Tensor&)>, std::function<bool(double, double)>>>
      ops = {{[](auto& x, auto& y) { return eq(x, y); }, [](double x, double y) { return x == y; }},
             {[](auto& x, auto& y) { return ne(x, y); }, [](double x, double y) { return x != y; }},
             {[](auto& x, auto& y) { return lt(x, y); }, [](double x, double y) { return x < y; }},
             {[](auto& x, auto& y) { return le(x, y); }, [](double x, double y) { return x <= y; }},
             {[](auto& x, auto& y) { return gt(x, y); }, [](double x, double y) { return x > y; }},
             {[](auto& x, auto& y) { return ge(x, y); }, [](double x, double y) { return x >= y; }},
             {[](auto& x, auto& y) { return logical_and(x, y); }, [](double x, double y) { return x && y; }},
             {[](auto& x, auto& y) { return logical_or(x, y); }, [](double x, double y) { return x || y; }},
             {[](auto& x, auto& y) { return logical_xor(x, y); }, [](double x, double y) { return bool(x) != bool(y); }}};
  for (const auto& [op, ref] : ops) {
    for (const Tensor& lhs : {a, a.to(kFloat32).t().contiguous().t(), a.to(kBFloat16)}) {
      Tensor y = op(lhs, b);
      ASSERT_EQ(y.dtype(), kBool);
      std::vector<double> want;
      for (int64_t i = 0; i < 42; ++i) {
        const auto idx = unravel(i, {6, 7});
        want.push_back(ref(at_broadcast(lhs, idx), at_broadcast(b, idx)));
      }
      expect_close(y, want, 0, 0, "comparison");
    }
  }
  expect_close(logical_not(tensor<float>({0, 2, -1})), {1, 0, 0}, 0, 0, "logical_not");
}

TEST(Binary, WhereMaskedFillAndLerp) {
  Tensor cond = tensor<bool>({true, false, true});
  Tensor a = tensor<float>({1, 2, 3});
  Tensor b = tensor<int64_t>({10}, {1});
  Tensor w = where(cond, a, b);
  EXPECT_EQ(w.dtype(), kFloat32);
  expect_close(w, {1, 10, 3}, 0, 0, "where");
  Tensor m = masked_fill(ones({2, 3}), tensor<bool>({false, true, false}), -5);
  expect_close(m, {1, -5, 1, 1, -5, 1}, 0, 0, "masked_fill broadcasts the mask");
  expect_close(lerp(a, tensor<float>({3, 2, 1}), 0.25), {1.5, 2, 2.5}, 1e-7, 0, "lerp");
}

TEST(Binary, InPlaceAndOutForms) {
  Tensor a = tensor<float>({1, 2, 3, 4}, {2, 2});
  a.add_(tensor<float>({10, 20}));
  expect_close(a, {11, 22, 13, 24}, 0, 0, "add_ broadcasts the other operand");
  a.mul_(2).sub_(ones({2, 2}), 3);
  expect_close(a, {19, 41, 23, 45}, 0, 0, "mul_ then sub_ with alpha");
  Tensor out = empty({2, 2}, kFloat64);
  add_out(out, a, a);
  EXPECT_EQ(out.dtype(), kFloat64);
  expect_close(out, {38, 82, 46, 90}, 0, 0, "add_out into float64");
  // Aliasing: a += a.t() must read a before writing it.
  Tensor s = tensor<float>({1, 2, 3, 4}, {2, 2});
  s.add_(s.t());
  expect_close(s, {2, 5, 5, 8}, 0, 0, "add_ with an overlapping transposed operand");
  Tensor i = tensor<int64_t>({1, 2});
  expect_error([&] { i.div_(2); }, {"[div]", "float32", "int64"});
}

}  // namespace
}  // namespace kiln::test
