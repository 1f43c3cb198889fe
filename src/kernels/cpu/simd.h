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
// The same on channels-last (N, H, W, C) data, output rows (n, oh) in
// [rows_begin, rows_end) (y and indices (N, OH, OW, C)).
void max_pool_2x2_rows_f32(const float* x, size_t rows_begin, size_t rows_end, size_t H, size_t W, size_t C,
                           size_t OH, size_t OW, float* y, int64_t* indices);

// batch_norm over one channel of a row-major (N, C, spatial) tensor: its N
// planes of HW values, `stride` (C * HW) elements apart, from the channel's
// first. float32 and float64 (batch_norm_simd.cpp).
struct BatchNormPlanes {
  size_t N, HW, stride;
};
// The mean and the biased variance (two passes; partial sums added in double).
void batch_norm_stats(const float* x, BatchNormPlanes p, double* mean, double* var);
void batch_norm_stats(const double* x, BatchNormPlanes p, double* mean, double* var);
// y = x scale + shift.
void batch_norm_affine(const float* x, float* y, BatchNormPlanes p, float scale, float shift);
void batch_norm_affine(const double* x, double* y, BatchNormPlanes p, double scale, double shift);
// The backward's sums of dy and of dy (x - mean).
void batch_norm_grad_sums(const float* g, const float* x, BatchNormPlanes p, float mean, double* sum_dy,
                          double* sum_dy_xmu);
void batch_norm_grad_sums(const double* g, const double* x, BatchNormPlanes p, double mean, double* sum_dy,
                          double* sum_dy_xmu);
// dx = a dy + b x + k.
void batch_norm_input_grad(const float* g, const float* x, float* dx, BatchNormPlanes p, float a, float b, float k);
void batch_norm_input_grad(const double* g, const double* x, double* dx, BatchNormPlanes p, double a, double b,
                           double k);

// Adam's update of n float32 elements in place (p, m, v; g read), with the
// float32 operations of the op-by-op update in its order (src/optim/adam.cpp):
// the numbers are those it would convert from double.
struct AdamScalars {
  float decay;  // AdamW's p *= 1 - lr wd (1 without decay)
  bool l2_decay;
  float l2;  // Adam's g += p wd
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction2_sqrt, eps, step_size;  // step_size: lr / bias_correction1
};
void adam_step_f32(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s);

// Row kernels of the fused nn functions.
void softmax_row_f32(const float* x, float* out, size_t n, bool log);
// y = (x - mean) * rstd * w + b; w, b may be null. Returns mean and rstd.
void layer_norm_row_f32(const float* x, float* y, size_t n, const float* w, const float* b, float eps,
                        float* mean_out, float* rstd_out);
void rms_norm_row_f32(const float* x, float* y, size_t n, const float* w, float eps);

}  // namespace kiln::cpu::simd
