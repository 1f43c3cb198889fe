// L-BFGS as PyTorch's torch.optim.LBFGS runs it (torch/optim/lbfgs.py): the
// two-loop recursion over the curvature pairs (s, y) with y^T s > 1e-10,
// the scaling H_diag = y^T s / y^T y, the same stopping tests, and the
// strong-Wolfe line search with cubic interpolation and its zoom phase.
// The parameters are seen as one flat vector (their gradients gathered,
// zeros for a parameter without one); scalars are read as doubles.
#include <algorithm>
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/optim.h"

namespace kiln::optim {
namespace {

double dot_of(const Tensor& a, const Tensor& b) { return sum(a * b).item<double>(); }
double abs_max(const Tensor& a) { return a.numel() ? amax(abs(a)).item<double>() : 0.0; }
double abs_sum(const Tensor& a) { return sum(abs(a)).item<double>(); }

std::map<std::string, double> defaults_of(const LBFGSOptions& o) {
  return {{"lr", o.lr},
          {"max_iter", static_cast<double>(o.max_iter)},
          {"max_eval", static_cast<double>(o.max_eval.value_or(o.max_iter * 5 / 4))},
          {"tolerance_grad", o.tolerance_grad},
          {"tolerance_change", o.tolerance_change},
          {"history_size", static_cast<double>(o.history_size)}};
}

// The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), within
// bounds (default: between x1 and x2); their middle if it has none.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = {}) {
  const auto [lo, hi] = bounds.value_or(x1 <= x2 ? std::pair{x1, x2} : std::pair{x2, x1});
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(d2_square);
  const double at = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                             : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(at, lo), hi);
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions o)
    : Optimizer("LBFGS", std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(o)),
      line_search_fn_(o.line_search_fn) {
  check(line_search_fn_.empty() || line_search_fn_ == "strong_wolfe", "LBFGS",
        "expected line_search_fn '' or 'strong_wolfe' but got '", line_search_fn_, "'");
  for (const ParamGroup& g : groups_) check_group(g);
  for (const Tensor& p : groups_[0].params)
    check(p.dtype() == groups_[0].params[0].dtype(), "LBFGS", "expected parameters of one dtype but got ",
          groups_[0].params[0].dtype(), " and ", p.dtype());
}

void LBFGS::check_group(const ParamGroup& g) const {
  check(groups_.size() == 1, "LBFGS", "LBFGS does not support per-parameter options (parameter groups)");
  check(g["lr"] > 0, "LBFGS", "invalid learning rate ", g["lr"]);
  check(g["max_iter"] >= 1 && g["max_eval"] >= 1 && g["history_size"] >= 1, "LBFGS",
        "expected max_iter, max_eval and history_size of at least 1 but got ", g["max_iter"], ", ", g["max_eval"],
        ", ", g["history_size"]);
}

void LBFGS::step() { fail("LBFGS", "step needs a closure that re-evaluates the loss: call step(closure)"); }

Tensor LBFGS::gather_flat_grad() const {
  std::vector<Tensor> parts;
  for (const Tensor& p : groups_[0].params)
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : zeros({p.numel()}, p.options()));
  return cat(parts);
}

void LBFGS::add_to_params(double t, const Tensor& d) {
  int64_t offset = 0;
  for (const Tensor& p : groups_[0].params) {
    p.add_(d.narrow(0, offset, p.numel()).view(p.sizes()), t);
    offset += p.numel();
  }
}

void LBFGS::set_params(const std::vector<Tensor>& x) {
  for (size_t i = 0; i < x.size(); ++i) groups_[0].params[i].copy_(x[i]);
}

LBFGS::Evaluation LBFGS::evaluate_at(const std::function<Tensor()>& closure, const std::vector<Tensor>& x, double t,
                                     const Tensor& d) {
  add_to_params(t, d);
  double loss;
  {
    EnableGradGuard grad;
    loss = closure().item<double>();
  }
  Evaluation e{loss, gather_flat_grad()};
  set_params(x);
  return e;
}

LBFGS::LineSearchResult LBFGS::strong_wolfe(const std::function<Tensor()>& closure, const std::vector<Tensor>& x,
                                            double t, const Tensor& d, double f, const Tensor& g, double gtd) {
  constexpr double c1 = 1e-4, c2 = 0.9;
  constexpr int64_t max_ls = 25;
  const double tolerance_change = groups_[0]["tolerance_change"];
  const double d_norm = abs_max(d);
  Evaluation e = evaluate_at(closure, x, t, d);
  int64_t evals = 1, ls_iter = 0;
  double gtd_new = dot_of(e.flat_grad, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  // The bracket [a, b] with its losses, gradients and slopes.
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    if (e.loss > f + c1 * t * gtd || (ls_iter > 1 && e.loss >= f_prev) || gtd_new >= 0) {
      bracket = {t_prev, t}, bracket_f = {f_prev, e.loss}, bracket_g = {g_prev, e.flat_grad},
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::fabs(gtd_new) <= -c2 * gtd) {
      bracket = {t}, bracket_f = {e.loss}, bracket_g = {e.flat_grad};
      done = true;
      break;
    }
    // Extrapolate: the cubic's minimiser within [t + 0.01 (t - t_prev), 10 t].
    const double next = cubic_interpolate(t_prev, f_prev, gtd_prev, t, e.loss, gtd_new,
                                          std::pair{t + 0.01 * (t - t_prev), t * 10});
    t_prev = t, f_prev = e.loss, g_prev = e.flat_grad, gtd_prev = gtd_new;
    t = next;
    e = evaluate_at(closure, x, t, d);
    ++evals, ++ls_iter;
    gtd_new = dot_of(e.flat_grad, d);
  }
  if (ls_iter == max_ls) bracket = {0, t}, bracket_f = {f, e.loss}, bracket_g = {g, e.flat_grad};
  // Zoom: shrink the bracket until the strong Wolfe conditions hold.
  bool insufficient_progress = false;
  size_t low = 0, high = 1;
  if (bracket.size() == 2 && bracket_f[0] > bracket_f[1]) low = 1, high = 0;
  while (!done && ls_iter < max_ls) {
    if (std::fabs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    // A point too near an end of the bracket moves 10% of it inwards when
    // the last one did not progress either (or t fell on or past an end).
    const double b_max = std::max(bracket[0], bracket[1]), b_min = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (b_max - b_min);
    if (std::min(b_max - t, t - b_min) < eps) {
      if (insufficient_progress || t >= b_max || t <= b_min) {
        t = std::fabs(t - b_max) < std::fabs(t - b_min) ? b_max - eps : b_min + eps;
        insufficient_progress = false;
      } else {
        insufficient_progress = true;
      }
    } else {
      insufficient_progress = false;
    }
    e = evaluate_at(closure, x, t, d);
    ++evals, ++ls_iter;
    gtd_new = dot_of(e.flat_grad, d);
    if (e.loss > f + c1 * t * gtd || e.loss >= bracket_f[low]) {
      bracket[high] = t, bracket_f[high] = e.loss, bracket_g[high] = e.flat_grad, bracket_gtd[high] = gtd_new;
      if (bracket_f[0] <= bracket_f[1]) low = 0, high = 1;
      else low = 1, high = 0;
    } else {
      if (std::fabs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low], bracket_g[high] = bracket_g[low],
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = e.loss, bracket_g[low] = e.flat_grad, bracket_gtd[low] = gtd_new;
    }
  }
  if (bracket.size() == 1) low = 0;
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

Tensor LBFGS::step(const std::function<Tensor()>& closure) {
  const ParamGroup& grp = groups_[0];
  const double lr = grp["lr"], tolerance_grad = grp["tolerance_grad"], tolerance_change = grp["tolerance_change"];
  const int64_t max_iter = static_cast<int64_t>(grp["max_iter"]), max_eval = static_cast<int64_t>(grp["max_eval"]);
  const size_t history_size = static_cast<size_t>(grp["history_size"]);
  Tensor orig_loss;
  {
    EnableGradGuard grad;
    orig_loss = closure();
  }
  NoGradGuard no_grad;
  double loss = orig_loss.item<double>();
  int64_t current_evals = 1;
  ++func_evals_;
  Tensor flat_grad = gather_flat_grad();
  bool opt_cond = abs_max(flat_grad) <= tolerance_grad;
  if (opt_cond) return orig_loss;
  for (int64_t n_iter = 1; n_iter <= max_iter; ++n_iter) {
    ++n_iter_;
    if (n_iter_ == 1) {
      d_ = -flat_grad;
      old_dirs_.clear(), old_stps_.clear(), ro_.clear();
      H_diag_ = 1;
    } else {
      // The newest curvature pair, kept when it has positive curvature.
      const Tensor y = flat_grad - prev_flat_grad_, s = d_ * t_;
      const double ys = dot_of(y, s);
      if (ys > 1e-10) {
        if (old_dirs_.size() == history_size) {
          old_dirs_.erase(old_dirs_.begin()), old_stps_.erase(old_stps_.begin()), ro_.erase(ro_.begin());
        }
        old_dirs_.push_back(y), old_stps_.push_back(s), ro_.push_back(1 / ys);
        H_diag_ = ys / dot_of(y, y);
      }
      // The two-loop recursion: d = -H g.
      const size_t k = old_dirs_.size();
      std::vector<double> al(k);
      Tensor q = -flat_grad;
      for (size_t i = k; i-- > 0;) {
        al[i] = dot_of(old_stps_[i], q) * ro_[i];
        q = q - old_dirs_[i] * al[i];
      }
      Tensor r = q * H_diag_;
      for (size_t i = 0; i < k; ++i) {
        const double be_i = dot_of(old_dirs_[i], r) * ro_[i];
        r = r + old_stps_[i] * (al[i] - be_i);
      }
      d_ = r;
    }
    prev_flat_grad_ = flat_grad.clone();
    prev_loss_ = loss;
    t_ = n_iter_ == 1 ? std::min(1.0, 1.0 / abs_sum(flat_grad)) * lr : lr;
    const double gtd = dot_of(flat_grad, d_);
    if (gtd > -tolerance_change) break;  // not a descent direction
    int64_t ls_evals = 0;
    if (line_search_fn_ == "strong_wolfe") {
      std::vector<Tensor> x;
      for (const Tensor& p : grp.params) x.push_back(p.clone());
      const LineSearchResult r = strong_wolfe(closure, x, t_, d_, loss, flat_grad, gtd);
      loss = r.loss, flat_grad = r.flat_grad, t_ = r.t, ls_evals = r.evals;
      add_to_params(t_, d_);
      opt_cond = abs_max(flat_grad) <= tolerance_grad;
    } else {
      add_to_params(t_, d_);
      if (n_iter != max_iter) {
        {
          EnableGradGuard grad;
          loss = closure().item<double>();
        }
        flat_grad = gather_flat_grad();
        opt_cond = abs_max(flat_grad) <= tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    func_evals_ += ls_evals;
    if (n_iter == max_iter || current_evals >= max_eval || opt_cond) break;
    if (abs_max(d_) * std::fabs(t_) <= tolerance_change) break;  // the step is too small
    if (std::fabs(loss - prev_loss_) < tolerance_change) break;  // the loss no longer moves
  }
  return orig_loss;
}

nn::StateDict LBFGS::state_dict() const {
  nn::StateDict out = Optimizer::state_dict();
  const std::string k = "state.0.";
  auto number = [](double v) { return scalar_tensor(v, kFloat64); };
  out.emplace(k + "func_evals", number(static_cast<double>(func_evals_)));
  out.emplace(k + "n_iter", number(static_cast<double>(n_iter_)));
  if (n_iter_ == 0) return out;
  out.emplace(k + "d", d_);
  out.emplace(k + "t", number(t_));
  out.emplace(k + "H_diag", number(H_diag_));
  out.emplace(k + "prev_flat_grad", prev_flat_grad_);
  out.emplace(k + "prev_loss", number(prev_loss_));
  const int64_t n = d_.numel();
  out.emplace(k + "old_dirs", old_dirs_.empty() ? zeros({0, n}, d_.options()) : stack(old_dirs_));
  out.emplace(k + "old_stps", old_stps_.empty() ? zeros({0, n}, d_.options()) : stack(old_stps_));
  out.emplace(k + "ro", tensor(ro_));
  return out;
}

void LBFGS::load_state_dict(const nn::StateDict& state) {
  nn::StateDict base;
  std::map<std::string, Tensor> own;
  for (const auto& [k, t] : state) {
    if (k.rfind("state.0.", 0) == 0) own.emplace(k.substr(8), t);
    else base.emplace(k, t);
  }
  auto take = [&](const char* name) {
    auto it = own.find(name);
    check(it != own.end(), "load_state_dict", "LBFGS state has no 'state.0.", name, "'");
    return it->second;
  };
  const int64_t n_iter = static_cast<int64_t>(take("n_iter").item<double>());
  const int64_t func_evals = static_cast<int64_t>(take("func_evals").item<double>());
  int64_t n = 0;
  for (const Tensor& p : groups_[0].params) n += p.numel();
  Tensor d, prev, dirs, stps, ro;
  if (n_iter > 0) {
    d = take("d"), prev = take("prev_flat_grad"), dirs = take("old_dirs"), stps = take("old_stps"), ro = take("ro");
    check(d.numel() == n && prev.numel() == n && dirs.dim() == 2 && dirs.size(1) == n && stps.sizes() == dirs.sizes() &&
              ro.numel() == dirs.size(0),
          "load_state_dict", "LBFGS state of ", d.numel(), " parameters with ", dirs.size(0),
          " curvature pairs does not fit ", n, " parameters");
  }
  Optimizer::load_state_dict(base);
  n_iter_ = n_iter, func_evals_ = func_evals;
  old_dirs_.clear(), old_stps_.clear(), ro_.clear();
  if (n_iter == 0) return;
  const DType dt = groups_[0].params[0].dtype();
  d_ = d.to(dt).clone(), prev_flat_grad_ = prev.to(dt).clone();
  t_ = take("t").item<double>(), H_diag_ = take("H_diag").item<double>(), prev_loss_ = take("prev_loss").item<double>();
  for (int64_t i = 0; i < dirs.size(0); ++i) {
    old_dirs_.push_back(dirs.select(0, i).to(dt).clone());
    old_stps_.push_back(stps.select(0, i).to(dt).clone());
    ro_.push_back(ro.to(kFloat64).select(0, i).item<double>());
  }
}

}  // namespace kiln::optim
