// The spatial ops with their own kernels, below nn's front ends (src/nn/),
// which check the arguments first and call these where they apply.
//
// convolution: oneDNN on the CPU, float32, 1 to 3 spatial dims, groups,
// dilation, optional bias, with its backward; nn's im2col composite stays
// the reference path (float64, and what the tests compare the kernel with).
#pragma once
#include <tuple>

#include "kiln/tensor.h"

namespace kiln::ops {

// Whether convolution() runs these arguments: float32 on the CPU, no zero
// sizes. Anything else takes nn's composite.
bool convolution_kernel_applies(const Tensor& x, const Tensor& weight);

// x (N, C, spatial...), weight (O, C / groups, kernel...), bias (O) or
// undefined; stride, padding and dilation have one value per spatial dim.
Tensor convolution(const Tensor& x, const Tensor& weight, const Tensor& bias, const Shape& stride,
                   const Shape& padding, const Shape& dilation, int64_t groups);

// max pooling over 1 to 3 spatial dims of a float32 / float64 x (N, C,
// spatial...): the maxima and the flat index of each in its input plane
// (PyTorch's: the first maximum, a NaN wins). `out` is the output's
// spatial size, ceil_mode already resolved into it.
std::tuple<Tensor, Tensor> max_pool(const Tensor& x, const Shape& kernel, const Shape& stride, const Shape& padding,
                                    const Shape& dilation, const Shape& out);

// batch_norm in training: x (N, C, ...) float32 / float64 normalised by
// its per-channel batch statistics, then weight and bias (each optional).
// Returns y, the mean and the biased variance (for the running statistics).
std::tuple<Tensor, Tensor, Tensor> batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                       double eps);

}  // namespace kiln::ops
