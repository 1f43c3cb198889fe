// Note [Float32 at the edges]
// Every floating transcendental and composite with a float32 / float16 /
// bfloat16 fast path, against std:: functions in double on a sweep of
// special values (+-0, denormals, +-1e-30, +-1e30, +-FLT_MAX, +-inf, NaN,
// large sin / cos arguments) and a dense sweep of the range each kernel
// approximates. Finite results must lie within the function's stated ulp
// bound of the double result rounded to float32 (or within a denormal of
// it); everything else must be of the same class: NaN, the same infinity,
// the same signed zero. Runs once per CPU capability (kernel tests).
#include <bit>
#include <cfloat>
#include <cmath>

#include "kernels/cpu/pointwise_math.h"
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct EdgeCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double ulps;            // bound on finite results, in units of the float32 result's last place
  double lo, hi;          // the dense sweep
  // gelu's negative tail: the result's condition number there, about x^2,
  // amplifies the float32 rounding of the scaled argument (x / sqrt 2, or
  // u), so the bound is ulps * max(1, x^2 / 4) for x < 0 (288 ulp at
  // x = -12, where gelu is 2e-32).
  bool scaled_by_condition = false;

  double bound(float x) const {
    return scaled_by_condition && x < 0 ? ulps * std::max(1.0, double(x) * double(x) / 4) : ulps;
  }
};

// References in double, in forms that do not cancel for negative x (the
// textbook 0.5 x (1 + erf(x / sqrt 2)) is 0 in double below x = -8.3).
// gelu, silu and mish at -inf: their limit, -0 as on the finite tail (not
// IEEE's -inf * 0 = NaN).
double at_minus_inf(double x, double r) { return x == -kInf ? -0.0 : r; }
double sigmoid_ref(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }
double gelu_ref(double x) { return at_minus_inf(x, 0.5 * x * std::erfc(-x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {  // 0.5 x (1 + tanh(u)) = x sigmoid(2u)
  return at_minus_inf(x, x * sigmoid_ref(2 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<EdgeCase> edge_cases() {
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, 4, -104, 89},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, 4, -20, 89},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 4, 1e-6, 1e6},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, 4, -0.999, 1e6},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 1, 0, 1e6},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 2, 1e-6, 1e6},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, 4, -1e5, 1e5},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, 4, -1e5, 1e5},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, 4, -12, 12},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, 4, -104, 30},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, 8, -6, 6},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, 8, -12, 12, true},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, 8, -12, 12, true},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return at_minus_inf(x, x * sigmoid_ref(x)); }, 4,
       -80, 80},
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 1, 0, 1e6},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, [](double x) { return x > 0 ? x : x * 0.1; },
       1, -1e6, 1e6},
      {"elu", [](const Tensor& x) { return elu(x, 1.5); }, [](double x) { return x > 0 ? x : 1.5 * std::expm1(x); }, 4,
       -20, 20},
      {"softplus", [](const Tensor& x) { return softplus(x); },
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, 4, -100, 30},
      {"hardswish", [](const Tensor& x) { return hardswish(x); },
       [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }, 2, -5, 5},
      {"mish", [](const Tensor& x) { return mish(x); },
       [](double x) { return at_minus_inf(x, x * std::tanh(std::log1p(std::exp(x)))); }, 8, -30, 30},
      {"log2", [](const Tensor& x) { return log2(x); }, [](double x) { return std::log2(x); }, 4, 1e-6, 1e6},
      {"log10", [](const Tensor& x) { return log10(x); }, [](double x) { return std::log10(x); }, 4, 1e-6, 1e6},
      {"exp2", [](const Tensor& x) { return exp2(x); }, [](double x) { return std::exp2(x); }, 4, -150, 128},
      {"log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); },
       [](double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); }, 4, -100, 100},
      {"selu", [](const Tensor& x) { return selu(x); },
       [](double x) { return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x)); }, 4, -20, 20},
      {"tan", [](const Tensor& x) { return tan(x); }, [](double x) { return std::tan(x); }, 1, -1e4, 1e4},
      {"asin", [](const Tensor& x) { return asin(x); }, [](double x) { return std::asin(x); }, 1, -1, 1},
      {"acos", [](const Tensor& x) { return acos(x); }, [](double x) { return std::acos(x); }, 1, -1, 1},
      {"atan", [](const Tensor& x) { return atan(x); }, [](double x) { return std::atan(x); }, 1, -1e30, 1e30},
      {"sinh", [](const Tensor& x) { return sinh(x); }, [](double x) { return std::sinh(x); }, 1, -100, 100},
      {"cosh", [](const Tensor& x) { return cosh(x); }, [](double x) { return std::cosh(x); }, 1, -100, 100},
      {"asinh", [](const Tensor& x) { return asinh(x); }, [](double x) { return std::asinh(x); }, 1, -1e30, 1e30},
      {"acosh", [](const Tensor& x) { return acosh(x); }, [](double x) { return std::acosh(x); }, 1, 1, 1e30},
      {"atanh", [](const Tensor& x) { return atanh(x); }, [](double x) { return std::atanh(x); }, 1, -1, 1},
  };
}

std::vector<float> special_values() {
  std::vector<float> v = {0.0f, 1e-40f, FLT_TRUE_MIN, FLT_MIN, 1e-30f, 1e-7f, 0.5f, 1.0f, 2.0f, 10.0f, 88.0f, 89.0f,
                          100.0f, 1e4f, 39000.0f, 1e5f, 1e8f, 1e20f, 1e30f, 3e38f, FLT_MAX,
                          std::numeric_limits<float>::infinity()};
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  v.push_back(-1.0f + 1e-7f);
  return v;
}

// Points spread over [lo, hi]: evenly, plus geometrically towards both ends
// and zero, where relative accuracy is hardest.
std::vector<float> dense_sweep(double lo, double hi) {
  std::vector<float> v;
  const int n = 20000;
  for (int i = 0; i <= n; ++i) v.push_back(static_cast<float>(lo + (hi - lo) * i / n));
  for (double mag = 1e-30; mag < 1e38; mag *= 1.01)
    for (double x : {mag, -mag})
      if (x >= lo && x <= hi) v.push_back(static_cast<float>(x));
  return v;
}

double ulp_of(float v) {
  const float a = std::fabs(v);
  if (std::isinf(a)) return FLT_MAX - std::nextafter(FLT_MAX, 0.0f);
  return static_cast<double>(std::nextafter(a, std::numeric_limits<float>::infinity()) - a);
}

// "" when `got` is acceptable for `want` (double), else why not.
std::string judge(float got, double want, double ulps) {
  const float want_f = static_cast<float>(want);
  if (std::isnan(want)) return std::isnan(got) ? "" : "expected NaN";
  if (std::isinf(want_f)) return got == want_f ? "" : "expected " + std::to_string(want_f);
  if (!std::isfinite(got)) return "expected a finite value";
  if (want_f == 0 && got == 0 && std::signbit(got) != std::signbit(want_f)) return "wrong sign of zero";
  const double err = std::fabs(static_cast<double>(got) - want);
  if (err <= ulps * ulp_of(want_f) || err <= FLT_MIN) return "";
  return std::to_string(err / ulp_of(want_f)) + " ulp off";
}

void check_edges(const EdgeCase& c, const std::vector<float>& xs, const char* sweep) {
  const Tensor in = tensor<float>(xs);
  const Tensor out = c.op(in);
  const std::vector<double> got = values(out);
  int reported = 0;
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = c.ref(static_cast<double>(xs[i]));
    const std::string why = judge(static_cast<float>(got[i]), want, c.bound(xs[i]));
    if (!why.empty() && reported++ < 5)
      ADD_FAILURE() << c.name << "(" << xs[i] << ") = " << got[i] << ", double gives " << want << ": " << why << " ("
                    << sweep << ")";
    if (std::isfinite(want) && std::isfinite(got[i]) && std::fabs(want) >= FLT_MIN)
      worst = std::max(worst, std::fabs(got[i] - want) / ulp_of(static_cast<float>(want)) / (c.bound(xs[i]) / c.ulps));
  }
  // (Divided by the condition scaling where the case has one.)
  if (std::getenv("KILN_REPORT_ULPS")) std::printf("%-10s %-8s worst %.2f ulp\n", c.name, sweep, worst);
}

TEST(Float32Edges, TranscendentalsOnSpecialValuesAndDenseSweeps) {
  for (const EdgeCase& c : edge_cases()) {
    check_edges(c, special_values(), "special");
    check_edges(c, dense_sweep(c.lo, c.hi), "dense");
  }
}

// float16 and bfloat16 run the same float32 kernels between conversions:
// special values keep their class (NaN, the same infinity, finite).
TEST(Float32Edges, SixteenBitFloatsKeepTheClassOfSpecialValues) {
  for (DType dt : {kFloat16, kBFloat16})
    for (const EdgeCase& c : edge_cases()) {
      const Tensor x = tensor<float>(special_values()).to(dt);
      const std::vector<double> xs = values(x), got = values(c.op(x));
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want = c.ref(xs[i]);
        const double want_rounded = values(tensor<double>({want}).to(dt))[0];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[i])) << c.name << "(" << xs[i] << ") in " << dt;
        else if (std::isinf(want_rounded)) EXPECT_EQ(got[i], want_rounded) << c.name << "(" << xs[i] << ") in " << dt;
        else EXPECT_TRUE(std::isfinite(got[i])) << c.name << "(" << xs[i] << ") = " << got[i] << " in " << dt;
      }
    }
}

// Note [Softmax's exponential]: exp_row_f within 1.07 ulp of e^x for x <= 0
// (every 61st float from -0 to -104, then the clamp and NaN), and
// exp_row_normal_f its bits wherever the row kernels use it, [-87, 0].
TEST(Float32Edges, SoftmaxExponentialWithinItsBound) {
  double worst = 0;
  int misses = 0;
  for (uint32_t b = std::bit_cast<uint32_t>(-0.0f); b <= std::bit_cast<uint32_t>(-104.0f) && misses < 5; b += 61) {
    const float x = std::bit_cast<float>(b);
    const float got = pointwise::exp_row_f(x);
    const double want = std::exp(static_cast<double>(x));
    const std::string why = judge(got, want, 1.07);
    if (!why.empty()) ADD_FAILURE() << "exp_row_f(" << x << ") = " << got << ": " << why << (++misses, "");
    if (got >= FLT_MIN) worst = std::max(worst, std::fabs(got - want) / ulp_of(static_cast<float>(want)));
    if (x >= -87.0f && std::bit_cast<uint32_t>(pointwise::exp_row_normal_f(x)) != std::bit_cast<uint32_t>(got))
      ADD_FAILURE() << "exp_row_normal_f(" << x << ") = " << pointwise::exp_row_normal_f(x) << ", exp_row_f " << got
                    << (++misses, "");
  }
  if (std::getenv("KILN_REPORT_ULPS")) std::printf("exp_row   sweep    worst %.2f ulp\n", worst);
  for (float x : {-104.5f, -1e30f, -FLT_MAX, -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(pointwise::exp_row_f(x), 0.0f) << x;
  EXPECT_TRUE(std::isnan(pointwise::exp_row_f(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(pointwise::exp_row_f(0.0f), 1.0f);
}

TEST(Float32Edges, SoftmaxFamilyAtTheEdges) {
  // Logits near 1000: (x - max) - log(sum) keeps x - max exact.
  const Tensor big = randn({4, 33}, kFloat64) + 1000;
  const Tensor ls = log_softmax(big.to(kFloat32), 1);
  const std::vector<double> got = values(ls), b = values(big.to(kFloat32));
  for (int64_t r = 0; r < 4; ++r) {
    double mx = -kInf, s = 0;
    for (int64_t j = 0; j < 33; ++j) mx = std::max(mx, b[r * 33 + j]);
    for (int64_t j = 0; j < 33; ++j) s += std::exp(b[r * 33 + j] - mx);
    for (int64_t j = 0; j < 33; ++j) EXPECT_NEAR(got[r * 33 + j], b[r * 33 + j] - mx - std::log(s), 2e-6);
  }
  // Equal huge logits: every class has log-probability -log(37).
  for (double v : values(log_softmax(full({37}, 1e37, kFloat32), 0))) EXPECT_NEAR(v, -std::log(37.0), 1e-6);
  for (double v : values(softmax(full({37}, 1e37, kFloat32), 0))) EXPECT_NEAR(v, 1.0 / 37, 1e-7);
  // A row of -inf: logsumexp is -inf (log(0)), log_softmax NaN as in PyTorch.
  const Tensor masked = full({2, 5}, -kInf, kFloat32);
  for (double v : values(logsumexp(masked, {1}))) EXPECT_EQ(v, -kInf);
  for (double v : values(log_softmax(masked, 1))) EXPECT_TRUE(std::isnan(v));
  // cross_entropy shares log_softmax: near-1000 logits agree with float64.
  const Tensor target = tensor<int64_t>({3, 0, 32, 7});
  const Tensor big32 = big.to(kFloat32);
  EXPECT_NEAR(nn::cross_entropy(big32, target).item<double>(),
              nn::cross_entropy(big32.to(kFloat64), target).item<double>(), 2e-6);
}

}  // namespace
}  // namespace kiln::test
