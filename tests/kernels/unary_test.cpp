// Unary ops against float64 references, every layout and float dtype, plus
// integer dtypes where the op keeps them.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  bool positive_domain = false;
  bool keeps_int = false;
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, false, true},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, false, true},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double x) { return double((0 < x) - (x < 0)); }, false, true},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, true},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, true},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, false, true},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }},
      {"floor", [](const Tensor& x) { return floor(x); }, [](double x) { return std::floor(x); }, false, true},
      {"ceil", [](const Tensor& x) { return ceil(x); }, [](double x) { return std::ceil(x); }, false, true},
      {"round", [](const Tensor& x) { return round(x); }, [](double x) { return std::nearbyint(x); }, false, true},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, false, true},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.75); },
       [](double x) { return std::min(std::max(x, -0.5), 0.75); }, false, false},
  };
}

// Sizes chosen to leave SIMD tails: 37 is not a multiple of any vector width.
const std::vector<Shape> kShapes = {{37}, {5, 37}, {3, 4, 9}, {}, {0, 5}, {2, 1, 3}};

TEST(Unary, FloatDTypesAllLayoutsMatchFloat64Reference) {
  manual_seed(1);
  for (const auto& c : cases()) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      for (const Shape& shape : kShapes) {
        for (Layout l : all_layouts()) {
          Tensor x = make_input(shape, l, dt, 3.0);
          if (c.positive_domain) x = (abs(x) + 0.05).to(dt);
          Tensor y = c.op(x);
          ASSERT_EQ(y.dtype(), dt) << c.name;
          ASSERT_EQ(y.sizes(), shape) << c.name;
          std::vector<double> want;
          for (double v : values(x)) want.push_back(round_to(dt, c.ref(v)));
          // A 16-bit result is the reference rounded to that type: compare with its ulp.
          const Tol t = tol_for(dt);
          expect_close(y, want, t.rtol, t.atol,
                       std::string(c.name) + " " + dtype_name(dt) + " " + layout_name(l));
        }
      }
    }
  }
}

TEST(Unary, IntegerDTypesKeepTheirType) {
  for (const auto& c : cases()) {
    if (!c.keeps_int) continue;
    for (DType dt : {kInt32, kInt64, kInt8, kInt16}) {
      Tensor x = randint(-11, 11, {4, 9}, dt);  // squares fit in int8
      Tensor y = c.op(x);
      ASSERT_EQ(y.dtype(), dt) << c.name;
      std::vector<double> want;
      for (double v : values(x)) want.push_back(c.ref(v));
      expect_close(y, want, 0, 0, std::string(c.name) + " " + dtype_name(dt));
    }
  }
}

TEST(Unary, IntegerInputOfFloatOpPromotesToFloat32) {
  Tensor x = tensor<int32_t>({1, 2, 3});
  Tensor y = exp(x);
  EXPECT_EQ(y.dtype(), kFloat32);
  expect_close(y, {std::exp(1.0), std::exp(2.0), std::exp(3.0)}, 1e-6, 0, "exp(int32)");
}

TEST(Unary, ClampWithOneBoundAndIntegers) {
  Tensor x = tensor<int64_t>({-5, 0, 7});
  expect_close(clamp(x, std::nullopt, 3), {-5, 0, 3}, 0, 0, "clamp max only");
  expect_close(clamp(x, -1, std::nullopt), {-1, 0, 7}, 0, 0, "clamp min only");
  EXPECT_EQ(clamp(x, 0.5, std::nullopt).dtype(), kFloat32);
}

TEST(Unary, SpecialValues) {
  const double inf = INFINITY;
  Tensor x = tensor<float>({0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -88.0f, 88.0f});
  expect_close(exp(x), {1, 1, inf, 0, NAN, 1, std::exp(-88.0), std::exp(88.0)}, 1e-5, 1e-30, "exp special");
  expect_close(relu(x), {0, 0, inf, 0, NAN, 1e-30, 0, 88}, 1e-6, 0, "relu special");
  // relu(-0) is +0 on every target (the scalar kernel's and the compiled loops' answer), and NaN stays NaN
  // at every vector position.
  for (int64_t n : {1, 7, 33}) {
    const auto r = values(relu(full({n}, -0.0))), q = values(relu(full({n}, NAN)));
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_FALSE(std::signbit(r[i])) << "relu(-0) at " << i << " of " << n;
      EXPECT_TRUE(std::isnan(q[i])) << "relu(NaN) at " << i << " of " << n;
    }
  }
  expect_close(sigmoid(x), {0.5, 0.5, 1, 0, NAN, 0.5, 1 / (1 + std::exp(88.0)), 1}, 1e-5, 1e-37, "sigmoid special");
  expect_close(erf(tensor<float>({1e-8f, -1e-8f, 0.49f, 0.51f, 4.0f})),
               {std::erf(1e-8), std::erf(-1e-8), std::erf(0.49), std::erf(0.51), std::erf(4.0)}, 1e-6, 0,
               "erf near the series switch");
}

TEST(Unary, RoundIsHalfToEven) {
  expect_close(round(tensor<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f})), {0, 2, 2, -0, -2}, 0, 0, "round");
}

TEST(Unary, InPlaceBumpsVersionAndWritesThroughViews) {
  Tensor base = tensor<float>({-1, 2, -3, 4}, {2, 2});
  const uint64_t v0 = base.version();
  Tensor col = base.select(1, 0);
  col.neg_();
  EXPECT_GT(base.version(), v0);
  expect_close(base, {1, 2, 3, 4}, 0, 0, "neg_ through a column view");
  base.relu_();
  base.exp_();
  expect_close(base, {std::exp(1.0), std::exp(2.0), std::exp(3.0), std::exp(4.0)}, 1e-6, 0, "exp_");
}

// fill_ takes std::fill_n over contiguous runs (split across threads) and an
// element loop over strided ones: a large contiguous tensor, a column view
// (stride 37) and a zero-size tensor, in float, bfloat16 and integer dtypes.
TEST(Unary, FillWritesContiguousRunsAndStridedViews) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt64}) {
    Tensor t = zeros({1000, 37}, dt);
    t.fill_(3.0);
    expect_close(t, std::vector<double>(37000, 3.0), 0, 0, std::string("fill_ contiguous ") + dtype_name(dt));
    t.select(1, 5).fill_(-1.0);
    std::vector<double> want(37000, 3.0);
    for (int64_t r = 0; r < 1000; ++r) want[static_cast<size_t>(r * 37 + 5)] = -1.0;
    expect_close(t, want, 0, 0, std::string("fill_ column ") + dtype_name(dt));
    Tensor none = zeros({0, 37}, dt);
    none.fill_(1.0);
    EXPECT_EQ(none.numel(), 0);
  }
}

}  // namespace
}  // namespace kiln::test
