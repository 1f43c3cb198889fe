// Optimizer steps against updates computed by hand in float64.
#include <cmath>

#include "kiln/optim.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Sets p.grad to a fixed gradient for the next step.
void set_grad(const Tensor& p, std::vector<double> g) { p.set_grad(tensor<double>(g)); }

TEST(Optim, SGDMomentumNesterovAndWeightDecay) {
  for (bool nesterov : {false, true}) {
    Tensor p = tensor<double>({1.0, -2.0}).requires_grad_();
    optim::SGDOptions o;
    o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 0.01, o.nesterov = nesterov;
    optim::SGD opt({p}, o);
    std::vector<double> w = {1.0, -2.0}, buf = {0, 0};
    const std::vector<std::vector<double>> grads = {{0.5, 0.1}, {-0.2, 0.3}, {0.4, -0.6}};
    for (size_t s = 0; s < grads.size(); ++s) {
      set_grad(p, grads[s]);
      opt.step();
      for (int i = 0; i < 2; ++i) {
        double g = grads[s][i] + 0.01 * w[i];
        buf[i] = s == 0 ? g : 0.9 * buf[i] + g;
        w[i] -= 0.1 * (nesterov ? g + 0.9 * buf[i] : buf[i]);
      }
      expect_close(p, w, 1e-14, 1e-14, nesterov ? "nesterov" : "momentum");
    }
  }
}

TEST(Optim, AdamWMatchesTheReferenceUpdate) {
  for (bool amsgrad : {false, true}) {
    Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
    optim::AdamWOptions o;
    o.lr = 0.01, o.weight_decay = 0.1, o.amsgrad = amsgrad;
    optim::AdamW opt({p}, o);
    std::vector<double> w = {0.5, -1.5, 2.0}, m(3, 0), v(3, 0), vmax(3, 0);
    const std::vector<std::vector<double>> grads = {{1, -2, 0.5}, {0.1, 0.1, -3}, {-1, 0.5, 0.5}};
    for (size_t s = 0; s < grads.size(); ++s) {
      set_grad(p, grads[s]);
      opt.step();
      const double t = static_cast<double>(s + 1);
      for (int i = 0; i < 3; ++i) {
        const double g = grads[s][i];
        w[i] *= 1 - 0.01 * 0.1;
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        vmax[i] = std::max(vmax[i], v[i]);
        const double vhat = (amsgrad ? vmax[i] : v[i]) / (1 - std::pow(0.999, t));
        w[i] -= 0.01 * (m[i] / (1 - std::pow(0.9, t))) / (std::sqrt(vhat) + 1e-8);
      }
      expect_close(p, w, 1e-12, 1e-14, amsgrad ? "amsgrad" : "adamw");
    }
    EXPECT_EQ(opt.steps(), 3);
  }
}

TEST(Optim, StateDictResumesIdentically) {
  Tensor p = tensor<double>({1, 2}).requires_grad_(), q = tensor<double>({1, 2}).requires_grad_();
  optim::AdamW a({p}, {}), b({q}, {});
  set_grad(p, {0.3, -0.1});
  a.step();
  b.load_state_dict(a.state_dict());
  {
    NoGradGuard g;
    q.copy_(p);
  }
  set_grad(p, {0.2, 0.2});
  set_grad(q, {0.2, 0.2});
  a.step();
  b.step();
  EXPECT_EQ(values(p), values(q));
  expect_error([&] { b.load_state_dict({}); }, {"[load_state_dict]", "step"});
}

TEST(Optim, ClipGradNormAndSchedule) {
  Tensor a = zeros({2}, kFloat64).requires_grad_(), b = zeros({1}, kFloat64).requires_grad_();
  set_grad(a, {3, 0});
  b.set_grad(tensor<double>({4}));
  const double n = optim::clip_grad_norm_({a, b}, 1.0).item<double>();
  EXPECT_NEAR(n, 5.0, 1e-12);
  expect_close(a.grad(), {0.6, 0}, 1e-6, 0, "clipped");
  expect_close(b.grad(), {0.8}, 1e-6, 0, "clipped");
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 10.0).item<double>(), 1.0, 1e-6);  // below the limit: unchanged
  expect_close(b.grad(), {0.8}, 1e-6, 0, "unchanged");
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_lr(0, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_lr(9, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_NEAR(optim::warmup_cosine_lr(60, 10, 110, 1.0, 0.1), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_lr(200, 10, 110, 1.0, 0.1), 0.1);
  expect_error([] { optim::SGD({ones({1})}, {}); }, {"[optimizer]", "require grad"});
}

}  // namespace
}  // namespace kiln::test
