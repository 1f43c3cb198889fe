// The functional forms of nn (dropout, losses) for call_op, under PyTorch's
// names; the ops below them are registered in src/ops/public_ops.cpp.
#include "kiln/nn.h"
#include "ops/boxing.h"

namespace kiln::nn {
namespace {

const bool registered = [] {
  ops::def<&dropout>("dropout(Tensor input, float p, bool train) -> Tensor");
  ops::def<&cross_entropy>(
      "cross_entropy(Tensor input, Tensor target, int ignore_index=-100, float label_smoothing=0.0, "
      "str reduction='mean') -> Tensor");
  ops::def<&mse_loss>("mse_loss(Tensor self, Tensor target, str reduction='mean') -> Tensor");
  return true;
}();

}  // namespace
}  // namespace kiln::nn
