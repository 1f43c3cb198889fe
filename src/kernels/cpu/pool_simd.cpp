// Max pooling's common case, 2x2 windows at stride 2 without padding, for
// float32 planes: the four taps of a vector of outputs come from two
// deinterleaving loads (the even and odd columns of the window's two rows),
// where the general kernel (pool_kernels.cpp) loads one strided tap at a time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/pool_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The search of the general kernel, tap by tap in (kh, kw) order: a tap
// replaces the best when larger or NaN (so ties keep the first, a NaN the
// last NaN). tap[i] receives the winner's number 0..3 (kh * 2 + kw).
template <class DI, class V, class VI>
HWY_INLINE void Offer(DI di, V v, int k, V& best, VI& winner) {
  const auto take = hn::Or(hn::Gt(v, best), hn::IsNaN(v));
  best = hn::IfThenElse(take, v, best);
  winner = hn::IfThenElse(hn::RebindMask(di, take), hn::Set(di, k), winner);
}

template <class D>
HWY_INLINE void Block(D d, const float* top, const float* bottom, float* y, int32_t* tap) {
  const hn::RebindToSigned<D> di;
  hn::Vec<D> v0, v1, v2, v3;  // not an array: SVE's vectors are sizeless
  hn::LoadInterleaved2(d, top, v0, v1);
  hn::LoadInterleaved2(d, bottom, v2, v3);
  auto best = v0;
  auto winner = hn::Zero(di);
  Offer(di, v1, 1, best, winner);
  Offer(di, v2, 2, best, winner);
  Offer(di, v3, 3, best, winner);
  hn::StoreU(best, d, y);
  hn::StoreU(winner, di, tap);
}

// One output row of n outputs with vectors of d: the last vector overlaps
// the one before it when n is not a multiple (recomputing a few outputs
// is cheaper than a scalar tail). n >= Lanes(d).
template <class D>
HWY_INLINE void Row(D d, const float* top, const float* bottom, size_t n, float* y, int32_t* tap) {
  const size_t N = hn::Lanes(d);
  size_t o = 0;
  for (; o + N <= n; o += N) Block(d, top + 2 * o, bottom + 2 * o, y + o, tap + o);
  if (o < n) Block(d, top + 2 * (n - N), bottom + 2 * (n - N), y + n - N, tap + n - N);
}

void RowScalar(const float* top, const float* bottom, size_t n, float* y, int32_t* tap) {
  for (size_t o = 0; o < n; ++o) {
    const float v[4] = {top[2 * o], top[2 * o + 1], bottom[2 * o], bottom[2 * o + 1]};
    float best = v[0];
    int32_t winner = 0;
    for (int k = 1; k < 4; ++k)
      if (v[k] > best || v[k] != v[k]) best = v[k], winner = k;
    y[o] = best, tap[o] = winner;
  }
}

void MaxPool2x2F32(const float* x, size_t planes, size_t H, size_t W, size_t OH, size_t OW, float* y,
                   int64_t* indices) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 8> d8;
  const hn::CappedTag<float, 4> d4;
  // Short rows (14 or 7 outputs in a small CNN) take narrower vectors than the widest.
  const size_t N = hn::Lanes(d), N8 = hn::Lanes(d8), N4 = hn::Lanes(d4);
  int32_t tap[64];
  for (size_t p = 0; p < planes; ++p)
    for (size_t oh = 0; oh < OH; ++oh) {
      const float* top = x + (p * H + 2 * oh) * W;
      float* out = y + (p * OH + oh) * OW;
      int64_t* at = indices + (p * OH + oh) * OW;
      for (size_t o0 = 0; o0 < OW; o0 += 64) {
        const size_t n = OW - o0 < 64 ? OW - o0 : 64;
        const float* t = top + 2 * o0;
        if (n >= N) Row(d, t, t + W, n, out + o0, tap);
        else if (n >= N8) Row(d8, t, t + W, n, out + o0, tap);
        else if (n >= N4) Row(d4, t, t + W, n, out + o0, tap);
        else RowScalar(t, t + W, n, out + o0, tap);
        // Tap k of output o is at column 2o + k % 2 of row 2 oh + k / 2 (flat in the plane).
        const int64_t first = static_cast<int64_t>(2 * oh * W + 2 * o0);
        for (size_t i = 0; i < n; ++i)
          at[o0 + i] = first + static_cast<int64_t>(2 * i) + (tap[i] & 1) + (tap[i] >> 1) * static_cast<int64_t>(W);
      }
    }
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu::simd {
HWY_EXPORT(MaxPool2x2F32);

void max_pool_2x2_f32(const float* x, size_t planes, size_t H, size_t W, size_t OH, size_t OW, float* y,
                      int64_t* indices) {
  HWY_DYNAMIC_DISPATCH(MaxPool2x2F32)(x, planes, H, W, OH, OW, y, indices);
}
}  // namespace kiln::cpu::simd
#endif
