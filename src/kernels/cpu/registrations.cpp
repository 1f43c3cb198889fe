// The CPU device's kernels, bound to the ops they implement (declared in
// src/ops/): the one place where an op name meets a CPU kernel. A kernel for
// a new op, or a new device's kernel folder, adds its own table like this.
#include <utility>

#include "kernels/cpu/kernels.h"

namespace kiln::cpu {
namespace {

const bool registered = [] {
  const std::pair<const char*, KernelFn> table[] = {
    {"logical_not", logical_not_kernel},
    {"eq", compare_kernel<CompareOp::Eq>},
    {"ne", compare_kernel<CompareOp::Ne>},
    {"lt", compare_kernel<CompareOp::Lt>},
    {"le", compare_kernel<CompareOp::Le>},
    {"gt", compare_kernel<CompareOp::Gt>},
    {"ge", compare_kernel<CompareOp::Ge>},
    {"logical_and", compare_kernel<CompareOp::And>},
    {"logical_or", compare_kernel<CompareOp::Or>},
    {"logical_xor", compare_kernel<CompareOp::Xor>},
    {"where", where_kernel},
    {"_to_copy", copy_kernel},
    {"full", fill_kernel},
    {"arange", arange_kernel},
    {"linspace", linspace_kernel},
    {"eye", eye_kernel},
    {"cat", cat_kernel},
    {"gather", gather_kernel},
    {"scatter", scatter_kernel},
    {"scatter_reduce", scatter_reduce_kernel},
    {"index_select", index_select_kernel},
    {"tril", tril_kernel},
    {"triu", triu_kernel},
    {"sort", sort_kernel},
    {"searchsorted", searchsorted_kernel},
    {"matmul", matmul_kernel},
    {"bmm_bias", matmul_bias_kernel},
    {"linalg_inv", linalg_inv_kernel},
    {"linalg_solve", linalg_solve_kernel},
    {"linalg_det", linalg_det_kernel},
    {"linalg_slogdet", linalg_det_kernel},
    {"linalg_cholesky", linalg_cholesky_kernel},
    {"linalg_qr", linalg_qr_kernel},
    {"linalg_eigh", linalg_eigh_kernel},
    {"linalg_svd", linalg_svd_kernel},
    {"ctc_loss", ctc_loss_kernel},
    {"ctc_loss_backward", ctc_loss_backward_kernel},
    {"convolution", convolution_kernel},
    {"convolution_backward", convolution_backward_kernel},
    {"max_pool", max_pool_kernel},
    {"max_pool_backward", max_pool_backward_kernel},
    {"batch_norm_training", batch_norm_training_kernel},
    {"batch_norm_backward", batch_norm_backward_kernel},
    {"_fused_adam_", fused_adam_kernel},
    {"matmul_u8s8", matmul_u8s8_kernel},
    {"pack_u8s8_weight", pack_u8s8_weight_kernel},
    {"linear_dynamic", linear_dynamic_kernel},
    {"conv2d_int8", conv2d_int8_kernel},
    {"softmax", softmax_kernel},
    {"layer_norm", layer_norm_kernel},
    {"embedding", embedding_kernel},
    {"one_hot", one_hot_kernel},
    {"rand", rand_kernel},
    {"randint", randint_kernel},
    {"multinomial", multinomial_kernel},
    {"sum", reduce_kernel<ReduceOp::Sum>},
    {"prod", reduce_kernel<ReduceOp::Prod>},
    {"amax", reduce_kernel<ReduceOp::Max>},
    {"amin", reduce_kernel<ReduceOp::Min>},
    {"all", reduce_kernel<ReduceOp::All>},
    {"any", reduce_kernel<ReduceOp::Any>},
    {"max.dim", max_dim_kernel},
    {"min.dim", min_dim_kernel},
    {"cumsum", cumsum_kernel},
    {"cumprod", cumprod_kernel},
    {"cumprod_backward", cumprod_backward_kernel},
    {"cummax", cummax_kernel},
    {"cummin", cummin_kernel},
    {"logcumsumexp", logcumsumexp_kernel},
  };
  for (const auto& [op, kernel] : table) register_kernel(op, kCPU, kernel);
  // The elementwise ops of pointwise_math.h's lists: their kernel, and their
  // functor for the compilers that fuse loops (Note [Elementwise kernels in parts]).
  register_elementwise_kernels<0>();
  register_elementwise_kernels<1>();
  register_elementwise_kernels<2>();
  register_elementwise_kernels<3>();
  register_elementwise_kernels<4>();
  register_elementwise_kernels<5>();
  return true;
}();

}  // namespace
}  // namespace kiln::cpu
