// Flash decoding over a bfloat16 K/V cache with Arm's bfloat16 instructions
// (FEAT_BF16, Armv8.6; Neoverse V1/V2, N2, Graviton 3/4): BFMMLA for the
// scores, BFDOT for P V. The counterpart of attention_bf16dot_x86.cpp, for
// the same reason: widening bf16 to float32 in registers costs as much as
// the arithmetic. The Highway kernels (attention_simd.cpp) stay for Arm
// CPUs without bf16 (Neoverse N1, Cortex-A72, ...).
//
// Only the functions marked KILN_BF16 use bf16 instructions; they run after
// the HWCAP2_BF16 check. Highway 1.0 (Debian 12) has no bf16 dot op, hence
// intrinsics. Speed on Arm cannot be measured on this project's machines
// (qemu only): the shapes of these loops follow the x86 kernel's measured
// ones (4-row tiles, chunks of 32 keys, prefetch in stream order).
#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/arm_features.h"
#include "kiln/detail/attention_simd.h"

#define KILN_BF16 __attribute__((target("arch=armv8.2-a+bf16")))

namespace kiln::attention_simd {
namespace {

bool cpu_has_bf16() {
  static const bool has = arm::has(arm::Feature::BF16);
  return has;
}

// ---- scores: BFMMLA multiplies a 2x4 block of bf16 (two query rows, four
// elements) by the transpose of another (two keys, the same four elements)
// into a 2x2 block of float32 sums, [r0.k0, r0.k1, r1.k0, r1.k1]: complete
// dot products, with no horizontal sums at the end, and twice BFDOT's
// products per instruction.

// q rows as bfloat16 in that operand order: row pairs (a last odd row
// paired with zeros), each pair's elements in groups of four with the two
// rows' groups side by side, [r0 e..e+3, r1 e..e+3] for e = 0, 4, ...
// Exact: q holds bfloat16 values, so the upper halves of its float32 bits
// are those values.
void pack_query_pairs(const float* q, int64_t rows, int64_t E, std::vector<uint16_t>& out) {
  out.assign(static_cast<size_t>((rows + 1) / 2 * 2 * E), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E; ++e) {
      uint32_t bits;
      std::memcpy(&bits, q + r * E + e, sizeof bits);
      out[static_cast<size_t>((r / 2) * 2 * E + (e / 4) * 8 + (r % 2) * 4 + e % 4)] = static_cast<uint16_t>(bits >> 16);
    }
}

KILN_BF16 inline bfloat16x8_t as_bf16(uint16x8_t v) { return vreinterpretq_bf16_u16(v); }

// RP row pairs (qp: their packed rows, 2 E apart) against KP key pairs
// starting at key row `keys` (rows E apart; `last`, when not null, replaces
// the second row of the last pair: the zeros past the final key).
template <int RP, int KP>
KILN_BF16 inline void score_tile(const uint16_t* qp, const uint16_t* keys, const uint16_t* last, int64_t E,
                                 float32x4_t (&acc)[RP][KP]) {
  for (int p = 0; p < RP; ++p)
    for (int t = 0; t < KP; ++t) acc[p][t] = vdupq_n_f32(0.0f);
  for (int64_t e = 0; e < E; e += 8) {
    uint16x8_t lo[KP], hi[KP];  // pair t, elements e..e+3 and e+4..e+7
    for (int t = 0; t < KP; ++t) {
      const uint16_t* second = last && t == KP - 1 ? last : keys + (2 * t + 1) * E;
      const uint64x2_t a = vreinterpretq_u64_u16(vld1q_u16(keys + 2 * t * E + e));
      const uint64x2_t b = vreinterpretq_u64_u16(vld1q_u16(second + e));
      lo[t] = vreinterpretq_u16_u64(vzip1q_u64(a, b));
      hi[t] = vreinterpretq_u16_u64(vzip2q_u64(a, b));
    }
    for (int p = 0; p < RP; ++p) {
      const bfloat16x8_t q_lo = as_bf16(vld1q_u16(qp + p * 2 * E + 2 * e));
      const bfloat16x8_t q_hi = as_bf16(vld1q_u16(qp + p * 2 * E + 2 * e + 8));
      for (int t = 0; t < KP; ++t) {
        acc[p][t] = vbfmmlaq_f32(acc[p][t], q_lo, as_bf16(lo[t]));
        acc[p][t] = vbfmmlaq_f32(acc[p][t], q_hi, as_bf16(hi[t]));
      }
    }
  }
}

// Rows [2 p0, 2 p0 + 2 RP) (those below `rows`) of s against every key.
template <int RP>
KILN_BF16 void score_rows(const uint16_t* qp, int64_t p0, int64_t rows, const uint16_t* k, int64_t n, int64_t E,
                          float scale, float* s, const StreamAhead& stream, bool prefetch,
                          const std::vector<uint16_t>& zeros) {
  // One 2x2 block of scores: row pair p0 + p, keys j and (when second_key) j + 1.
  const auto store = [&](float32x4_t block, int p, int64_t j, bool second_key) {
    const float32x4_t d = vmulq_n_f32(block, scale);
    const int64_t r = 2 * (p0 + p);
    s[r * n + j] = vgetq_lane_f32(d, 0);
    if (second_key) s[r * n + j + 1] = vgetq_lane_f32(d, 1);
    if (r + 1 < rows) {
      s[(r + 1) * n + j] = vgetq_lane_f32(d, 2);
      if (second_key) s[(r + 1) * n + j + 1] = vgetq_lane_f32(d, 3);
    }
  };
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    if (prefetch)
      for (int64_t u = 0; u < 8; ++u) stream.prefetch_row(j + u);
    float32x4_t acc[RP][4];
    score_tile<RP, 4>(qp + p0 * 2 * E, k + j * E, nullptr, E, acc);
    for (int p = 0; p < RP; ++p)
      for (int t = 0; t < 4; ++t) store(acc[p][t], p, j + 2 * t, true);
  }
  for (; j < n; j += 2) {
    if (prefetch) stream.prefetch_row(j);
    const bool pair = j + 1 < n;
    float32x4_t acc[RP][1];
    score_tile<RP, 1>(qp + p0 * 2 * E, k + j * E, pair ? nullptr : zeros.data(), E, acc);
    for (int p = 0; p < RP; ++p) store(acc[p][0], p, j, pair);
  }
}

KILN_BF16 void scores(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                      const Prefetch& pf) {
  thread_local std::vector<uint16_t> qp, zeros;
  pack_query_pairs(q, rows, E, qp);
  zeros.assign(static_cast<size_t>(E), 0);
  // 8 KiB ahead, as the x86 kernel (its measurement).
  const StreamAhead stream(k, n, E * static_cast<int64_t>(sizeof(uint16_t)), pf, 2 * StreamAhead::kAheadBytes);
  const int64_t pairs = (rows + 1) / 2;
  int64_t p = 0;
  for (; p + 2 <= pairs; p += 2) score_rows<2>(qp.data(), p, rows, k, n, E, scale, s, stream, p == 0, zeros);
  for (; p < pairs; ++p) score_rows<1>(qp.data(), p, rows, k, n, E, scale, s, stream, p == 0, zeros);
}

// ---- P V: BFDOT adds to each float32 lane the products of one pair of
// bf16 lanes of each source. Zipping rows j and j + 1 of V puts
// (v_j[e], v_j+1[e]) in lane e, and the lane form multiplies them by the
// pair (p_j, p_j+1) picked from a register of four pairs: the accumulators
// stay in the natural element order (x86's unpack works within 128-bit
// blocks and needs a permuted order; NEON's zip does not).

// One pair of keys (T: which of the four pairs in pv) into W groups of 8
// elements of R rows: va, vb point at the pair's V rows (vb at zeros past
// the last key).
template <int R, int W, int T>
KILN_BF16 inline __attribute__((always_inline)) void add_pair(float32x4_t (&acc)[R][2 * W],
                                                              const bfloat16x8_t (&pv)[R], const uint16_t* va,
                                                              const uint16_t* vb) {
  for (int w = 0; w < W; ++w) {
    const uint16x8_t a = vld1q_u16(va + 8 * w), b = vld1q_u16(vb + 8 * w);
    const bfloat16x8_t lo = as_bf16(vzip1q_u16(a, b)), hi = as_bf16(vzip2q_u16(a, b));
    for (int row = 0; row < R; ++row) {
      acc[row][2 * w] = vbfdotq_laneq_f32(acc[row][2 * w], lo, pv[row], T);
      acc[row][2 * w + 1] = vbfdotq_laneq_f32(acc[row][2 * w + 1], hi, pv[row], T);
    }
  }
}

// Keys [j0, j1) into elements [e, e + 8 W) of R rows of acc (row stride Ev);
// pb holds the rows' probabilities as bf16 (row stride padded, zeros from
// n on), j0 a multiple of 8.
template <int R, int W>
KILN_BF16 void accumulate_group(float* acc, const uint16_t* pb, int64_t padded, const uint16_t* v, int64_t j0,
                                int64_t j1, int64_t n, int64_t e, int64_t Ev, const uint16_t* zeros) {
  float32x4_t a[R][2 * W];
  for (int row = 0; row < R; ++row)
    for (int i = 0; i < 2 * W; ++i) a[row][i] = vld1q_f32(acc + row * Ev + e + 4 * i);
  const auto row_of = [&](int64_t j) { return j < n ? v + j * Ev + e : zeros; };
  for (int64_t j = j0; j < j1; j += 8) {
    bfloat16x8_t pv[R];
    for (int row = 0; row < R; ++row) pv[row] = as_bf16(vld1q_u16(pb + row * padded + j));
    add_pair<R, W, 0>(a, pv, row_of(j), row_of(j + 1));
    if (j + 2 < j1) add_pair<R, W, 1>(a, pv, row_of(j + 2), row_of(j + 3));
    if (j + 4 < j1) add_pair<R, W, 2>(a, pv, row_of(j + 4), row_of(j + 5));
    if (j + 6 < j1) add_pair<R, W, 3>(a, pv, row_of(j + 6), row_of(j + 7));
  }
  for (int row = 0; row < R; ++row)
    for (int i = 0; i < 2 * W; ++i) vst1q_f32(acc + row * Ev + e + 4 * i, a[row][i]);
}

// R rows of acc += P V over keys [0, n), in chunks of 32 keys (read again
// from L1 by each group of elements) and groups of 16 elements (8 for the
// last odd one): 16 accumulators for four rows.
template <int R>
KILN_BF16 void accumulate_rows_bf16(float* acc, const uint16_t* pb, int64_t padded, const uint16_t* v, int64_t n,
                                    int64_t Ev, const StreamAhead& stream, bool prefetch, const uint16_t* zeros) {
  constexpr int64_t kKeyChunk = 32;
  for (int64_t j0 = 0; j0 < n; j0 += kKeyChunk) {
    const int64_t j1 = std::min(n, j0 + kKeyChunk);
    if (prefetch)
      for (int64_t j = j0; j < j1; ++j) stream.prefetch_row(j);
    int64_t e = 0;
    for (; e + 16 <= Ev; e += 16) accumulate_group<R, 2>(acc, pb, padded, v, j0, j1, n, e, Ev, zeros);
    if (e < Ev) accumulate_group<R, 1>(acc, pb, padded, v, j0, j1, n, e, Ev, zeros);
  }
}

KILN_BF16 void softmax_accumulate(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                                  const uint16_t* v, int64_t Ev, const Prefetch& pf) {
  online_softmax(s, rows, n, n, mx, l, corr);
  scale_rows(acc, rows, Ev, Ev, corr);
  // The probabilities rounded to bf16 (BFCVTN, to nearest even), as PyTorch's
  // CPU flash attention does for reduced-precision inputs, zeros past n.
  const int64_t padded = (n + 7) / 8 * 8;
  thread_local std::vector<uint16_t> pb, zeros;
  pb.assign(static_cast<size_t>(rows * padded), 0);
  zeros.assign(static_cast<size_t>(Ev), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = s + r * n;
    uint16_t* out = pb.data() + r * padded;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const bfloat16x8_t b = vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(vld1q_f32(p + j)), vld1q_f32(p + j + 4));
      vst1q_u16(out + j, vreinterpretq_u16_bf16(b));
    }
    for (; j < n; ++j) out[j] = vget_lane_u16(vreinterpret_u16_bf16(vcvt_bf16_f32(vdupq_n_f32(p[j]))), 0);
  }
  const StreamAhead stream(v, n, Ev * static_cast<int64_t>(sizeof(uint16_t)), pf, 2 * StreamAhead::kAheadBytes);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    accumulate_rows_bf16<4>(acc + r * Ev, pb.data() + r * padded, padded, v, n, Ev, stream, r == 0, zeros.data());
  for (; r < rows; ++r)
    accumulate_rows_bf16<1>(acc + r * Ev, pb.data() + r * padded, padded, v, n, Ev, stream, r == 0, zeros.data());
}

}  // namespace

const char* bf16_decode_kernel() { return cpu_has_bf16() ? "neon-bf16" : "widening"; }

bool dots_rows_bf16dot(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                       const Prefetch& pf) {
  if (E % 8 != 0 || !cpu_has_bf16()) return false;
  scores(q, rows, k, n, E, scale, s, pf);
  return true;
}

bool softmax_accumulate_rows_bf16dot(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                                     const uint16_t* v, int64_t Ev, const Prefetch& pf) {
  if (Ev % 8 != 0 || !cpu_has_bf16()) return false;
  softmax_accumulate(acc, s, rows, n, mx, l, corr, v, Ev, pf);
  return true;
}

}  // namespace kiln::attention_simd
