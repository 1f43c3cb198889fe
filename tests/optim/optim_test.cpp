// Optimizer steps against updates computed by hand in float64.
#include <cmath>
#include <cstring>
#include <memory>

#include "kiln/lr_scheduler.h"
#include "kiln/optim.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Sets p.grad to a fixed gradient for the next step.
void set_grad(const Tensor& p, std::vector<double> g) { p.set_grad(tensor<double>(g).to(p.dtype())); }

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

// In float32 too (from the second step, the fused step of Note [The fused
// Adam step]; amsgrad stays op by op).
TEST(Optim, AdamWMatchesTheReferenceUpdate) {
  for (DType dt : {kFloat64, kFloat32})
  for (bool amsgrad : {false, true}) {
    Tensor p = tensor<double>({0.5, -1.5, 2.0}).to(dt).requires_grad_();
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
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      expect_close(p, w, tol, tol * 1e-2, std::string(amsgrad ? "amsgrad " : "adamw ") + dtype_name(dt));
    }
    EXPECT_EQ(opt.steps(), 3);
  }
}

// Passes every op on to the kernels: under it, code with a fused fast path
// issues its separate ops (thread_modes_active()).
class PassThroughMode : public DispatchMode {
 public:
  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    return dispatch(op, in, attrs, out);
  }
};

// The same float32 bits, or NaN in both.
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const Tensor g = got.contiguous(), w = want.contiguous();
  int misses = 0;
  for (int64_t i = 0; i < g.numel() && misses < 5; ++i) {
    const float a = g.data_ptr<float>()[i], b = w.data_ptr<float>()[i];
    if (std::memcmp(&a, &b, sizeof a) != 0 && !(std::isnan(a) && std::isnan(b)))
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << b, ++misses;
  }
}

// float32 Adam and AdamW: the fused step gives the op-by-op update's bits
// (run under a mode), step after step with a changing lr, on an odd-sized
// parameter holding +-0, infinities, NaN, huge and subnormal values and
// gradients, with and without weight decay.
TEST(Optim, FusedAdamStepHasTheOpByOpBits) {
  manual_seed(31);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3e38f, -3e38f, 1e-40f};
  // A row-major parameter, and a channels-last one (a CNN's weight, whose gradient comes row-major).
  for (const Shape& shape : {Shape{37, 29}, Shape{12, 7, 3, 5}})
  for (bool decoupled : {true, false})
    for (double wd : {0.0, 0.1}) {
      const bool channels_last = shape.size() == 4;
      const std::string what = std::string(decoupled ? "AdamW" : "Adam") + (wd != 0 ? " with weight decay" : "") +
                               (channels_last ? ", channels-last" : "");
      const Tensor p0 = channels_last ? randn(shape).contiguous(MemoryFormat::ChannelsLast) : randn(shape);
      const Tensor flat = p0.permute(channels_last ? Shape{0, 2, 3, 1} : Shape{0, 1}).reshape({-1});  // memory order
      for (int64_t i = 0; i < 8; ++i) flat.narrow(0, 100 * i + 3, 1).fill_(specials[i]);
      const Tensor a = p0.clone().requires_grad_(), b = p0.clone().requires_grad_();
      auto make = [&](const Tensor& p) -> std::unique_ptr<optim::Adam> {
        if (decoupled) return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{.weight_decay = wd});
        return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{.weight_decay = wd});
      };
      const auto fused = make(a), op_by_op = make(b);
      PassThroughMode mode;
      for (int s = 0; s < 5; ++s) {
        const Tensor g = randn(shape) * 10.0;
        for (int64_t i = 0; i < 8; ++i) {
          g.view({-1}).narrow(0, 100 * i + 50 + s, 1).fill_(specials[i]);
          g.view({-1}).narrow(0, 100 * ((i + s) % 8) + 3, 1).fill_(specials[i]);
        }
        a.set_grad(g), b.set_grad(g.clone());
        fused->set_lr(1e-2 / (s + 1)), op_by_op->set_lr(1e-2 / (s + 1));
        fused->step();
        {
          const ModeGuard guard(&mode);
          op_by_op->step();
        }
        const std::string at = what + ", step " + std::to_string(s + 1);
        expect_same_bits(a, b, at + ": parameter");
        const nn::StateDict sa = fused->state_dict(), sb = op_by_op->state_dict();
        for (const char* k : {"state.0.exp_avg", "state.0.exp_avg_sq"}) expect_same_bits(sa.at(k), sb.at(k), at + ": " + k);
      }
      EXPECT_EQ(a.is_contiguous(), !channels_last) << what;
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
  expect_error([&] { b.load_state_dict({}); }, {"[load_state_dict]", "AdamW state has 0 parameter group(s)"});
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
  expect_error([] { optim::SGD({ones({1})}, {}); }, {"[SGD]", "require grad"});
}

// Runs `steps` updates of one parameter [w0...] with the given gradients and
// compares each step with `reference` (which updates w from g in float64).
void check_updates(optim::Optimizer& opt, const Tensor& p, const std::vector<std::vector<double>>& grads,
                   const std::function<void(std::vector<double>&, const std::vector<double>&, int)>& reference,
                   const std::string& what) {
  std::vector<double> w = values(p);
  for (size_t s = 0; s < grads.size(); ++s) {
    set_grad(p, grads[s]);
    opt.step();
    reference(w, grads[s], static_cast<int>(s) + 1);
    expect_close(p, w, 1e-12, 1e-14, what + " step " + std::to_string(s + 1));
  }
}

const std::vector<std::vector<double>> kGrads = {{1, -2, 0.5}, {0.1, 0.1, -3}, {-1, 0.5, 0.5}, {0.3, 0, -0.2}, {2, -1, 1}};

TEST(Optim, AdamAddsWeightDecayToTheGradient) {
  Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
  optim::AdamOptions o;
  o.lr = 0.02, o.weight_decay = 0.1, o.beta1 = 0.8, o.beta2 = 0.9, o.eps = 1e-6;
  optim::Adam opt({p}, o);
  std::vector<double> m(3), v(3);
  check_updates(opt, p, kGrads, [&](std::vector<double>& w, const std::vector<double>& grad, int t) {
    for (int i = 0; i < 3; ++i) {
      const double g = grad[i] + 0.1 * w[i];
      m[i] = 0.8 * m[i] + 0.2 * g;
      v[i] = 0.9 * v[i] + 0.1 * g * g;
      w[i] -= 0.02 / (1 - std::pow(0.8, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.9, t)) + 1e-6);
    }
  }, "adam");
}

TEST(Optim, AdamaxInfinityNorm) {
  Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
  optim::AdamaxOptions o;
  o.lr = 0.05, o.weight_decay = 0.1, o.beta1 = 0.8, o.beta2 = 0.95, o.eps = 1e-3;
  optim::Adamax opt({p}, o);
  std::vector<double> m(3), u(3);
  check_updates(opt, p, kGrads, [&](std::vector<double>& w, const std::vector<double>& grad, int t) {
    for (int i = 0; i < 3; ++i) {
      const double g = grad[i] + 0.1 * w[i];
      m[i] = 0.8 * m[i] + 0.2 * g;
      u[i] = std::max(0.95 * u[i], std::fabs(g) + 1e-3);
      w[i] -= 0.05 / (1 - std::pow(0.8, t)) * m[i] / u[i];
    }
  }, "adamax");
}

TEST(Optim, NAdamMomentumScheduleWithBothWeightDecays) {
  for (bool decoupled : {false, true}) {
    Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
    optim::NAdamOptions o;
    o.lr = 0.02, o.weight_decay = 0.1, o.momentum_decay = 0.05, o.decoupled_weight_decay = decoupled;
    optim::NAdam opt({p}, o);
    std::vector<double> m(3), v(3);
    double mu_product = 1;
    check_updates(opt, p, kGrads, [&](std::vector<double>& w, const std::vector<double>& grad, int t) {
      const double mu = 0.9 * (1 - 0.5 * std::pow(0.96, t * 0.05));
      const double mu_next = 0.9 * (1 - 0.5 * std::pow(0.96, (t + 1) * 0.05));
      mu_product *= mu;
      for (int i = 0; i < 3; ++i) {
        if (decoupled) w[i] *= 1 - 0.02 * 0.1;
        const double g = grad[i] + (decoupled ? 0 : 0.1 * w[i]);
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        const double denom = std::sqrt(v[i] / (1 - std::pow(0.999, t))) + 1e-8;
        w[i] -= 0.02 * (1 - mu) / (1 - mu_product) * g / denom;
        w[i] -= 0.02 * mu_next / (1 - mu_product * mu_next) * m[i] / denom;
      }
    }, decoupled ? "nadam decoupled" : "nadam");
  }
}

TEST(Optim, RAdamRectifiesOnceTheVarianceIsTractable) {
  for (bool decoupled : {false, true}) {
    Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
    optim::RAdamOptions o;
    o.lr = 0.03, o.weight_decay = 0.05, o.beta2 = 0.9, o.decoupled_weight_decay = decoupled;  // rho_t > 5 from step 6
    optim::RAdam opt({p}, o);
    std::vector<double> m(3), v(3);
    int rectified = 0;
    std::vector<std::vector<double>> grads = kGrads;
    grads.insert(grads.end(), {{0.5, -0.5, 0.1}, {-0.3, 0.2, 0.9}, {1, 1, -1}});
    check_updates(opt, p, grads, [&](std::vector<double>& w, const std::vector<double>& grad, int t) {
      const double rho_inf = 2 / (1 - 0.9) - 1;
      const double rho = rho_inf - 2 * t * std::pow(0.9, t) / (1 - std::pow(0.9, t));
      rectified += rho > 5;
      for (int i = 0; i < 3; ++i) {
        if (decoupled) w[i] *= 1 - 0.03 * 0.05;
        const double g = grad[i] + (decoupled ? 0 : 0.05 * w[i]);
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.9 * v[i] + 0.1 * g * g;
        const double mhat = m[i] / (1 - std::pow(0.9, t));
        if (rho > 5) {
          const double r = std::sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho));
          w[i] -= 0.03 * mhat * r * std::sqrt(1 - std::pow(0.9, t)) / (std::sqrt(v[i]) + 1e-8);
        } else {
          w[i] -= 0.03 * mhat;
        }
      }
    }, decoupled ? "radam decoupled" : "radam");
    EXPECT_GT(rectified, 0);
    EXPECT_LT(rectified, 8);  // both branches ran
  }
}

// NAdam's per-parameter mu_product (a 0-d tensor) survives a state_dict
// round trip: a restored optimizer continues exactly.
TEST(Optim, NAdamStateRoundTrips) {
  Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_(), q = p.detach().clone().requires_grad_();
  optim::NAdam a({p}, optim::NAdamOptions{});
  for (int s = 0; s < 2; ++s) set_grad(p, kGrads[s]), a.step();
  const nn::StateDict state = a.state_dict();
  EXPECT_EQ(state.at("state.0.mu_product").dim(), 0);
  { NoGradGuard g; q.copy_(p); }
  optim::NAdam b({q}, optim::NAdamOptions{});
  b.load_state_dict(state);
  for (int s = 2; s < 5; ++s) set_grad(p, kGrads[s]), a.step(), set_grad(q, kGrads[s]), b.step();
  expect_close(q, values(p), 0, 0, "resumed nadam");
  expect_error([] { optim::NAdam({tensor<double>({1.0}).requires_grad_()}, optim::NAdamOptions{.momentum_decay = -1}); },
               {"NAdam", "momentum_decay"});
  expect_error([] { optim::RAdam({tensor<double>({1.0}).requires_grad_()}, optim::RAdamOptions{.beta2 = 1.0}); },
               {"RAdam", "invalid betas"});
  expect_error([] { optim::Adamax({tensor<double>({1.0}).requires_grad_()}, optim::AdamaxOptions{.eps = -1}); },
               {"Adamax", "epsilon"});
}

TEST(Optim, RMSpropPlainCenteredAndWithMomentum) {
  for (bool centered : {false, true}) {
    for (double momentum : {0.0, 0.7}) {
      Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
      optim::RMSpropOptions o;
      o.lr = 0.01, o.alpha = 0.9, o.weight_decay = 0.05, o.momentum = momentum, o.centered = centered;
      optim::RMSprop opt({p}, o);
      std::vector<double> sq(3), ga(3), buf(3);
      check_updates(opt, p, kGrads, [&](std::vector<double>& w, const std::vector<double>& grad, int) {
        for (int i = 0; i < 3; ++i) {
          const double g = grad[i] + 0.05 * w[i];
          sq[i] = 0.9 * sq[i] + 0.1 * g * g;
          ga[i] = 0.9 * ga[i] + 0.1 * g;
          const double avg = std::sqrt(centered ? sq[i] - ga[i] * ga[i] : sq[i]) + 1e-8;
          buf[i] = momentum * buf[i] + g / avg;
          w[i] -= 0.01 * (momentum > 0 ? buf[i] : g / avg);
        }
      }, std::string("rmsprop") + (centered ? " centered" : "") + (momentum > 0 ? " momentum" : ""));
    }
  }
}

TEST(Optim, AdagradWithLrDecayAndInitialAccumulator) {
  Tensor p = tensor<double>({0.5, -1.5, 2.0}).requires_grad_();
  optim::AdagradOptions o;
  o.lr = 0.1, o.lr_decay = 0.01, o.weight_decay = 0.02, o.initial_accumulator_value = 0.5;
  optim::Adagrad opt({p}, o);
  std::vector<double> sum(3, 0.5);
  check_updates(opt, p, kGrads, [&](std::vector<double>& w, const std::vector<double>& grad, int t) {
    const double clr = 0.1 / (1 + (t - 1) * 0.01);
    for (int i = 0; i < 3; ++i) {
      const double g = grad[i] + 0.02 * w[i];
      sum[i] += g * g;
      w[i] -= clr * g / (std::sqrt(sum[i]) + 1e-10);
    }
  }, "adagrad");
}

TEST(Optim, ParameterGroupsHaveTheirOwnOptions) {
  Tensor a = tensor<double>({1.0, 2.0}).requires_grad_(), b = tensor<double>({3.0}).requires_grad_();
  optim::SGDOptions o;
  o.lr = 0.1, o.momentum = 0.5;
  optim::SGD opt({optim::ParamGroup({a}), optim::ParamGroup({b}, {{"lr", 1.0}, {"momentum", 0.0}})}, o);
  EXPECT_EQ(opt.param_groups()[1]["lr"], 1.0);
  EXPECT_EQ(opt.param_groups()[0]["momentum"], 0.5);  // from the defaults
  set_grad(a, {1, 1});
  set_grad(b, {1});
  opt.step();
  expect_close(a, {0.9, 1.9}, 1e-15, 0, "group 0");
  expect_close(b, {2.0}, 1e-15, 0, "group 1");
  // A group added later; zero_grad keeps zeroed gradients when asked.
  Tensor c = tensor<double>({5.0}).requires_grad_();
  opt.add_param_group(optim::ParamGroup({c}, {{"lr", 0.5}}));
  set_grad(c, {2});
  opt.zero_grad(false);
  EXPECT_TRUE(c.grad().defined());
  EXPECT_EQ(values(c.grad()), (std::vector<double>{0}));
  opt.zero_grad();
  EXPECT_FALSE(c.grad().defined());
  opt.set_lr(0.25);
  EXPECT_EQ(opt.param_groups()[2]["lr"], 0.25);
  expect_error([&] { opt.add_param_group(optim::ParamGroup({a})); }, {"SGD", "more than one parameter group"});
  expect_error([&] { opt.add_param_group(optim::ParamGroup({c.detach().requires_grad_()}, {{"betas", 0.9}})); },
               {"SGD", "unknown option 'betas'", "momentum"});
  expect_error([&] { (void)opt.param_groups()[0]["beta1"]; }, {"param_group", "'beta1'", "lr"});
  expect_error([] { optim::Adam({tensor<double>({1.0}).requires_grad_()}, optim::AdamOptions{.lr = -1}); },
               {"Adam", "learning rate", "-1"});
  expect_error([] { optim::RMSprop({tensor<double>({1.0}).requires_grad_()}, optim::RMSpropOptions{.alpha = -0.5}); },
               {"RMSprop", "alpha"});
}

TEST(Optim, StateDictHasPyTorchsLayoutAndRoundTrips) {
  auto make = [] {
    return std::vector<Tensor>{tensor<double>({1, 2}).requires_grad_(), tensor<double>({3}).requires_grad_(),
                               tensor<double>({4, 5, 6}).requires_grad_()};
  };
  std::vector<Tensor> p = make(), q = make();
  auto groups = [](const std::vector<Tensor>& t) {
    return std::vector<optim::ParamGroup>{optim::ParamGroup({t[0], t[1]}), optim::ParamGroup({t[2]}, {{"lr", 0.5}})};
  };
  optim::Adam a(groups(p), {}), b(groups(q), {});
  for (const Tensor& t : p) t.set_grad(ones_like(t));
  p[1].set_grad(Tensor());  // parameter 1 has no gradient: no state, no step
  a.step();
  const nn::StateDict s = a.state_dict();
  EXPECT_EQ(values(s.at("param_groups.0.params")), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(s.at("param_groups.1.params")), (std::vector<double>{2}));
  EXPECT_EQ(s.at("param_groups.1.lr").item<double>(), 0.5);
  EXPECT_EQ(s.at("state.2.step").item<double>(), 1.0);
  EXPECT_TRUE(s.count("state.0.exp_avg_sq"));
  EXPECT_FALSE(s.count("state.1.step"));
  b.load_state_dict(s);
  {
    NoGradGuard g;
    for (size_t i = 0; i < 3; ++i) q[i].copy_(p[i]);
  }
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < 3; ++i) {
      p[i].set_grad(full_like(p[i], 0.1 * static_cast<double>(step + i)));
      q[i].set_grad(full_like(q[i], 0.1 * static_cast<double>(step + i)));
    }
    a.step(), b.step();
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(values(p[i]), values(q[i])) << i;
  optim::Adam one_group({make()[0]}, {});
  expect_error([&] { one_group.load_state_dict(s); }, {"load_state_dict", "state has 2 parameter group(s)", "optimizer has 1"});
  nn::StateDict wrong = s;
  wrong["state.0.exp_avg"] = zeros({3}, kFloat64);
  expect_error([&] { b.load_state_dict(wrong); }, {"load_state_dict", "state.0.exp_avg", "[3]", "[2]"});
}

// Note [A loaded optimizer state is checked whole]: a state from a file with
// options out of the constructor's ranges, a broken step, a scalar moment,
// stray keys or other parameter numbers is refused, naming the key, and the
// optimizer keeps its own state (each of these was accepted, some to fail
// only at the next step).
TEST(Optim, ALoadedStateIsCheckedWhole) {
  std::vector<Tensor> p{randn({2, 3}, kFloat64).requires_grad_(), randn({4}, kFloat64).requires_grad_()};
  optim::Adam a(p, {});
  for (const Tensor& t : p) t.set_grad(ones_like(t));
  a.step();
  const nn::StateDict good = a.state_dict();
  optim::Adam b(p, {});
  const nn::StateDict before = b.state_dict();
  auto refused = [&](const std::string& key, const Tensor& value, std::vector<std::string> needles) {
    nn::StateDict s = good;
    if (value.defined()) s[key] = value;
    else s.erase(key);
    needles.insert(needles.begin(), "[load_state_dict]");
    expect_error([&] { b.load_state_dict(s); }, needles);
    EXPECT_EQ(b.state_dict().size(), before.size()) << key << ": the state changed although refused";
  };
  const auto number = [](double v) { return scalar_tensor(v, kFloat64); };
  refused("param_groups.0.beta1", number(5), {"param_groups.0.*", "invalid betas (5"});
  refused("param_groups.0.eps", number(-1), {"param_groups.0.*", "invalid epsilon -1"});
  refused("param_groups.0.lr", number(-0.5), {"param_groups.0.lr' is -0.5"});
  refused("param_groups.0.amsgrad", number(std::nan("")), {"param_groups.0.amsgrad' is nan", "finite"});
  refused("param_groups.0.amsgrad", number(0.5), {"param_groups.0.amsgrad' is 0.5", "a flag"});
  refused("param_groups.0.weight_decay", number(INFINITY), {"weight_decay' is inf"});
  refused("state.0.step", number(std::nan("")), {"state.0.step' is nan"});
  refused("state.0.step", number(-5), {"state.0.step' is -5", "whole number >= 0"});
  refused("state.1.step", number(2.5), {"state.1.step' is 2.5"});
  refused("state.0.exp_avg", number(0.5), {"state.0.exp_avg' has shape []", "[2, 3]"});
  refused("state.99.exp_avg", zeros({2, 3}, kFloat64), {"unknown entry 'state.99.exp_avg'", "2 parameters"});
  refused("param_groups.0.momentum", number(0.9), {"unknown entry 'param_groups.0.momentum'"});
  refused("param_groups.0.params", tensor<int64_t>({7, 1}), {"parameter number 7 at position 0 (expected 0)"});
  refused("param_groups.0.params", tensor<double>({0, 1}), {"not a list of parameter numbers"});
  refused("param_groups.0.beta2", Tensor(), {"Adam state has no 'param_groups.0.beta2'"});
  // A moment missing from a parameter that has taken steps (it would restart
  // from zeros), one Adam does not keep, max_exp_avg_sq missing with amsgrad.
  refused("state.0.exp_avg", Tensor(), {"parameter 0 has taken 1 step but has no 'state.0.exp_avg'"});
  refused("state.1.exp_avg_sq", Tensor(), {"has no 'state.1.exp_avg_sq'"});
  refused("state.0.momentum_buffer", zeros({2, 3}, kFloat64),
          {"'state.0.momentum_buffer' is no state of Adam", "exp_avg, exp_avg_sq, max_exp_avg_sq"});
  refused("param_groups.0.amsgrad", number(1), {"has no 'state.0.max_exp_avg_sq'"});
  b.load_state_dict(good);  // and the state it came from still loads
  EXPECT_EQ(b.steps(), 1);
}

TEST(Optim, ClipGradValue) {
  Tensor a = zeros({4}, kFloat64).requires_grad_();
  set_grad(a, {-3, 0.5, 2, -0.1});
  optim::clip_grad_value_({a}, 1.0);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{-1, 0.5, 1, -0.1}));
  expect_error([&] { optim::clip_grad_value_({a}, -1); }, {"clip_grad_value_", "-1"});
}

// The lrs a scheduler gives over `epochs` steps (epoch 0 first).
std::vector<double> lrs(optim::LRScheduler& s, int epochs) {
  std::vector<double> out{s.optimizer().lr()};
  for (int e = 1; e < epochs; ++e) {
    s.step();
    out.push_back(s.optimizer().lr());
    EXPECT_EQ(s.get_last_lr().at(0), out.back());
  }
  return out;
}

void expect_lrs(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << what << " epoch " << i;
}

TEST(LRScheduler, SchedulesMatchPyTorchs) {
  auto sgd = [] { return optim::SGD({tensor<double>({1.0}).requires_grad_()}, optim::SGDOptions{.lr = 1.0}); };
  {
    auto o = sgd();
    optim::StepLR s(o, 2, 0.5);
    expect_lrs(lrs(s, 6), {1, 1, 0.5, 0.5, 0.25, 0.25}, "StepLR");
  }
  {
    auto o = sgd();
    optim::MultiStepLR s(o, {1, 4}, 0.1);
    expect_lrs(lrs(s, 6), {1, 0.1, 0.1, 0.1, 0.01, 0.01}, "MultiStepLR");
  }
  {
    auto o = sgd();
    optim::ExponentialLR s(o, 0.9);
    expect_lrs(lrs(s, 4), {1, 0.9, 0.81, 0.729}, "ExponentialLR");
  }
  {
    auto o = sgd();
    optim::CosineAnnealingLR s(o, 4, 0.2);
    const double c1 = 0.2 + 0.8 * (1 + std::cos(M_PI / 4)) / 2, c3 = 0.2 + 0.8 * (1 + std::cos(3 * M_PI / 4)) / 2;
    expect_lrs(lrs(s, 5), {1, c1, 0.6, c3, 0.2}, "CosineAnnealingLR");
  }
  {
    auto o = sgd();
    optim::LinearLR s(o, 0.5, 1.0, 4);
    expect_lrs(lrs(s, 6), {0.5, 0.625, 0.75, 0.875, 1, 1}, "LinearLR");
  }
  {
    auto o = sgd();
    optim::LambdaLR s(o, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
    expect_lrs(lrs(s, 3), {1, 0.5, 1.0 / 3}, "LambdaLR");
  }
  {
    // OneCycleLR(max_lr=1, total_steps=10): starts at 1/25, peaks at step 2
    // (0.3 * 10 - 1), ends at 1/25/1e4 at step 9 (cosine both ways).
    auto o = sgd();
    optim::OneCycleLR s(o, 1.0, 10);
    const auto got = lrs(s, 10);
    auto cos_anneal = [](double a, double b, double pct) { return b + (a - b) / 2 * (1 + std::cos(M_PI * pct)); };
    std::vector<double> want;
    for (int e = 0; e < 10; ++e)
      want.push_back(e <= 2 ? cos_anneal(0.04, 1.0, e / 2.0) : cos_anneal(1.0, 0.04 / 1e4, (e - 2) / 7.0));
    expect_lrs(got, want, "OneCycleLR");
    s.step();  // step 10 = total_steps: allowed, as in PyTorch
    expect_error([&] { s.step(); }, {"OneCycleLR", "total_steps is 10"});
  }
  {
    // Warmup then decay: LinearLR for 3 epochs, then ExponentialLR from its own epoch 0.
    auto o = sgd();
    auto warm = std::make_shared<optim::LinearLR>(o, 0.25, 1.0, 3);
    auto decay = std::make_shared<optim::ExponentialLR>(o, 0.5);
    optim::SequentialLR s(o, {warm, decay}, {3});
    expect_lrs(lrs(s, 6), {0.25, 0.5, 0.75, 1, 0.5, 0.25}, "SequentialLR");
    expect_error([&] { optim::SequentialLR bad(o, {warm, decay}, {}); }, {"SequentialLR", "one milestone fewer"});
  }
}

TEST(LRScheduler, GroupsStateDictAndResume) {
  Tensor a = tensor<double>({1.0}).requires_grad_(), b = tensor<double>({1.0}).requires_grad_();
  optim::SGD o({optim::ParamGroup({a}), optim::ParamGroup({b}, {{"lr", 0.1}})}, optim::SGDOptions{.lr = 1.0});
  optim::StepLR s(o, 1, 0.5);
  s.step(), s.step();
  EXPECT_EQ(s.get_last_lr(), (std::vector<double>{0.25, 0.025}));
  // A resumed run: a fresh optimizer and scheduler loaded from the state dicts continue the schedule.
  Tensor a2 = tensor<double>({1.0}).requires_grad_(), b2 = tensor<double>({1.0}).requires_grad_();
  optim::SGD o2({optim::ParamGroup({a2}), optim::ParamGroup({b2}, {{"lr", 0.1}})}, optim::SGDOptions{.lr = 1.0});
  o2.load_state_dict(o.state_dict());
  optim::StepLR s2(o2, 1, 0.5);
  s2.load_state_dict(s.state_dict());
  s.step(), s2.step();
  EXPECT_EQ(s2.get_last_lr(), s.get_last_lr());
  EXPECT_EQ(o2.param_groups()[1]["lr"], 0.0125);
  expect_error([&] { s2.load_state_dict({}); }, {"load_state_dict", "last_epoch"});
}

TEST(LRScheduler, ReduceLROnPlateau) {
  optim::SGD o({tensor<double>({1.0}).requires_grad_()}, optim::SGDOptions{.lr = 1.0});
  optim::ReduceLROnPlateau s(o, "min", 0.5, 2, 0.1, "rel", 1, 0.2);
  // Improvements of under 10% of the best do not count (9.0 is not below
  // 10 * 0.9; 8.9 is, and becomes the best); the 3rd bad epoch in a row
  // halves the lr, the next is a cooldown epoch; never below min_lr.
  std::vector<double> got;
  for (double metric : {10.0, 9.5, 9.4, 9.3, 9.2, 9.1, 9.0, 8.9, 8.8, 8.7, 8.6, 8.5, 8.4, 8.3, 8.2, 8.1}) {
    s.step(metric);
    got.push_back(s.get_last_lr()[0]);
  }
  expect_lrs(got, {1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2, 0.2}, "plateau");
  optim::ReduceLROnPlateau restored(o, "min", 0.5, 2, 0.1, "rel", 1, 0.2);
  restored.load_state_dict(s.state_dict());
  EXPECT_EQ(restored.state_dict().at("best").item<double>(), 8.9);
  expect_error([&] { optim::ReduceLROnPlateau bad(o, "lowest"); }, {"ReduceLROnPlateau", "'lowest'"});
}

}  // namespace
}  // namespace kiln::test
