// autograd::Function<T>: custom ops as classes (PyTorch's autograd.Function).
#include "kiln/compile.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// y = exp(x) * scale, with its gradient written by hand; also returns a
// non-differentiable mask.
struct ScaledExp : autograd::Function<ScaledExp> {
  static std::vector<Tensor> forward(autograd::AutogradContext* ctx, const Tensor& x, double scale) {
    const Tensor y = exp(x) * scale;
    const Tensor mask = x > 0;
    ctx->save_for_backward({y});
    ctx->mark_non_differentiable({mask});
    ctx->saved_data["calls"] = 0;
    return {y, mask};
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    std::any_cast<int&>(ctx->saved_data["calls"])++;
    EXPECT_TRUE(ctx->needs_input_grad(0));
    return {grads[0] * ctx->get_saved_variables()[0]};
  }
};

// x.mul_(2) in forward, declared with mark_dirty: x's history becomes the function's.
struct DoubleInPlace : autograd::Function<DoubleInPlace> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    x.mul_(2.0);
    ctx->mark_dirty({x});
    return x;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext*, std::vector<Tensor> grads) { return {grads[0] * 2.0}; }
};

TEST(AutogradFunction, ClassFormMatchesItsFormula) {
  manual_seed(2450);
  const Tensor x = randn({4, 3}, kFloat64).requires_grad_();
  const auto outs = ScaledExp::apply(x, 1.5);
  EXPECT_TRUE(outs[0].requires_grad());
  EXPECT_FALSE(outs[1].requires_grad());
  EXPECT_EQ(outs[0].grad_fn_name(), std::string(typeid(ScaledExp).name()) + "_backward");
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ScaledExp::apply(in[0], 1.5)[0]}; },
                                  {x}));
  // mark_dirty: the in-place result differentiates through the function.
  const Tensor a = randn({3}, kFloat64).requires_grad_();
  const Tensor b = a * 1.0;
  const Tensor c = DoubleInPlace::apply(b);
  EXPECT_TRUE(c.is_same(b));
  (c * 3.0).sum().backward();
  expect_close(a.grad(), {6, 6, 6}, 0, 0, "through the dirty input");
  // A leaf that requires grad may not be modified in place.
  expect_error([] { DoubleInPlace::apply(randn({2}).requires_grad_()); }, {"modified in place", "mark_dirty"});
  // A saved tensor modified in place afterwards is reported.
  const Tensor z = randn({3}, kFloat64).requires_grad_();
  const auto zo = ScaledExp::apply(z, 2.0);
  {
    NoGradGuard g;
    zo[0].add_(1.0);
  }
  expect_error([&] { zo[0].sum().backward(); }, {"modified by an inplace operation"});
}

TEST(AutogradFunction, WorksInsideCompiledFunctions) {
  manual_seed(2451);
  auto fn = [](const Tensor& x) { return ScaledExp::apply(tanh(x) * 2.0, 0.5)[0] + x; };
  auto f = compile(fn);
  const Tensor x = randn({5}).requires_grad_(), x2 = x.detach().clone().requires_grad_();
  const Tensor yc = f(x), ye = fn(x2);
  expect_close(yc, values(ye), 1e-6, 1e-6, "value");
  yc.sum().backward();
  ye.sum().backward();
  expect_close(x.grad(), values(x2.grad()), 1e-5, 1e-6, "gradient");
}

}  // namespace
}  // namespace kiln::test
