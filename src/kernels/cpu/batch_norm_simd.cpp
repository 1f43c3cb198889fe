// batch_norm's loops over one channel's planes (row-major tensors), for
// batch_norm_kernels.cpp: plain loops the compiler vectorises, compiled
// once per Highway target so that they run in the machine's widest
// vectors (AVX-512: the CNN's batch norms 1.6x faster than in the
// baseline's SSE2). The sums keep 16 lane-wise partials whatever the
// target, so every target adds in the same order and gives the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/batch_norm_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {

// The sum of f(0) .. f(n - 1): 16 lane-wise partial sums in T (a loop
// the compiler vectorizes without reordering any one sum), added up in
// double. A plane of HW values adds at most HW / 16 terms per lane.
template <class T, class F>
HWY_INLINE double LaneSum(size_t n, const F& f) {
  constexpr size_t kLanes = 16;
  T part[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) part[j] += f(i + j);
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(f(i));
  for (T v : part) s += static_cast<double>(v);
  return s;
}

// Mean, then the mean of squared deviations from it (two passes: no
// cancellation as in E[x^2] - E[x]^2).
template <class T>
void Stats(const T* x, BatchNormPlanes p, double* mean_out, double* var_out) {
  const double count = static_cast<double>(p.N * p.HW);
  double sum = 0;
  for (size_t n = 0; n < p.N; ++n) {
    const T* v = x + n * p.stride;
    sum += LaneSum<T>(p.HW, [v](size_t i) { return v[i]; });
  }
  const double mean = sum / count;
  const T m = static_cast<T>(mean);
  double squares = 0;
  for (size_t n = 0; n < p.N; ++n) {
    const T* v = x + n * p.stride;
    squares += LaneSum<T>(p.HW, [v, m](size_t i) { return (v[i] - m) * (v[i] - m); });
  }
  *mean_out = mean, *var_out = squares / count;
}

template <class T>
void Affine(const T* x, T* y, BatchNormPlanes p, T scale, T shift) {
  for (size_t n = 0; n < p.N; ++n) {
    const T* in = x + n * p.stride;
    T* out = y + n * p.stride;
    for (size_t i = 0; i < p.HW; ++i) out[i] = in[i] * scale + shift;
  }
}

template <class T>
void GradSums(const T* g, const T* x, BatchNormPlanes p, T mean, double* sum_dy, double* sum_dy_xmu) {
  double s = 0, sx = 0;
  for (size_t n = 0; n < p.N; ++n) {
    const T *gn = g + n * p.stride, *v = x + n * p.stride;
    s += LaneSum<T>(p.HW, [gn](size_t i) { return gn[i]; });
    sx += LaneSum<T>(p.HW, [gn, v, mean](size_t i) { return gn[i] * (v[i] - mean); });
  }
  *sum_dy = s, *sum_dy_xmu = sx;
}

template <class T>
void InputGrad(const T* g, const T* x, T* dx, BatchNormPlanes p, T a, T b, T k) {
  for (size_t n = 0; n < p.N; ++n) {
    const T *gn = g + n * p.stride, *v = x + n * p.stride;
    T* out = dx + n * p.stride;
    for (size_t i = 0; i < p.HW; ++i) out[i] = a * gn[i] + b * v[i] + k;
  }
}

void StatsF32(const float* x, BatchNormPlanes p, double* mean, double* var) { Stats(x, p, mean, var); }
void StatsF64(const double* x, BatchNormPlanes p, double* mean, double* var) { Stats(x, p, mean, var); }
void AffineF32(const float* x, float* y, BatchNormPlanes p, float scale, float shift) { Affine(x, y, p, scale, shift); }
void AffineF64(const double* x, double* y, BatchNormPlanes p, double scale, double shift) { Affine(x, y, p, scale, shift); }
void GradSumsF32(const float* g, const float* x, BatchNormPlanes p, float mean, double* sum_dy, double* sum_dy_xmu) {
  GradSums(g, x, p, mean, sum_dy, sum_dy_xmu);
}
void GradSumsF64(const double* g, const double* x, BatchNormPlanes p, double mean, double* sum_dy, double* sum_dy_xmu) {
  GradSums(g, x, p, mean, sum_dy, sum_dy_xmu);
}
void InputGradF32(const float* g, const float* x, float* dx, BatchNormPlanes p, float a, float b, float k) {
  InputGrad(g, x, dx, p, a, b, k);
}
void InputGradF64(const double* g, const double* x, double* dx, BatchNormPlanes p, double a, double b, double k) {
  InputGrad(g, x, dx, p, a, b, k);
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu::simd {
HWY_EXPORT(StatsF32);
HWY_EXPORT(StatsF64);
HWY_EXPORT(AffineF32);
HWY_EXPORT(AffineF64);
HWY_EXPORT(GradSumsF32);
HWY_EXPORT(GradSumsF64);
HWY_EXPORT(InputGradF32);
HWY_EXPORT(InputGradF64);

void batch_norm_stats(const float* x, BatchNormPlanes p, double* mean, double* var) {
  HWY_DYNAMIC_DISPATCH(StatsF32)(x, p, mean, var);
}
void batch_norm_stats(const double* x, BatchNormPlanes p, double* mean, double* var) {
  HWY_DYNAMIC_DISPATCH(StatsF64)(x, p, mean, var);
}
void batch_norm_affine(const float* x, float* y, BatchNormPlanes p, float scale, float shift) {
  HWY_DYNAMIC_DISPATCH(AffineF32)(x, y, p, scale, shift);
}
void batch_norm_affine(const double* x, double* y, BatchNormPlanes p, double scale, double shift) {
  HWY_DYNAMIC_DISPATCH(AffineF64)(x, y, p, scale, shift);
}
void batch_norm_grad_sums(const float* g, const float* x, BatchNormPlanes p, float mean, double* sum_dy,
                          double* sum_dy_xmu) {
  HWY_DYNAMIC_DISPATCH(GradSumsF32)(g, x, p, mean, sum_dy, sum_dy_xmu);
}
void batch_norm_grad_sums(const double* g, const double* x, BatchNormPlanes p, double mean, double* sum_dy,
                          double* sum_dy_xmu) {
  HWY_DYNAMIC_DISPATCH(GradSumsF64)(g, x, p, mean, sum_dy, sum_dy_xmu);
}
void batch_norm_input_grad(const float* g, const float* x, float* dx, BatchNormPlanes p, float a, float b, float k) {
  HWY_DYNAMIC_DISPATCH(InputGradF32)(g, x, dx, p, a, b, k);
}
void batch_norm_input_grad(const double* g, const double* x, double* dx, BatchNormPlanes p, double a, double b,
                           double k) {
  HWY_DYNAMIC_DISPATCH(InputGradF64)(g, x, dx, p, a, b, k);
}
}  // namespace kiln::cpu::simd
#endif
