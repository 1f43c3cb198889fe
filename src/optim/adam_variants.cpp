// Adamax, NAdam and RAdam: Adam's moment estimates with PyTorch's variations
// (an infinity-norm second moment; Nesterov momentum with its decay
// schedule; a rectified adaptive step).
#include <cmath>

#include "kiln/error.h"
#include "kiln/optim.h"
#include "optim/state_slot.h"

namespace kiln::optim {

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions o)
    : Adamax(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions o)
    : Optimizer("Adamax", std::move(groups),
                {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay}}) {
  for (const ParamGroup& g : groups_) check_group(g);
}
void Adamax::check_group(const ParamGroup& g) const { detail::check_adam_like("Adamax", g); }

void Adamax::step() {
  for_each_param_with_grad([](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double beta1 = grp["beta1"], beta2 = grp["beta2"];
    const double t = static_cast<double>(++s.step);
    const Tensor g = detail::decayed_grad(grp, p, false);
    Tensor& exp_avg = detail::state_slot(s.tensors, "exp_avg", p);
    Tensor& exp_inf = detail::state_slot(s.tensors, "exp_inf", p);
    exp_avg.mul_(beta1).add_(g, 1 - beta1);
    exp_inf.copy_(maximum(exp_inf * beta2, abs(g) + grp["eps"]));
    p.sub_(exp_avg / exp_inf * (grp["lr"] / (1 - std::pow(beta1, t))));
  });
}

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions o)
    : NAdam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
NAdam::NAdam(std::vector<ParamGroup> groups, NAdamOptions o)
    : Optimizer("NAdam", std::move(groups),
                {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
                 {"momentum_decay", o.momentum_decay}, {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0}}) {
  for (const ParamGroup& g : groups_) check_group(g);
}
void NAdam::check_group(const ParamGroup& g) const {
  detail::check_adam_like("NAdam", g);
  check(g["momentum_decay"] >= 0, "NAdam", "invalid momentum_decay ", g["momentum_decay"]);
}

// mu_t = beta1 (1 - 0.96^(t psi) / 2), the momentum of step t; the update
// mixes the gradient (weight 1 - mu_t) and the momentum (weight mu_{t+1}),
// each over its product of mus so far (state "mu_product").
void NAdam::step() {
  for_each_param_with_grad([](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double lr = grp["lr"], beta1 = grp["beta1"], beta2 = grp["beta2"], psi = grp["momentum_decay"];
    const double t = static_cast<double>(++s.step);
    const Tensor g = detail::decayed_grad(grp, p, grp["decoupled_weight_decay"] != 0);
    const double mu = beta1 * (1 - 0.5 * std::pow(0.96, t * psi));
    const double mu_next = beta1 * (1 - 0.5 * std::pow(0.96, (t + 1) * psi));
    auto it = s.tensors.find("mu_product");
    if (it == s.tensors.end()) it = s.tensors.emplace("mu_product", full({}, 1.0, kFloat64)).first;
    const double mu_product = it->second.item<double>() * mu;
    it->second.fill_(mu_product);
    const auto [exp_avg, exp_avg_sq] = detail::update_moments(s.tensors, p, g, beta1, beta2);
    const Tensor denom = sqrt(exp_avg_sq / (1 - std::pow(beta2, t))) + grp["eps"];
    p.sub_(g / denom * (lr * (1 - mu) / (1 - mu_product)));
    p.sub_(exp_avg / denom * (lr * mu_next / (1 - mu_product * mu_next)));
  });
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions o)
    : RAdam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
RAdam::RAdam(std::vector<ParamGroup> groups, RAdamOptions o)
    : Optimizer("RAdam", std::move(groups),
                {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
                 {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0}}) {
  for (const ParamGroup& g : groups_) check_group(g);
}
void RAdam::check_group(const ParamGroup& g) const { detail::check_adam_like("RAdam", g); }

// The adaptive step only once the second moment's variance is tractable
// (rho_t > 5), scaled by the rectification term; before that, momentum SGD.
void RAdam::step() {
  for_each_param_with_grad([](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double lr = grp["lr"], beta1 = grp["beta1"], beta2 = grp["beta2"];
    const double t = static_cast<double>(++s.step);
    const Tensor g = detail::decayed_grad(grp, p, grp["decoupled_weight_decay"] != 0);
    const auto [exp_avg, exp_avg_sq] = detail::update_moments(s.tensors, p, g, beta1, beta2);
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    const double rho_inf = 2 / (1 - beta2) - 1;
    const double rho_t = rho_inf - 2 * t * std::pow(beta2, t) / bc2;
    if (rho_t > 5) {
      const double rect =
          std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      p.sub_(exp_avg / (sqrt(exp_avg_sq) + grp["eps"]) * (lr / bc1 * std::sqrt(bc2) * rect));
    } else {
      p.sub_(exp_avg * (lr / bc1));
    }
  });
}

namespace {
const bool adamax_names =
    detail::register_state_names("Adamax", {{"exp_avg", "exp_inf"}, [](const ParamGroup&) {
                                              return std::vector<std::string>{"exp_avg", "exp_inf"};
                                            }});
const bool nadam_names =
    detail::register_state_names("NAdam", {{"exp_avg", "exp_avg_sq", "mu_product"}, [](const ParamGroup&) {
                                             return std::vector<std::string>{"exp_avg", "exp_avg_sq", "mu_product"};
                                           }});
const bool radam_names =
    detail::register_state_names("RAdam", {{"exp_avg", "exp_avg_sq"}, [](const ParamGroup&) {
                                             return std::vector<std::string>{"exp_avg", "exp_avg_sq"};
                                           }});
}  // namespace

}  // namespace kiln::optim
