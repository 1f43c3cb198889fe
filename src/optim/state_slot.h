// The optimizers' per-parameter state tensors, made on first use, and the
// checks the Adam family shares.
#pragma once
#include <map>
#include <string>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "kiln/optim.h"

namespace kiln::optim::detail {

// The state tensor `name` of a parameter p: on first use, p's shape filled
// with `initial` (zeros_like for 0, the op AdamW's compiled steps trace).
inline Tensor& state_slot(std::map<std::string, Tensor>& state, const char* name, const Tensor& p, double initial = 0) {
  auto it = state.find(name);
  if (it == state.end()) it = state.emplace(name, initial == 0 ? zeros_like(p) : full_like(p, initial)).first;
  return it->second;
}

// What every Adam-like optimizer checks of a group (betas, eps, weight decay).
inline void check_adam_like(const char* name, const ParamGroup& g) {
  check(g["beta1"] >= 0 && g["beta1"] < 1 && g["beta2"] >= 0 && g["beta2"] < 1, name, "invalid betas (", g["beta1"],
        ", ", g["beta2"], ")");
  check(g["eps"] >= 0, name, "invalid epsilon ", g["eps"]);
  check(g["weight_decay"] >= 0, name, "invalid weight_decay ", g["weight_decay"]);
}

}  // namespace kiln::optim::detail
