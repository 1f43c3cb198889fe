// The optimizers' per-parameter state tensors, made on first use, their
// names, and the checks the Adam family shares.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "kiln/optim.h"

namespace kiln::optim::detail {

// The state tensors of an optimizer's parameters (Note [A loaded optimizer
// state is checked whole]): those a parameter of `group` holds once it has
// taken a step, and every name the optimizer may hold. Each optimizer's file
// registers its own; an optimizer without (a user's) is not checked by name.
struct StateNames {
  std::vector<std::string> allowed;
  std::function<std::vector<std::string>(const ParamGroup& group)> required;
};
// For the optimizer called `optimizer` (its state_dict's name); true, for a
// static initializer.
bool register_state_names(const std::string& optimizer, StateNames names);
const StateNames* find_state_names(const std::string& optimizer);

// The state tensor `name` of a parameter p: on first use, p's shape filled
// with `initial` (zeros_like for 0, the op AdamW's compiled steps trace).
inline Tensor& state_slot(std::map<std::string, Tensor>& state, const char* name, const Tensor& p, double initial = 0) {
  auto it = state.find(name);
  if (it == state.end()) it = state.emplace(name, initial == 0 ? zeros_like(p) : full_like(p, initial)).first;
  return it->second;
}

// Adam's running moments of g (state "exp_avg", "exp_avg_sq"), updated in
// place and returned as {first, second}.
struct Moments {
  Tensor& first;
  Tensor& second;
};
inline Moments update_moments(std::map<std::string, Tensor>& state, const Tensor& p, const Tensor& g, double beta1,
                              double beta2) {
  Tensor& exp_avg = state_slot(state, "exp_avg", p);
  Tensor& exp_avg_sq = state_slot(state, "exp_avg_sq", p);
  exp_avg.mul_(beta1).add_(g, 1 - beta1);
  exp_avg_sq.mul_(beta2).add_(g * g, 1 - beta2);
  return {exp_avg, exp_avg_sq};
}

// The gradient with weight decay (group option "weight_decay"): added to it
// (L2), or applied to the parameter beforehand (decoupled, AdamW's way).
inline Tensor decayed_grad(const ParamGroup& grp, const Tensor& p, bool decoupled) {
  const double wd = grp["weight_decay"];
  if (wd == 0) return p.grad();
  if (decoupled) {
    p.mul_(1 - grp["lr"] * wd);
    return p.grad();
  }
  return p.grad() + p * wd;
}

// What every Adam-like optimizer checks of a group (betas, eps, weight decay).
inline void check_adam_like(const char* name, const ParamGroup& g) {
  check(g["beta1"] >= 0 && g["beta1"] < 1 && g["beta2"] >= 0 && g["beta2"] < 1, name, "invalid betas (", g["beta1"],
        ", ", g["beta2"], ")");
  check(g["eps"] >= 0, name, "invalid epsilon ", g["eps"]);
  check(g["weight_decay"] >= 0, name, "invalid weight_decay ", g["weight_decay"]);
}

}  // namespace kiln::optim::detail
