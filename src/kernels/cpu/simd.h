// Entry points of the SIMD kernels. Each is compiled once per target by
// Highway (the *_simd.cpp files) and picks the best target allowed at run
// time (see src/core/cpu_features.cpp). All take contiguous float32 data;
// callers handle strides and other dtypes (src/kernels/cpu/loops.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln::cpu::simd {

// out[i] = op(in[i]); lo/hi are the op's float attributes, in its functor's
// kAttrs order (clamp's bounds, leaky_relu's slope), ignored by the others.
void unary_f32(int op, const float* in, float* out, size_t n, float lo, float hi);

// out[i] = op(a[i], b[i]) where a (or b) may be a single broadcast value:
// a_step / b_step is 1 for an array and 0 for a scalar.
void binary_f32(int op, const float* a, size_t a_step, const float* b, size_t b_step, float* out, size_t n,
                float alpha);

// Reductions over contiguous data.
float sum_f32(const float* x, size_t n);
float max_f32(const float* x, size_t n);  // -inf for n == 0; NaN if any is NaN
// The smallest and largest of x[0, n) (+inf and -inf for n == 0); false if any is inf or NaN.
bool min_max_f32(const float* x, size_t n, float* lo, float* hi);
void accumulate_f32(float* acc, const float* x, size_t n);  // acc[i] += x[i]
// PyTorch's uint8 quantization: out[i] = clamp(round_half_even(x[i] *
// inverse) + zero_point, 0, 255) (x finite; inverse = 1 / scale as a float).
void quantize_u8_f32(const float* x, size_t n, float inverse, float zero_point, uint8_t* out);

// Max pooling of `planes` contiguous H x W planes over 2x2 windows at
// stride 2 without padding (2 OH <= H, 2 OW <= W): y and the flat in-plane
// indices of the maxima, as the general kernel finds them (ties keep the
// first tap in (kh, kw) order, a NaN wins).
void max_pool_2x2_f32(const float* x, size_t planes, size_t H, size_t W, size_t OH, size_t OW, float* y,
                      int64_t* indices);

// Row kernels of the fused nn functions.
void softmax_row_f32(const float* x, float* out, size_t n, bool log);
// y = (x - mean) * rstd * w + b; w, b may be null. Returns mean and rstd.
void layer_norm_row_f32(const float* x, float* y, size_t n, const float* w, const float* b, float eps,
                        float* mean_out, float* rstd_out);
void rms_norm_row_f32(const float* x, float* y, size_t n, const float* w, float eps);

}  // namespace kiln::cpu::simd
