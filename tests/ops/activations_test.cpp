// torch.nn.functional's activations (leaky_relu, elu, softplus, hardtanh,
// hardsigmoid, hardswish, mish) against their definitions in float64 on
// random values in float32 and float64, non-contiguous and zero-size inputs,
// integer inputs (promoted), their attributes' defaults, and their errors.
// Float32 at the edges: tests/kernels/special_values_test.cpp; gradients:
// tests/autograd/gradcheck_test.cpp.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

struct Activation {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
};

double clamp_ref(double x, double lo, double hi) { return std::isnan(x) ? x : std::min(std::max(x, lo), hi); }

std::vector<Activation> activations() {
  return {
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x); }, [](double x) { return x > 0 ? x : 0.01 * x; }},
      {"leaky_relu(0.3)", [](const Tensor& x) { return leaky_relu(x, 0.3); },
       [](double x) { return x > 0 ? x : 0.3 * x; }},
      {"elu", [](const Tensor& x) { return elu(x); }, [](double x) { return x > 0 ? x : std::expm1(x); }},
      {"elu(2)", [](const Tensor& x) { return elu(x, 2.0); }, [](double x) { return x > 0 ? x : 2 * std::expm1(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x); },
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }},
      {"softplus(0.5, 1)", [](const Tensor& x) { return softplus(x, 0.5, 1.0); },
       [](double x) { return 0.5 * x > 1 ? x : std::log1p(std::exp(0.5 * x)) / 0.5; }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x); }, [](double x) { return clamp_ref(x, -1, 1); }},
      {"hardtanh(-2, 0.5)", [](const Tensor& x) { return hardtanh(x, -2.0, 0.5); },
       [](double x) { return clamp_ref(x, -2, 0.5); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); },
       [](double x) { return clamp_ref(x + 3, 0, 6) / 6; }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); },
       [](double x) { return x * clamp_ref(x + 3, 0, 6) / 6; }},
      {"mish", [](const Tensor& x) { return mish(x); },
       [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }},
  };
}

TEST(Activations, MatchTheirDefinitionsInEveryLayout) {
  manual_seed(2801);
  for (const Activation& a : activations())
    for (DType dt : {kFloat32, kFloat64}) {
      const double tol = dt == kFloat32 ? 2e-6 : 1e-13;
      const Tensor x = randn({7, 5}, dt) * 6;
      for (const Tensor& in : {x, x.t(), x.narrow(1, 1, 3), empty({0, 3}, dt)}) {
        const Tensor got = a.op(in);
        EXPECT_EQ(got.dtype(), dt) << a.name;
        EXPECT_EQ(got.sizes(), in.sizes()) << a.name;
        std::vector<double> want;
        for (double v : values(in.contiguous())) want.push_back(a.ref(v));
        expect_close(got, want, tol, tol, std::string(a.name) + " " + shape_str(in.sizes()));
      }
    }
}

TEST(Activations, IntegersPromoteToTheDefaultFloat) {
  const Tensor i = arange(-4, 5);
  for (const Activation& a : activations()) {
    const Tensor got = a.op(i);
    EXPECT_EQ(got.dtype(), kFloat32) << a.name;
    std::vector<double> want;
    for (double v : values(i)) want.push_back(a.ref(v));
    expect_close(got, want, 2e-6, 2e-6, a.name);
  }
}

TEST(Activations, Errors) {
  expect_error([] { softplus(randn({2}), 0.0); }, {"[softplus]", "beta must not be 0"});
  expect_error([] { hardtanh(randn({2}), 1.0, -1.0); }, {"[hardtanh]", "min_val (1)", "max_val (-1)"});
}

}  // namespace
}  // namespace kiln::test
