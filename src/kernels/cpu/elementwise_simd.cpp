// The float32 unary and binary kernels: the functors of pointwise_math.h in
// loops the compiler vectorises, compiled once per Highway target (the
// target's instructions; Highway picks the best at run time). The same
// functors are the generated loops' math (Note [One definition of the math]).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "kernels/cpu/op_codes.h"
#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {

// Functors with a cheaper form on a common range (pointwise::kHasFastForm:
// sin and cos, the argument reduction below kSinCosFastMax) run blocks that
// lie wholly in that range through it; the result is the same, the select
// in f being the definition.

constexpr size_t kBlock = 64;

template <class F>
HWY_INLINE void UnaryBlock(const float* in, float* out, size_t n, float lo, float hi) {
  if constexpr (requires { F::f(0.0f, 0.0f, 0.0f); }) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) out[i] = F::f(in[i], lo, hi);
  } else if constexpr (requires { F::f(0.0f, 0.0f); }) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) out[i] = F::f(in[i], lo);
  } else if constexpr (pointwise::kHasFastForm<F>) {
    uint32_t widest = 0;  // the largest |x|'s bits (NaN's are larger than any number's)
#pragma omp simd reduction(max : widest)
    for (size_t i = 0; i < n; ++i) widest = std::max(widest, pointwise::to_bits(in[i]) & 0x7fffffffu);
    if (widest <= pointwise::to_bits(F::kFastMax)) {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) out[i] = F::f_fast(in[i]);
    } else {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) out[i] = F::f(in[i]);
    }
  } else {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) out[i] = F::f(in[i]);
  }
}

template <class F>
void UnaryLoop(const float* in, float* out, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i += kBlock) UnaryBlock<F>(in + i, out + i, std::min(kBlock, n - i), lo, hi);
}

void UnaryF32(int op, const float* in, float* out, size_t n, float lo, float hi) {
  switch (static_cast<UnaryOp>(op)) {
#define KILN_UNARY_CASE(functor, name) \
  case UnaryOp::functor: return UnaryLoop<pointwise::functor>(in, out, n, lo, hi);
    KILN_POINTWISE_UNARY(KILN_UNARY_CASE)
#undef KILN_UNARY_CASE
  }
}

// a (or b) is a single broadcast value when its step is 0.
template <class F>
void BinaryLoop(const float* a, size_t as, const float* b, size_t bs, float* out, size_t n, float alpha) {
  auto run = [&](auto fa, auto fb) {
    if constexpr (requires { F::f(0.0f, 0.0f, 0.0f); }) {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) out[i] = F::f(fa(i), fb(i), alpha);
    } else {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) out[i] = F::f(fa(i), fb(i));
    }
  };
  if (n == 0) return;
  const float a0 = a[0], b0 = b[0];
  auto array_a = [a](size_t i) { return a[i]; };
  auto array_b = [b](size_t i) { return b[i]; };
  auto scalar_a = [a0](size_t) { return a0; };
  auto scalar_b = [b0](size_t) { return b0; };
  if (as && bs) run(array_a, array_b);
  else if (as) run(array_a, scalar_b);
  else if (bs) run(scalar_a, array_b);
  else run(scalar_a, scalar_b);
}

void BinaryF32(int op, const float* a, size_t as, const float* b, size_t bs, float* out, size_t n,
               float alpha) {
  switch (static_cast<BinaryOp>(op)) {
#define KILN_BINARY_CASE(functor, name) \
  case BinaryOp::functor: return BinaryLoop<pointwise::functor>(a, as, b, bs, out, n, alpha);
    KILN_POINTWISE_BINARY(KILN_BINARY_CASE)
#undef KILN_BINARY_CASE
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
