// The CPU kernels (bound to their ops in registrations.cpp). Each reads its inputs, attributes
// and preallocated outputs from an OpCall; shapes and dtypes were already
// checked by the op's front end and shape function.
#pragma once
#include "kernels/cpu/op_codes.h"
#include "kiln/dispatch.h"

namespace kiln::cpu {

// The unary and binary elementwise ops' kernels, registered in parts
// (Note [Elementwise kernels in parts], elementwise_kernels.h).
template <int Part> void register_elementwise_kernels();
template <CompareOp OP> void compare_kernel(const OpCall& c);    // bool output
void logical_not_kernel(const OpCall& c);
void where_kernel(const OpCall& c);                              // cond, a, b
void copy_kernel(const OpCall& c);                               // out = convert(in)
void fill_kernel(const OpCall& c);                               // attrs: value
void arange_kernel(const OpCall& c);                             // attrs: start, step
void linspace_kernel(const OpCall& c);                           // attrs: start, end
void eye_kernel(const OpCall& c);

template <ReduceOp OP> void reduce_kernel(const OpCall& c);      // attrs: dims
void max_dim_kernel(const OpCall& c);                            // attrs: dim, keepdim -> values, indices
void min_dim_kernel(const OpCall& c);                            // attrs: dim, keepdim -> values, indices
void cumsum_kernel(const OpCall& c);                             // attrs: dim, reverse
void cumprod_kernel(const OpCall& c);                            // attrs: dim
void cumprod_backward_kernel(const OpCall& c);                   // grad, self; attrs: dim
void cummax_kernel(const OpCall& c);                             // attrs: dim -> values, indices
void cummin_kernel(const OpCall& c);                             // attrs: dim -> values, indices
void logcumsumexp_kernel(const OpCall& c);                       // attrs: dim

void matmul_kernel(const OpCall& c);                             // batched, broadcast batch dims
void matmul_bias_kernel(const OpCall& c);  // matmul + a bias row (Note [Bias in the GEMM])

void linalg_inv_kernel(const OpCall& c);
void linalg_solve_kernel(const OpCall& c);                       // A, B (batch dims of A)
void linalg_det_kernel(const OpCall& c);                         // det, or slogdet (two outputs)
void linalg_cholesky_kernel(const OpCall& c);                    // attrs: upper
void linalg_qr_kernel(const OpCall& c);                          // -> Q (0 elements: not wanted), R
void linalg_eigh_kernel(const OpCall& c);                        // attrs: UPLO -> values, [vectors]
void linalg_svd_kernel(const OpCall& c);                         // -> [U], S, [Vh]

void ctc_loss_kernel(const OpCall& c);           // log_probs, targets, lengths; attrs: blank, zero_infinity
void ctc_loss_backward_kernel(const OpCall& c);  // grad, then the forward's inputs

void convolution_kernel(const OpCall& c);           // x, w, [b]; attrs: stride, padding, dilation, groups, has_bias
void convolution_backward_kernel(const OpCall& c);  // grad, x, w -> grad x, w, b (those asked for)

void max_pool_kernel(const OpCall& c);           // attrs: kernel, stride, padding, dilation, out -> values, indices
void max_pool_backward_kernel(const OpCall& c);  // grad, indices; attrs: input (sizes)
void batch_norm_training_kernel(const OpCall& c);  // x, [w], [b]; attrs: eps, has_weight, has_bias -> y, mean, var
void batch_norm_backward_kernel(const OpCall& c);  // grad, x, [w], mean, var -> grad x, w, b (those asked for)
void fused_adam_kernel(const OpCall& c);  // param, grad, exp_avg, exp_avg_sq -> the 1st, 3rd, 4th updated

void matmul_u8s8_kernel(const OpCall& c);     // a uint8 (M, K), b int8 (N, K) -> int32 a b^T
void pack_u8s8_weight_kernel(const OpCall& c);  // int8 (N, K) -> the VNNI kernel's layout
void conv2d_int8_kernel(const OpCall& c);  // x f32, w (int8, scales, row sums, packed), [bias]; attrs: geometry, input qparams
void linear_dynamic_kernel(const OpCall& c);  // x f32, w int8, w scales, w row sums, w packed, [bias]; attrs: has_bias

void softmax_kernel(const OpCall& c);                            // attrs: dim, log
void layer_norm_kernel(const OpCall& c);  // x, [w], [b]; attrs: n, eps, has_weight, has_bias, rms

void cat_kernel(const OpCall& c);                                // attrs: dim
void gather_kernel(const OpCall& c);                             // attrs: dim
void scatter_kernel(const OpCall& c);                            // attrs: dim, add
void scatter_reduce_kernel(const OpCall& c);                     // attrs: dim, reduce, include_self
void index_select_kernel(const OpCall& c);                       // attrs: dim
void embedding_kernel(const OpCall& c);
void one_hot_kernel(const OpCall& c);
void tril_kernel(const OpCall& c);                               // attrs: diagonal
void triu_kernel(const OpCall& c);                               // attrs: diagonal
void sort_kernel(const OpCall& c);                               // attrs: dim, descending, k
void searchsorted_kernel(const OpCall& c);                       // boundaries, values; attrs: right
void rand_kernel(const OpCall& c);                               // attrs: seed, offset, normal
void randint_kernel(const OpCall& c);                            // attrs: low, high, seed, offset
void multinomial_kernel(const OpCall& c);                        // attrs: n, replacement, seed, offset

}  // namespace kiln::cpu
