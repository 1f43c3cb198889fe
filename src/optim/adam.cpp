// Adam and AdamW (PyTorch's rules; AdamW's weight decay decoupled).
#include <cmath>

#include "kiln/error.h"
#include "kiln/optim.h"
#include "optim/state_slot.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> defaults_of(const AdamOptions& o) {
  return {{"lr", o.lr},   {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam("Adam", std::move(groups), o, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(name), std::move(groups), defaults_of(o)), decoupled_(decoupled) {
  for (const ParamGroup& g : groups_) check_group(g);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam("AdamW", std::move(groups), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad}, true) {}

void Adam::check_group(const ParamGroup& g) const { detail::check_adam_like(name_.c_str(), g); }

int64_t Adam::steps() const { return state_.empty() ? 0 : state_[0].step; }

void Adam::step() {
  for_each_param_with_grad([&](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double lr = grp["lr"], beta1 = grp["beta1"], beta2 = grp["beta2"];
    const double t = static_cast<double>(++s.step);
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    const Tensor g = detail::decayed_grad(grp, p, decoupled_);
    const auto [exp_avg, exp_avg_sq] = detail::update_moments(s.tensors, p, g, beta1, beta2);
    Tensor second = exp_avg_sq;
    if (grp["amsgrad"] != 0) {
      Tensor& max_sq = detail::state_slot(s.tensors, "max_exp_avg_sq", p);
      max_sq.copy_(maximum(max_sq, exp_avg_sq));
      second = max_sq;
    }
    const Tensor denom = sqrt(second) / std::sqrt(bc2) + grp["eps"];
    // The step size as a number operand, not an alpha attribute: it changes
    // every step, and kiln::compile reads numbers per call but keys on attributes.
    p.sub_(exp_avg / denom * (lr / bc1));
  });
}

}  // namespace kiln::optim
