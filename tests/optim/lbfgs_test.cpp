// LBFGS: its iterations against the algorithm written here over plain
// doubles (the two-loop recursion, PyTorch's first step and curvature
// test), convergence with and without the strong-Wolfe line search
// (Rosenbrock; a quadratic against linalg::solve), the state_dict round
// trip continuing the exact trajectory, and errors.
#include <cmath>

#include "kiln/linalg.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using Vec = std::vector<double>;
double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// f(x) = 1/2 x^T A x - b^T x: gradient A x - b.
struct Quadratic {
  Tensor A, b;
  Vec grad(const Vec& x) const {
    const std::vector<double> a = values(A), bv = values(b);
    const size_t n = x.size();
    Vec g(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = -bv[i];
      for (size_t j = 0; j < n; ++j) g[i] += a[i * n + j] * x[j];
    }
    return g;
  }
  Tensor loss(const Tensor& x) const { return 0.5 * sum(x * matmul(A, x)) - sum(b * x); }
};

// max_iter iterations of L-BFGS without line search from x (PyTorch's rules).
Vec reference_lbfgs(const Quadratic& q, Vec x, double lr, int iterations, size_t history) {
  const size_t n = x.size();
  Vec g = q.grad(x), d(n), g_prev;
  std::vector<Vec> dirs, stps;
  Vec ro;
  double t = 0, h_diag = 1;
  for (int it = 1; it <= iterations; ++it) {
    if (it == 1) {
      for (size_t i = 0; i < n; ++i) d[i] = -g[i];
    } else {
      Vec y(n), s(n);
      for (size_t i = 0; i < n; ++i) y[i] = g[i] - g_prev[i], s[i] = d[i] * t;
      const double ys = dotv(y, s);
      if (ys > 1e-10) {
        if (dirs.size() == history) dirs.erase(dirs.begin()), stps.erase(stps.begin()), ro.erase(ro.begin());
        dirs.push_back(y), stps.push_back(s), ro.push_back(1 / ys);
        h_diag = ys / dotv(y, y);
      }
      Vec qv(n), al(dirs.size());
      for (size_t i = 0; i < n; ++i) qv[i] = -g[i];
      for (size_t k = dirs.size(); k-- > 0;) {
        al[k] = dotv(stps[k], qv) * ro[k];
        for (size_t i = 0; i < n; ++i) qv[i] -= al[k] * dirs[k][i];
      }
      for (size_t i = 0; i < n; ++i) d[i] = qv[i] * h_diag;
      for (size_t k = 0; k < dirs.size(); ++k) {
        const double be = dotv(dirs[k], d) * ro[k];
        for (size_t i = 0; i < n; ++i) d[i] += stps[k][i] * (al[k] - be);
      }
    }
    g_prev = g;
    double l1 = 0;
    for (double v : g) l1 += std::fabs(v);
    t = it == 1 ? std::min(1.0, 1.0 / l1) * lr : lr;
    for (size_t i = 0; i < n; ++i) x[i] += t * d[i];
    g = q.grad(x);
  }
  return x;
}

Quadratic random_quadratic(int64_t n) {
  const Tensor M = randn({n, n}, kFloat64);
  return {matmul(M, M.t()) + static_cast<double>(n) * eye(n, {}, kFloat64), randn({n}, kFloat64)};
}

std::function<Tensor()> closure_for(optim::Optimizer& opt, const std::function<Tensor()>& loss) {
  return [&opt, loss] {
    opt.zero_grad();
    Tensor l = loss();
    l.backward();
    return l;
  };
}

TEST(LBFGS, IterationsMatchTheAlgorithmOnDoubles) {
  manual_seed(5401);
  const Quadratic q = random_quadratic(6);
  for (size_t history : {size_t{100}, size_t{2}}) {
    const Tensor x = randn({6}, kFloat64).requires_grad_();
    const Vec start = values(x);
    optim::LBFGSOptions o;
    o.lr = 0.1, o.max_iter = 5, o.history_size = static_cast<int64_t>(history);
    optim::LBFGS opt({x}, o);
    const Tensor first = opt.step(closure_for(opt, [&] { return q.loss(x); }));
    EXPECT_NEAR(first.item<double>(), q.loss(tensor(start)).item<double>(), 1e-12);  // the first loss
    expect_close(x.detach(), reference_lbfgs(q, start, 0.1, 5, history), 1e-10, 1e-12,
                 "5 iterations, history " + std::to_string(history));
  }
}

TEST(LBFGS, ConvergesWithAndWithoutLineSearch) {
  manual_seed(5402);
  const Quadratic q = random_quadratic(8);
  const Tensor solution = linalg::solve(q.A, q.b);
  for (const std::string search : {"", "strong_wolfe"}) {
    const Tensor x = zeros({8}, kFloat64).requires_grad_();
    optim::LBFGSOptions o;
    o.line_search_fn = search;
    o.tolerance_change = 1e-14;  // the default stops once the loss moves by < 1e-9, near 1e-5 here
    if (search.empty()) o.lr = 0.1;
    optim::LBFGS opt({x}, o);
    for (int i = 0; i < 10; ++i) opt.step(closure_for(opt, [&] { return q.loss(x); }));
    EXPECT_LT(max(abs(x.detach() - solution)).item<double>(), 1e-6) << "line search '" << search << "'";
  }
  // Rosenbrock from (-1.5, 2), two parameters: the minimum (1, 1).
  const Tensor a = full({1}, -1.5, kFloat64).requires_grad_(), b = full({1}, 2.0, kFloat64).requires_grad_();
  optim::LBFGSOptions o;
  o.line_search_fn = "strong_wolfe";
  o.max_iter = 100;
  optim::LBFGS opt({a, b}, o);
  opt.step(closure_for(opt, [&] { return sum(square(1 - a) + 100 * square(b - square(a))); }));
  EXPECT_NEAR(a.item<double>(), 1.0, 1e-5);
  EXPECT_NEAR(b.item<double>(), 1.0, 1e-5);
}

TEST(LBFGS, StateDictContinuesTheSameTrajectory) {
  manual_seed(5403);
  const Quadratic q = random_quadratic(5);
  const Tensor start = randn({5}, kFloat64);
  optim::LBFGSOptions o;
  o.lr = 0.05, o.max_iter = 3, o.history_size = 4;
  const Tensor x = start.clone().requires_grad_();
  optim::LBFGS opt({x}, o);
  for (int i = 0; i < 2; ++i) opt.step(closure_for(opt, [&] { return q.loss(x); }));
  const nn::StateDict saved = opt.state_dict();
  EXPECT_EQ(saved.at("state.0.old_dirs").size(1), 5);
  const Tensor y = x.detach().clone().requires_grad_();
  optim::LBFGS resumed({y}, o);
  resumed.load_state_dict(saved);
  for (int i = 0; i < 2; ++i) {
    opt.step(closure_for(opt, [&] { return q.loss(x); }));
    resumed.step(closure_for(resumed, [&] { return q.loss(y); }));
  }
  EXPECT_EQ(values(x.detach()), values(y.detach()));
  // A state of other sizes is refused.
  const Tensor z = zeros({3}, kFloat64).requires_grad_();
  optim::LBFGS other({z}, o);
  expect_error([&] { other.load_state_dict(saved); }, {"[load_state_dict]", "does not fit 3 parameters"});
}

TEST(LBFGS, Errors) {
  const Tensor x = zeros({2}).requires_grad_();
  optim::LBFGS opt({x});
  expect_error([&] { opt.step(); }, {"[LBFGS]", "closure"});
  expect_error([&] { opt.add_param_group(optim::ParamGroup({zeros({1}).requires_grad_()})); },
               {"[LBFGS]", "parameter groups"});
  EXPECT_EQ(opt.param_groups().size(), 1u);
  optim::LBFGSOptions bad;
  bad.line_search_fn = "backtracking";
  expect_error([&] { optim::LBFGS({x}, bad); }, {"[LBFGS]", "'backtracking'"});
  expect_error([&] { optim::LBFGS({x, zeros({1}, kFloat64).requires_grad_()}); }, {"[LBFGS]", "one dtype"});
}

}  // namespace
}  // namespace kiln::test
