// gradcheck: analytical gradients (one backward per output element) against
// central differences in float64.
#include <cmath>

#include "autograd/graph.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::autograd {

bool gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  for (const Tensor& in : inputs)
    check(!in.requires_grad() || in.dtype() == kFloat64, "gradcheck",
          "inputs that require grad must be float64 but got ", in.dtype());
  std::vector<size_t> diff;  // inputs that require grad
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) diff.push_back(i);
  const std::vector<Tensor> outs = fn(inputs);

  // Numerical Jacobian column by column: perturb one input element at a time.
  auto eval = [&]() {
    NoGradGuard no_grad;
    std::vector<Tensor> o = fn(inputs);
    std::vector<std::vector<double>> flat;
    for (const Tensor& t : o) {
      Tensor c = t.to(kFloat64).contiguous();
      flat.emplace_back(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    }
    return flat;
  };
  // All analytical rows first: perturbing the inputs below bumps their
  // version counters, after which this graph can no longer be walked.
  std::vector<Tensor> diff_inputs;
  for (size_t i : diff) diff_inputs.push_back(inputs[i]);
  std::vector<std::vector<std::vector<double>>> analytic(outs.size());  // [output][k][flat input elems]
  int64_t total_in = 0;
  for (size_t i : diff) total_in += inputs[i].numel();
  for (size_t oi = 0; oi < outs.size(); ++oi) {
    if (!is_floating(outs[oi].dtype())) continue;
    if (!outs[oi].requires_grad()) {  // no history: its analytical Jacobian is zero, which is checked too
      analytic[oi].assign(static_cast<size_t>(outs[oi].numel()), std::vector<double>(static_cast<size_t>(total_in), 0.0));
      continue;
    }
    for (int64_t k = 0; k < outs[oi].numel(); ++k) {
      Tensor seed = zeros(outs[oi].sizes(), outs[oi].dtype());
      seed.view({-1}).select(0, k).fill_(1);
      std::vector<Tensor> g = grad({outs[oi]}, diff_inputs, {seed}, true, true);
      std::vector<double> row;
      for (size_t j = 0; j < diff.size(); ++j) {
        const int64_t n = inputs[diff[j]].numel();
        if (!g[j].defined()) {
          row.insert(row.end(), static_cast<size_t>(n), 0.0);
          continue;
        }
        Tensor c = g[j].to(kFloat64).contiguous();
        row.insert(row.end(), c.data_ptr<double>(), c.data_ptr<double>() + n);
      }
      analytic[oi].push_back(std::move(row));
    }
  }
  int64_t col = 0;
  for (size_t j = 0; j < diff.size(); ++j) {
    const Tensor& x = inputs[diff[j]];
    NoGradGuard no_grad;
    Tensor xv = x.view({-1});
    for (int64_t e = 0; e < x.numel(); ++e, ++col) {
      const double orig = xv.select(0, e).item<double>();
      xv.select(0, e).fill_(orig + opt.eps);
      const auto plus = eval();
      xv.select(0, e).fill_(orig - opt.eps);
      const auto minus = eval();
      xv.select(0, e).fill_(orig);
      for (size_t oi = 0; oi < outs.size(); ++oi)
        for (size_t k = 0; k < analytic[oi].size(); ++k) {
          const double numeric = (plus[oi][k] - minus[oi][k]) / (2 * opt.eps);
          const double a = analytic[oi][k][static_cast<size_t>(col)];
          if (!(std::fabs(a - numeric) <= opt.atol + opt.rtol * std::fabs(numeric)))
            fail("gradcheck", "Jacobian mismatch for output ", oi, " element ", k, " with respect to input ", diff[j],
                 " element ", e, ": analytical ", a, " vs numerical ", numeric);
        }
    }
  }
  return true;
}

bool gradgradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                   const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  // The first-order gradients of sum(fn(x)[i] * w[i]), as functions of x,
  // built with create_graph: gradcheck then differentiates them again.
  std::vector<Tensor> w;
  {
    EnableGradGuard grad_mode;
    for (const Tensor& o : fn(inputs)) w.push_back(is_floating(o.dtype()) ? randn(o.sizes(), o.dtype()) : Tensor());
  }
  auto first_order = [&](const std::vector<Tensor>& in) {
    EnableGradGuard grad_mode;  // gradcheck evaluates under no_grad
    const std::vector<Tensor> outs = fn(in);
    std::vector<Tensor> roots, seeds, wrt;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].requires_grad()) roots.push_back(outs[i]), seeds.push_back(w[i]);
    for (const Tensor& x : in)
      if (x.requires_grad()) wrt.push_back(x);
    std::vector<Tensor> g = roots.empty() ? std::vector<Tensor>(wrt.size())
                                          : grad(roots, wrt, seeds, true, /*allow_unused=*/true, /*create_graph=*/true);
    for (size_t j = 0; j < g.size(); ++j)
      if (!g[j].defined()) g[j] = zeros(wrt[j].sizes(), wrt[j].dtype());
    return g;
  };
  return gradcheck(first_order, inputs, opt);
}

}  // namespace kiln::autograd
