// The functional forms of nn (dropout, losses) for call_op, under PyTorch's
// names; the ops below them are registered in src/ops/public_ops.cpp.
#include "kiln/nn.h"
#include "ops/boxing.h"

namespace kiln::nn {
namespace {

const bool registered = [] {
  ops::def<&dropout>("dropout(Tensor input, float p, bool train) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, const Tensor&, const Tensor&, int64_t, double, const std::string&)>(
      &cross_entropy)>(
      "cross_entropy(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, "
      "float label_smoothing=0.0, str reduction='mean') -> Tensor");
  ops::def<&nll_loss>(
      "nll_loss(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, str reduction='mean') -> Tensor");
  ops::def<&binary_cross_entropy>(
      "binary_cross_entropy(Tensor input, Tensor target, Tensor? weight=None, str reduction='mean') -> Tensor");
  ops::def<&binary_cross_entropy_with_logits>(
      "binary_cross_entropy_with_logits(Tensor input, Tensor target, Tensor? weight=None, Tensor? pos_weight=None, "
      "str reduction='mean') -> Tensor");
  ops::def<&mse_loss>("mse_loss(Tensor self, Tensor target, str reduction='mean') -> Tensor");
  ops::def<&l1_loss>("l1_loss(Tensor self, Tensor target, str reduction='mean') -> Tensor");
  ops::def<&smooth_l1_loss>("smooth_l1_loss(Tensor self, Tensor target, str reduction='mean', float beta=1.0) -> Tensor");
  ops::def<&huber_loss>("huber_loss(Tensor self, Tensor target, str reduction='mean', float delta=1.0) -> Tensor");
  ops::def<&kl_div>("kl_div(Tensor self, Tensor target, str reduction='mean', bool log_target=False) -> Tensor");
  ops::def<&margin_ranking_loss>(
      "margin_ranking_loss(Tensor input1, Tensor input2, Tensor target, float margin=0.0, str reduction='mean') -> Tensor");
  ops::def<&cosine_embedding_loss>(
      "cosine_embedding_loss(Tensor input1, Tensor input2, Tensor target, float margin=0.0, str reduction='mean') -> "
      "Tensor");
  return true;
}();

}  // namespace
}  // namespace kiln::nn
