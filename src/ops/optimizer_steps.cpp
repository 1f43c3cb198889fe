// Fused optimizer updates: one op per parameter where the optimizer's
// op-by-op update would run a dozen elementwise passes over it (kernels:
// src/kernels/cpu/optimizer_kernels.cpp). src/optim calls them by name,
// on eager float32 parameters; under a dispatch mode (kiln::compile's
// tracer) it issues the separate ops instead, which kiln::compile fuses
// itself and keys without the per-step numbers.
#include "ops/op_util.h"

namespace kiln::ops {
namespace {

// (param, grad, exp_avg, exp_avg_sq) -> the new (param, exp_avg, exp_avg_sq),
// written in place over the inputs (the out= tensors are those), else laid
// out as param (channels-last too).
std::vector<TensorMeta> three_like_param(std::span<const Tensor> in, const Attrs&) {
  TensorMeta m(in[0].sizes(), in[0].dtype());
  follow_memory_format(m, in[0]);
  return {m, m, m};
}

const OpDef& kFusedAdam = register_op(with_backward(
    OpDef{"_fused_adam_",
          "_fused_adam_(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, *, float lr, float beta1, "
          "float beta2, float eps, float weight_decay, bool decoupled, float bias_correction1, "
          "float bias_correction2) -> (Tensor, Tensor, Tensor)",
          OpKind::Compute, three_like_param},
    &autograd::kNotDifferentiable));

}  // namespace
}  // namespace kiln::ops
