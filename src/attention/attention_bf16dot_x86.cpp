// Flash decoding over a bfloat16 K/V cache with the AVX512-BF16 dot-product
// instruction (vdpbf16ps: two bf16 products summed into each float32 lane).
// Widening bf16 to float32 in registers costs as much as the arithmetic and
// left the bf16 decode compute-bound on Zen 5; this does a quarter of the
// instructions per key. The Highway version of these
// two functions (attention_simd.cpp) stays for every other CPU.
//
// Only the functions marked KILN_BF16DOT use AVX-512 instructions; they are
// called from the AVX-512 Highway target only (so a forced lower capability
// gets the Highway kernels) and after the CPUID check. Highway 1.0
// (Debian 12) has no bf16 dot op, hence intrinsics.
// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused merge
// source, which -Wmaybe-uninitialized reports inside its own header.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

#include "kiln/detail/attention_simd.h"
#include "kiln/runtime.h"

#define KILN_BF16DOT __attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16")))

namespace kiln::attention_simd {
namespace {

bool cpu_has_bf16dot() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

KILN_BF16DOT inline __m512bh load_bf16(const void* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }

// The first m of 16 lanes (all for m >= 16, none for m <= 0).
inline __mmask16 first_lanes(int64_t m) {
  return static_cast<__mmask16>(m >= 16 ? 0xFFFF : (1u << std::max<int64_t>(m, 0)) - 1);
}

// Lane i of the result = sum of the lanes of v[i]. In-lane shuffles sum
// neighbouring lanes twice (each 128-bit block then holds four inputs'
// partial sums), then 128-bit block shuffles finish the tree: 30 shuffles
// and 15 adds, as many as a tree of two-source permutes (vpermt2ps), but
// cheaper ones: faster dots in L1 and decoding from memory (8 alternating
// runs; figures in this comment's commit).
KILN_BF16DOT inline __m512 sum_lane_pairs(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}
KILN_BF16DOT inline __m512 reduce_each16(const __m512 (&v)[16]) {
  const __m512 b0 = sum_lane_pairs(sum_lane_pairs(v[0], v[1]), sum_lane_pairs(v[2], v[3]));
  const __m512 b1 = sum_lane_pairs(sum_lane_pairs(v[4], v[5]), sum_lane_pairs(v[6], v[7]));
  const __m512 b2 = sum_lane_pairs(sum_lane_pairs(v[8], v[9]), sum_lane_pairs(v[10], v[11]));
  const __m512 b3 = sum_lane_pairs(sum_lane_pairs(v[12], v[13]), sum_lane_pairs(v[14], v[15]));
  // Block k of b_i holds inputs 4i..4i+3 summed over lanes 4k..4k+3.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(b0, b1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(b0, b1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(b2, b3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(b2, b3, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Rows [lo, lo + count) of a StreamAhead's stream (its own rows, then
// next's) prefetched in address order, Lines lines per step().
struct RowsAhead {
  LineCursor own, next;
  RowsAhead() = default;
  RowsAhead(const StreamAhead& stream, int64_t lo, int64_t count) {
    const int64_t n = stream.n, hi = lo + count;
    const int64_t a = std::min(lo, n), b = std::min(hi, n);
    own = LineCursor(stream.span(a, b - a));
    const int64_t na = std::max(lo, n) - n, nb = std::min(std::max(hi, n) - n, stream.next.n);
    if (nb > na) next = LineCursor(stream.span(n + na, nb - na));
  }
  template <int Lines>
  __attribute__((always_inline)) void step() {
    LineCursor& c = own.at < own.end ? own : next;
    if (c.at >= c.end) return;
    for (int l = 0; l < Lines; ++l) __builtin_prefetch(c.at + 64 * l, 0, 0);
    c.at += 64 * Lines;
  }
};

// q rows as bfloat16, the form vdpbf16ps multiplies (exact: q was bf16).
KILN_BF16DOT void q_to_bf16(const float* q, int64_t rows, int64_t E, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(rows * E));
  for (int64_t i = 0; i < rows * E; i += 32)
    _mm512_storeu_si512(out.data() + i,
                        reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(q + i))));
}

// R query rows (R = 4, or 1 for the rest) against keys [j0, n), E % 32 == 0.
template <int R>
KILN_BF16DOT void dots_block(const uint16_t* qb, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                             int64_t s_stride, const StreamAhead& stream, bool prefetch) {
  const int64_t chunks = E / 32;
  int64_t j = 0;
  if constexpr (R == 4)
    for (; j + 4 <= n; j += 4) {
      // The four rows' lines in one burst through prefetch_row. Sixteen
      // straight-line prefetches of the same addresses made the dots faster
      // in L1 but decoded slower from memory (10 alternating runs), as did
      // the lines spread over the four chunks; both again with P V's
      // RowsAhead cursor (8 runs; figures in this comment's commit).
      if (prefetch)
        for (int64_t u = 0; u < 4; ++u) stream.prefetch_row(j + u);
      __m512 acc[16];  // acc[row * 4 + key]
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t c = 0; c < chunks; ++c) {
        __m512bh kv[4];
        for (int u = 0; u < 4; ++u) kv[u] = load_bf16(k + (j + u) * E + 32 * c);
        for (int row = 0; row < 4; ++row) {
          const __m512bh qv = load_bf16(qb + row * E + 32 * c);
          for (int u = 0; u < 4; ++u) acc[row * 4 + u] = _mm512_dpbf16_ps(acc[row * 4 + u], qv, kv[u]);
        }
      }
      alignas(64) float dots[16];
      _mm512_store_ps(dots, _mm512_mul_ps(reduce_each16(acc), _mm512_set1_ps(scale)));
      for (int row = 0; row < 4; ++row)
        for (int u = 0; u < 4; ++u) s[row * s_stride + j + u] = dots[row * 4 + u];
    }
  for (; j < n; ++j) {
    if (prefetch) stream.prefetch_row(j);
    for (int row = 0; row < R; ++row) {
      __m512 a = _mm512_setzero_ps();
      for (int64_t c = 0; c < chunks; ++c)
        a = _mm512_dpbf16_ps(a, load_bf16(qb + row * E + 32 * c), load_bf16(k + j * E + 32 * c));
      s[row * s_stride + j] = _mm512_reduce_add_ps(a) * scale;
    }
  }
}

KILN_BF16DOT void dots(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                       const Prefetch& pf) {
  thread_local std::vector<uint16_t> qb;
  q_to_bf16(q, rows, E, qb);
  // 8 KiB ahead, twice the float32 kernels' distance: faster bf16 decoding
  // on two threads than 4 KiB, and 16 KiB slower than either (alternating
  // runs; the figures are in this line's commit).
  const StreamAhead stream(k, n, E * static_cast<int64_t>(sizeof(uint16_t)), pf, 2 * StreamAhead::kAheadBytes);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) dots_block<4>(qb.data() + r * E, k, n, E, scale, s + r * n, n, stream, r == 0);
  for (; r < rows; ++r) dots_block<1>(qb.data() + r * E, k, n, E, scale, s + r * n, n, stream, r == 0);
}

// P V pairs keys: unpacking rows j and j + 1 of V interleaves their
// elements, (v_j[e], v_j+1[e]) in each 32-bit lane, which vdpbf16ps
// multiplies with the broadcast pair (p_j, p_j+1). The unpack works within
// 128-bit blocks, so the accumulators hold e in the order below, kept for
// the whole call: permuting them at every chunk's pass instead cost 2.5%
// in cache and decoded from memory at 0.663 against 0.698 of the copy.
struct PairOrder {
  __m512i lo, hi, back0, back1;
};
KILN_BF16DOT PairOrder pair_order() {
  alignas(64) int32_t lo[16], hi[16], back0[16], back1[16];
  for (int l = 0; l < 16; ++l) {
    lo[l] = (l / 4) * 8 + l % 4;  // unpacklo: e = 8 * block + 0..3
    hi[l] = (l / 4) * 8 + 4 + l % 4;
  }
  // Natural element e comes from lane (e / 8) * 4 + e % 4 of lo when e % 8 < 4,
  // else from that lane of hi (index 16 + lane into lo | hi).
  auto from = [](int e) { return (e % 8 < 4 ? 0 : 16) + (e / 8) * 4 + e % 4; };
  for (int e = 0; e < 16; ++e) {
    back0[e] = from(e);
    back1[e] = from(e + 16);
  }
  return {_mm512_load_si512(lo), _mm512_load_si512(hi), _mm512_load_si512(back0), _mm512_load_si512(back1)};
}

// One pair of keys into W passes of R rows of accumulators: va, vb point at
// the pair's V rows at the first pass's elements (vb null past the last
// key), pairs[row * pair_stride] is row's (p_j, p_j+1).
template <int R, int W>
KILN_BF16DOT inline __attribute__((always_inline)) void add_pair(__m512 (&lo)[W][R], __m512 (&hi)[W][R],
                                                                 const uint32_t* pairs, int64_t pair_stride,
                                                                 const uint16_t* va, const uint16_t* vb) {
  __m512bh vlo[W], vhi[W];
  for (int w = 0; w < W; ++w) {
    const __m512i a = _mm512_loadu_si512(va + 32 * w), b = vb ? _mm512_loadu_si512(vb + 32 * w) : _mm512_setzero_si512();
    vlo[w] = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(a, b));
    vhi[w] = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(a, b));
  }
  for (int row = 0; row < R; ++row) {
    const __m512bh pp = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pairs[row * pair_stride])));
    for (int w = 0; w < W; ++w) {
      lo[w][row] = _mm512_dpbf16_ps(lo[w][row], pp, vlo[w]);
      hi[w][row] = _mm512_dpbf16_ps(hi[w][row], pp, vhi[w]);
    }
  }
}

// Keys [j0, j1) of W passes (32 elements each) starting at element e; acc
// in pair order (PairOrder: lo then hi for each 32 elements).
template <int R, int W>
KILN_BF16DOT inline void accumulate_passes(float* acc, const uint32_t* pairs, int64_t pair_stride, const uint16_t* v,
                                           int64_t j0, int64_t j1, int64_t e, int64_t Ev, RowsAhead* ahead) {
  __m512 lo[W][R], hi[W][R];
  for (int w = 0; w < W; ++w)
    for (int row = 0; row < R; ++row) {
      const float* a = acc + row * Ev + e + 32 * w;
      lo[w][row] = _mm512_loadu_ps(a), hi[w][row] = _mm512_loadu_ps(a + 16);
    }
  int64_t j = j0;
  for (; j + 1 < j1; j += 2) {
    // A chunk's rows hold as many lines as it has passes: 2 W lines per pair.
    if (ahead) ahead->step<2 * W>();
    add_pair<R, W>(lo, hi, pairs + j / 2, pair_stride, v + j * Ev + e, v + (j + 1) * Ev + e);
  }
  if (j < j1) add_pair<R, W>(lo, hi, pairs + j / 2, pair_stride, v + j * Ev + e, nullptr);
  for (int w = 0; w < W; ++w)
    for (int row = 0; row < R; ++row) {
      float* a = acc + row * Ev + e + 32 * w;
      _mm512_storeu_ps(a, lo[w][row]), _mm512_storeu_ps(a + 16, hi[w][row]);
    }
}

// R rows of acc (row stride Ev) += P (as bf16 pairs, pair_stride apart) V
// over keys [0, n), in chunks of 32 keys and passes of 32 elements of Ev,
// two passes at once for four rows (16 accumulators, one broadcast per
// row and pair for both).
// The next chunk's rows stream in while this chunk's passes run, in address
// order (RowsAhead), not pass by pass: each pass reads one line of every
// row, and prefetching those columns (line p of 32 rows 256 bytes apart,
// then line p + 1...) decoded slower from memory than address order in 9
// of 10 alternating runs. In address order the two passes at once cost
// nothing from memory against one pass and gain in cache; pass by pass
// they had cost (the figures are in this comment's commit).
template <int R>
KILN_BF16DOT void accumulate_block(float* acc, const uint32_t* pairs, int64_t pair_stride, const uint16_t* v, int64_t n,
                                   int64_t Ev, const Prefetch& pf, bool prefetch) {
  // Chunks of 32 keys (8 KiB ahead): 16 decoded slower (0.631 against
  // 0.692, 8 runs), 64 the same (0.692).
  constexpr int64_t kKeyChunk = 32;
  const int64_t row_bytes = Ev * static_cast<int64_t>(sizeof(uint16_t));
  const StreamAhead stream(v, n, row_bytes, pf, kKeyChunk * row_bytes);
  const int64_t passes = Ev / 32;
  for (int64_t j0 = 0; j0 < n; j0 += kKeyChunk) {
    const int64_t j1 = std::min(n, j0 + kKeyChunk);
    RowsAhead ahead;
    if (prefetch) ahead = RowsAhead(stream, j0 + stream.ahead, kKeyChunk);
    int64_t pass = 0;
    if constexpr (R == 4)
      for (; pass + 2 <= passes; pass += 2)
        accumulate_passes<R, 2>(acc, pairs, pair_stride, v, j0, j1, 32 * pass, Ev, prefetch ? &ahead : nullptr);
    for (; pass < passes; ++pass)
      accumulate_passes<R, 1>(acc, pairs, pair_stride, v, j0, j1, 32 * pass, Ev, prefetch ? &ahead : nullptr);
  }
}

// exp(x) for x <= 0 (or -inf, giving 0): 2^n 2^f with t = x log2(e) =
// n + f, |f| <= 1/2, 2^f by its Taylor polynomial of degree 6 (error below
// 2e-7) and vscalefps for 2^n. Relative error at most 4e-6 down to
// x = -87 (from rounding t; std::exp in float64 as reference), far below
// the bfloat16 rounding of the probabilities. Fewer instructions than
// Highway's Exp, which handles ranges this softmax never meets (its
// arguments are scores less the row's max).
KILN_BF16DOT inline __m512 exp_nonpositive(__m512 x) {
  const __m512 t = _mm512_max_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _mm512_set1_ps(-200.0f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147181f));  // f ln 2, |.| <= 0.35
  __m512 p = _mm512_set1_ps(1.0f / 720);
  for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

// online_softmax's update (attention_simd.h) of rows x n scores s, with the
// probabilities written as bfloat16 in key order to pb (row stride padded,
// zeros past n: the 32-bit word i is the pair (p_2i, p_2i+1)) instead of
// back to s: one pass for exp and conversion, not two. With the cheaper exp,
// decoding in cache ran faster in all of 10 alternating runs, as fast as
// with the softmax left out.
KILN_BF16DOT void softmax_pairs(const float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr, uint16_t* pb,
                                int64_t padded) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  const auto tail = [n](int64_t j) { return first_lanes(n - j); };
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * n;
    __m512 vmax = neg_inf;
    for (int64_t j = 0; j < n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, tail(j), row + j));
    const float bmax = _mm512_reduce_max_ps(vmax);
    uint16_t* out = pb + r * padded;
    if (bmax == kNegInf) {  // nothing visible: P = 0, state unchanged
      std::fill(out, out + padded, uint16_t{0});
      corr[r] = 1.0f;
      continue;
    }
    const float nmax = std::max(mx[r], bmax);
    corr[r] = mx[r] == kNegInf ? 0.0f : std::exp(mx[r] - nmax);
    const __m512 m = _mm512_set1_ps(nmax);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < padded; j += 32) {
      const __m512 lo = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail(j), row + j), m));
      const __m512 hi = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail(j + 16), row + j + 16), m));
      sum = _mm512_add_ps(sum, _mm512_add_ps(lo, hi));
      _mm512_storeu_si512(out + j, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
    l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(sum);
    mx[r] = nmax;
  }
}

KILN_BF16DOT void softmax_accumulate(float* acc, const float* s, int64_t rows, int64_t n, float* mx, float* l,
                                     float* corr, const uint16_t* v, int64_t Ev, const Prefetch& pf) {
  static const PairOrder order = pair_order();
  const int64_t padded = (n + 31) / 32 * 32;
  thread_local std::vector<uint16_t> pb;
  pb.resize(static_cast<size_t>(rows * padded));
  softmax_pairs(s, rows, n, mx, l, corr, pb.data(), padded);
  // acc scaled by corr and in pair order for the call, so that the chunks'
  // passes load and store their accumulators as they are.
  thread_local std::vector<float> paired;
  paired.resize(static_cast<size_t>(rows * Ev));
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
    for (int64_t e = 0; e < Ev; e += 32) {
      const __m512 a0 = _mm512_loadu_ps(acc + r * Ev + e), a1 = _mm512_loadu_ps(acc + r * Ev + e + 16);
      _mm512_storeu_ps(paired.data() + r * Ev + e, _mm512_mul_ps(c, _mm512_permutex2var_ps(a0, order.lo, a1)));
      _mm512_storeu_ps(paired.data() + r * Ev + e + 16, _mm512_mul_ps(c, _mm512_permutex2var_ps(a0, order.hi, a1)));
    }
  }
  const auto* pairs = reinterpret_cast<const uint32_t*>(pb.data());
  const int64_t pair_stride = padded / 2;
  {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
      accumulate_block<4>(paired.data() + r * Ev, pairs + r * pair_stride, pair_stride, v, n, Ev, pf, r == 0);
    for (; r < rows; ++r)
      accumulate_block<1>(paired.data() + r * Ev, pairs + r * pair_stride, pair_stride, v, n, Ev, pf, r == 0);
  }
  // Back to the natural order.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < Ev; e += 32) {
      const float* a = paired.data() + r * Ev + e;
      const __m512 lo = _mm512_loadu_ps(a), hi = _mm512_loadu_ps(a + 16);
      _mm512_storeu_ps(acc + r * Ev + e, _mm512_permutex2var_ps(lo, order.back0, hi));
      _mm512_storeu_ps(acc + r * Ev + e + 16, _mm512_permutex2var_ps(lo, order.back1, hi));
    }
}

}  // namespace

// The x86 kernels run from the AVX-512 Highway target only.
const char* bf16_decode_kernel() {
  return cpu_capability() == Capability::AVX512 && cpu_has_bf16dot() ? "avx512-bf16" : "widening";
}

bool dots_rows_bf16dot(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                       const Prefetch& pf) {
  if (E % 32 != 0 || !cpu_has_bf16dot()) return false;
  dots(q, rows, k, n, E, scale, s, pf);
  return true;
}

bool softmax_accumulate_rows_bf16dot(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                                     const uint16_t* v, int64_t Ev, const Prefetch& pf) {
  if (Ev % 32 != 0 || !cpu_has_bf16dot()) return false;
  softmax_accumulate(acc, s, rows, n, mx, l, corr, v, Ev, pf);
  return true;
}

}  // namespace kiln::attention_simd
