// SIMD inner loops of FlexAttention, compiled per Highway target. The
// templated kernels (kiln/detail/attention_*.h) keep the mods and the block
// walk; these do the arithmetic that does not depend on the mods.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/detail/attention_simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::attention_simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

// exp(x) for x <= 0 (scores less their row's max; -inf gives 0): x =
// n ln 2 + r with ln 2 in two parts (as Highway's Exp), e^r by its Taylor
// polynomial of degree 6 (|r| <= ln 2 / 2: error below 2e-7), 2^n put in
// the exponent bits. Highway's Exp also covers x > 0 and splits 2^n in two
// to reach overflow correctly, which a softmax never needs. Below -87 (2^n
// not a normal float) the result is 0 (the true value is under 2^-125).
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto n = hn::Round(hn::Mul(x, hn::Set(d, 1.442695041f)));
  auto r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  auto p = hn::Set(d, 1.0f / 720);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const auto n_safe = hn::Max(n, hn::Set(d, -126.0f));  // -inf -> -126; masked below
  const auto pow2n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n_safe), hn::Set(di, 127))));
  return hn::IfThenElseZero(hn::Ge(x, hn::Set(d, -87.0f)), hn::Mul(p, pow2n));
}

// s[j] = exp(s[j] - mx) in place; returns their sum. -inf gives 0.
float ExpSubSum(float* s, int64_t n, float mx) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, mx);
  auto sum = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, s + j), vm));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, s + j);
  }
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    total += s[j];
  }
  return total;
}

// Online-softmax update of a block of scores (mods applied, -inf where
// masked), row by row: see attention_simd.h.
void OnlineSoftmax(float* s, int64_t rows, int64_t cols, int64_t ld, float* mx, float* l, float* corr) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    auto vmax = hn::Set(d, kNegInf);
    int64_t j = 0;
    for (; j + N <= cols; j += N) vmax = hn::Max(vmax, hn::LoadU(d, row + j));
    float bmax = hn::GetLane(hn::MaxOfLanes(d, vmax));
    for (; j < cols; ++j) bmax = std::max(bmax, row[j]);
    if (bmax == kNegInf) {  // nothing visible in this block: P = 0, state unchanged
      std::fill(row, row + cols, 0.0f);
      corr[r] = 1.0f;
      continue;
    }
    const float nmax = std::max(mx[r], bmax);
    corr[r] = mx[r] == kNegInf ? 0.0f : std::exp(mx[r] - nmax);
    l[r] = l[r] * corr[r] + ExpSubSum(row, cols, nmax);
    mx[r] = nmax;
  }
}

// a[r * lda + e] *= f[r] for e < n.
void ScaleRows(float* a, int64_t rows, int64_t n, int64_t lda, const float* f) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    if (f[r] == 1.0f) continue;
    float* ar = a + r * lda;
    const auto vf = hn::Set(d, f[r]);
    int64_t e = 0;
    for (; e + N <= n; e += N) hn::StoreU(hn::Mul(hn::LoadU(d, ar + e), vf), d, ar + e);
    for (; e < n; ++e) ar[e] *= f[r];
  }
}

// row[j] = -inf where bit j of `bits` is 0 (a partial block's mask,
// BlockMaskData::partial_bits). Lanes come N at a time, so a chunk of bits
// is a whole byte or less of one word; all-ones chunks (visible keys) are
// skipped.
void MaskRow(float* row, int64_t cols, const uint64_t* bits) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const uint64_t all = N >= 64 ? ~uint64_t{0} : (uint64_t{1} << N) - 1;
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; N <= 64 && j + N <= cols; j += N) {  // (a chunk is at most one word)
    const uint64_t chunk = (bits[j / 64] >> (j % 64)) & all;
    if (chunk == all) continue;
    uint8_t lanes[8];
    for (int byte = 0; byte < 8; ++byte) lanes[byte] = static_cast<uint8_t>(chunk >> (8 * byte));
    hn::StoreU(hn::IfThenElse(hn::LoadMaskBits(d, lanes), hn::LoadU(d, row + j), neg_inf), d, row + j);
  }
  for (; j < cols; ++j)
    if (!((bits[j / 64] >> (j % 64)) & 1)) row[j] = -std::numeric_limits<float>::infinity();
}

// The backward's elementwise step over a block: P = exp(S - lse) and
// dS = P (dP - delta) deriv scale, in place.
void SoftmaxGrad(float* p, float* dp, const float* deriv, int64_t rows, int64_t cols, int64_t ld, const float* lse,
                 const float* delta, float scale) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const auto vs = hn::Set(d, scale);
  for (int64_t r = 0; r < rows; ++r) {
    float* pr = p + r * ld;
    float* dpr = dp + r * ld;
    if (lse[r] == kNegInf) {  // a fully masked row has no gradient
      std::fill(pr, pr + cols, 0.0f);
      std::fill(dpr, dpr + cols, 0.0f);
      continue;
    }
    ExpSubSum(pr, cols, lse[r]);
    const auto vd = hn::Set(d, delta[r]);
    int64_t j = 0;
    for (; j + N <= cols; j += N) {
      auto g = hn::Mul(hn::Mul(hn::LoadU(d, pr + j), hn::Sub(hn::LoadU(d, dpr + j), vd)), vs);
      if (deriv) g = hn::Mul(g, hn::LoadU(d, deriv + r * ld + j));
      hn::StoreU(g, d, dpr + j);
    }
    for (; j < cols; ++j) dpr[j] = pr[j] * (dpr[j] - delta[r]) * scale * (deriv ? deriv[r * ld + j] : 1.0f);
  }
}

// Keys and values are read as stored: float32, or bfloat16 bits widened in
// registers (decoding over a bf16 cache reads half the bytes).
HWY_INLINE hn::Vec<D> LoadKV(D d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE hn::Vec<D> LoadKV(D d, const uint16_t* p) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToUnsigned<D> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
// GCC folds a loaded vector into every FMA that uses it as a memory
// operand, one load per use; on Zen 5 512-bit FMAs with memory operands ran
// at half the rate of register ones or worse (accumulating 4 rows over keys
// in L1). This keeps v in a register; where no instruction
// takes a memory operand (Arm) it is v itself.
template <class V>
HWY_INLINE V InRegister(V v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  asm("" : "+v"(v.raw));
#endif
  return v;
}
inline float KVToFloat(float x) { return x; }
inline float KVToFloat(uint16_t bits) {
  const uint32_t w = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
// Per 128-bit block: [sum of a, of b, of c, of e] over that block's lanes,
// by interleaving within blocks (one-cycle unpacks), three instructions per
// pair.
HWY_INLINE hn::Vec<D> BlockSums(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c, hn::Vec<D> e) {
  const hn::Repartition<double, D> d64;
  const auto ab = hn::BitCast(d64, hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b)));
  const auto ce = hn::BitCast(d64, hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e)));
  return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, ab, ce)), hn::BitCast(d, hn::InterleaveUpper(d64, ab, ce)));
}
// lo's two halves summed in the lower half, hi's in the upper.
HWY_INLINE hn::Vec<D> SumHalves(D d, hn::Vec<D> lo, hn::Vec<D> hi) {
  return hn::Add(hn::ConcatLowerLower(d, hi, lo), hn::ConcatUpperUpper(d, hi, lo));
}

// Lane i of the result = sum of the lanes of v[i], for N = Lanes(d) vectors.
// 128-bit vectors (and the 128-bit blocks of AVX2) reduce by BlockSums; the
// blocks of AVX2 then meet in one add. Wider vectors use pairwise adds of
// even and odd lanes.
template <size_t kN>
HWY_INLINE hn::Vec<D> ReduceEach(D d, hn::Vec<D> (&v)[kN]) {
  if constexpr (kN == 4 || kN == 8) {
    for (size_t g = 0; g < kN; g += 4) v[g / 4] = BlockSums(d, v[g], v[g + 1], v[g + 2], v[g + 3]);
    if constexpr (kN == 8) return SumHalves(d, v[0], v[1]);
    return v[0];
  } else {
    for (size_t width = kN; width > 1; width /= 2)
      for (size_t i = 0; i < width / 2; ++i)
        v[i] = hn::Add(hn::ConcatEven(d, v[2 * i + 1], v[2 * i]), hn::ConcatOdd(d, v[2 * i + 1], v[2 * i]));
    return v[0];
  }
}
#endif

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
// Lane row * 4 + u = dot(q row `row`, k row u) for 4 query rows (E apart)
// and 4 key rows (E apart), 16-lane vectors, E % 16 == 0: the general loop
// below with its 16 accumulators as named values. As an array GCC kept them
// on the stack, spilling inside the FMA loop (in-cache dots much slower).
// The 16 sums meet in a tree that stays inside 128-bit blocks for its first
// two levels (unpack, one cycle each) and crosses blocks only for the last
// two, instead of lane permutes throughout (ConcatEven/ConcatOdd): a few
// percent faster per key in L1 (4 rows, E = 128, 64 keys). The software
// prefetch costs more than that in L1 but pays from memory.
template <class KV>
HWY_INLINE hn::Vec<D> DotsFourByFour(D d, const float* q, const KV* k, int64_t E) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto a00 = hn::Zero(d), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  auto a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
  for (int64_t e = 0; e < E; e += N) {
    const auto k0 = InRegister(LoadKV(d, k + e)), k1 = InRegister(LoadKV(d, k + E + e)),
               k2 = InRegister(LoadKV(d, k + 2 * E + e)), k3 = InRegister(LoadKV(d, k + 3 * E + e));
    auto q0 = InRegister(hn::LoadU(d, q + e));
    a00 = hn::MulAdd(q0, k0, a00), a01 = hn::MulAdd(q0, k1, a01), a02 = hn::MulAdd(q0, k2, a02), a03 = hn::MulAdd(q0, k3, a03);
    q0 = InRegister(hn::LoadU(d, q + E + e));
    a10 = hn::MulAdd(q0, k0, a10), a11 = hn::MulAdd(q0, k1, a11), a12 = hn::MulAdd(q0, k2, a12), a13 = hn::MulAdd(q0, k3, a13);
    q0 = InRegister(hn::LoadU(d, q + 2 * E + e));
    a20 = hn::MulAdd(q0, k0, a20), a21 = hn::MulAdd(q0, k1, a21), a22 = hn::MulAdd(q0, k2, a22), a23 = hn::MulAdd(q0, k3, a23);
    q0 = InRegister(hn::LoadU(d, q + 3 * E + e));
    a30 = hn::MulAdd(q0, k0, a30), a31 = hn::MulAdd(q0, k1, a31), a32 = hn::MulAdd(q0, k2, a32), a33 = hn::MulAdd(q0, k3, a33);
  }
  // Row r's four per-block sums in block b of c_r (BlockSums); then the
  // blocks are summed: halves first (rows 0 and 2, 1 and 3 side by side),
  // then neighbouring blocks, leaving row r in block r.
  const auto c0 = BlockSums(d, a00, a01, a02, a03), c1 = BlockSums(d, a10, a11, a12, a13);
  const auto c2 = BlockSums(d, a20, a21, a22, a23), c3 = BlockSums(d, a30, a31, a32, a33);
  const auto x = SumHalves(d, c0, c2), y = SumHalves(d, c1, c3);
  return hn::OddEvenBlocks(hn::Add(y, hn::SwapAdjacentBlocks(y)), hn::Add(x, hn::SwapAdjacentBlocks(x)));
}
#endif

// s[r * n + j] = scale * dot(q row r, k row j). Query rows go four at a
// time, so each key vector loaded feeds four FMAs (decoding reads every key
// once for the whole GQA group).
template <class KV>
void DotsRowsT(const float* q, int64_t rows, const KV* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const StreamAhead stream(k, n, E * static_cast<int64_t>(sizeof(KV)), pf);
  int64_t r = 0;
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  // Four query rows by N/4 keys: the N accumulators are summed together by
  // a pairwise-add tree (ConcatEven + ConcatOdd halves the vector count per
  // level) whose last vector holds all N dot products, instead of one
  // horizontal reduction per dot product; each query vector loaded feeds
  // N/4 keys.
  constexpr int64_t KJ = static_cast<int64_t>(hn::MaxLanes(D())) / 4;
  if (E % N == 0)
    for (; r + 4 <= rows; r += 4) {
      const float* qr = q + r * E;
      int64_t j = 0;
      for (; j + KJ <= n; j += KJ) {
        // Row by row: the rows' lines in one loop, or spread over the FMAs,
        // streamed slower from memory (alternating runs, two threads).
        if (r == 0)
          for (int64_t u = 0; u < KJ; ++u) stream.prefetch_row(j + u);
        alignas(64) float dots[4 * KJ];
        if constexpr (KJ == 4) {
          hn::Store(hn::Mul(DotsFourByFour(d, qr, k + j * E, E), hn::Set(d, scale)), d, dots);
        } else {
          hn::Vec<D> acc[4 * KJ];  // acc[row * KJ + key]
          for (auto& a : acc) a = hn::Zero(d);
          for (int64_t e = 0; e < E; e += N) {
            hn::Vec<D> kv[KJ];
            for (int64_t u = 0; u < KJ; ++u) kv[u] = LoadKV(d, k + (j + u) * E + e);
            for (int64_t row = 0; row < 4; ++row) {
              const auto qv = hn::LoadU(d, qr + row * E + e);
              for (int64_t u = 0; u < KJ; ++u) acc[row * KJ + u] = hn::MulAdd(qv, kv[u], acc[row * KJ + u]);
            }
          }
          hn::Store(hn::Mul(ReduceEach(d, acc), hn::Set(d, scale)), d, dots);
        }
        for (int64_t row = 0; row < 4; ++row)
          std::memcpy(s + (r + row) * n + j, dots + row * KJ, KJ * sizeof(float));
      }
      for (; j < n; ++j) {
        if (r == 0) stream.prefetch_row(j);
        for (int64_t row = 0; row < 4; ++row) {
          auto a = hn::Zero(d);
          for (int64_t e = 0; e < E; e += N) a = hn::MulAdd(hn::LoadU(d, qr + row * E + e), LoadKV(d, k + j * E + e), a);
          s[(r + row) * n + j] = hn::GetLane(hn::SumOfLanes(d, a)) * scale;
        }
      }
    }
#endif
  for (; r + 4 <= rows; r += 4) {
    const float *q0 = q + r * E, *q1 = q0 + E, *q2 = q1 + E, *q3 = q2 + E;
    for (int64_t j = 0; j < n; ++j) {
      if (r == 0) stream.prefetch_row(j);
      const KV* kj = k + j * E;
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      int64_t e = 0;
      for (; e + N <= E; e += N) {
        const auto kv = LoadKV(d, kj + e);
        a0 = hn::MulAdd(hn::LoadU(d, q0 + e), kv, a0), a1 = hn::MulAdd(hn::LoadU(d, q1 + e), kv, a1);
        a2 = hn::MulAdd(hn::LoadU(d, q2 + e), kv, a2), a3 = hn::MulAdd(hn::LoadU(d, q3 + e), kv, a3);
      }
      float t0 = hn::GetLane(hn::SumOfLanes(d, a0)), t1 = hn::GetLane(hn::SumOfLanes(d, a1));
      float t2 = hn::GetLane(hn::SumOfLanes(d, a2)), t3 = hn::GetLane(hn::SumOfLanes(d, a3));
      for (; e < E; ++e) {
        const float kf = KVToFloat(kj[e]);
        t0 += q0[e] * kf, t1 += q1[e] * kf, t2 += q2[e] * kf, t3 += q3[e] * kf;
      }
      s[r * n + j] = t0 * scale, s[(r + 1) * n + j] = t1 * scale;
      s[(r + 2) * n + j] = t2 * scale, s[(r + 3) * n + j] = t3 * scale;
    }
  }
  for (; r < rows; ++r) {
    const float* qr = q + r * E;
    for (int64_t j = 0; j < n; ++j) {
      if (r == 0) stream.prefetch_row(j);
      const KV* kj = k + j * E;
      auto acc = hn::Zero(d);
      int64_t e = 0;
      for (; e + N <= E; e += N) acc = hn::MulAdd(hn::LoadU(d, qr + e), LoadKV(d, kj + e), acc);
      float t = hn::GetLane(hn::SumOfLanes(d, acc));
      for (; e < E; ++e) t += qr[e] * KVToFloat(kj[e]);
      s[r * n + j] = t * scale;
    }
  }
}

// Targets with 32 vector registers (AVX-512, NEON) hold wider tiles of
// accumulators (here and in Gemm below). Fixed-size arrays of vectors need
// sized vectors, so not SVE; 16-register targets (SSE4, AVX2) keep the
// narrow ones.
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR && !(HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3)
#define KILN_WIDE_TILES 1
#else
#define KILN_WIDE_TILES 0
#endif

#if KILN_WIDE_TILES
// acc rows a[0..3] (Ev apart), elements [e, e + W N) += p[u * n + j] v[j]
// over keys [j0, j1), the 4 W accumulators in registers: each V vector is
// loaded once (InRegister) and feeds the four rows. In a stand-alone test
// (L1, Ev = 128) 4 x 4 tiles beat 2 rows x 8 vectors, which load each V
// vector twice, and in this function far more against 2 x 8 blocks with
// GCC's folded loads (figures in this comment's commit).
template <int64_t W, class KV>
HWY_INLINE void AccumulateFourRows(float* a, const float* pr, int64_t n, const KV* v, int64_t Ev, int64_t e,
                                   int64_t j0, int64_t j1, LineCursor& cursor) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> c[4][W];
  for (int64_t u = 0; u < 4; ++u)
    for (int64_t w = 0; w < W; ++w) c[u][w] = hn::LoadU(d, a + u * Ev + e + w * N);
  for (int64_t j = j0; j < j1; ++j) {
    cursor.step();
    hn::Vec<D> vv[W];
    for (int64_t w = 0; w < W; ++w) vv[w] = InRegister(LoadKV(d, v + j * Ev + e + w * N));
    for (int64_t u = 0; u < 4; ++u) {
      const auto pu = hn::Set(d, pr[u * n + j]);
      for (int64_t w = 0; w < W; ++w) c[u][w] = hn::MulAdd(pu, vv[w], c[u][w]);
    }
  }
  for (int64_t u = 0; u < 4; ++u)
    for (int64_t w = 0; w < W; ++w) hn::StoreU(c[u][w], d, a + u * Ev + e + w * N);
}
#endif

// acc[r] = acc[r] * corr[r] + sum_j p[r * n + j] * v[j]. Four rows by W
// vectors of acc stay in registers across a chunk of keys.
template <class KV>
void AccumulateRowsT(float* acc, const float* corr, const float* p, int64_t rows, const KV* v, int64_t n, int64_t Ev,
                     const Prefetch& pf) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  ScaleRows(acc, rows, Ev, Ev, corr);
  const int64_t row_bytes = Ev * static_cast<int64_t>(sizeof(KV));
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    float* a = acc + r * Ev;
    const float* pr = p + r * n;
    // Keys go in chunks so that the V rows of one chunk stay in L1 across
    // the passes over Ev, while the next chunk's rows (or the next keys,
    // pf) stream in, spread over the chunk's steps. Chunks of 8 keys (4 KiB
    // of float32 rows at Ev = 128), not 32: faster float32 decoding on one
    // and two threads (alternating runs; the prefetch distance alone, 8 rows
    // ahead with chunks of 32, did not do it).
    constexpr int64_t kKeyChunk = 8;
    const StreamAhead stream(v, n, row_bytes, pf, kKeyChunk * row_bytes);
    int64_t e = 0;
    for (int64_t j0 = 0; j0 < n; j0 += kKeyChunk) {
      const int64_t j1 = std::min(n, j0 + kKeyChunk);
      LineCursor next = r == 0 ? LineCursor(stream.span(j0 + stream.ahead, kKeyChunk)) : LineCursor();
      e = 0;
#if KILN_WIDE_TILES
      for (; e + 4 * N <= Ev; e += 4 * N) AccumulateFourRows<4>(a, pr, n, v, Ev, e, j0, j1, next);
      for (; e + N <= Ev; e += N) AccumulateFourRows<1>(a, pr, n, v, Ev, e, j0, j1, next);
#else
      // Named accumulators: SVE's vectors have no size, so no arrays.
      for (; e + 2 * N <= Ev; e += 2 * N) {
        auto c00 = hn::LoadU(d, a + e), c01 = hn::LoadU(d, a + e + N);
        auto c10 = hn::LoadU(d, a + Ev + e), c11 = hn::LoadU(d, a + Ev + e + N);
        auto c20 = hn::LoadU(d, a + 2 * Ev + e), c21 = hn::LoadU(d, a + 2 * Ev + e + N);
        auto c30 = hn::LoadU(d, a + 3 * Ev + e), c31 = hn::LoadU(d, a + 3 * Ev + e + N);
        for (int64_t j = j0; j < j1; ++j) {
          next.step();
          const auto v0 = InRegister(LoadKV(d, v + j * Ev + e)), v1 = InRegister(LoadKV(d, v + j * Ev + e + N));
          const auto p0 = hn::Set(d, pr[j]), p1 = hn::Set(d, pr[n + j]);
          const auto p2 = hn::Set(d, pr[2 * n + j]), p3 = hn::Set(d, pr[3 * n + j]);
          c00 = hn::MulAdd(p0, v0, c00), c01 = hn::MulAdd(p0, v1, c01);
          c10 = hn::MulAdd(p1, v0, c10), c11 = hn::MulAdd(p1, v1, c11);
          c20 = hn::MulAdd(p2, v0, c20), c21 = hn::MulAdd(p2, v1, c21);
          c30 = hn::MulAdd(p3, v0, c30), c31 = hn::MulAdd(p3, v1, c31);
        }
        hn::StoreU(c00, d, a + e), hn::StoreU(c01, d, a + e + N);
        hn::StoreU(c10, d, a + Ev + e), hn::StoreU(c11, d, a + Ev + e + N);
        hn::StoreU(c20, d, a + 2 * Ev + e), hn::StoreU(c21, d, a + 2 * Ev + e + N);
        hn::StoreU(c30, d, a + 3 * Ev + e), hn::StoreU(c31, d, a + 3 * Ev + e + N);
      }
#endif
    }
    for (; e < Ev; ++e)
      for (int64_t u = 0; u < 4; ++u) {
        float t = a[u * Ev + e];
        for (int64_t j = 0; j < n; ++j) t += pr[u * n + j] * KVToFloat(v[j * Ev + e]);
        a[u * Ev + e] = t;
      }
  }
  const StreamAhead stream(v, n, row_bytes, pf);
  for (; r < rows; ++r) {
    float* ar = acc + r * Ev;
    for (int64_t j = 0; j < n; ++j) {
      if (r == 0) stream.prefetch_row(j);
      const float pj = p[r * n + j];
      const KV* vj = v + j * Ev;
      const auto vp = hn::Set(d, pj);
      int64_t e = 0;
      for (; e + N <= Ev; e += N) hn::StoreU(hn::MulAdd(vp, LoadKV(d, vj + e), hn::LoadU(d, ar + e)), d, ar + e);
      for (; e < Ev; ++e) ar[e] += pj * KVToFloat(vj[e]);
    }
  }
}

void DotsRows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s,
              const Prefetch& pf) {
  DotsRowsT(q, rows, k, n, E, scale, s, pf);
}
void DotsRowsBF16(const float* q, int64_t rows, const uint16_t* k, int64_t n, int64_t E, float scale, float* s,
                  const Prefetch& pf) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM_A64
  if (dots_rows_bf16dot(q, rows, k, n, E, scale, s, pf)) return;
#endif
  DotsRowsT(q, rows, k, n, E, scale, s, pf);
}
void AccumulateRows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev,
                    const Prefetch& pf) {
  AccumulateRowsT(acc, corr, p, rows, v, n, Ev, pf);
}
void SoftmaxAccumulateRowsBF16(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                               const uint16_t* v, int64_t Ev, const Prefetch& pf) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM_A64
  if (softmax_accumulate_rows_bf16dot(acc, s, rows, n, mx, l, corr, v, Ev, pf)) return;
#endif
  OnlineSoftmax(s, rows, n, n, mx, l, corr);
  AccumulateRowsT(acc, corr, s, rows, v, n, Ev, pf);
}

// Targets with 32 vector registers (AVX-512, NEON) take 8 x 2-vector tiles
// of C: 16 accumulators hide the FMA latency and each pair of B vectors
// loaded feeds 16 FMAs; 16-register targets (SSE4, AVX2) and SVE keep 4 x 2
// tiles (KILN_WIDE_TILES above).

// C (M x N, ldc) = alpha * A @ B (+ C when accumulate). A is M x K with
// element (i, k) at A[i * a_rs + k * a_cs], so a transposed operand needs no
// copy; B is K x N with rows ldb apart. The forward's two products per
// block pair and the backward's five all have this form.
void Gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  const D d;
  const int64_t NL = static_cast<int64_t>(hn::Lanes(d));
  // Captures no vector: SVE vectors are sizeless and cannot be captured.
  auto put = [d, alpha, accumulate](float* c, hn::Vec<D> acc) {
    const auto va = hn::Set(d, alpha);
    hn::StoreU(accumulate ? hn::MulAdd(acc, va, hn::LoadU(d, c)) : hn::Mul(acc, va), d, c);
  };
  auto scalar = [&](int64_t i, int64_t j) {
    float t = 0;
    for (int64_t k = 0; k < K; ++k) t += A[i * a_rs + k * a_cs] * B[k * ldb + j];
    C[i * ldc + j] = accumulate ? C[i * ldc + j] + alpha * t : alpha * t;
  };
  // Rows [i, i_end) from column j0 on: 4 x 2-vector tiles, then narrower.
  auto rest = [&](int64_t i, int64_t i_end, int64_t j0) {
    for (; i + 4 <= i_end; i += 4) {
      const float* a0 = A + i * a_rs;
      const float *a1 = a0 + a_rs, *a2 = a1 + a_rs, *a3 = a2 + a_rs;
      int64_t j = j0;
      for (; j + 2 * NL <= N; j += 2 * NL) {
        auto c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d);
        auto c20 = hn::Zero(d), c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d);
        for (int64_t k = 0; k < K; ++k) {
          const float* b = B + k * ldb + j;
          const auto b0 = hn::LoadU(d, b), b1 = hn::LoadU(d, b + NL);
          const int64_t ak = k * a_cs;
          const auto x0 = hn::Set(d, a0[ak]), x1 = hn::Set(d, a1[ak]), x2 = hn::Set(d, a2[ak]), x3 = hn::Set(d, a3[ak]);
          c00 = hn::MulAdd(x0, b0, c00), c01 = hn::MulAdd(x0, b1, c01);
          c10 = hn::MulAdd(x1, b0, c10), c11 = hn::MulAdd(x1, b1, c11);
          c20 = hn::MulAdd(x2, b0, c20), c21 = hn::MulAdd(x2, b1, c21);
          c30 = hn::MulAdd(x3, b0, c30), c31 = hn::MulAdd(x3, b1, c31);
        }
        float* c = C + i * ldc + j;
        put(c, c00), put(c + NL, c01), put(c + ldc, c10), put(c + ldc + NL, c11);
        put(c + 2 * ldc, c20), put(c + 2 * ldc + NL, c21), put(c + 3 * ldc, c30), put(c + 3 * ldc + NL, c31);
      }
      for (; j + NL <= N; j += NL) {
        auto c0 = hn::Zero(d), c1 = hn::Zero(d), c2 = hn::Zero(d), c3 = hn::Zero(d);
        for (int64_t k = 0; k < K; ++k) {
          const auto b0 = hn::LoadU(d, B + k * ldb + j);
          const int64_t ak = k * a_cs;
          c0 = hn::MulAdd(hn::Set(d, a0[ak]), b0, c0), c1 = hn::MulAdd(hn::Set(d, a1[ak]), b0, c1);
          c2 = hn::MulAdd(hn::Set(d, a2[ak]), b0, c2), c3 = hn::MulAdd(hn::Set(d, a3[ak]), b0, c3);
        }
        float* c = C + i * ldc + j;
        put(c, c0), put(c + ldc, c1), put(c + 2 * ldc, c2), put(c + 3 * ldc, c3);
      }
      for (; j < N; ++j)
        for (int64_t r = 0; r < 4; ++r) scalar(i + r, j);
    }
    for (; i < i_end; ++i) {
      int64_t j = j0;
      for (; j + NL <= N; j += NL) {
        auto c0 = hn::Zero(d);
        for (int64_t k = 0; k < K; ++k)
          c0 = hn::MulAdd(hn::Set(d, A[i * a_rs + k * a_cs]), hn::LoadU(d, B + k * ldb + j), c0);
        put(C + i * ldc + j, c0);
      }
      for (; j < N; ++j) scalar(i, j);
    }
  };
  int64_t rows8 = 0;
#if KILN_WIDE_TILES
  rows8 = M / 8 * 8;
  const int64_t cols2 = N / (2 * NL) * (2 * NL);
  for (int64_t i = 0; i < rows8; i += 8)
    for (int64_t j = 0; j < cols2; j += 2 * NL) {
      hn::Vec<D> c[8][2];
      for (auto& row : c) row[0] = row[1] = hn::Zero(d);
      const float* a = A + i * a_rs;
      for (int64_t k = 0; k < K; ++k) {
        const float* b = B + k * ldb + j;
        const auto b0 = hn::LoadU(d, b), b1 = hn::LoadU(d, b + NL);
        const float* ak = a + k * a_cs;
        for (int64_t r = 0; r < 8; ++r) {
          const auto x = hn::Set(d, ak[r * a_rs]);
          c[r][0] = hn::MulAdd(x, b0, c[r][0]), c[r][1] = hn::MulAdd(x, b1, c[r][1]);
        }
      }
      for (int64_t r = 0; r < 8; ++r) put(C + (i + r) * ldc + j, c[r][0]), put(C + (i + r) * ldc + j + NL, c[r][1]);
    }
  if (cols2 < N) rest(0, rows8, cols2);
#endif
  rest(rows8, M, 0);
}
#undef KILN_WIDE_TILES

}  // namespace kiln::attention_simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::attention_simd {
HWY_EXPORT(DotsRows);

HWY_EXPORT(AccumulateRows);
HWY_EXPORT(DotsRowsBF16);
HWY_EXPORT(SoftmaxAccumulateRowsBF16);
HWY_EXPORT(Gemm);
HWY_EXPORT(OnlineSoftmax);
HWY_EXPORT(ScaleRows);
HWY_EXPORT(SoftmaxGrad);
HWY_EXPORT(MaskRow);

void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(Gemm)(M, N, K, alpha, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
}

void dots_rows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf) {
  HWY_DYNAMIC_DISPATCH(DotsRows)(q, rows, k, n, E, scale, s, pf);
}
void accumulate_rows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev,
                     const Prefetch& pf) {
  HWY_DYNAMIC_DISPATCH(AccumulateRows)(acc, corr, p, rows, v, n, Ev, pf);
}

void dots_rows(const float* q, int64_t rows, const BFloat16* k, int64_t n, int64_t E, float scale, float* s,
               const Prefetch& pf) {
  HWY_DYNAMIC_DISPATCH(DotsRowsBF16)(q, rows, reinterpret_cast<const uint16_t*>(k), n, E, scale, s, pf);
}
void softmax_accumulate_rows(float* acc, float* s, int64_t rows, int64_t n, float* mx, float* l, float* corr,
                             const BFloat16* v, int64_t Ev, const Prefetch& pf) {
  HWY_DYNAMIC_DISPATCH(SoftmaxAccumulateRowsBF16)(acc, s, rows, n, mx, l, corr, reinterpret_cast<const uint16_t*>(v), Ev,
                                                  pf);
}
void online_softmax(float* s, int64_t rows, int64_t cols, int64_t ld, float* mx, float* l, float* corr) {
  HWY_DYNAMIC_DISPATCH(OnlineSoftmax)(s, rows, cols, ld, mx, l, corr);
}
void scale_rows(float* a, int64_t rows, int64_t n, int64_t lda, const float* f) {
  HWY_DYNAMIC_DISPATCH(ScaleRows)(a, rows, n, lda, f);
}
void softmax_grad(float* p, float* dp, const float* deriv, int64_t rows, int64_t cols, int64_t ld, const float* lse,
                  const float* delta, float scale) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGrad)(p, dp, deriv, rows, cols, ld, lse, delta, scale);
}
void mask_row(float* row, int64_t cols, const uint64_t* bits) { HWY_DYNAMIC_DISPATCH(MaskRow)(row, cols, bits); }
}  // namespace kiln::attention_simd
#endif
