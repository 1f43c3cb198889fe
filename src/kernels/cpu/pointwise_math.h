// The one definition of each elementwise op's math (Note [One definition of
// the math]). Every op is a functor with its float32 form, which the eager
// kernels (elementwise_simd.cpp, vectorised once per Highway target) and the
// loops kiln::compile generates (this file's text is their prelude) both
// call, and its float64 form (libm: the reference).
//
// Note [One definition of the math]
// The float32 forms are plain branch-free C++: IEEE +, -, *, /, sqrt, fused
// multiply-adds written out (mad: one rounding, so the same result with or
// without an FMA unit; a target without one calls libm's fmaf), selects and
// bit operations; no other library call, and no contraction the compiler
// chooses (both sides are built with -ffp-contract=off). Lanes are
// independent, so whatever vector width a compiler picks, every element is
// computed by the same sequence of correctly rounded operations: eager and
// compiled results are bit-identical by construction, on every CPU. The functions are right on the whole float
// line (Note [Float32 at the edges], tests/kernels/special_values_test.cpp):
// +-0 keep their sign where the function does, infinities and NaN give the
// IEEE answer, tiny results round once into the subnormals.
//
// This file includes nothing and uses only compiler builtins, so that it can
// be embedded as text (pointwise_math_text.cpp, made by CMake) into the
// generated sources, which are compiled with no include path.
//
// Adding an elementwise op: its functor here and a line in the list at the
// end; the kernel, its registration and fusion by kiln::compile follow.
#ifndef KILN_POINTWISE_MATH_H_
#define KILN_POINTWISE_MATH_H_

// Inlined into every caller, so each Highway target's loop (and each
// generated loop) vectorises the function with its own instructions.
#define KILN_PW_INLINE [[gnu::always_inline]] inline

namespace kiln::pointwise {

using u32 = __UINT32_TYPE__;
using i32 = __INT32_TYPE__;

KILN_PW_INLINE float from_bits(u32 b) { return __builtin_bit_cast(float, b); }
KILN_PW_INLINE u32 to_bits(float f) { return __builtin_bit_cast(u32, f); }
KILN_PW_INLINE float inf_f() { return __builtin_inff(); }
KILN_PW_INLINE float mad(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
KILN_PW_INLINE double mad(double a, double b, double c) { return __builtin_fma(a, b, c); }
KILN_PW_INLINE float nan_f() { return __builtin_nanf(""); }

// 2^k for k in [-126, 127], built as the float's exponent field.
KILN_PW_INLINE float pow2i(i32 k) { return from_bits(static_cast<u32>(k + 127) << 23); }

// round(z) for |z| < 2^22 as a float and as an integer: adding 1.5 * 2^23
// leaves the integer in the low mantissa bits (round half to even).
KILN_PW_INLINE float round_shift(float z, i32& k) {
  const float t = z + 12582912.0f;
  k = static_cast<i32>(to_bits(t) - 0x4B400000u);
  return t - 12582912.0f;
}

// e^r - 1 for |r| <= ln(2) / 2 + a little, as r + r^2 p(r): Taylor to degree
// 8 (truncation below 3e-10 relative).
KILN_PW_INLINE float expm1_core(float r) {
  float p = 2.48015873e-05f;  // 1/8!
  p = mad(p, r, 1.98412698e-04f);
  p = mad(p, r, 1.38888889e-03f);
  p = mad(p, r, 8.33333333e-03f);
  p = mad(p, r, 4.16666667e-02f);
  p = mad(p, r, 1.66666667e-01f);
  p = mad(p, r, 0.5f);
  return mad(r * r, p, r);
}

// x = k ln2 + r with |r| <= ln(2) / 2: ln2 in two parts, the first with 15
// significant bits so k * kLn2Hi is exact for |k| < 512 (Cody and Waite).
KILN_PW_INLINE float reduce_ln2(float x, i32& k) {
  const float kf = round_shift(x * 1.44269504f, k);
  return mad(-kf, 1.42860677e-06f, mad(-kf, 0.693145751953125f, x));
}

// e^x within 1 ulp for x <= 89 (e^89 overflows; above, the caller clamps),
// x clamped below at -104 (e^-104 rounds to 0); the result is p 2^k1 2^k2
// with k1 + k2 = k, both powers normal and the first product exact, so a
// subnormal result is rounded once. A NaN x flows through to the result.
KILN_PW_INLINE float exp_upto89_f(float x) {
  const float xc = x < -104.0f ? -104.0f : x;
  i32 k;
  const float r = reduce_ln2(xc, k);
  const float p = 1.0f + expm1_core(r);
  const i32 k1 = k >> 1;
  return (p * pow2i(k1)) * pow2i(k - k1);
}

KILN_PW_INLINE float exp_f(float x) { return exp_upto89_f(x > 89.0f ? 89.0f : x); }

// Note [Softmax's exponential]
// A softmax row rounds e^(x - max) twice more (the sum's reciprocal, the
// product), so its exponential trades exp_upto89_f's last tenth of an ulp for
// speed (the row kernels are bound by it): e^r - 1 = r + r^2 q(r) with q a
// degree-4 minimax fit (mpmath's chebyfit of (e^r - 1 - r) / r^2 on
// |r| <= ln(2) / 2 + 5e-4, relative error 1.1e-8), two multiply-adds fewer
// than expm1_core; 2^k is read from round_shift's sum with the exponent bias
// added there (one shift), and (1 + e) 2^k is one multiply-add, one rounding.
// exp_row_f is within 1.07 ulp of e^x for every float x <= 0 (1.061 checked on all
// of them against libm's double exp; exp_upto89_f: 0.98). For x in [-87, 0]
// both 2^k and the result are normal, so one scaling gives exp_row_f's bits
// exactly: exp_row_normal_f, which the row kernels use for a row whose span
// (max - min) is at most 87.
KILN_PW_INLINE float expm1_core_row(float r) {
  float p = 1.39262839e-03f;
  p = mad(p, r, 8.36325938e-03f);
  p = mad(p, r, 4.16665540e-02f);
  p = mad(p, r, 1.66665765e-01f);
  p = mad(p, r, 0.5f);
  return mad(r * r, p, r);
}

// x = k ln2 + r as reduce_ln2, returning the float whose low mantissa bits
// hold k + 127 (2^k's exponent field while k >= -126).
KILN_PW_INLINE float reduce_ln2_biased(float x, float& r) {
  constexpr float kShift = 12582912.0f + 127.0f;  // 1.5 * 2^23, plus the bias
  const float t = x * 1.44269504f + kShift;
  const float kf = t - kShift;
  r = mad(-kf, 1.42860677e-06f, mad(-kf, 0.693145751953125f, x));
  return t;
}

KILN_PW_INLINE float exp_row_f(float x) {
  float r;
  const float t = reduce_ln2_biased(x < -104.0f ? -104.0f : x, r);
  const i32 k = static_cast<i32>(to_bits(t) - 0x4B40007Fu);
  const i32 k1 = k >> 1;
  const float s1 = pow2i(k1);
  return mad(expm1_core_row(r), s1, s1) * pow2i(k - k1);
}

KILN_PW_INLINE float exp_row_normal_f(float x) {
  float r;
  const float t = reduce_ln2_biased(x, r);
  const float scale = from_bits(to_bits(t) << 23);
  return mad(expm1_core_row(r), scale, scale);
}

// 2^x = 2^k 2^r with k = round(x) and r = x - k exact (|r| <= 1/2); 2^r =
// e^(r ln 2) with r ln 2 carried as hi + lo (lo by one fused multiply-add),
// e^(hi + lo) = e^hi (1 + lo). x is clamped to [-151, 129] (2^-151 rounds to
// 0, 2^128 overflows); the scaling as in exp. Exact at integers.
KILN_PW_INLINE float exp2_f(float x) {
  const float xc = x < -151.0f ? -151.0f : (x > 129.0f ? 129.0f : x);
  i32 k;
  const float r = xc - round_shift(xc, k);
  const float hi = r * 0.693147182f;
  const float lo = mad(r, 0.693147182f, -hi) + r * -1.90465421e-09f;
  const float q = expm1_core(hi);
  const float p = 1.0f + mad(q, lo, q + lo);  // e^hi (1 + lo) - 1 = q + lo + q lo
  const i32 k1 = k >> 1;
  return (p * pow2i(k1)) * pow2i(k - k1);
}

// e^x - 1: 2^k (q + 1) - 1 = 2^k q + (2^k - 1) with q = e^r - 1, both terms
// exact up to the last addition; k = 0 gives q itself (tiny x exact), and
// -0 stays -0. Below -30 the result rounds to -1; from k = 100 the split
// scaling of exp_f (overflow to inf).
KILN_PW_INLINE float expm1_f(float x) {
  const float xc = x < -30.0f ? -30.0f : (x > 89.0f ? 89.0f : x);
  i32 k;
  const float r = reduce_ln2(xc, k);
  const float q = expm1_core(r);
  const float two = pow2i(k > 100 ? 0 : k);
  const float moderate = two * q + (two - 1.0f);
  const i32 k1 = k >> 1;
  const float big = ((q + 1.0f) * pow2i(k1)) * pow2i(k - k1);
  const float e = k > 100 ? big : moderate;
  return x != x || x == 0.0f ? x : e;
}

// log(x) = k ln2 + log(m), m in [sqrt(1/2), sqrt 2) and f = m - 1: with
// s = f / (2 + f), log(1 + f) = f - hfsq + s (hfsq + R(s^2)), hfsq = f^2 / 2,
// R the series of 2 atanh(s) - 2s - s^3 .. past its first terms (Taylor to
// s^9; truncation below 1e-9 relative). Subnormal x is scaled by 2^23 first.
// x = 2^k m: k (as a float) and log(m) - (m - 1)'s parts; with f = m - 1,
// log(m) = f - hfsq + s (hfsq + R).
struct LogParts {
  float dk, f, hfsq, s, R;
};
KILN_PW_INLINE LogParts log_parts(float x) {
  const bool sub = static_cast<i32>(to_bits(x)) < 0x00800000;  // subnormal (or zero, or negative: special)
  const float xs = sub ? x * 8388608.0f : x;
  // Shifting by 1 - sqrt(1/2)'s bits puts m's split at sqrt(1/2).
  const u32 ix = to_bits(xs) + (0x3f800000u - 0x3f3504f3u);
  const i32 k = static_cast<i32>(ix >> 23) - (sub ? 150 : 127);
  const float m = from_bits((ix & 0x007fffffu) + 0x3f3504f3u);
  LogParts p;
  p.f = m - 1.0f;
  p.s = p.f / (2.0f + p.f);
  const float z = p.s * p.s;
  p.R = z * mad(z, mad(z, mad(z, 0.222222222f, 0.285714286f), 0.4f), 0.666666667f);
  p.hfsq = 0.5f * p.f * p.f;
  p.dk = static_cast<float>(k);
  return p;
}

// The log of a number that is not positive and finite (+-0, negative, inf,
// NaN: one unsigned compare), else `r`; for log, log2 and log10.
KILN_PW_INLINE float log_special(float x, float r) {
  const bool special = to_bits(x) - 1u >= 0x7f7fffffu;
  const float value = x == 0.0f ? -inf_f() : (x == inf_f() ? x : nan_f());
  return special ? value : r;
}

KILN_PW_INLINE float log_f(float x) {
  const LogParts p = log_parts(x);
  const float r = mad(p.dk, 0.693145751953125f, (p.f - p.hfsq) + mad(p.s, p.hfsq + p.R, p.dk * 1.42860677e-06f));
  return log_special(x, r);
}

// log2(x) = k + log(m) / ln 2: exact at powers of two (m = 1).
KILN_PW_INLINE float log2_f(float x) {
  const LogParts p = log_parts(x);
  const float t = (p.f - p.hfsq) + p.s * (p.hfsq + p.R);
  return log_special(x, p.dk + mad(t, 1.44269502f, t * 1.92596299e-08f));
}

// log10(x) = k log10(2) + log(m) / ln 10, log10(2) in two parts (the first
// with 13 significant bits, so k times it is exact).
KILN_PW_INLINE float log10_f(float x) {
  const LogParts p = log_parts(x);
  const float t = (p.f - p.hfsq) + p.s * (p.hfsq + p.R);
  return log_special(x, mad(p.dk, 0.301025390625f, mad(t, 0.434294482f, p.dk * 4.60503898e-06f)));
}

// log(1 + x) = log(u) + (x - (u - 1)) / u with u = 1 + x rounded: the second
// term is the rounding error of u, to first order. u = 1 is x itself (tiny
// x, -0 kept).
KILN_PW_INLINE float log1p_f(float x) {
  const float u = 1.0f + x;
  const float corrected = log_f(u) + (x - (u - 1.0f)) / u;
  const bool plain = u <= 0.0f || x == inf_f() || x != x;  // -1 -> -inf, below -> NaN
  return u == 1.0f ? x : (plain ? log_f(u) : corrected);
}

// +-sin(r) or +-cos(r) for x = (n + r / (pi/2)), |r| <= pi/4 + a little,
// q = n mod 4 (0 .. 3): their Taylor series in double (truncation below
// 3e-9 relative), rounded to float once.
KILN_PW_INLINE float sin_of_quadrant(double r, double q) {
  const double z = r * r;
  const double sin_r = mad(r * z, mad(z, mad(z, mad(z, 1.0 / 362880, -1.0 / 5040), 1.0 / 120), -1.0 / 6), r);
  const double cos_r =
      mad(z, mad(z, mad(z, mad(z, mad(z, -1.0 / 3628800, 1.0 / 40320), -1.0 / 720), 1.0 / 24), -0.5), 1.0);
  const double v = q == 1.0 || q == 3.0 ? cos_r : sin_r;
  return static_cast<float>(q >= 2.0 ? -v : v);
}

// Below this |x| the argument is reduced in float (sin_quadrant_fast: within
// 1.6 ulp, checked exhaustively); above, exactly in double.
inline constexpr float kSinCosFastMax = 524288.0f;  // 2^19

// sin(x + shift pi/2) for |x| <= kSinCosFastMax: x = n pi/2 + r with
// pi/2 = C1 + C2 + C3 in 24-bit pieces (Cody and Waite). x - n C1 is exact
// (every term lies on the 2^-23 grid and the difference is below 2), the two
// later steps round once each, relative to r; n is below 2^19, so x 2/pi
// rounded to float picks the right quadrant or a neighbour (|r| < pi/4 +
// 0.025). sin(r) and cos(r) by Taylor series in float (truncation below
// 2e-9); the quadrant's low bits select one and give the sign.
KILN_PW_INLINE float sin_quadrant_fast(float x, u32 shift) {
  i32 k;
  const float n = round_shift(x * 0.636619772f, k);
  float r = mad(-n, 1.57079637f, x);
  r = mad(-n, -4.37113883e-08f, r);
  r = mad(-n, -1.71512451e-15f, r);
  const u32 q = static_cast<u32>(k) + shift;
  const float z = r * r;
  const float sin_r = mad(r * z, mad(z, mad(z, mad(z, 2.75573192e-6f, -1.98412698e-4f), 8.33333333e-3f),
                                     -1.66666667e-1f), r);
  const float cos_r = mad(z, mad(z, mad(z, mad(z, mad(z, -2.75573192e-7f, 2.48015873e-5f), -1.38888889e-3f),
                                           4.16666667e-2f), -0.5f), 1.0f);
  const float v = (q & 1u) != 0u ? cos_r : sin_r;
  return from_bits(to_bits(v) ^ ((q & 2u) << 30));
}

// 2/pi in 24-bit pieces: kTwoOverPi[i] = the bits 24i+1 .. 24i+24 of 2/pi.
// x = M 2^E (M a 24-bit integer) times each piece is exact in double.
inline constexpr double kTwoOverPi[8] = {0xa2f983p-24, 0x6e4e44p-48, 0x1529fcp-72,  0x2757d1p-96,
                                         0xf534ddp-120, 0xc0db62p-144, 0x95993cp-168, 0x439041p-192};

// sin(x + shift pi/2) for every float x, the argument reduced exactly (Payne
// and Hanek): x 2/pi mod 4 is the sum of the products x * kTwoOverPi[i]
// mod 4, each exact, summed with their rounding errors kept aside (Knuth's
// two-sum); pieces past the 8th are below 2^-58 for every float.
KILN_PW_INLINE float sin_quadrant_exact(float x, double shift) {
  const double xd = x;
  double s = shift, err = 0.0;
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    double p = xd * kTwoOverPi[i];
    p = mad(-4.0, __builtin_rint(p * 0.25), p);
    const double t = s + p, b = t - s;
    err += (s - (t - b)) + (p - b);
    s = mad(-4.0, __builtin_rint(t * 0.25), t);
  }
  const double n = __builtin_rint(s);
  const double r = ((s - n) + err) * 1.5707963267948966;
  return sin_of_quadrant(r, n < 0.0 ? n + 4.0 : n);
}

// sin(x) (shift 0) or cos(x) = sin(x + pi/2) (shift 1). The eager kernel
// runs a block whose |x| are all <= kSinCosFastMax through the fast form
// alone (the same result: this select is the definition).
KILN_PW_INLINE float sin_quadrant_f(float x, u32 shift) {
  return __builtin_fabsf(x) <= kSinCosFastMax ? sin_quadrant_fast(x, shift)
                                              : sin_quadrant_exact(x, static_cast<double>(shift));
}

KILN_PW_INLINE float sin_f(float x) { return x == 0.0f ? x : sin_quadrant_f(x, 0u); }  // -0 kept
KILN_PW_INLINE float cos_f(float x) { return sin_quadrant_f(x, 1u); }

// tanh(|x|) = -e / (2 + e) with e = e^(-2|x|) - 1: no overflow, no
// cancellation near 0; the sign copied back (-0 kept).
KILN_PW_INLINE float tanh_f(float x) {
  const float a = __builtin_fabsf(x);
  const float e = expm1_f(-2.0f * a);
  const float t = -e / (2.0f + e);
  return x != x ? x : __builtin_copysignf(t, x);
}

// factor * sigmoid(x): 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below,
// so neither side overflows or cancels. e^-|x| is rounded once, into the
// subnormals where it is tiny (sigmoid(-95) is 5.5e-42, not 0).
// A NaN x gives e = NaN and so a NaN result.
KILN_PW_INLINE float sigmoid_times_f(float x, float factor) {
  const float e = exp_upto89_f(-__builtin_fabsf(x));
  const float inv = 1.0f / (1.0f + e);
  return x < 0.0f ? (e * inv) * factor : inv * factor;
}

// erf near zero (|x| < 0.5), where 1 - erfc would cancel: its Taylor series.
KILN_PW_INLINE float erf_series_f(float x) {
  const float x2 = x * x;
  float p = -1.0f / 1320.0f;
  p = mad(p, x2, 1.0f / 216.0f);
  p = mad(p, x2, -1.0f / 42.0f);
  p = mad(p, x2, 1.0f / 10.0f);
  p = mad(p, x2, -1.0f / 3.0f);
  p = mad(p, x2, 1.0f);
  return (p * x) * 1.1283791670955126f;
}

// erfc(a) for a >= 0 (Numerical Recipes' Chebyshev fit, fractional error
// under 1.2e-7): t exp(p(t) - a^2). Rounding p - a^2 to float would cost up
// to 2^-18 relative at a = 9, so the exponent is carried as s + r: a^2 as
// hi + lo (lo by one fused multiply-add), p - hi as s + its rounding error (two-sum);
// then exp(s + r) = exp(s)(1 + r), |r| < 1e-5. Past a = 10.5 the result is
// below the smallest subnormal.
KILN_PW_INLINE float erfc_nonnegative_f(float a_in) {
  const float a = a_in < 10.5f ? a_in : 10.5f;
  const float t = 1.0f / mad(0.5f, a, 1.0f);
  float p = 0.17087277f;
  p = mad(p, t, -0.82215223f);
  p = mad(p, t, 1.48851587f);
  p = mad(p, t, -1.13520398f);
  p = mad(p, t, 0.27886807f);
  p = mad(p, t, -0.18628806f);
  p = mad(p, t, 0.09678418f);
  p = mad(p, t, 0.37409196f);
  p = mad(p, t, 1.00002368f);
  p = mad(p, t, -1.26551223f);
  const float sq_hi = a * a;
  const float sq_lo = mad(a, a, -sq_hi);  // exactly a^2 - sq_hi
  const float sum = p - sq_hi, back = sum - p;
  const float sum_err = (p - (sum - back)) + (-sq_hi - back);
  const float r = sum_err - sq_lo;
  return (t * exp_upto89_f(sum)) * (r + 1.0f);
}

KILN_PW_INLINE float erf_f(float x) {
  const float ax = __builtin_fabsf(x);
  const float far = __builtin_copysignf(1.0f - erfc_nonnegative_f(ax), x);
  const float r = ax < 0.5f ? erf_series_f(x) : far;
  return x != x ? x : r;
}

// (Near 0 the fit's 1.2e-7 is within 2 ulp of erfc's 1: no series needed.)
KILN_PW_INLINE float erfc_f(float x) {
  const float tail = erfc_nonnegative_f(__builtin_fabsf(x));
  const float r = x < 0.0f ? 2.0f - tail : tail;
  return x != x ? x : r;
}

// Float64 forms of the composites, in the same shapes (the reference).
KILN_PW_INLINE double sigmoid_times_d(double x, double factor) {
  if (x >= 0.0) return factor / (1.0 + __builtin_exp(-x));
  const double e = __builtin_exp(x);
  return factor * e / (1.0 + e);
}

// gelu's tanh form 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = k (x + c x^3):
// no cancellation for negative x, where 1 + tanh(u) loses every digit.
inline constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluC = 0.044715;

struct Neg {
  KILN_PW_INLINE static float f(float x) { return -x; }
  KILN_PW_INLINE static double f(double x) { return -x; }
};
struct Abs {
  KILN_PW_INLINE static float f(float x) { return __builtin_fabsf(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_fabs(x); }
};
// (0 < x) - (x < 0), as PyTorch: NaN and -0 give +0.
struct Sign {
  KILN_PW_INLINE static float f(float x) { return (x > 0.0f ? 1.0f : 0.0f) - (x < 0.0f ? 1.0f : 0.0f); }
  KILN_PW_INLINE static double f(double x) { return (x > 0.0 ? 1.0 : 0.0) - (x < 0.0 ? 1.0 : 0.0); }
};
struct Exp {
  KILN_PW_INLINE static float f(float x) { return exp_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_exp(x); }
};
struct Expm1 {
  KILN_PW_INLINE static float f(float x) { return expm1_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_expm1(x); }
};
struct Log {
  KILN_PW_INLINE static float f(float x) { return log_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_log(x); }
};
struct Log1p {
  KILN_PW_INLINE static float f(float x) { return log1p_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_log1p(x); }
};
struct Sqrt {
  KILN_PW_INLINE static float f(float x) { return __builtin_sqrtf(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_sqrt(x); }
};
struct Rsqrt {
  KILN_PW_INLINE static float f(float x) { return 1.0f / __builtin_sqrtf(x); }
  KILN_PW_INLINE static double f(double x) { return 1.0 / __builtin_sqrt(x); }
};
struct Reciprocal {
  KILN_PW_INLINE static float f(float x) { return 1.0f / x; }
  KILN_PW_INLINE static double f(double x) { return 1.0 / x; }
};
struct Sin {
  KILN_PW_INLINE static float f(float x) { return sin_f(x); }
  static constexpr float kFastMax = kSinCosFastMax;
  KILN_PW_INLINE static float f_fast(float x) { return x == 0.0f ? x : sin_quadrant_fast(x, 0u); }
  KILN_PW_INLINE static double f(double x) { return __builtin_sin(x); }
};
struct Cos {
  KILN_PW_INLINE static float f(float x) { return cos_f(x); }
  static constexpr float kFastMax = kSinCosFastMax;
  KILN_PW_INLINE static float f_fast(float x) { return sin_quadrant_fast(x, 1u); }
  KILN_PW_INLINE static double f(double x) { return __builtin_cos(x); }
};
struct Tanh {
  KILN_PW_INLINE static float f(float x) { return tanh_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_tanh(x); }
};
struct Sigmoid {
  KILN_PW_INLINE static float f(float x) { return sigmoid_times_f(x, 1.0f); }
  KILN_PW_INLINE static double f(double x) { return sigmoid_times_d(x, 1.0); }
};
// x where x > 0 or NaN, else +0 (-0 too).
struct Relu {
  KILN_PW_INLINE static float f(float x) { return x > 0.0f || x != x ? x : 0.0f; }
  KILN_PW_INLINE static double f(double x) { return x > 0.0 || x != x ? x : 0.0; }
};
// x Phi(x) = x erfc(-x / sqrt 2) / 2: no cancellation for negative x.
// x s(x) for an s that vanishes as x -> -inf (gelu, silu, mish): at -inf
// the limit, -0 as on the finite tail, where IEEE's -inf * 0 is NaN (which
// PyTorch 2.9 returns: its issues 185770 and 160876; its fixes return 0).
KILN_PW_INLINE float limit_at_minus_inf(float x, float r) { return x == -__builtin_inff() ? -0.0f : r; }
KILN_PW_INLINE double limit_at_minus_inf(double x, double r) { return x == -__builtin_inf() ? -0.0 : r; }

struct GeluErf {
  KILN_PW_INLINE static float f(float x) { return limit_at_minus_inf(x, x * (0.5f * erfc_f(x * -0.707106781f))); }
  KILN_PW_INLINE static double f(double x) {
    return limit_at_minus_inf(x, 0.5 * x * __builtin_erfc(-x * 0.70710678118654752));
  }
};
struct GeluTanh {
  KILN_PW_INLINE static float f(float x) {
    const float u2 = static_cast<float>(2 * kGeluK) * mad(static_cast<float>(kGeluC) * (x * x), x, x);
    return limit_at_minus_inf(x, sigmoid_times_f(u2, x));
  }
  KILN_PW_INLINE static double f(double x) {
    return limit_at_minus_inf(x, sigmoid_times_d(2 * kGeluK * (x + kGeluC * x * x * x), x));
  }
};
struct Silu {
  KILN_PW_INLINE static float f(float x) { return limit_at_minus_inf(x, sigmoid_times_f(x, x)); }
  KILN_PW_INLINE static double f(double x) { return limit_at_minus_inf(x, sigmoid_times_d(x, x)); }
};
struct Erf {
  KILN_PW_INLINE static float f(float x) { return erf_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_erf(x); }
};
struct Floor {
  KILN_PW_INLINE static float f(float x) { return __builtin_floorf(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_floor(x); }
};
struct Ceil {
  KILN_PW_INLINE static float f(float x) { return __builtin_ceilf(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_ceil(x); }
};
struct Log2 {
  KILN_PW_INLINE static float f(float x) { return log2_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_log2(x); }
};
struct Log10 {
  KILN_PW_INLINE static float f(float x) { return log10_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_log10(x); }
};
struct Exp2 {
  KILN_PW_INLINE static float f(float x) { return exp2_f(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_exp2(x); }
};
// The inverse trigonometric, tangent and hyperbolic functions: float32
// through the double function, rounded once (within 0.5 ulp and a hair of
// the exact value; scalar calls, no vector forms yet).
#define KILN_PW_THROUGH_DOUBLE(Name, fn)                                                            \
  struct Name {                                                                                     \
    KILN_PW_INLINE static float f(float x) { return static_cast<float>(fn(static_cast<double>(x))); } \
    KILN_PW_INLINE static double f(double x) { return fn(x); }                                      \
  };
KILN_PW_THROUGH_DOUBLE(Tan, __builtin_tan)
KILN_PW_THROUGH_DOUBLE(Asin, __builtin_asin)
KILN_PW_THROUGH_DOUBLE(Acos, __builtin_acos)
KILN_PW_THROUGH_DOUBLE(Atan, __builtin_atan)
KILN_PW_THROUGH_DOUBLE(Sinh, __builtin_sinh)
KILN_PW_THROUGH_DOUBLE(Cosh, __builtin_cosh)
KILN_PW_THROUGH_DOUBLE(Asinh, __builtin_asinh)
KILN_PW_THROUGH_DOUBLE(Acosh, __builtin_acosh)
KILN_PW_THROUGH_DOUBLE(Atanh, __builtin_atanh)
#undef KILN_PW_THROUGH_DOUBLE
struct Trunc {
  KILN_PW_INLINE static float f(float x) { return __builtin_truncf(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_trunc(x); }
};
// x - trunc(x): NaN for +-inf, as in PyTorch.
struct Frac {
  KILN_PW_INLINE static float f(float x) { return x - __builtin_truncf(x); }
  KILN_PW_INLINE static double f(double x) { return x - __builtin_trunc(x); }
};
// log(sigmoid(x)) = min(x, 0) - log(1 + e^-|x|): no overflow, no cancellation.
struct LogSigmoid {
  KILN_PW_INLINE static float f(float x) { return (x < 0.0f ? x : 0.0f) - log1p_f(exp_upto89_f(-__builtin_fabsf(x))); }
  KILN_PW_INLINE static double f(double x) {
    return (x < 0.0 ? x : 0.0) - __builtin_log1p(__builtin_exp(-__builtin_fabs(x)));
  }
};
// scale (x > 0 ? x : alpha (e^x - 1)) with PyTorch's constants.
struct Selu {
  static constexpr double kAlpha = 1.6732632423543772848170429916717;
  static constexpr double kScale = 1.0507009873554804934193349852946;
  KILN_PW_INLINE static float f(float x) {
    return static_cast<float>(kScale) * (x > 0.0f ? x : static_cast<float>(kAlpha) * expm1_f(x));
  }
  KILN_PW_INLINE static double f(double x) { return kScale * (x > 0.0 ? x : kAlpha * __builtin_expm1(x)); }
};
struct Round {  // half to even
  KILN_PW_INLINE static float f(float x) { return __builtin_rintf(x); }
  KILN_PW_INLINE static double f(double x) { return __builtin_rint(x); }
};
struct Square {
  KILN_PW_INLINE static float f(float x) { return x * x; }
  KILN_PW_INLINE static double f(double x) { return x * x; }
};
// min(max(x, lo), hi) as PyTorch (hi wins when lo > hi); NaN passes through.
struct Clamp {
  static constexpr const char* kAttrs[] = {"min", "max"};
  KILN_PW_INLINE static float f(float x, float lo, float hi) {
    const float m = x < lo ? lo : x;
    return x != x ? x : (m > hi ? hi : m);
  }
  KILN_PW_INLINE static double f(double x, double lo, double hi) {
    const double m = x < lo ? lo : x;
    return x != x ? x : (m > hi ? hi : m);
  }
};

// The activations of torch.nn.functional, in PyTorch's forms.
struct LeakyRelu {
  static constexpr const char* kAttrs[] = {"negative_slope"};
  KILN_PW_INLINE static float f(float x, float slope) { return x > 0.0f ? x : x * slope; }
  KILN_PW_INLINE static double f(double x, double slope) { return x > 0.0 ? x : x * slope; }
};
struct Elu {
  static constexpr const char* kAttrs[] = {"alpha"};
  KILN_PW_INLINE static float f(float x, float alpha) { return x > 0.0f ? x : alpha * expm1_f(x); }
  KILN_PW_INLINE static double f(double x, double alpha) { return x > 0.0 ? x : alpha * __builtin_expm1(x); }
};
// log(1 + e^(beta x)) / beta, and x itself where beta x > threshold.
struct Softplus {
  static constexpr const char* kAttrs[] = {"beta", "threshold"};
  KILN_PW_INLINE static float f(float x, float beta, float threshold) {
    const float z = x * beta;
    return z > threshold ? x : log1p_f(exp_f(z)) / beta;
  }
  KILN_PW_INLINE static double f(double x, double beta, double threshold) {
    const double z = x * beta;
    return z > threshold ? x : __builtin_log1p(__builtin_exp(z)) / beta;
  }
};
struct Hardtanh {
  static constexpr const char* kAttrs[] = {"min_val", "max_val"};
  KILN_PW_INLINE static float f(float x, float lo, float hi) { return Clamp::f(x, lo, hi); }
  KILN_PW_INLINE static double f(double x, double lo, double hi) { return Clamp::f(x, lo, hi); }
};
// min(max(x + 3, 0), 6) / 6 (NaN passes through).
struct Hardsigmoid {
  KILN_PW_INLINE static float f(float x) { return Clamp::f(x + 3.0f, 0.0f, 6.0f) / 6.0f; }
  KILN_PW_INLINE static double f(double x) { return Clamp::f(x + 3.0, 0.0, 6.0) / 6.0; }
};
// x hardsigmoid(x): the product last, so no x above 5.7e37 overflows (x * 6).
struct Hardswish {
  KILN_PW_INLINE static float f(float x) { return x * Hardsigmoid::f(x); }
  KILN_PW_INLINE static double f(double x) { return x * Hardsigmoid::f(x); }
};
// x tanh(log(1 + e^x)).
struct Mish {
  KILN_PW_INLINE static float f(float x) { return limit_at_minus_inf(x, x * tanh_f(log1p_f(exp_f(x)))); }
  KILN_PW_INLINE static double f(double x) {
    return limit_at_minus_inf(x, x * __builtin_tanh(__builtin_log1p(__builtin_exp(x))));
  }
};

// a + alpha * b rounds the product first on every side (no FMA: it would make
// inf + 3 * -3e38 finite).
struct Add {
  KILN_PW_INLINE static float f(float a, float b, float alpha) { return a + alpha * b; }
  KILN_PW_INLINE static double f(double a, double b, double alpha) { return a + alpha * b; }
};
struct Sub {
  KILN_PW_INLINE static float f(float a, float b, float alpha) { return a - alpha * b; }
  KILN_PW_INLINE static double f(double a, double b, double alpha) { return a - alpha * b; }
};
struct Mul {
  KILN_PW_INLINE static float f(float a, float b) { return a * b; }
  KILN_PW_INLINE static double f(double a, double b) { return a * b; }
};
struct Div {
  KILN_PW_INLINE static float f(float a, float b) { return a / b; }
  KILN_PW_INLINE static double f(double a, double b) { return a / b; }
};
// libm's pow and fmod on both sides (no vector form; the same function, so
// still the same results).
struct Pow {
  KILN_PW_INLINE static float f(float a, float b) { return __builtin_powf(a, b); }
  KILN_PW_INLINE static double f(double a, double b) { return __builtin_pow(a, b); }
};
struct Fmod {
  KILN_PW_INLINE static float f(float a, float b) { return __builtin_fmodf(a, b); }
  KILN_PW_INLINE static double f(double a, double b) { return __builtin_fmod(a, b); }
};
// NaN in either input propagates, as in torch.maximum.
// sqrt(a^2 + b^2) in double (no overflow or underflow: every float's square
// is a normal double), rounded once to float. An infinity wins over NaN, as
// in IEEE hypot.
// atan2(a, b): the angle of (b, a), through double as above.
struct Atan2 {
  KILN_PW_INLINE static float f(float a, float b) {
    return static_cast<float>(__builtin_atan2(static_cast<double>(a), static_cast<double>(b)));
  }
  KILN_PW_INLINE static double f(double a, double b) { return __builtin_atan2(a, b); }
};
struct Hypot {
  KILN_PW_INLINE static float f(float a, float b) {
    const double da = a, db = b;
    const float h = static_cast<float>(__builtin_sqrt(mad(da, da, db * db)));
    return __builtin_fabsf(a) == inf_f() || __builtin_fabsf(b) == inf_f() ? inf_f() : h;
  }
  KILN_PW_INLINE static double f(double a, double b) { return __builtin_hypot(a, b); }
};
// log(e^a + e^b) as max(a, b) + log1p(e^-|a - b|): no overflow, exact where
// one side dominates; equal infinities are that infinity (inf - inf would be
// NaN), as in PyTorch; a NaN on either side gives NaN.
struct LogAddExp {
  KILN_PW_INLINE static float f(float a, float b) {
    const float r = (a > b ? a : b) + log1p_f(exp_upto89_f(-__builtin_fabsf(a - b)));
    return a == b && __builtin_fabsf(a) == inf_f() ? a : (a != a || b != b ? a + b : r);
  }
  KILN_PW_INLINE static double f(double a, double b) {
    const double r = (a > b ? a : b) + __builtin_log1p(__builtin_exp(-__builtin_fabs(a - b)));
    return a == b && __builtin_fabs(a) == __builtin_inf() ? a : (a != a || b != b ? a + b : r);
  }
};
// libm's functions by argument type, so one template serves both forms.
KILN_PW_INLINE float fmod_of(float a, float b) { return __builtin_fmodf(a, b); }
KILN_PW_INLINE double fmod_of(double a, double b) { return __builtin_fmod(a, b); }
KILN_PW_INLINE float floor_of(float x) { return __builtin_floorf(x); }
KILN_PW_INLINE double floor_of(double x) { return __builtin_floor(x); }
KILN_PW_INLINE float copysign_of(float a, float b) { return __builtin_copysignf(a, b); }
KILN_PW_INLINE double copysign_of(double a, double b) { return __builtin_copysign(a, b); }

struct CopySign {
  KILN_PW_INLINE static float f(float a, float b) { return copysign_of(a, b); }
  KILN_PW_INLINE static double f(double a, double b) { return copysign_of(a, b); }
};
// fmod's remainder m of a / b has a's sign; Python's has b's.
template <class T>
KILN_PW_INLINE bool on_wrong_side(T m, T b) {
  return m != T(0) && (b < T(0)) != (m < T(0));
}

// Python's a % b: fmod's remainder moved into b's sign (NaN for b = 0).
template <class T>
KILN_PW_INLINE T python_remainder(T a, T b) {
  const T m = fmod_of(a, b);
  return on_wrong_side(m, b) ? m + b : m;
}

// Python's a // b as PyTorch computes it for floats: (a - fmod(a, b)) / b
// is exact up to one rounding, moved down by one where fmod's sign differs
// from b's, then rounded to the nearest integer; a zero keeps a / b's sign;
// b = 0 gives a / b (+-inf or NaN).
template <class T>
KILN_PW_INLINE T python_floor_divide(T a, T b) {
  const T m = fmod_of(a, b);
  const T d = on_wrong_side(m, b) ? (a - m) / b - T(1) : (a - m) / b;
  const T fl = floor_of(d);
  const T r = d - fl > T(0.5) ? fl + T(1) : fl;
  const T q = a / b;
  return b == T(0) ? q : (d == T(0) ? copysign_of(T(0), q) : r);
}

struct Remainder {
  KILN_PW_INLINE static float f(float a, float b) { return python_remainder(a, b); }
  KILN_PW_INLINE static double f(double a, double b) { return python_remainder(a, b); }
};
struct FloorDivide {
  KILN_PW_INLINE static float f(float a, float b) { return python_floor_divide(a, b); }
  KILN_PW_INLINE static double f(double a, double b) { return python_floor_divide(a, b); }
};
struct Maximum {
  KILN_PW_INLINE static float f(float a, float b) { return a != a || b != b ? a + b : (a > b ? a : b); }
  KILN_PW_INLINE static double f(double a, double b) { return a != a || b != b ? a + b : (a > b ? a : b); }
};
struct Minimum {
  KILN_PW_INLINE static float f(float a, float b) { return a != a || b != b ? a + b : (a < b ? a : b); }
  KILN_PW_INLINE static double f(double a, double b) { return a != a || b != b ? a + b : (a < b ? a : b); }
};
// (grad, x) -> grad where x > threshold, else 0: relu's gradient (x its
// output, threshold 0), PyTorch's threshold_backward. A select, not
// grad * (x > threshold): an inf or NaN grad at x <= threshold gives 0.
struct ThresholdBackward {
  static constexpr const char* kAttrs[] = {"threshold"};
  KILN_PW_INLINE static float f(float g, float x, float threshold) { return x <= threshold ? 0.0f : g; }
  KILN_PW_INLINE static double f(double g, double x, double threshold) { return x <= threshold ? 0.0 : g; }
};
// (grad, x) -> grad * gelu'(x) = grad (Phi(x) + x phi(x)).
struct GeluBackward {
  KILN_PW_INLINE static float f(float g, float x) {
    const float cdf = 0.5f * erfc_f(x * -0.707106781f);
    const float pdf = exp_upto89_f(-0.5f * (x * x)) * 0.398942280f;
    return g * mad(x, pdf, cdf);
  }
  KILN_PW_INLINE static double f(double g, double x) {
    const double cdf = 0.5 * __builtin_erfc(-x * 0.70710678118654752);
    const double pdf = __builtin_exp(-0.5 * x * x) * 0.3989422804014327;
    return g * (cdf + x * pdf);
  }
};
// (grad, x) -> grad * d/dx [x s] with s = sigmoid(2u) (gelu's tanh form):
// s + x 2 s (1 - s) u', 1 - s being sigmoid(-2u). 0.5 (1 + tanh(u)) would
// lose every digit for negative x (1 + t with t near -1).
struct GeluTanhBackward {
  KILN_PW_INLINE static float f(float g, float x) {
    const float k = static_cast<float>(kGeluK), x2 = x * x;
    const float u2 = (2.0f * k) * mad(static_cast<float>(kGeluC) * x2, x, x);
    const float e = exp_upto89_f(-__builtin_fabsf(u2));  // one exponential for both sigmoids
    const float inv = 1.0f / (1.0f + e), small = e * inv;
    const float s = u2 < 0.0f ? small : inv, rest = u2 < 0.0f ? inv : small;  // s and 1 - s
    const float du2 = (2.0f * k) * mad(static_cast<float>(3 * kGeluC), x2, 1.0f);
    return g * mad(x * (s * rest), du2, s);
  }
  KILN_PW_INLINE static double f(double g, double x) {
    const double u2 = 2 * kGeluK * (x + kGeluC * x * x * x);
    const double s = sigmoid_times_d(u2, 1.0), rest = sigmoid_times_d(-u2, 1.0);
    return g * (s + x * s * rest * 2 * kGeluK * (1 + 3 * kGeluC * x * x));
  }
};

// For the loops kiln::compile generates, which run a block of elements
// through the ops' fast forms and again through f only when some argument
// was out of a fast form's range (as the eager kernel checks its blocks):
// F's fast form where it has one, setting `beyond` for an argument out of
// its range, else F's only form.
// (C++17, as the generated sources are compiled: no concept.)
template <class F, class = void>
inline constexpr bool kHasFastForm = false;
template <class F>
inline constexpr bool kHasFastForm<F, decltype((void)F::f_fast(0.0f), (void)F::kFastMax)> = true;
template <class F>
KILN_PW_INLINE float fast_form(float x, u32& beyond) {
  if constexpr (kHasFastForm<F>) {
    beyond |= (to_bits(x) & 0x7fffffffu) > to_bits(F::kFastMax) ? 1u : 0u;
    return F::f_fast(x);
  } else {
    return F::f(x);
  }
}

}  // namespace kiln::pointwise

// The elementwise ops by family: X(functor, op name). The op codes
// (kernels/cpu/op_codes.h), the SIMD kernels, the kernel registrations and
// kiln::compile's fusion all read these lists.
#define KILN_POINTWISE_UNARY(X)                                                                              \
  X(Neg, "neg") X(Abs, "abs") X(Sign, "sign") X(Exp, "exp") X(Expm1, "expm1") X(Log, "log") X(Log1p, "log1p") \
  X(Sqrt, "sqrt") X(Rsqrt, "rsqrt") X(Reciprocal, "reciprocal") X(Sin, "sin") X(Cos, "cos") X(Tanh, "tanh")   \
  X(Sigmoid, "sigmoid") X(Relu, "relu") X(GeluErf, "gelu") X(GeluTanh, "gelu_tanh") X(Silu, "silu")           \
  X(Erf, "erf") X(Floor, "floor") X(Ceil, "ceil") X(Round, "round") X(Square, "square") X(Clamp, "clamp")     \
  X(LeakyRelu, "leaky_relu") X(Elu, "elu") X(Softplus, "softplus") X(Hardtanh, "hardtanh")                   \
  X(Hardsigmoid, "hardsigmoid") X(Hardswish, "hardswish") X(Mish, "mish") X(Log2, "log2") X(Log10, "log10") \
  X(Exp2, "exp2") X(Trunc, "trunc") X(Frac, "frac") X(LogSigmoid, "log_sigmoid") X(Selu, "selu")           \
  X(Tan, "tan") X(Asin, "asin") X(Acos, "acos") X(Atan, "atan") X(Sinh, "sinh") X(Cosh, "cosh")               \
  X(Asinh, "asinh") X(Acosh, "acosh") X(Atanh, "atanh")
#define KILN_POINTWISE_BINARY(X)                                                                              \
  X(Add, "add") X(Sub, "sub") X(Mul, "mul") X(Div, "div") X(Pow, "pow") X(Maximum, "maximum")                 \
  X(Minimum, "minimum") X(Fmod, "fmod") X(GeluBackward, "gelu_backward") X(GeluTanhBackward, "gelu_tanh_backward") \
  X(ThresholdBackward, "threshold_backward")                                                                  \
  X(Hypot, "hypot") X(LogAddExp, "logaddexp") X(CopySign, "copysign") X(Remainder, "remainder")             \
  X(FloorDivide, "floor_divide") X(Atan2, "atan2")

#endif  // KILN_POINTWISE_MATH_H_
