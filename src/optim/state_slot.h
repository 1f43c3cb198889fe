// The optimizers' per-parameter state tensors, made on first use.
#pragma once
#include <map>
#include <string>

#include "kiln/ops.h"

namespace kiln::optim::detail {

// The state tensor `name` of a parameter p: on first use, p's shape filled
// with `initial` (zeros_like for 0, the op AdamW's compiled steps trace).
inline Tensor& state_slot(std::map<std::string, Tensor>& state, const char* name, const Tensor& p, double initial = 0) {
  auto it = state.find(name);
  if (it == state.end()) it = state.emplace(name, initial == 0 ? zeros_like(p) : full_like(p, initial)).first;
  return it->second;
}

}  // namespace kiln::optim::detail
