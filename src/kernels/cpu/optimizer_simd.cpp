// The fused optimizer updates' loops (optimizer_kernels.cpp), compiled once
// per Highway target. Each element goes through the pointwise functors of
// the op-by-op update in its order, so the result has the same bits; the
// dozen passes over memory become one.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optimizer_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/pointwise_math.h"
#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {
namespace pw = pointwise;

template <bool kL2>
void AdamLoop(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    // AdamW: p.mul_(1 - lr wd) (a factor of 1 without decay: p unchanged).
    const float param = pw::Mul::f(p[i], s.decay);
    // Adam's L2 decay: g + p wd.
    const float grad = kL2 ? pw::Add::f(g[i], pw::Mul::f(p[i], s.l2), 1.0f) : g[i];
    // exp_avg.mul_(beta1).add_(g, 1 - beta1); exp_avg_sq.mul_(beta2).add_(g * g, 1 - beta2).
    const float first = pw::Add::f(pw::Mul::f(m[i], s.beta1), grad, s.one_minus_beta1);
    const float second = pw::Add::f(pw::Mul::f(v[i], s.beta2), pw::Mul::f(grad, grad), s.one_minus_beta2);
    // p.sub_(exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps) * (lr / bc1)).
    const float denom = pw::Add::f(pw::Div::f(pw::Sqrt::f(second), s.bias_correction2_sqrt), s.eps, 1.0f);
    p[i] = pw::Sub::f(param, pw::Mul::f(pw::Div::f(first, denom), s.step_size), 1.0f);
    m[i] = first, v[i] = second;
  }
}

void AdamStepF32(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
  if (s.l2_decay) AdamLoop<true>(p, g, m, v, n, s);
  else AdamLoop<false>(p, g, m, v, n, s);
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu::simd {
HWY_EXPORT(AdamStepF32);

void adam_step_f32(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
  HWY_DYNAMIC_DISPATCH(AdamStepF32)(p, g, m, v, n, s);
}
}  // namespace kiln::cpu::simd
#endif
