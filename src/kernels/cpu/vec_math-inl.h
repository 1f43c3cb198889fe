// Float32 vector math that is right on the whole float line, for the
// Highway kernels (Note [Float32 at the edges] in
// tests/kernels/special_values_test.cpp). Highway's functions are accurate
// only on the range each approximates: Exp returns garbage above 88.7
// (exp(1e4) = 2e27), Log is defined on (0, FLT_MAX] only (log(0) = -105),
// Log1p on (-1, FLT_MAX), and Sin / Cos reduce their argument correctly
// only to about +-39000. These wrappers keep Highway's fast core and give
// every other input the IEEE answer; the callers handle NaN inputs and the
// huge sin / cos arguments (kSinCosMax). Included once per Highway target.
#if defined(KILN_VEC_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_VEC_MATH_INL_H_
#undef KILN_VEC_MATH_INL_H_
#else
#define KILN_VEC_MATH_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Beyond this |x|, sin and cos are computed in double per element.
inline constexpr float kSinCosMax = 8192.0f;

// exp(x) = mant * scale, with mant a normal float for every x >= -120:
// below -80 the result leaves the normal range, so mant is exp(x + 16)
// (x + 16 is exact there) and scale e^-16. Callers that multiply the result
// further apply scale last, so a tiny result is rounded once.
template <class D, class V>
HWY_INLINE void ExpParts(D d, V x, V& mant, V& scale) {
  const auto low = hn::Lt(x, hn::Set(d, -80.0f));
  if (HWY_LIKELY(hn::AllFalse(d, low))) {  // the usual vector: no lane needs the scaling
    mant = hn::Exp(d, hn::Min(x, hn::Set(d, 89.0f)));
    scale = hn::Set(d, 1.0f);
    return;
  }
  // Above 89 the result is +inf; Exp(89) already overflows to it.
  const V arg = hn::Min(hn::Max(hn::IfThenElse(low, hn::Add(x, hn::Set(d, 16.0f)), x), hn::Set(d, -120.0f)),
                        hn::Set(d, 89.0f));
  mant = hn::Exp(d, arg);
  scale = hn::IfThenElse(low, hn::Set(d, 1.12535175e-07f), hn::Set(d, 1.0f));  // e^-16
}

template <class D, class V>
HWY_INLINE V ExpF(D d, V x) {
  V mant, scale;
  ExpParts(d, x, mant, scale);
  return hn::Mul(mant, scale);
}

template <class D, class V>
HWY_INLINE V Expm1F(D d, V x) {
  const V r = hn::Expm1(d, hn::Min(x, hn::Set(d, 89.0f)));
  return hn::IfThenElse(hn::Eq(x, hn::Zero(d)), x, r);  // keeps -0
}

template <class D, class V>
HWY_INLINE V LogF(D d, V x) {
  const V inf = hn::Set(d, std::numeric_limits<float>::infinity());
  V r = hn::Log(d, x);
  r = hn::IfThenElse(hn::Eq(x, inf), inf, r);
  r = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), hn::Neg(inf), r);
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Set(d, std::numeric_limits<float>::quiet_NaN()), r);
}

template <class D, class V>
HWY_INLINE V Log1pF(D d, V x) {
  const V inf = hn::Set(d, std::numeric_limits<float>::infinity()), minus_one = hn::Set(d, -1.0f);
  V r = hn::Log1p(d, x);
  r = hn::IfThenElse(hn::Eq(x, inf), inf, r);
  r = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), x, r);  // keeps -0
  r = hn::IfThenElse(hn::Eq(x, minus_one), hn::Neg(inf), r);
  return hn::IfThenElse(hn::Lt(x, minus_one), hn::Set(d, std::numeric_limits<float>::quiet_NaN()), r);
}

// 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below, so neither side
// overflows or cancels; times `factor` (silu's x) before the last scaling.
template <class D, class V>
HWY_INLINE V SigmoidTimes(D d, V x, V factor) {
  const V one = hn::Set(d, 1.0f);
  V mant, scale;
  ExpParts(d, hn::Neg(hn::Abs(x)), mant, scale);  // e^-|x|
  const V inv = hn::Div(one, hn::Add(one, hn::Mul(mant, scale)));
  const V negative = hn::Mul(hn::Mul(hn::Mul(mant, inv), factor), scale);
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), negative, hn::Mul(inv, factor));
}

template <class D, class V>
HWY_INLINE V SigmoidF(D d, V x) {
  return SigmoidTimes(d, x, hn::Set(d, 1.0f));
}

// erf near zero (|x| < 0.5), where 1 - erfc would cancel: its Taylor series.
template <class D, class V>
HWY_INLINE V ErfSeries(D d, V x) {
  const V x2 = hn::Mul(x, x);
  V series = hn::Set(d, -1.0f / 1320.0f);
  series = hn::MulAdd(series, x2, hn::Set(d, 1.0f / 216.0f));
  series = hn::MulAdd(series, x2, hn::Set(d, -1.0f / 42.0f));
  series = hn::MulAdd(series, x2, hn::Set(d, 1.0f / 10.0f));
  series = hn::MulAdd(series, x2, hn::Set(d, -1.0f / 3.0f));
  series = hn::MulAdd(series, x2, hn::Set(d, 1.0f));
  return hn::Mul(hn::Mul(series, x), hn::Set(d, 1.1283791670955126f));
}

// erfc(a) for a >= 0 (Numerical Recipes' Chebyshev fit, fractional error
// under 1.2e-7): t exp(p(t) - a^2). Rounding p - a^2 to float would cost up
// to 2^-18 relative (30 ulp) at a = 9, so the exponent is carried exactly
// as s + r: a^2 as hi + lo (Veltkamp's product, no FMA needed), p - hi as
// s + its rounding error (Knuth's two-sum); then exp(s + r) = exp(s)(1 + r)
// with |r| < 1e-5, one Exp. Past a = 10.5 the result is below the smallest
// denormal.
template <class D, class V>
HWY_INLINE V ErfcNonNegative(D d, V a_in) {
  const V a = hn::Min(a_in, hn::Set(d, 10.5f));
  const V t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(hn::Set(d, 0.5f), a, hn::Set(d, 1.0f)));
  V p = hn::Set(d, 0.17087277f);
  p = hn::MulAdd(p, t, hn::Set(d, -0.82215223f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.48851587f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.13520398f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.27886807f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.18628806f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.09678418f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.37409196f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.00002368f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.26551223f));
  const V c = hn::Mul(hn::Set(d, 4097.0f), a);  // split a into 12-bit halves
  const V a_hi = hn::Sub(c, hn::Sub(c, a)), a_lo = hn::Sub(a, a_hi);
  const V sq_hi = hn::Mul(a, a);
  const V sq_lo = hn::Add(hn::Add(hn::Sub(hn::Mul(a_hi, a_hi), sq_hi), hn::Mul(hn::Add(a_hi, a_hi), a_lo)),
                          hn::Mul(a_lo, a_lo));
  const V neg_hi = hn::Neg(sq_hi);
  const V sum = hn::Add(p, neg_hi), back = hn::Sub(sum, p);
  const V sum_err = hn::Add(hn::Sub(p, hn::Sub(sum, back)), hn::Sub(neg_hi, back));
  const V r = hn::Sub(sum_err, sq_lo);
  V mant, scale;
  ExpParts(d, sum, mant, scale);
  return hn::Mul(hn::Mul(hn::Mul(t, mant), hn::MulAdd(r, hn::Set(d, 1.0f), hn::Set(d, 1.0f))), scale);
}

// erf to ~2.5e-7 relative.
template <class D, class V>
HWY_INLINE V ErfF(D d, V x) {
  const V ax = hn::Abs(x);
  const V far = hn::CopySign(hn::Sub(hn::Set(d, 1.0f), ErfcNonNegative(d, ax)), x);
  return hn::IfThenElse(hn::Lt(ax, hn::Set(d, 0.5f)), ErfSeries(d, x), far);
}

// erfc(x) = 1 - erf(x), without the cancellation for large x.
template <class D, class V>
HWY_INLINE V ErfcF(D d, V x) {
  const V ax = hn::Abs(x), one = hn::Set(d, 1.0f);
  const V tail = ErfcNonNegative(d, ax);
  const V r = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Sub(hn::Set(d, 2.0f), tail), tail);
  return hn::IfThenElse(hn::Lt(ax, hn::Set(d, 0.5f)), hn::Sub(one, ErfSeries(d, x)), r);
}

// gelu(x) = x Phi(x) = x erfc(-x / sqrt 2) / 2: no cancellation for negative x.
template <class D, class V>
HWY_INLINE V GeluErfF(D d, V x) {
  const V cdf = hn::Mul(hn::Set(d, 0.5f), ErfcF(d, hn::Mul(x, hn::Set(d, static_cast<float>(-M_SQRT1_2)))));
  return hn::Mul(x, cdf);
}

// gelu's tanh form, 0.5 x (1 + tanh(u)), is x sigmoid(2u): no cancellation
// for negative x, where 1 + tanh(u) loses every digit.
template <class D, class V>
HWY_INLINE V GeluTanhF(D d, V x) {
  const V u2 = hn::Mul(hn::Set(d, 2.0f * 0.7978845608028654f),
                       hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), hn::Mul(x, x)), x, x));
  return SigmoidTimes(d, u2, x);
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KILN_VEC_MATH_INL_H_
