// SIMD float32 row kernels: reductions over contiguous data and the fused
// softmax / layer_norm / rms_norm rows. Sums keep several vector
// accumulators, which both hides FMA latency and halves rounding error
// growth compared with one running sum.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rows_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/pointwise_math.h"
#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

// Sum of f(x[i]) over a row; f maps a vector to a vector.
template <class F>
HWY_INLINE float SumMapped(const float* x, size_t n, F f) {
  const D d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, f(hn::LoadU(d, x + i)));
    a1 = hn::Add(a1, f(hn::LoadU(d, x + i + N)));
    a2 = hn::Add(a2, f(hn::LoadU(d, x + i + 2 * N)));
    a3 = hn::Add(a3, f(hn::LoadU(d, x + i + 3 * N)));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, f(hn::LoadU(d, x + i)));
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += hn::GetLane(f(hn::Set(d, x[i])));
  return s;
}

float SumF32(const float* x, size_t n) {
  return SumMapped(x, n, [](auto v) { return v; });
}

// Note [A layer_norm's mean]
// A layer_norm amplifies its mean's rounding: for a constant row x - mean
// should be 0, and a mean 1 ulp off gives (x - mean) * rstd of about 1e-3 * 1/sqrt(eps)
// instead of 0 (tester seed 52198, a row max broadcast along the row). The
// generated loops of kiln::compile sum rows in another order than these
// kernels, so a float sum made the two disagree there. The sum is taken in
// double by both, eager here and the loops (cpp_backend.cpp): exact whenever
// the row's exponents span under 53 - log2(n) bits, so then the same in any
// order, and the mean its rounding; the variance pass stays in float (its
// rounding is not amplified).
HWY_INLINE double SumF32InDouble(const float* x, size_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;  // as many floats as dd has lanes
  const size_t N = hn::Lanes(dd);
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::Add(a0, hn::PromoteTo(dd, hn::LoadU(dh, x + i)));
    a1 = hn::Add(a1, hn::PromoteTo(dd, hn::LoadU(dh, x + i + N)));
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

float MaxF32(const float* x, size_t n) {
  const D d;
  const size_t N = hn::Lanes(d);
  auto m = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto nan = hn::Zero(d);  // becomes non-zero where a NaN was seen
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    m = hn::Max(m, v);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(v)));  // not Ne(v, v): ordered (false for NaN) on AVX
  }
  float r = hn::GetLane(hn::MaxOfLanes(d, m));
  bool any_nan = !hn::AllTrue(d, hn::Eq(nan, hn::Zero(d)));
  for (; i < n; ++i) {
    any_nan = any_nan || std::isnan(x[i]);
    r = x[i] > r ? x[i] : r;
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : r;
}

bool MinMaxF32(const float* x, size_t n, float* lo_out, float* hi_out) {
  const D d;
  const size_t N = hn::Lanes(d);
  auto lo = hn::Set(d, std::numeric_limits<float>::infinity()), hi = hn::Neg(lo);
  auto bad = hn::Zero(d);  // non-zero where an inf or NaN was seen (v - v is NaN for them, never equal to 0)
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    lo = hn::Min(lo, v), hi = hn::Max(hi, v);
    bad = hn::Or(bad, hn::VecFromMask(d, hn::Not(hn::Eq(hn::Sub(v, v), hn::Zero(d)))));
  }
  float l = hn::GetLane(hn::MinOfLanes(d, lo)), h = hn::GetLane(hn::MaxOfLanes(d, hi));
  bool finite = hn::AllTrue(d, hn::Eq(bad, hn::Zero(d)));
  for (; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    l = std::min(l, x[i]), h = std::max(h, x[i]);
  }
  *lo_out = l, *hi_out = h;
  return finite;
}

// out[i] = clamp(round_half_even(clamp(x[i] * inverse)) + zero_point, 0,
// 255): quantized_kernels.cpp's Uint8Quantizer (PyTorch's rule) a vector
// at a time. The scalar loop it replaces in linear_dynamic stored through
// uint8_t, which may alias anything, so GCC reloaded its operands every
// element: a fifth of a batch-256 int8 linear's time.
void QuantizeU8F32(const float* x, size_t n, float inverse, float zero_point, uint8_t* out) {
  const D d;
  const hn::Rebind<int32_t, D> di;
  const hn::Rebind<uint8_t, D> du8;
  const size_t N = hn::Lanes(d);
  const float t_lo = -zero_point - 1.0f, t_hi = 256.0f - zero_point;
  const auto inv = hn::Set(d, inverse), zp = hn::Set(d, zero_point), lo = hn::Set(d, t_lo), hi = hn::Set(d, t_hi);
  const auto zero = hn::Zero(d), top = hn::Set(d, 255.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto t = hn::Min(hn::Max(hn::Mul(hn::LoadU(d, x + i), inv), lo), hi);
    const auto r = hn::Min(hn::Max(hn::Add(hn::Round(t), zp), zero), top);
    hn::StoreU(hn::DemoteTo(du8, hn::ConvertTo(di, r)), du8, out + i);
  }
  for (; i < n; ++i) {
    const float t = std::min(std::max(x[i] * inverse, t_lo), t_hi);
    out[i] = static_cast<uint8_t>(std::min(std::max(std::nearbyint(t) + zero_point, 0.0f), 255.0f));
  }
}

void AccumulateF32(float* acc, const float* x, size_t n) {
  const D d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, acc + i), hn::LoadU(d, x + i)), d, acc + i);
  for (; i < n; ++i) acc[i] += x[i];
}

// out = exp(x - max) / sum, or for log: (x - max) - log(sum). Subtracting
// max first keeps x - max exact near the max: x - (max + log(sum)) rounds
// max + log(sum) at max's magnitude (100x PyTorch's error for logits near
// 1000; 0 instead of -log(n) for logits of 1e37). The row is in L1 after
// the first pass, so the kernel is bound by its exponential (Note
// [Softmax's exponential]): a row spanning at most 87 (every logit row in
// practice; not one with -inf or -1e9 masks) takes the form with one scaling.
// A NaN anywhere makes the sum NaN, so the row's every output, as in
// PyTorch, whatever max and min made of it (the exponential of NaN - max is
// NaN in both forms). The loops are vectorised by the compiler for this
// Highway target.
template <class Exp>
HWY_INLINE void SoftmaxRowWith(const float* x, float* out, size_t n, bool log, float mx, Exp exp) {
  float s = 0.0f;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += exp(x[i] - mx);
    const float log_s = std::log(s);
#pragma omp simd
    for (size_t i = 0; i < n; ++i) out[i] = (x[i] - mx) - log_s;
    return;
  }
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) {
    const float e = exp(x[i] - mx);
    out[i] = e;
    s += e;
  }
  const float inv = 1.0f / s;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) out[i] *= inv;
}

// The row's largest and smallest values, four vectors at a time (one
// running max and min would wait on each other's latency). NaN: as above.
HWY_INLINE void RowRange(const float* x, size_t n, float& mx, float& mn) {
  const D d;
  const size_t N = hn::Lanes(d);
  auto hi0 = hn::Set(d, -std::numeric_limits<float>::infinity()), hi1 = hi0, hi2 = hi0, hi3 = hi0;
  auto lo0 = hn::Set(d, std::numeric_limits<float>::infinity()), lo1 = lo0, lo2 = lo0, lo3 = lo0;
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
    const auto v2 = hn::LoadU(d, x + i + 2 * N), v3 = hn::LoadU(d, x + i + 3 * N);
    hi0 = hn::Max(hi0, v0), hi1 = hn::Max(hi1, v1), hi2 = hn::Max(hi2, v2), hi3 = hn::Max(hi3, v3);
    lo0 = hn::Min(lo0, v0), lo1 = hn::Min(lo1, v1), lo2 = hn::Min(lo2, v2), lo3 = hn::Min(lo3, v3);
  }
  mx = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(hi0, hi1), hn::Max(hi2, hi3))));
  mn = hn::GetLane(hn::MinOfLanes(d, hn::Min(hn::Min(lo0, lo1), hn::Min(lo2, lo3))));
  for (; i < n; ++i) {
    mx = x[i] > mx ? x[i] : mx;
    mn = x[i] < mn ? x[i] : mn;
  }
}

void SoftmaxRowF32(const float* x, float* out, size_t n, bool log) {
  float mx, mn;
  RowRange(x, n, mx, mn);
  // A row of -inf (fully masked) has a NaN span and gives NaN, as in PyTorch.
  if (mx - mn <= 87.0f) {
    SoftmaxRowWith(x, out, n, log, mx, [](float v) { return pointwise::exp_row_normal_f(v); });
  } else {
    SoftmaxRowWith(x, out, n, log, mx, [](float v) { return pointwise::exp_row_f(v); });
  }
}

// Affine output y = (x - mean) * scale * w + b over a row.
HWY_INLINE void ScaleShiftRow(const float* x, float* y, size_t n, float shift, float scale, const float* w,
                              const float* b) {
  const D d;
  const size_t N = hn::Lanes(d);
  const auto vshift = hn::Set(d, shift), vscale = hn::Set(d, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vshift), vscale);
    if (w) v = hn::Mul(v, hn::LoadU(d, w + i));
    if (b) v = hn::Add(v, hn::LoadU(d, b + i));
    hn::StoreU(v, d, y + i);
  }
  for (; i < n; ++i) {
    float v = (x[i] - shift) * scale;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

void LayerNormRowF32(const float* x, float* y, size_t n, const float* w, const float* b, float eps,
                     float* mean_out, float* rstd_out) {
  const D d;
  // Two passes (mean, then centred squares) avoid the cancellation of E[x^2] - E[x]^2.
  const float mean = n ? static_cast<float>(SumF32InDouble(x, n) / static_cast<double>(n)) : 0.0f;
  const auto vmean = hn::Set(d, mean);
  const float var = n ? SumMapped(x, n, [&](auto v) {
                          const auto c = hn::Sub(v, vmean);
                          return hn::Mul(c, c);
                        }) / static_cast<float>(n)
                      : 0.0f;
  const float rstd = 1.0f / std::sqrt(var + eps);
  ScaleShiftRow(x, y, n, mean, rstd, w, b);
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

void RmsNormRowF32(const float* x, float* y, size_t n, const float* w, float eps) {
  const float ms = n ? SumMapped(x, n, [](auto v) { return hn::Mul(v, v); }) / static_cast<float>(n) : 0.0f;
  ScaleShiftRow(x, y, n, 0.0f, 1.0f / std::sqrt(ms + eps), w, nullptr);
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu::simd {
HWY_EXPORT(SumF32);
HWY_EXPORT(MaxF32);
HWY_EXPORT(MinMaxF32);
HWY_EXPORT(AccumulateF32);
HWY_EXPORT(QuantizeU8F32);
HWY_EXPORT(SoftmaxRowF32);
HWY_EXPORT(LayerNormRowF32);
HWY_EXPORT(RmsNormRowF32);

float sum_f32(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(SumF32)(x, n); }
float max_f32(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(MaxF32)(x, n); }
bool min_max_f32(const float* x, size_t n, float* lo, float* hi) { return HWY_DYNAMIC_DISPATCH(MinMaxF32)(x, n, lo, hi); }
void accumulate_f32(float* acc, const float* x, size_t n) { HWY_DYNAMIC_DISPATCH(AccumulateF32)(acc, x, n); }
void quantize_u8_f32(const float* x, size_t n, float inverse, float zero_point, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeU8F32)(x, n, inverse, zero_point, out);
}
void softmax_row_f32(const float* x, float* out, size_t n, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowF32)(x, out, n, log);
}
void layer_norm_row_f32(const float* x, float* y, size_t n, const float* w, const float* b, float eps,
                        float* mean_out, float* rstd_out) {
  HWY_DYNAMIC_DISPATCH(LayerNormRowF32)(x, y, n, w, b, eps, mean_out, rstd_out);
}
void rms_norm_row_f32(const float* x, float* y, size_t n, const float* w, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormRowF32)(x, y, n, w, eps);
}
}  // namespace kiln::cpu::simd
#endif
