// SIMD inner loops of FlexAttention, compiled per Highway target. The
// templated kernels (kiln/attention_kernels.h) keep the mods and the block
// walk; these do the arithmetic that does not depend on the mods.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <cstring>

#include "kiln/attention_simd.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::attention_simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

// s[j] = scale * sum_e q[e] * kt[e * ld + j] for j < n: one query row
// against a block of keys stored transposed (E x ld). Four vector
// accumulators per pass over e, so each q[e] is broadcast once per 4N keys.
void ScoresRow(const float* q, const float* kt, int64_t ld, int64_t E, int64_t n, float scale, float* s) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (int64_t e = 0; e < E; ++e) {
      const auto qe = hn::Set(d, q[e]);
      const float* row = kt + e * ld + j;
      a0 = hn::MulAdd(qe, hn::LoadU(d, row), a0);
      a1 = hn::MulAdd(qe, hn::LoadU(d, row + N), a1);
      a2 = hn::MulAdd(qe, hn::LoadU(d, row + 2 * N), a2);
      a3 = hn::MulAdd(qe, hn::LoadU(d, row + 3 * N), a3);
    }
    hn::StoreU(hn::Mul(a0, vs), d, s + j);
    hn::StoreU(hn::Mul(a1, vs), d, s + j + N);
    hn::StoreU(hn::Mul(a2, vs), d, s + j + 2 * N);
    hn::StoreU(hn::Mul(a3, vs), d, s + j + 3 * N);
  }
  for (; j + N <= n; j += N) {
    auto acc = hn::Zero(d);
    for (int64_t e = 0; e < E; ++e) acc = hn::MulAdd(hn::Set(d, q[e]), hn::LoadU(d, kt + e * ld + j), acc);
    hn::StoreU(hn::Mul(acc, vs), d, s + j);
  }
  for (; j < n; ++j) {
    float acc = 0;
    for (int64_t e = 0; e < E; ++e) acc += q[e] * kt[e * ld + j];
    s[j] = acc * scale;
  }
}

// s[j] = exp(s[j] - mx) in place; returns their sum. -inf gives 0.
float ExpSubSum(float* s, int64_t n, float mx) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, mx);
  auto sum = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm));
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

// acc[e] = acc[e] * corr + sum_j p[j] * v[j * Ev + e]. Four vectors of acc
// stay in registers across the pass over j.
void ScaleAccumulate(float* acc, float corr, const float* p, const float* v, int64_t n, int64_t Ev) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vc = hn::Set(d, corr);
  int64_t e = 0;
  for (; e + 4 * N <= Ev; e += 4 * N) {
    auto a0 = hn::Mul(hn::LoadU(d, acc + e), vc), a1 = hn::Mul(hn::LoadU(d, acc + e + N), vc);
    auto a2 = hn::Mul(hn::LoadU(d, acc + e + 2 * N), vc), a3 = hn::Mul(hn::LoadU(d, acc + e + 3 * N), vc);
    for (int64_t j = 0; j < n; ++j) {
      const auto pj = hn::Set(d, p[j]);
      const float* row = v + j * Ev + e;
      a0 = hn::MulAdd(pj, hn::LoadU(d, row), a0);
      a1 = hn::MulAdd(pj, hn::LoadU(d, row + N), a1);
      a2 = hn::MulAdd(pj, hn::LoadU(d, row + 2 * N), a2);
      a3 = hn::MulAdd(pj, hn::LoadU(d, row + 3 * N), a3);
    }
    hn::StoreU(a0, d, acc + e);
    hn::StoreU(a1, d, acc + e + N);
    hn::StoreU(a2, d, acc + e + 2 * N);
    hn::StoreU(a3, d, acc + e + 3 * N);
  }
  for (; e + N <= Ev; e += N) {
    auto a = hn::Mul(hn::LoadU(d, acc + e), vc);
    for (int64_t j = 0; j < n; ++j) a = hn::MulAdd(hn::Set(d, p[j]), hn::LoadU(d, v + j * Ev + e), a);
    hn::StoreU(a, d, acc + e);
  }
  for (; e < Ev; ++e) {
    float a = acc[e] * corr;
    for (int64_t j = 0; j < n; ++j) a += p[j] * v[j * Ev + e];
    acc[e] = a;
  }
}

// Four query rows at once (q rows qstride apart, score rows sstride apart):
// every key vector loaded feeds four FMAs.
void ScoresRows4(const float* q, int64_t qstride, const float* kt, int64_t ld, int64_t E, int64_t n, float scale,
                 float* s, int64_t sstride) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    auto a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
    auto a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
    for (int64_t e = 0; e < E; ++e) {
      const auto k0 = hn::LoadU(d, kt + e * ld + j), k1 = hn::LoadU(d, kt + e * ld + j + N);
      const auto q0 = hn::Set(d, q[e]), q1 = hn::Set(d, q[qstride + e]);
      const auto q2 = hn::Set(d, q[2 * qstride + e]), q3 = hn::Set(d, q[3 * qstride + e]);
      a00 = hn::MulAdd(q0, k0, a00), a01 = hn::MulAdd(q0, k1, a01);
      a10 = hn::MulAdd(q1, k0, a10), a11 = hn::MulAdd(q1, k1, a11);
      a20 = hn::MulAdd(q2, k0, a20), a21 = hn::MulAdd(q2, k1, a21);
      a30 = hn::MulAdd(q3, k0, a30), a31 = hn::MulAdd(q3, k1, a31);
    }
    hn::StoreU(hn::Mul(a00, vs), d, s + j), hn::StoreU(hn::Mul(a01, vs), d, s + j + N);
    hn::StoreU(hn::Mul(a10, vs), d, s + sstride + j), hn::StoreU(hn::Mul(a11, vs), d, s + sstride + j + N);
    hn::StoreU(hn::Mul(a20, vs), d, s + 2 * sstride + j), hn::StoreU(hn::Mul(a21, vs), d, s + 2 * sstride + j + N);
    hn::StoreU(hn::Mul(a30, vs), d, s + 3 * sstride + j), hn::StoreU(hn::Mul(a31, vs), d, s + 3 * sstride + j + N);
  }
  if (j < n)
    for (int64_t r = 0; r < 4; ++r) ScoresRow(q + r * qstride, kt + j, ld, E, n - j, scale, s + r * sstride + j);
}

// Four accumulator rows at once: acc[r] = acc[r] * corr[r] + p[r] @ v, with
// each value vector loaded once for the four rows.
void ScaleAccumulateRows4(float* acc, int64_t astride, const float* corr, const float* p, int64_t pstride,
                          const float* v, int64_t n, int64_t Ev) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t e = 0;
  for (; e + 2 * N <= Ev; e += 2 * N) {
    auto ld = [&](int64_t r, int64_t o) { return hn::Mul(hn::LoadU(d, acc + r * astride + e + o), hn::Set(d, corr[r])); };
    auto a00 = ld(0, 0), a01 = ld(0, N), a10 = ld(1, 0), a11 = ld(1, N);
    auto a20 = ld(2, 0), a21 = ld(2, N), a30 = ld(3, 0), a31 = ld(3, N);
    for (int64_t j = 0; j < n; ++j) {
      const auto v0 = hn::LoadU(d, v + j * Ev + e), v1 = hn::LoadU(d, v + j * Ev + e + N);
      const auto p0 = hn::Set(d, p[j]), p1 = hn::Set(d, p[pstride + j]);
      const auto p2 = hn::Set(d, p[2 * pstride + j]), p3 = hn::Set(d, p[3 * pstride + j]);
      a00 = hn::MulAdd(p0, v0, a00), a01 = hn::MulAdd(p0, v1, a01);
      a10 = hn::MulAdd(p1, v0, a10), a11 = hn::MulAdd(p1, v1, a11);
      a20 = hn::MulAdd(p2, v0, a20), a21 = hn::MulAdd(p2, v1, a21);
      a30 = hn::MulAdd(p3, v0, a30), a31 = hn::MulAdd(p3, v1, a31);
    }
    hn::StoreU(a00, d, acc + e), hn::StoreU(a01, d, acc + e + N);
    hn::StoreU(a10, d, acc + astride + e), hn::StoreU(a11, d, acc + astride + e + N);
    hn::StoreU(a20, d, acc + 2 * astride + e), hn::StoreU(a21, d, acc + 2 * astride + e + N);
    hn::StoreU(a30, d, acc + 3 * astride + e), hn::StoreU(a31, d, acc + 3 * astride + e + N);
  }
  if (e < Ev)
    for (int64_t r = 0; r < 4; ++r) {
      float* a = acc + r * astride;
      for (int64_t x = e; x < Ev; ++x) {
        float t = a[x] * corr[r];
        for (int64_t j = 0; j < n; ++j) t += p[r * pstride + j] * v[j * Ev + x];
        a[x] = t;
      }
    }
}

void DotsRows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * E;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * E;
      auto acc = hn::Zero(d);
      int64_t e = 0;
      for (; e + N <= E; e += N) acc = hn::MulAdd(hn::LoadU(d, qr + e), hn::LoadU(d, kj + e), acc);
      float t = hn::GetLane(hn::SumOfLanes(d, acc));
      for (; e < E; ++e) t += qr[e] * kj[e];
      s[r * n + j] = t * scale;
    }
  }
}

void AccumulateRows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < Ev; ++e) acc[r * Ev + e] *= corr[r];
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * Ev;
    for (int64_t r = 0; r < rows; ++r) {
      const float pj = p[r * n + j];
      if (pj == 0.0f) continue;
      float* ar = acc + r * Ev;
      const auto vp = hn::Set(d, pj);
      int64_t e = 0;
      for (; e + N <= Ev; e += N) hn::StoreU(hn::MulAdd(vp, hn::LoadU(d, vj + e), hn::LoadU(d, ar + e)), d, ar + e);
      for (; e < Ev; ++e) ar[e] += pj * vj[e];
    }
  }
}

}  // namespace kiln::attention_simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::attention_simd {
HWY_EXPORT(ScoresRow);
HWY_EXPORT(ExpSubSum);
HWY_EXPORT(ScaleAccumulate);
HWY_EXPORT(DotsRows);
HWY_EXPORT(ScoresRows4);
HWY_EXPORT(ScaleAccumulateRows4);

void scores_rows4(const float* q, int64_t qstride, const float* kt, int64_t ld, int64_t E, int64_t n, float scale,
                  float* s, int64_t sstride) {
  HWY_DYNAMIC_DISPATCH(ScoresRows4)(q, qstride, kt, ld, E, n, scale, s, sstride);
}
void scale_accumulate_rows4(float* acc, int64_t astride, const float* corr, const float* p, int64_t pstride,
                            const float* v, int64_t n, int64_t Ev) {
  HWY_DYNAMIC_DISPATCH(ScaleAccumulateRows4)(acc, astride, corr, p, pstride, v, n, Ev);
}
HWY_EXPORT(AccumulateRows);

void dots_rows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s) {
  HWY_DYNAMIC_DISPATCH(DotsRows)(q, rows, k, n, E, scale, s);
}
void accumulate_rows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev) {
  HWY_DYNAMIC_DISPATCH(AccumulateRows)(acc, corr, p, rows, v, n, Ev);
}

void scores_row(const float* q, const float* kt, int64_t ld, int64_t E, int64_t n, float scale, float* s) {
  HWY_DYNAMIC_DISPATCH(ScoresRow)(q, kt, ld, E, n, scale, s);
}
float exp_sub_sum(float* s, int64_t n, float mx) { return HWY_DYNAMIC_DISPATCH(ExpSubSum)(s, n, mx); }
void scale_accumulate(float* acc, float corr, const float* p, const float* v, int64_t n, int64_t Ev) {
  HWY_DYNAMIC_DISPATCH(ScaleAccumulate)(acc, corr, p, v, n, Ev);
}
}  // namespace kiln::attention_simd
#endif
