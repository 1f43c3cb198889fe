// What the loss functions share: the reduction and the same-shape check.
#pragma once
#include <string>

#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::nn::detail {

inline Tensor reduce_loss(const Tensor& loss, const std::string& reduction, const char* op) {
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  check(reduction == "mean", op, "expected reduction 'mean', 'sum' or 'none' but got '", reduction, "'");
  return mean(loss);
}

// Pointwise losses take input and target of one shape (PyTorch broadcasts
// with a warning that it is probably a mistake; kiln refuses).
inline void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  check(input.sizes() == target.sizes(), op, "input of shape ", shape_text(input.sizes()), " and target of shape ",
        shape_text(target.sizes()), " differ");
  check(is_floating(input.dtype()), op, "expected a floating point input but got ", input.dtype());
}

}  // namespace kiln::nn::detail
