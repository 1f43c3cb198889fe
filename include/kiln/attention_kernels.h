// Templates behind kiln/attention.h: create_block_mask, the dual number used
// to differentiate score_mods, and the tiled forward and backward kernels.
// Included by attention.h; not meant to be included directly.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/attention_simd.h"
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln {

// Evaluates mask_mod on every (q, kv) of every block pair and classifies the
// blocks. Q_LEN and KV_LEN need not be multiples of block_size.
template <class MaskMod>
BlockMask<MaskMod> create_block_mask(MaskMod mask_mod, int64_t B, int64_t H, int64_t q_len, int64_t kv_len,
                                     int64_t block_size = 128) {
  check(B >= 1 && H >= 1 && q_len >= 0 && kv_len >= 0 && block_size >= 1, "create_block_mask",
        "invalid sizes B=", B, " H=", H, " Q_LEN=", q_len, " KV_LEN=", kv_len, " block_size=", block_size);
  BlockMask<MaskMod> m(mask_mod);
  m.B = B, m.H = H, m.q_len = q_len, m.kv_len = kv_len, m.block_size = block_size;
  const int64_t nq = m.num_q_blocks(), nk = m.num_kv_blocks();
  m.kv_num_blocks = zeros({B, H, nq}, kInt32);
  m.full_kv_num_blocks = zeros({B, H, nq}, kInt32);
  m.kv_indices = zeros({B, H, nq, std::max<int64_t>(nk, 1)}, kInt32);
  m.full_kv_indices = zeros({B, H, nq, std::max<int64_t>(nk, 1)}, kInt32);
  int32_t* pn = m.kv_num_blocks.template data_ptr<int32_t>();
  int32_t* fn = m.full_kv_num_blocks.template data_ptr<int32_t>();
  int32_t* pi = m.kv_indices.template data_ptr<int32_t>();
  int32_t* fi = m.full_kv_indices.template data_ptr<int32_t>();
  parallel_for(0, B * H * nq, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t b = row / (H * nq), h = (row / nq) % H, qb = row % nq;
      for (int64_t kb = 0; kb < nk; ++kb) {
        int64_t on = 0, total = 0;
        for (int64_t q = qb * block_size; q < std::min(q_len, (qb + 1) * block_size); ++q)
          for (int64_t kv = kb * block_size; kv < std::min(kv_len, (kb + 1) * block_size); ++kv) {
            on += mask_mod(b, h, q, kv) ? 1 : 0;
            ++total;
          }
        if (on == 0) continue;
        if (on == total) fi[row * std::max<int64_t>(nk, 1) + fn[row]++] = static_cast<int32_t>(kb);
        else pi[row * std::max<int64_t>(nk, 1) + pn[row]++] = static_cast<int32_t>(kb);
      }
    }
  });
  m.build_transposed();
  return m;
}

namespace attention_detail {

// Forward-mode dual number: value and derivative with respect to the score.
template <class T>
struct Dual {
  T v, d;
  Dual(T value = 0, T deriv = 0) : v(value), d(deriv) {}  // NOLINT: built from plain numbers in score_mods
  friend Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
  friend Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
  friend Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
  friend Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
  friend Dual tanh(Dual a) {
    const T t = std::tanh(a.v);
    return {t, a.d * (1 - t * t)};
  }
  friend Dual exp(Dual a) {
    const T e = std::exp(a.v);
    return {e, a.d * e};
  }
};

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The blocks (partial first) of one (b, h, row-block) of a block mask.
struct BlockList {
  const int32_t* partial;
  int64_t n_partial;
  const int32_t* full;
  int64_t n_full;
};
inline BlockList block_list(const Tensor& num, const Tensor& idx, const Tensor& fnum, const Tensor& fidx, int64_t B,
                            int64_t H, int64_t b, int64_t h, int64_t blk) {
  const int64_t bb = B == 1 ? 0 : b, hh = H == 1 ? 0 : h;
  const int64_t nrows = num.size(2), width = idx.size(3);
  const int64_t row = (bb * H + hh) * nrows + blk;
  return {idx.data_ptr<int32_t>() + row * width, num.data_ptr<int32_t>()[row], fidx.data_ptr<int32_t>() + row * width,
          fnum.data_ptr<int32_t>()[row]};
}

struct Shapes {
  int64_t B, Hq, Hkv, L, S, E, Ev, group;
  double scale;
};

Shapes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m, const FlexOptions& o);

// Scores of one query row against keys k0..k0+n (kt: the block transposed, E x bs).
template <class T>
void scores_row(const T* q, const T* kt, int64_t bs, int64_t E, int64_t n, T scale, T* s) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::scores_row(q, kt, bs, E, n, scale, s);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t e = 0; e < E; ++e) acc += q[e] * kt[e * bs + j];
      s[j] = acc * scale;
    }
  }
}
template <class T>
T exp_sub_sum(T* s, int64_t n, T mx) {
  if constexpr (std::is_same_v<T, float>) return attention_simd::exp_sub_sum(s, n, mx);
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  return sum;
}
template <class T>
void scale_accumulate(T* acc, T corr, const T* p, const T* v, int64_t n, int64_t Ev) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::scale_accumulate(acc, corr, p, v, n, Ev);
  } else {
    for (int64_t e = 0; e < Ev; ++e) {
      T a = acc[e] * corr;
      for (int64_t j = 0; j < n; ++j) a += p[j] * v[j * Ev + e];
      acc[e] = a;
    }
  }
}

// One query row meets one KV block: applies score_mod (and mask_mod on a
// partial block) to the raw scores in `row`, then the online-softmax update
// of the row's running max `mx` and sum `l`. Leaves exp(score - max) in
// `row` (0 where masked) and returns the factor the row's accumulator must
// be scaled by before adding row @ V.
template <class T, class ScoreMod, class MaskMod>
T online_softmax_step(T* row, int64_t cols, bool partial, int64_t b, int64_t h, int64_t i, int64_t k0,
                      const ScoreMod& score_mod, const MaskMod& mask_mod, T& mx, T& l) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T bmax = kNegInf;
  for (int64_t j = 0; j < cols; ++j) {
    T x = score_mod(row[j], b, h, i, k0 + j);
    if (partial && !mask_mod(b, h, i, k0 + j)) x = kNegInf;
    row[j] = x;
    bmax = std::max(bmax, x);
  }
  if (bmax == kNegInf) {  // nothing visible in this block: p = 0, state unchanged
    std::fill(row, row + cols, T(0));
    return T(1);
  }
  const T nmax = std::max(mx, bmax);
  const T corr = mx == kNegInf ? T(0) : std::exp(mx - nmax);
  l = l * corr + exp_sub_sum<T>(row, cols, nmax);
  mx = nmax;
  return corr;
}

// Out (B, Hq, L, Ev) and lse (B, Hq, L) from contiguous T inputs. One task
// per (b, h, query block); KV blocks outer so each block of K is transposed
// once and reused by every row; per-row online-softmax state (max, sum, acc).
template <class T, class ScoreMod, class MaskMod>
void forward(const T* q, const T* k, const T* v, T* out, T* lse, const Shapes& s, const BlockMask<MaskMod>& m,
             const ScoreMod& score_mod) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t bs = m.block_size, nq = m.num_q_blocks();
  parallel_for(0, s.B * s.Hq * nq, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> sc(static_cast<size_t>(4 * bs)), kt(static_cast<size_t>(bs * s.E)), corr(4);
    std::vector<T> mx(static_cast<size_t>(bs)), l(static_cast<size_t>(bs)), acc(static_cast<size_t>(bs * s.Ev));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.Hq * nq), h = (task / nq) % s.Hq, qb = task % nq, hk = h / s.group;
      const BlockList bl = block_list(m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices, m.B,
                                      m.H, b, h, qb);
      const T* K = k + (b * s.Hkv + hk) * s.S * s.E;
      const T* V = v + (b * s.Hkv + hk) * s.S * s.Ev;
      const int64_t i0 = qb * bs, rows = std::min(s.L, i0 + bs) - i0;
      std::fill(mx.begin(), mx.end(), kNegInf);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t n = 0; n < bl.n_partial + bl.n_full; ++n) {
        const bool partial = n < bl.n_partial;
        const int64_t kb = partial ? bl.partial[n] : bl.full[n - bl.n_partial];
        const int64_t k0 = kb * bs, cols = std::min(s.S, k0 + bs) - k0;
        for (int64_t j = 0; j < cols; ++j)
          for (int64_t e = 0; e < s.E; ++e) kt[e * bs + j] = K[(k0 + j) * s.E + e];
        // Rows in groups of four (float32) so each K and V vector loaded serves four rows.
        for (int64_t r = 0; r < rows;) {
          const int64_t g = std::is_same_v<T, float> && rows - r >= 4 ? 4 : 1;
          const T* qrow = q + ((b * s.Hq + h) * s.L + i0 + r) * s.E;
          if constexpr (std::is_same_v<T, float>) {
            if (g == 4) attention_simd::scores_rows4(qrow, s.E, kt.data(), bs, s.E, cols, static_cast<float>(s.scale), sc.data(), bs);
          }
          if (g == 1) scores_row<T>(qrow, kt.data(), bs, s.E, cols, static_cast<T>(s.scale), sc.data());
          for (int64_t u = 0; u < g; ++u)
            corr[u] = online_softmax_step(sc.data() + u * bs, cols, partial, b, h, i0 + r + u, k0, score_mod,
                                          m.mask_mod, mx[r + u], l[r + u]);
          if constexpr (std::is_same_v<T, float>) {
            if (g == 4)
              attention_simd::scale_accumulate_rows4(acc.data() + r * s.Ev, s.Ev, corr.data(), sc.data(), bs,
                                                     V + k0 * s.Ev, cols, s.Ev);
          }
          if (g == 1) scale_accumulate<T>(acc.data() + r * s.Ev, corr[0], sc.data(), V + k0 * s.Ev, cols, s.Ev);
          r += g;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        T* O = out + ((b * s.Hq + h) * s.L + i) * s.Ev;
        // A fully masked row: output 0 and lse -inf, as in PyTorch.
        for (int64_t e = 0; e < s.Ev; ++e) O[e] = l[r] > 0 ? acc[r * s.Ev + e] / l[r] : T(0);
        lse[(b * s.Hq + h) * s.L + i] = l[r] > 0 ? mx[r] + std::log(l[r]) : kNegInf;
      }
    }
  });
}

// Note [Flash decoding]
// With few query rows (L <= block_size, decoding) and a mask shared by all
// heads, one task per (b, KV head, KV partition) handles the whole GQA group
// of query heads: each key and value row is read once per partition instead
// of once per query head, with no block transpose. Partitions keep the cores
// busy when B * Hkv is small; their partial (max, sum, acc) are merged
// exactly through the log-sum-exp. Automatic choice: enough partitions for
// four tasks per thread, but at least four KV blocks per partition.
template <class MaskMod>
bool decode_eligible(const Shapes& s, const BlockMask<MaskMod>& m) {
  return s.L <= m.block_size && m.H == 1;
}

template <class MaskMod>
int64_t decode_partitions(const Shapes& s, const BlockMask<MaskMod>& m, int64_t requested) {
  if (requested > 0) return requested;
  const int64_t blocks = m.kv_num_blocks.template data_ptr<int32_t>()[0] + m.full_kv_num_blocks.template data_ptr<int32_t>()[0];
  const int64_t want = (4 * get_num_threads() + s.B * s.Hkv - 1) / (s.B * s.Hkv);
  return std::max<int64_t>(1, std::min(want, blocks / 4));
}

template <class ScoreMod, class MaskMod>
void forward_decode(const float* q, const float* k, const float* v, float* out, float* lse, const Shapes& s,
                    const BlockMask<MaskMod>& m, const ScoreMod& score_mod, int64_t P) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t bs = m.block_size, rows = s.group * s.L;  // row r: query head hk*group + r/L, position r%L
  const int64_t tasks = s.B * s.Hkv * P;
  std::vector<float> pm(static_cast<size_t>(tasks * rows)), pl(static_cast<size_t>(tasks * rows)),
      pacc(static_cast<size_t>(tasks * rows * s.Ev));
  parallel_for(0, tasks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> qrows(static_cast<size_t>(rows * s.E)), sc(static_cast<size_t>(rows * bs)),
        corr(static_cast<size_t>(rows));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.Hkv * P), hk = (task / P) % s.Hkv, part = task % P;
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(qrows.data() + r * s.E, q + ((b * s.Hq + hk * s.group + r / s.L) * s.L + r % s.L) * s.E,
                    static_cast<size_t>(s.E) * sizeof(float));
      const BlockList bl = block_list(m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices, m.B,
                                      m.H, b, 0, 0);
      const int64_t total = bl.n_partial + bl.n_full;
      float* mx = pm.data() + task * rows;
      float* l = pl.data() + task * rows;
      float* acc = pacc.data() + task * rows * s.Ev;
      std::fill(mx, mx + rows, kNegInf);
      std::fill(l, l + rows, 0.0f);
      std::fill(acc, acc + rows * s.Ev, 0.0f);
      const float* K = k + (b * s.Hkv + hk) * s.S * s.E;
      const float* V = v + (b * s.Hkv + hk) * s.S * s.Ev;
      for (int64_t n = total * part / P; n < total * (part + 1) / P; ++n) {
        const bool partial = n < bl.n_partial;
        const int64_t kb = partial ? bl.partial[n] : bl.full[n - bl.n_partial];
        const int64_t k0 = kb * bs, cols = std::min(s.S, k0 + bs) - k0;
        attention_simd::dots_rows(qrows.data(), rows, K + k0 * s.E, cols, s.E, static_cast<float>(s.scale), sc.data());
        for (int64_t r = 0; r < rows; ++r)
          corr[r] = online_softmax_step(sc.data() + r * cols, cols, partial, b, hk * s.group + r / s.L, r % s.L, k0,
                                        score_mod, m.mask_mod, mx[r], l[r]);
        attention_simd::accumulate_rows(acc, corr.data(), sc.data(), rows, V + k0 * s.Ev, cols, s.Ev);
      }
    }
  });
  // Merge the partitions of each (b, KV head).
  for (int64_t bh = 0; bh < s.B * s.Hkv; ++bh) {
    const int64_t b = bh / s.Hkv, hk = bh % s.Hkv;
    for (int64_t r = 0; r < rows; ++r) {
      float M = kNegInf;
      for (int64_t p = 0; p < P; ++p) M = std::max(M, pm[(bh * P + p) * rows + r]);
      const int64_t h = hk * s.group + r / s.L, i = r % s.L;
      float* O = out + ((b * s.Hq + h) * s.L + i) * s.Ev;
      float total = 0;
      std::fill(O, O + s.Ev, 0.0f);
      if (M != kNegInf)
        for (int64_t p = 0; p < P; ++p) {
          const int64_t t = bh * P + p;
          if (pm[t * rows + r] == kNegInf) continue;
          const float w = std::exp(pm[t * rows + r] - M);
          total += pl[t * rows + r] * w;
          for (int64_t e = 0; e < s.Ev; ++e) O[e] += pacc[(t * rows + r) * s.Ev + e] * w;
        }
      for (int64_t e = 0; e < s.Ev; ++e) O[e] = total > 0 ? O[e] / total : 0.0f;
      lse[(b * s.Hq + h) * s.L + i] = total > 0 ? M + std::log(total) : kNegInf;
    }
  }
}

// dq, dk, dv from the saved output and lse (FlashAttention-2's recurrence),
// walking the transposed block lists. One task per (b, KV head) so the query
// heads sharing a KV head (GQA) add into dk/dv without races.
template <class T, class ScoreMod, class MaskMod>
void backward(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv,
              const Shapes& s, const BlockMask<MaskMod>& m, const ScoreMod& score_mod) {
  const int64_t bs = m.block_size, nk = m.num_kv_blocks();
  parallel_for(0, s.B * s.Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> delta(static_cast<size_t>(s.L));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / s.Hkv, hk = task % s.Hkv;
      const T* K = k + (b * s.Hkv + hk) * s.S * s.E;
      const T* V = v + (b * s.Hkv + hk) * s.S * s.Ev;
      T* dK = dk + (b * s.Hkv + hk) * s.S * s.E;
      T* dV = dv + (b * s.Hkv + hk) * s.S * s.Ev;
      for (int64_t h = hk * s.group; h < (hk + 1) * s.group; ++h) {
        const int64_t off = (b * s.Hq + h) * s.L;
        for (int64_t i = 0; i < s.L; ++i) delta[i] = dot(dout + (off + i) * s.Ev, out + (off + i) * s.Ev, s.Ev);
        for (int64_t kb = 0; kb < nk; ++kb) {
          const BlockList bl = block_list(m.q_num_blocks, m.q_indices, m.full_q_num_blocks, m.full_q_indices, m.B, m.H,
                                          b, h, kb);
          for (int64_t n = 0; n < bl.n_partial + bl.n_full; ++n) {
            const bool partial = n < bl.n_partial;
            const int64_t qb = partial ? bl.partial[n] : bl.full[n - bl.n_partial];
            for (int64_t i = qb * bs; i < std::min(s.L, (qb + 1) * bs); ++i) {
              const T li = lse[off + i];
              if (li == -std::numeric_limits<T>::infinity()) continue;
              const T* Q = q + (off + i) * s.E;
              const T* dO = dout + (off + i) * s.Ev;
              T* dQ = dq + (off + i) * s.E;
              for (int64_t j = kb * bs; j < std::min(s.S, (kb + 1) * bs); ++j) {
                if (partial && !m.mask_mod(b, h, i, j)) continue;
                const Dual<T> sd = score_mod(Dual<T>(static_cast<T>(dot(Q, K + j * s.E, s.E) * s.scale), T(1)), b, h, i, j);
                const T p = std::exp(sd.v - li);
                const T* Vj = V + j * s.Ev;
                T dp = 0;
                for (int64_t e = 0; e < s.Ev; ++e) {
                  dV[j * s.Ev + e] += p * dO[e];
                  dp += dO[e] * Vj[e];
                }
                const T ds = p * (dp - delta[i]) * sd.d * static_cast<T>(s.scale);
                const T* Kj = K + j * s.E;
                for (int64_t e = 0; e < s.E; ++e) {
                  dQ[e] += ds * Kj[e];
                  dK[j * s.E + e] += ds * Q[e];
                }
              }
            }
          }
        }
      }
    }
  });
}

template <class T>
Tensor as_compute(const Tensor& t) {
  return t.to(dtype_of<T>::value).contiguous();
}

template <class T, class ScoreMod, class MaskMod>
FlexOutput run(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreMod& score_mod,
               const BlockMask<MaskMod>& m, const FlexOptions& opt) {
  const Shapes s = check_inputs(q, k, v, m, opt);
  Tensor qc, kc, vc;
  {
    NoGradGuard no_grad;
    qc = as_compute<T>(q), kc = as_compute<T>(k), vc = as_compute<T>(v);
  }
  Tensor out = empty({s.B, s.Hq, s.L, s.Ev}, dtype_of<T>::value);
  // The backward pass needs lse at the compute precision; callers get float32.
  Tensor lse = empty({s.B, s.Hq, s.L}, dtype_of<T>::value);
  bool decoded = false;
  if constexpr (std::is_same_v<T, float>) {
    if (decode_eligible(s, m) && opt.kv_partitions != 1) {
      forward_decode(qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(), out.data_ptr<float>(),
                     lse.data_ptr<float>(), s, m, score_mod, decode_partitions(s, m, opt.kv_partitions));
      decoded = true;
    }
  }
  if (!decoded)
    forward<T>(qc.data_ptr<T>(), kc.data_ptr<T>(), vc.data_ptr<T>(), out.data_ptr<T>(), lse.data_ptr<T>(), s, m,
               score_mod);
  Tensor result;
  {
    NoGradGuard no_grad;
    result = out.to(q.dtype());
  }
  // The closure keeps the compute-dtype copies; `saved_out` is an alias
  // without history, so the graph holds no cycle through the result.
  const Tensor saved_out = out.detach();
  const DType dq_t = q.dtype(), dk_t = k.dtype(), dv_t = v.dtype();
  autograd::record_function("flex_attention", {q, k, v}, {result},
                            [=](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
                              NoGradGuard no_grad;
                              const Tensor go = as_compute<T>(grads[0]);
                              Tensor dq = zeros(qc.sizes(), dtype_of<T>::value), dk = zeros(kc.sizes(), dtype_of<T>::value),
                                     dv = zeros(vc.sizes(), dtype_of<T>::value);
                              backward<T>(qc.data_ptr<T>(), kc.data_ptr<T>(), vc.data_ptr<T>(), saved_out.data_ptr<T>(),
                                          lse.data_ptr<T>(), go.data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(),
                                          dv.data_ptr<T>(), s, m, score_mod);
                              return {dq.to(dq_t), dk.to(dk_t), dv.to(dv_t)};
                            });
  Tensor lse_out;
  if (opt.return_lse) {
    NoGradGuard no_grad;
    lse_out = lse.to(kFloat32);
  }
  return {result, lse_out};
}

}  // namespace attention_detail

// q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev). Differentiable in
// q, k and v (not yet in tensors captured by the mods).
template <class ScoreMod, class MaskMod>
FlexOutput flex_attention(const Tensor& q, const Tensor& k, const Tensor& v, ScoreMod score_mod,
                          const BlockMask<MaskMod>& block_mask, FlexOptions options = {}) {
  if (q.dtype() == kFloat64) return attention_detail::run<double>(q, k, v, score_mod, block_mask, options);
  return attention_detail::run<float>(q, k, v, score_mod, block_mask, options);
}

// Without a block mask: every position attends to every position.
template <class ScoreMod = NoScoreMod>
FlexOutput flex_attention(const Tensor& q, const Tensor& k, const Tensor& v, ScoreMod score_mod = {},
                          FlexOptions options = {}) {
  check(q.dim() == 4 && k.dim() == 4, "flex_attention", "expected 4-D q and k but got ", shape_str(q.sizes()), " and ",
        shape_str(k.sizes()));
  const auto m = create_block_mask(NoopMask{}, 1, 1, q.size(2), k.size(2));
  return flex_attention(q, k, v, score_mod, m, options);
}

}  // namespace kiln
