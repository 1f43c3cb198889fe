// SIMD unary and binary float32 kernels, compiled once per Highway target.
// The vector functors mirror scalar_functors.h, which the tests compare
// against.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/cpu/vec_math-inl.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/op_codes.h"
#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <UnaryOp OP, class D, class V>
HWY_INLINE V ApplyUnary(D d, V x, V lo, V hi) {
  const V zero = hn::Zero(d);
  const V one = hn::Set(d, 1.0f);
  if constexpr (OP == UnaryOp::Neg) return hn::Neg(x);
  else if constexpr (OP == UnaryOp::Abs) return hn::Abs(x);
  else if constexpr (OP == UnaryOp::Sign)
    return hn::Sub(hn::IfThenElseZero(hn::Gt(x, zero), one), hn::IfThenElseZero(hn::Lt(x, zero), one));
  else if constexpr (OP == UnaryOp::Exp) return ExpF(d, x);
  else if constexpr (OP == UnaryOp::Expm1) return Expm1F(d, x);
  else if constexpr (OP == UnaryOp::Log) return LogF(d, x);
  else if constexpr (OP == UnaryOp::Log1p) return Log1pF(d, x);
  else if constexpr (OP == UnaryOp::Sqrt) return hn::Sqrt(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return hn::Div(one, hn::Sqrt(x));
  else if constexpr (OP == UnaryOp::Reciprocal) return hn::Div(one, x);
  else if constexpr (OP == UnaryOp::Sin) return hn::IfThenElse(hn::Eq(x, zero), x, hn::Sin(d, x));  // keeps -0
  else if constexpr (OP == UnaryOp::Cos) return hn::Cos(d, x);
  else if constexpr (OP == UnaryOp::Tanh) return hn::Tanh(d, x);
  else if constexpr (OP == UnaryOp::Sigmoid) return SigmoidF(d, x);
  // x where x > 0 or NaN, else +0 (also for -0, as the scalar kernel and
  // the compiled loops give).
  else if constexpr (OP == UnaryOp::Relu) return hn::IfThenElse(hn::Or(hn::Gt(x, zero), hn::IsNaN(x)), x, zero);
  else if constexpr (OP == UnaryOp::GeluErf) return GeluErfF(d, x);
  else if constexpr (OP == UnaryOp::GeluTanh) return GeluTanhF(d, x);
  else if constexpr (OP == UnaryOp::Silu) return SigmoidTimes(d, x, x);
  else if constexpr (OP == UnaryOp::Erf) return ErfF(d, x);
  else if constexpr (OP == UnaryOp::Floor) return hn::Floor(x);
  else if constexpr (OP == UnaryOp::Ceil) return hn::Ceil(x);
  else if constexpr (OP == UnaryOp::Round) return hn::Round(x);
  else if constexpr (OP == UnaryOp::Square) return hn::Mul(x, x);
  else if constexpr (OP == UnaryOp::Clamp) {
    const V c = hn::Min(hn::Max(x, lo), hi);
    return hn::IfThenElse(hn::Eq(x, x), c, x);  // NaN passes through
  }
}

// Highway's math functions do not all propagate NaN (Exp(NaN) is 0): every
// op except those that define NaN handling themselves passes NaN through.
template <UnaryOp OP, class D, class V>
HWY_INLINE V ApplyUnaryNaN(D d, V x, V lo, V hi) {
  const V r = ApplyUnary<OP>(d, x, lo, hi);
  if constexpr (OP == UnaryOp::Clamp || OP == UnaryOp::Relu || OP == UnaryOp::Sign) return r;
  else return hn::IfThenElse(hn::Eq(x, x), r, x);
}

// Sin and cos of |x| > kSinCosMax (where Highway's argument reduction fails,
// sin(1e8) off by 60 ulp, sin(1e20) = -inf): in double per element, whose
// libm reduces exactly. Rare, so checked per vector first. The arguments
// come from x, not the input array: callers may compute in place.
template <UnaryOp OP, class D, class V>
HWY_INLINE void FixHugeArguments(D d, V x, float* out, size_t n) {
  if constexpr (OP == UnaryOp::Sin || OP == UnaryOp::Cos) {
    if (hn::AllFalse(d, hn::Gt(hn::Abs(x), hn::Set(d, kSinCosMax)))) return;
    HWY_ALIGN float lanes[HWY_MAX_BYTES / sizeof(float)];
    hn::Store(x, d, lanes);
    const size_t stored = std::min(n, hn::Lanes(d));  // n never exceeds it; said so the compiler sees it
    for (size_t j = 0; j < stored; ++j)
      if (std::fabs(lanes[j]) > kSinCosMax) {
        const double v = static_cast<double>(lanes[j]);
        out[j] = static_cast<float>(OP == UnaryOp::Sin ? std::sin(v) : std::cos(v));
      }
  }
}

template <UnaryOp OP>
void UnaryLoop(const float* in, float* out, size_t n, float lo, float hi) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(d, in + i);
    hn::StoreU(ApplyUnaryNaN<OP>(d, x, vlo, vhi), d, out + i);
    FixHugeArguments<OP>(d, x, out + i, N);
  }
  if (i < n) {  // the tail goes through a padded buffer so no lane reads past the end
    HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(buf, in + i, (n - i) * sizeof(float));
    const auto x = hn::Load(d, buf);
    hn::Store(ApplyUnaryNaN<OP>(d, x, vlo, vhi), d, buf);
    FixHugeArguments<OP>(d, x, buf, n - i);
    std::memcpy(out + i, buf, (n - i) * sizeof(float));
  }
}

void UnaryF32(int op, const float* in, float* out, size_t n, float lo, float hi) {
  switch (static_cast<UnaryOp>(op)) {
#define KILN_UNARY_CASE(name) \
  case UnaryOp::name: return UnaryLoop<UnaryOp::name>(in, out, n, lo, hi);
    KILN_UNARY_CASE(Neg) KILN_UNARY_CASE(Abs) KILN_UNARY_CASE(Sign) KILN_UNARY_CASE(Exp)
    KILN_UNARY_CASE(Expm1) KILN_UNARY_CASE(Log) KILN_UNARY_CASE(Log1p) KILN_UNARY_CASE(Sqrt)
    KILN_UNARY_CASE(Rsqrt) KILN_UNARY_CASE(Reciprocal) KILN_UNARY_CASE(Sin) KILN_UNARY_CASE(Cos)
    KILN_UNARY_CASE(Tanh) KILN_UNARY_CASE(Sigmoid) KILN_UNARY_CASE(Relu) KILN_UNARY_CASE(GeluErf)
    KILN_UNARY_CASE(GeluTanh) KILN_UNARY_CASE(Silu) KILN_UNARY_CASE(Erf) KILN_UNARY_CASE(Floor)
    KILN_UNARY_CASE(Ceil) KILN_UNARY_CASE(Round) KILN_UNARY_CASE(Square) KILN_UNARY_CASE(Clamp)
#undef KILN_UNARY_CASE
  }
}

template <BinaryOp OP, class D, class V>
HWY_INLINE V ApplyBinary(D d, V a, V b, V alpha) {
  // a + alpha * b rounds the product first, as the scalar loops and the
  // generated loops do (an FMA here would make inf + 3 * -3e38 finite on
  // targets with FMA only, and eager differ from compiled).
  if constexpr (OP == BinaryOp::Add) return hn::Add(a, hn::Mul(alpha, b));
  else if constexpr (OP == BinaryOp::GeluBackward) {
    const V half = hn::Set(d, 0.5f);
    const V cdf = hn::Mul(half, ErfcF(d, hn::Mul(b, hn::Set(d, static_cast<float>(-M_SQRT1_2)))));
    const V pdf = hn::Mul(ExpF(d, hn::Mul(hn::Set(d, -0.5f), hn::Mul(b, b))), hn::Set(d, 0.3989422804014327f));
    return hn::Mul(a, hn::MulAdd(b, pdf, cdf));
  } else if constexpr (OP == BinaryOp::GeluTanhBackward) {
    const V one = hn::Set(d, 1.0f), half = hn::Set(d, 0.5f), k = hn::Set(d, 0.7978845608028654f);
    const V b2 = hn::Mul(b, b);
    const V t = hn::Tanh(d, hn::Mul(k, hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), b2), b, b)));
    const V dinner = hn::Mul(k, hn::MulAdd(hn::Set(d, 3 * 0.044715f), b2, one));
    const V left = hn::Mul(half, hn::Add(one, t));
    const V right = hn::Mul(hn::Mul(half, b), hn::Mul(hn::NegMulAdd(t, t, one), dinner));
    return hn::Mul(a, hn::Add(left, right));
  }
  else if constexpr (OP == BinaryOp::Sub) return hn::Sub(a, hn::Mul(alpha, b));
  else if constexpr (OP == BinaryOp::Mul) return hn::Mul(a, b);
  else if constexpr (OP == BinaryOp::Div) return hn::Div(a, b);
  else if constexpr (OP == BinaryOp::Maximum) {
    const V m = hn::Max(a, b);  // NaN in either input propagates, as in torch.maximum
    return hn::IfThenElse(hn::And(hn::Eq(a, a), hn::Eq(b, b)), m, hn::Add(a, b));
  } else if constexpr (OP == BinaryOp::Minimum) {
    const V m = hn::Min(a, b);
    return hn::IfThenElse(hn::And(hn::Eq(a, a), hn::Eq(b, b)), m, hn::Add(a, b));
  }
}

template <BinaryOp OP>
void BinaryLoop(const float* a, size_t as, const float* b, size_t bs, float* out, size_t n, float alpha) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto valpha = hn::Set(d, alpha);
  const auto va0 = hn::Set(d, a[0]), vb0 = hn::Set(d, b[0]);
  auto load = [&](const float* p, size_t step, decltype(va0) bcast, size_t i) {
    return step ? hn::LoadU(d, p + i) : bcast;
  };
  size_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(ApplyBinary<OP>(d, load(a, as, va0, i), load(b, bs, vb0, i), valpha), d, out + i);
  if (i < n) {
    HWY_ALIGN float ba[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float bb[HWY_MAX_BYTES / sizeof(float)] = {};
    for (size_t j = i; j < n; ++j) ba[j - i] = a[j * as], bb[j - i] = b[j * bs];
    hn::Store(ApplyBinary<OP>(d, hn::Load(d, ba), hn::Load(d, bb), valpha), d, ba);
    std::memcpy(out + i, ba, (n - i) * sizeof(float));
  }
}

void BinaryF32(int op, const float* a, size_t as, const float* b, size_t bs, float* out, size_t n,
               float alpha) {
  switch (static_cast<BinaryOp>(op)) {
    case BinaryOp::Add: return BinaryLoop<BinaryOp::Add>(a, as, b, bs, out, n, alpha);
    case BinaryOp::Sub: return BinaryLoop<BinaryOp::Sub>(a, as, b, bs, out, n, alpha);
    case BinaryOp::Mul: return BinaryLoop<BinaryOp::Mul>(a, as, b, bs, out, n, alpha);
    case BinaryOp::Div: return BinaryLoop<BinaryOp::Div>(a, as, b, bs, out, n, alpha);
    case BinaryOp::Maximum: return BinaryLoop<BinaryOp::Maximum>(a, as, b, bs, out, n, alpha);
    case BinaryOp::Minimum: return BinaryLoop<BinaryOp::Minimum>(a, as, b, bs, out, n, alpha);
    case BinaryOp::GeluBackward: return BinaryLoop<BinaryOp::GeluBackward>(a, as, b, bs, out, n, alpha);
    case BinaryOp::GeluTanhBackward: return BinaryLoop<BinaryOp::GeluTanhBackward>(a, as, b, bs, out, n, alpha);
    // pow and fmod have no Highway form; libm per element, same results on every target.
    case BinaryOp::Pow:
      for (size_t i = 0; i < n; ++i) out[i] = std::pow(a[i * as], b[i * bs]);
      return;
    case BinaryOp::Fmod:
      for (size_t i = 0; i < n; ++i) out[i] = std::fmod(a[i * as], b[i * bs]);
      return;
  }
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu::simd {
HWY_EXPORT(UnaryF32);
HWY_EXPORT(BinaryF32);

void unary_f32(int op, const float* in, float* out, size_t n, float lo, float hi) {
  HWY_DYNAMIC_DISPATCH(UnaryF32)(op, in, out, n, lo, hi);
}
void binary_f32(int op, const float* a, size_t a_step, const float* b, size_t b_step, float* out, size_t n,
                float alpha) {
  HWY_DYNAMIC_DISPATCH(BinaryF32)(op, a, a_step, b, b_step, out, n, alpha);
}
}  // namespace kiln::cpu::simd
#endif
