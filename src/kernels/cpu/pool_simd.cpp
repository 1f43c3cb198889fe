// Max pooling's common case, 2x2 windows at stride 2 without padding, for
// float32: in planes, the four taps of a vector of outputs come from two
// deinterleaving loads (the even and odd columns of the window's two rows),
// where the general kernel (pool_kernels.cpp) loads one strided tap at a
// time; channels-last, a vector of channels per tap.
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
// last NaN). The winner is a tap's number 0..3 (kh * 2 + kw).
template <class DI, class V, class VI>
HWY_INLINE void Offer(DI di, V v, int k, V& best, VI& winner) {
  const auto take = hn::Or(hn::Gt(v, best), hn::IsNaN(v));
  best = hn::IfThenElse(take, v, best);
  winner = hn::IfThenElse(hn::RebindMask(di, take), hn::Set(di, k), winner);
}

// The best of four vectors of taps, and the winning tap's number per lane.
template <class D, class V>
HWY_INLINE void BestOfFour(D d, V v0, V v1, V v2, V v3, float* y, int32_t* tap) {
  const hn::RebindToSigned<D> di;
  auto best = v0;
  auto winner = hn::Zero(di);
  Offer(di, v1, 1, best, winner);
  Offer(di, v2, 2, best, winner);
  Offer(di, v3, 3, best, winner);
  hn::StoreU(best, d, y);
  hn::StoreU(winner, di, tap);
}

// Planes: Lanes(d) outputs along a row, their taps the even and odd
// columns of the window's two input rows.
template <class D>
HWY_INLINE void PlaneBlock(D d, const float* top, const float* bottom, float* y, int32_t* tap) {
  hn::Vec<D> v0, v1, v2, v3;  // not an array: SVE's vectors are sizeless
  hn::LoadInterleaved2(d, top, v0, v1);
  hn::LoadInterleaved2(d, bottom, v2, v3);
  BestOfFour(d, v0, v1, v2, v3, y, tap);
}

// Channels-last: Lanes(d) channels of one output, each tap a contiguous
// vector (the window's four pixels, C floats apart along a row and
// `row` down).
template <class D>
HWY_INLINE void ChannelBlock(D d, const float* at, size_t C, size_t row, float* y, int32_t* tap) {
  BestOfFour(d, hn::LoadU(d, at), hn::LoadU(d, at + C), hn::LoadU(d, at + row), hn::LoadU(d, at + row + C), y, tap);
}

// n outputs (planes: along a row; channels-last: channels) with vectors of
// d, the last vector overlapping the one before it when n is not a
// multiple (recomputing a few outputs is cheaper than a scalar tail).
// n >= Lanes(d); block(d, o) does outputs [o, o + Lanes(d)).
template <class D, class F>
HWY_INLINE void Span(D d, size_t n, const F& block) {
  const size_t N = hn::Lanes(d);
  size_t o = 0;
  for (; o + N <= n; o += N) block(d, o);
  if (o < n) block(d, n - N);
}

// The scalar form, for spans shorter than the narrowest vector: output o's
// taps are v[k][o * advance].
void ScalarSpan(size_t n, const float* const (&v)[4], size_t advance, float* y, int32_t* tap) {
  for (size_t o = 0; o < n; ++o) {
    float best = v[0][o * advance];
    int32_t winner = 0;
    for (int k = 1; k < 4; ++k) {
      const float x = v[k][o * advance];
      if (x > best || x != x) best = x, winner = k;
    }
    y[o] = best, tap[o] = winner;
  }
}

// Runs `block` over n outputs with the widest vectors that fit n (short
// rows, 14 or 7 outputs in a small CNN, take narrower ones).
template <class Block>
HWY_INLINE void Widest(size_t n, const Block& block, const float* const (&scalar_taps)[4], size_t advance, float* y,
                       int32_t* tap) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 8> d8;
  const hn::CappedTag<float, 4> d4;
  if (n >= hn::Lanes(d)) Span(d, n, block);
  else if (n >= hn::Lanes(d8)) Span(d8, n, block);
  else if (n >= hn::Lanes(d4)) Span(d4, n, block);
  else ScalarSpan(n, scalar_taps, advance, y, tap);
}

// The flat in-plane index of tap k of the window at (2 oh, 2 ow): row 2 oh
// + k / 2, column 2 ow + k % 2.
HWY_INLINE int64_t TapIndex(size_t oh, size_t ow, size_t W, int32_t k) {
  return static_cast<int64_t>((2 * oh + static_cast<size_t>(k >> 1)) * W + 2 * ow + static_cast<size_t>(k & 1));
}

void MaxPool2x2F32(const float* x, size_t planes, size_t H, size_t W, size_t OH, size_t OW, float* y,
                   int64_t* indices) {
  int32_t tap[64];
  for (size_t p = 0; p < planes; ++p)
    for (size_t oh = 0; oh < OH; ++oh) {
      const float* top = x + (p * H + 2 * oh) * W;
      float* out = y + (p * OH + oh) * OW;
      int64_t* at = indices + (p * OH + oh) * OW;
      for (size_t o0 = 0; o0 < OW; o0 += 64) {
        const size_t n = OW - o0 < 64 ? OW - o0 : 64;
        const float* t = top + 2 * o0;
        const float* const taps[4] = {t, t + 1, t + W, t + W + 1};
        Widest(n, [&](auto d, size_t o) { PlaneBlock(d, t + 2 * o, t + W + 2 * o, out + o0 + o, tap + o); }, taps, 2,
               out + o0, tap);
        for (size_t i = 0; i < n; ++i) at[o0 + i] = TapIndex(oh, o0 + i, W, tap[i]);
      }
    }
}

void MaxPool2x2RowsF32(const float* x, size_t rows_begin, size_t rows_end, size_t H, size_t W, size_t C, size_t OH,
                       size_t OW, float* y, int64_t* indices) {
  int32_t tap[64];
  for (size_t r = rows_begin; r < rows_end; ++r) {
    const size_t n_image = r / OH, oh = r % OH;
    for (size_t ow = 0; ow < OW; ++ow) {
      const float* window = x + ((n_image * H + 2 * oh) * W + 2 * ow) * C;
      float* out = y + (r * OW + ow) * C;
      int64_t* at = indices + (r * OW + ow) * C;
      for (size_t c0 = 0; c0 < C; c0 += 64) {
        const size_t n = C - c0 < 64 ? C - c0 : 64;
        const float* t = window + c0;
        const float* const taps[4] = {t, t + C, t + W * C, t + W * C + C};
        Widest(n, [&](auto d, size_t o) { ChannelBlock(d, t + o, C, W * C, out + c0 + o, tap + o); }, taps, 1,
               out + c0, tap);
        for (size_t i = 0; i < n; ++i) at[c0 + i] = TapIndex(oh, ow, W, tap[i]);
      }
    }
  }
}

}  // namespace kiln::cpu::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu::simd {
HWY_EXPORT(MaxPool2x2F32);
HWY_EXPORT(MaxPool2x2RowsF32);

void max_pool_2x2_f32(const float* x, size_t planes, size_t H, size_t W, size_t OH, size_t OW, float* y,
                      int64_t* indices) {
  HWY_DYNAMIC_DISPATCH(MaxPool2x2F32)(x, planes, H, W, OH, OW, y, indices);
}
void max_pool_2x2_rows_f32(const float* x, size_t rows_begin, size_t rows_end, size_t H, size_t W, size_t C,
                           size_t OH, size_t OW, float* y, int64_t* indices) {
  HWY_DYNAMIC_DISPATCH(MaxPool2x2RowsF32)(x, rows_begin, rows_end, H, W, C, OH, OW, y, indices);
}
}  // namespace kiln::cpu::simd
#endif
