// Templates behind kiln/attention.h: create_block_mask, the dual number used
// to differentiate score_mods, and the tiled forward and backward kernels.
// Included by attention.h; not meant to be included directly.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kiln/dispatch.h"

#include "kiln/aligned_buffer.h"
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
  // The lists depend on no tensor of the program (a mask_mod reading one
  // took its data pointer already), so they are built as real tensors even
  // while kiln::compile traces: no graph break.
  ModesOffGuard concrete;
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
  // The bits of each row's partial blocks, gathered per row, then packed
  // into m.partial_bits (BlockMaskData) unless they would be too large.
  const int64_t words = m.bit_words(), block_words = block_size * words;
  std::vector<std::vector<uint64_t>> row_bits(static_cast<size_t>(B * H * nq));
  parallel_for(0, B * H * nq, 1, [&](int64_t lo, int64_t hi) {
    std::vector<uint64_t> bits(static_cast<size_t>(block_words));
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t b = row / (H * nq), h = (row / nq) % H, qb = row % nq;
      for (int64_t kb = 0; kb < nk; ++kb) {
        int64_t on = 0, total = 0;
        std::fill(bits.begin(), bits.end(), uint64_t{0});
        for (int64_t q = qb * block_size; q < std::min(q_len, (qb + 1) * block_size); ++q)
          for (int64_t kv = kb * block_size; kv < std::min(kv_len, (kb + 1) * block_size); ++kv) {
            const int64_t j = kv - kb * block_size;
            if (mask_mod(b, h, q, kv)) {
              ++on;
              bits[static_cast<size_t>((q - qb * block_size) * words + j / 64)] |= uint64_t{1} << (j % 64);
            }
            ++total;
          }
        if (on == 0) continue;
        if (on == total) {
          fi[row * std::max<int64_t>(nk, 1) + fn[row]++] = static_cast<int32_t>(kb);
        } else {
          pi[row * std::max<int64_t>(nk, 1) + pn[row]++] = static_cast<int32_t>(kb);
          row_bits[static_cast<size_t>(row)].insert(row_bits[static_cast<size_t>(row)].end(), bits.begin(), bits.end());
        }
      }
    }
  });
  const int64_t most = B * H * nq == 0 ? 0 : *std::max_element(pn, pn + B * H * nq);
  if (most > 0 && B * H * nq * most * block_words * 8 <= BlockMaskData::kMaxPartialBitsBytes) {
    m.partial_bits = zeros({B, H, nq, most, block_size, words}, kInt64);
    auto* dst = reinterpret_cast<uint64_t*>(m.partial_bits.template data_ptr<int64_t>());
    for (int64_t row = 0; row < B * H * nq; ++row)
      std::copy(row_bits[static_cast<size_t>(row)].begin(), row_bits[static_cast<size_t>(row)].end(),
                dst + row * most * block_words);
  }
  m.build_transposed();
  return m;
}

namespace attention_detail {

// Forward-mode dual number: value and derivative with respect to the score.
template <class T>
struct Dual {
  T v, d;
  Dual(T value = 0, T deriv = 0) : v(value), d(deriv) {}  // NOLINT: built from plain numbers in score_mods
  // A captured tensor's element: a constant, but for the read the thread's
  // tape differentiates (Note [Tensors a score_mod captures]).
  Dual(const CapturedValue& c) : v(static_cast<T>(c.value)), d(static_cast<T>(read_derivative(c))) {}  // NOLINT
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

// A score_mod that reads CapturedTensors, with the ones the probe found
// (Note [Tensors a score_mod captures]): learned() names them and
// backward_learned_at adds their gradients at one score. `missed` is set
// when the backward pass reads a tensor requiring grad that is not among
// them, or a read of one that never met the score.
template <class ScoreMod>
struct CapturedScoreMod {
  ScoreMod mod;
  std::vector<Tensor> tensors;
  std::shared_ptr<std::atomic<bool>> missed = std::make_shared<std::atomic<bool>>(false);
  template <class S>
  S operator()(S s, int64_t b, int64_t h, int64_t q, int64_t kv) const {
    return mod(s, b, h, q, kv);
  }
  std::vector<Tensor> learned() const { return tensors; }
  template <class T>
  void backward_learned_at(double g, T score, int64_t b, int64_t h, int64_t q, int64_t kv,
                           double* const* grads) const {
    thread_local CaptureTape tape;
    TapeScope scope(&tape);
    tape.start(-1);
    (void)mod(Dual<T>(score, T(0)), b, h, q, kv);
    const std::vector<CapturedValue> reads = tape.reads;
    const std::vector<char> met = tape.met;
    for (size_t k = 0; k < reads.size(); ++k) {
      size_t t = 0;
      while (t < tensors.size() && tensors[t].impl() != reads[k].source->impl()) ++t;
      if (t == tensors.size() || !met[k]) {
        if (reads[k].source->requires_grad()) missed->store(true);
        continue;
      }
      tape.start(static_cast<int>(k));
      grads[t][reads[k].index] += g * static_cast<double>(mod(Dual<T>(score, T(0)), b, h, q, kv).d);
    }
  }
};
template <class M>
concept LearnsAtScore = requires(const M& m, double g, int64_t i, double* const* grads) {
  { m.learned() } -> std::convertible_to<std::vector<Tensor>>;
  m.backward_learned_at(g, 0.0f, i, i, i, i, grads);
};
template <class M>
concept LearnsTensors = HasLearnedTensors<M> || LearnsAtScore<M>;

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

// Element strides of a (B, H, rows, dim) operand whose last dim is
// contiguous: the tiled kernels read rows of q, k, v, out and grad_out in
// place, so the heads of a fused projection need no copy.
struct RowStrides {
  int64_t b = 0, h = 0, l = 0;
  template <class T>
  T* row(T* base, int64_t bi, int64_t hi, int64_t i) const {
    return base + bi * b + hi * h + i * l;
  }
};
RowStrides row_strides(const Tensor& t);  // t 4-D with stride(3) == 1

struct Shapes {
  int64_t B, Hq, Hkv, L, S, E, Ev, group;
  double scale;
  int64_t Bkv;  // B, or 1 when k and v broadcast over the batch (a shared or paged cache)
  // Contiguous unless a caller sets them (forward / backward only; flash
  // decoding and the paged kernels read contiguous tensors; both write
  // out through o_st).
  RowStrides q_st, k_st, v_st, o_st, do_st;  // o / do: out and the backward's grad_out
  RowStrides dq_st, dk_st, dv_st;             // where the backward writes (dk / dv: per q batch)
  int64_t kv_batch(int64_t b) const { return Bkv == 1 ? 0 : b; }
};

Shapes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m, const FlexOptions& o);

// One query row meets one KV block: score_mod on every raw score of `row`
// (skipped for NoScoreMod), mask_mod on a partial block (-inf where masked).
// `bits`: the row's mask bits in this block (BlockMaskData::partial_bits),
// used instead of mask_mod when given.
template <class T, class ScoreMod, class MaskMod>
void apply_mods(T* row, int64_t cols, bool partial, int64_t b, int64_t h, int64_t i, int64_t k0,
                const ScoreMod& score_mod, const MaskMod& mask_mod, const uint64_t* bits = nullptr) {
  if constexpr (!std::is_same_v<ScoreMod, NoScoreMod>)
    for (int64_t j = 0; j < cols; ++j) row[j] = score_mod(row[j], b, h, i, k0 + j);
  if (!partial) return;
  if (bits) {
    if constexpr (std::is_same_v<T, float>) {
      attention_simd::mask_row(row, cols, bits);
    } else {
      for (int64_t j = 0; j < cols; ++j)
        if (!((bits[j / 64] >> (j % 64)) & 1)) row[j] = -std::numeric_limits<T>::infinity();
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j)
    if (!mask_mod(b, h, i, k0 + j)) row[j] = -std::numeric_limits<T>::infinity();
}

// The elementwise steps of the kernels: SIMD for float32 (attention_simd.h
// says what each does), the same in plain loops for float64 (tests).
template <class T>
void online_softmax(T* s, int64_t rows, int64_t cols, int64_t ld, T* mx, T* l, T* corr) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::online_softmax(s, rows, cols, ld, mx, l, corr);
  } else {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * ld;
      const T bmax = cols ? *std::max_element(row, row + cols) : kNegInf;
      if (bmax == kNegInf) {
        std::fill(row, row + cols, T(0));
        corr[r] = T(1);
        continue;
      }
      const T nmax = std::max(mx[r], bmax);
      corr[r] = mx[r] == kNegInf ? T(0) : std::exp(mx[r] - nmax);
      T sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += (row[j] = std::exp(row[j] - nmax));
      l[r] = l[r] * corr[r] + sum;
      mx[r] = nmax;
    }
  }
}

template <class T>
void scale_rows(T* a, int64_t rows, int64_t n, int64_t lda, const T* f) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::scale_rows(a, rows, n, lda, f);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < n; ++e) a[r * lda + e] *= f[r];
  }
}

template <class T>
void softmax_grad(T* p, T* dp, const T* deriv, int64_t rows, int64_t cols, int64_t ld, const T* lse, const T* delta,
                  T scale) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::softmax_grad(p, dp, deriv, rows, cols, ld, lse, delta, scale);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        T& pv = p[r * ld + j];
        T& g = dp[r * ld + j];
        if (lse[r] == -std::numeric_limits<T>::infinity()) {
          pv = g = 0;
          continue;
        }
        pv = std::exp(pv - lse[r]);
        g = pv * (g - delta[r]) * scale * (deriv ? deriv[r * ld + j] : T(1));
      }
  }
}

// C (M x N) = alpha * A @ B (+ C): the SIMD micro-kernel for float32, plain
// loops for float64 (tests). Strides as in attention_simd::gemm.
template <class T>
void gemm(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb,
          T* C, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    attention_simd::gemm(M, N, K, alpha, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
  } else {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        T t = 0;
        for (int64_t k = 0; k < K; ++k) t += A[i * a_rs + k * a_cs] * B[k * ldb + j];
        C[i * ldc + j] = accumulate ? C[i * ldc + j] + alpha * t : alpha * t;
      }
  }
}

// Copies rows x cols of `src` (row stride ld) to dst transposed (cols x ld_dst).
template <class T>
void transpose_block(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst, int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld + c];
}

// Calls f(a, e, written) for the runs [a, e) of [lo, hi) whose kFlexTile
// tiles share one `written` flag (flags: one per tile), then flags them all:
// the kernels' products overwrite what no earlier product wrote.
template <class F>
void for_written_runs(char* flags, int64_t lo, int64_t hi, F f) {
  for (int64_t a = lo; a < hi;) {
    const char written = flags[a / kFlexTile];
    int64_t e = std::min(hi, (a / kFlexTile + 1) * kFlexTile);
    while (e < hi && flags[e / kFlexTile] == written) e = std::min(hi, e + kFlexTile);
    f(a, e, written != 0);
    a = e;
  }
  for (int64_t t = lo / kFlexTile; t * kFlexTile < hi; ++t) flags[t] = 1;
}

// Out (B, Hq, L, Ev) and lse (B, Hq, L); q, k, v rows read in place. One
// task per (b, h, query block), KV blocks in the inner loop; per-row
// online-softmax state (max, sum, acc).
// Each block of K is transposed (the layout gemm's B operand needs) once per
// thread and KV head, not once per task: a thread's tasks are consecutive,
// so the next query blocks and the other query heads of a GQA group reuse
// it. Up to kKeptKeysBytes per thread; a longer K is transposed per block.
constexpr int64_t kKeptKeysBytes = int64_t{4} << 20;
template <class T, class ScoreMod, class MaskMod>
void forward(const T* q, const T* k, const T* v, T* out, T* lse, const Shapes& s, const BlockMask<MaskMod>& m,
             const ScoreMod& score_mod) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t bs = m.block_size, nq = m.num_q_blocks(), nk = m.num_kv_blocks();
  const bool keep = nk * bs * s.E * static_cast<int64_t>(sizeof(T)) <= kKeptKeysBytes;
  parallel_for(0, s.B * s.Hq * nq, 1, [&](int64_t lo, int64_t hi) {
    // sc and kt are written before they are read: left uninitialised (kt may be megabytes).
    const auto sc = uninitialized_aligned<T>(static_cast<size_t>(bs * bs));
    const auto kt = uninitialized_aligned<T>(static_cast<size_t>((keep ? nk : 1) * bs * s.E));
    std::vector<int64_t> kt_head(static_cast<size_t>(keep ? nk : 1), -1);  // whose block each slot holds
    aligned_vector<T> mx(static_cast<size_t>(bs)), l(static_cast<size_t>(bs)), corr(static_cast<size_t>(bs)),
        acc(static_cast<size_t>(bs * s.Ev)), qrows(static_cast<size_t>(4 * s.E));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.Hq * nq), h = (task / nq) % s.Hq, qb = task % nq, hk = h / s.group;
      const int64_t head = s.kv_batch(b) * s.Hkv + hk;
      const BlockList bl = block_list(m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices, m.B,
                                      m.H, b, h, qb);
      const T* K = s.k_st.row(k, s.kv_batch(b), hk, 0);
      const T* V = s.v_st.row(v, s.kv_batch(b), hk, 0);
      const int64_t i0 = qb * bs, rows = std::min(s.L, i0 + bs) - i0;
      std::fill(mx.begin(), mx.end(), kNegInf);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      // A few query rows (decoding where flash decoding does not apply, or
      // the last rows of a sequence): dot products against the K rows in
      // place, as flash decoding does, instead of transposing whole blocks
      // of K for so little work.
      const T* Q = s.q_st.row(q, b, h, i0);
      bool by_dots = false;
      if constexpr (std::is_same_v<T, float>) by_dots = rows <= 4 && s.k_st.l == s.E;
      if (by_dots && s.q_st.l != s.E) {
        for (int64_t r = 0; r < rows; ++r) std::copy(Q + r * s.q_st.l, Q + r * s.q_st.l + s.E, qrows.begin() + r * s.E);
        Q = qrows.data();
      }
      for (int64_t n = 0; n < bl.n_partial + bl.n_full; ++n) {
        const bool partial = n < bl.n_partial;
        const int64_t kb = partial ? bl.partial[n] : bl.full[n - bl.n_partial];
        const int64_t k0 = kb * bs, cols = std::min(s.S, k0 + bs) - k0, slot = keep ? kb : 0;
        T* ktb = kt.get() + slot * bs * s.E;
        if (!by_dots && (!keep || kt_head[slot] != head)) {
          transpose_block(K + k0 * s.k_st.l, cols, s.E, s.k_st.l, ktb, bs);
          kt_head[slot] = head;
        }
        // Per group of rows (Note [Tiles of a partial block]): S = Q K^T on
        // the group's keys [lo, hi), the mods and the online-softmax step
        // per row, then acc = corr * acc + P V.
        const uint64_t* bits = partial ? m.partial_bits_block(b, h, qb, n) : nullptr;
        const int64_t words = m.bit_words();
        for_row_groups(bits, words, rows, cols, [&](int64_t r0, int64_t gr, int64_t j0, int64_t w) {
          const int64_t ld = by_dots ? w : bs;  // row stride of the scores
          T* sg = sc.get() + r0 * ld;
          if constexpr (std::is_same_v<T, float>)
            if (by_dots) attention_simd::dots_rows(Q, rows, K + (k0 + j0) * s.E, w, s.E, static_cast<float>(s.scale), sg);
          if (!by_dots)
            gemm<T>(gr, w, s.E, static_cast<T>(s.scale), Q + r0 * s.q_st.l, s.q_st.l, 1, ktb + j0, bs, sg, bs, false);
          for (int64_t r = 0; r < gr; ++r)
            apply_mods(sg + r * ld, w, partial, b, h, i0 + r0 + r, k0 + j0, score_mod, m.mask_mod,
                       bits ? bits + (r0 + r) * words + j0 / 64 : nullptr);
          online_softmax<T>(sg, gr, w, ld, mx.data() + r0, l.data() + r0, corr.data() + r0);
          scale_rows<T>(acc.data() + r0 * s.Ev, gr, s.Ev, s.Ev, corr.data() + r0);
          gemm<T>(gr, s.Ev, w, T(1), sg, ld, 1, V + (k0 + j0) * s.v_st.l, s.v_st.l, acc.data() + r0 * s.Ev, s.Ev, true);
        });
      }
      // out = acc / l; a fully masked row gets output 0 and lse -inf, as in PyTorch.
      T* O = s.o_st.row(out, b, h, i0);
      for (int64_t r = 0; r < rows; ++r) {
        lse[(b * s.Hq + h) * s.L + i0 + r] = l[r] > 0 ? mx[r] + std::log(l[r]) : kNegInf;
        corr[r] = l[r] > 0 ? T(1) / l[r] : T(0);
        std::copy(acc.begin() + r * s.Ev, acc.begin() + (r + 1) * s.Ev, O + r * s.o_st.l);
      }
      scale_rows<T>(O, rows, s.Ev, s.o_st.l, corr.data());
    }
  });
}

// Note [Flash decoding]
// With few query rows (decoding) and a mask shared by all heads, one task
// per (b, KV head, KV partition) handles the whole GQA group of query heads:
// each key and value row is read once per partition instead of once per
// query head, with no block transpose. Partitions keep the cores busy when
// B * Hkv is small; their partial (max, sum, acc) are merged exactly through
// the log-sum-exp. Automatic choice: used for L <= kMaxDecodeQueries (and
// L <= block_size: one query block), with enough partitions for four tasks
// per thread, but at least four KV blocks per partition; a requested
// kv_partitions > 1 uses it up to L = block_size. Its products are dot
// products, rows x S x E without GEMM tiles, so longer queries run faster
// tiled (B=1, Hq=8, Hkv 8 or 2, S=4096, E=64, two threads, decode / tiled
// ms: L=32 1.50 / 1.93 and 1.41 / 1.80; L=64 2.87 / 2.57 and 2.79 / 2.79;
// a GPT training batch, L=S=128 in one block of 128, 1.40 / 0.48).
constexpr int64_t kMaxDecodeQueries = 32;
template <class MaskMod>
bool decode_eligible(const Shapes& s, const BlockMask<MaskMod>& m, int64_t requested) {
  return s.L <= m.block_size && m.H == 1 && requested != 1 && (s.L <= kMaxDecodeQueries || requested > 1);
}

template <class MaskMod>
int64_t decode_partitions(const Shapes& s, const BlockMask<MaskMod>& m, int64_t requested) {
  if (requested > 0) return requested;
  const int64_t blocks = m.kv_num_blocks.template data_ptr<int32_t>()[0] + m.full_kv_num_blocks.template data_ptr<int32_t>()[0];
  const int64_t want = (4 * get_num_threads() + s.B * s.Hkv - 1) / (s.B * s.Hkv);
  return std::max<int64_t>(1, std::min(want, blocks / 4));
}

// KV: float, or BFloat16 read as stored (widened in registers).
template <class KV, class ScoreMod, class MaskMod>
void forward_decode(const float* q, const KV* k, const KV* v, float* out, float* lse, const Shapes& s,
                    const BlockMask<MaskMod>& m, const ScoreMod& score_mod, int64_t P) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t bs = m.block_size, rows = s.group * s.L;  // row r: query head hk*group + r/L, position r%L
  const int64_t tasks = s.B * s.Hkv * P;
  // Blocks per run: the run's scores stay within 32 KiB (of a 48 KiB L1).
  const int64_t max_run = std::max<int64_t>(1, 8192 / (rows * bs));
  aligned_vector<float> pm(static_cast<size_t>(tasks * rows)), pl(static_cast<size_t>(tasks * rows)),
      pacc(static_cast<size_t>(tasks * rows * s.Ev));
  parallel_for(0, tasks, 1, [&](int64_t lo, int64_t hi) {
    aligned_vector<float> qrows(static_cast<size_t>(rows * s.E)),
        sc(static_cast<size_t>(rows * bs * max_run)), corr(static_cast<size_t>(rows));
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
      const KV* K = k + (s.kv_batch(b) * s.Hkv + hk) * s.S * s.E;
      const KV* V = v + (s.kv_batch(b) * s.Hkv + hk) * s.S * s.Ev;
      auto block_at = [&](int64_t n) { return n < bl.n_partial ? bl.partial[n] : bl.full[n - bl.n_partial]; };
      const int64_t end = total * (part + 1) / P;
      // Runs of consecutive KV blocks are one chunk: all dots, one softmax
      // update, then P V, so K and V are read in long sequential stretches
      // (B=1, Hq=32, Hkv=8, S=32768, two threads, alternating runs: float32
      // 45-51 -> 58-65 GB/s, bfloat16 40-47 -> 56-63 with runs of 8 blocks,
      // 16 about the same, 32 slower). Since bfloat16 P V prefetches in
      // address order, 16 blocks beat 8 (ratio to copy 0.722 against 0.699,
      // 8 alternating runs, 7 ahead; float32 0.779 against 0.768), 32 no
      // better (0.720).
      for (int64_t n = total * part / P, run; n < end; n += run) {
        const int64_t k0 = block_at(n) * bs;
        run = 1;
        while (run < max_run && n + run < end && block_at(n + run) == block_at(n) + run) ++run;
        const int64_t cols = std::min(s.S, k0 + run * bs) - k0;
        // K and V are read as one stream: this chunk's values come in
        // during its dots, the next chunk's keys during P V.
        const attention_simd::Prefetch values{V + k0 * s.Ev, cols, static_cast<int64_t>(s.Ev * sizeof(KV))};
        attention_simd::Prefetch next_keys;
        if (n + run < end) {
          const int64_t nk0 = block_at(n + run) * bs;
          next_keys = {K + nk0 * s.E, std::min(s.S, nk0 + bs) - nk0, static_cast<int64_t>(s.E * sizeof(KV))};
        }
        attention_simd::dots_rows(qrows.data(), rows, K + k0 * s.E, cols, s.E, static_cast<float>(s.scale), sc.data(),
                                  values);
        for (int64_t j = 0; j < run; ++j) {
          const int64_t c0 = j * bs, bcols = std::min(cols - c0, bs);
          const bool partial = n + j < bl.n_partial;
          const uint64_t* bits = partial ? m.partial_bits_block(b, 0, 0, n + j) : nullptr;  // H == 1, one query block
          for (int64_t r = 0; r < rows; ++r)
            apply_mods(sc.data() + r * cols + c0, bcols, partial, b, hk * s.group + r / s.L, r % s.L, k0 + c0,
                       score_mod, m.mask_mod, bits ? bits + (r % s.L) * m.bit_words() : nullptr);
        }
        if constexpr (std::is_same_v<KV, BFloat16>) {
          attention_simd::softmax_accumulate_rows(acc, sc.data(), rows, cols, mx, l, corr.data(), V + k0 * s.Ev, s.Ev,
                                                  next_keys);
        } else {
          online_softmax<float>(sc.data(), rows, cols, cols, mx, l, corr.data());
          attention_simd::accumulate_rows(acc, corr.data(), sc.data(), rows, V + k0 * s.Ev, cols, s.Ev, next_keys);
        }
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
      float* O = s.o_st.row(out, b, h, i);
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
// tiled like the forward: for each KV block (transposed once) and each query
// block the transposed block list gives, five small GEMMs (scores S = Q K^T,
// dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS K) around an
// elementwise pass that applies the mods, P = exp(S - lse) and
// dS = P (dP - delta) score_mod'(S) scale. One task per (b, KV head), so the
// query heads sharing a KV head (GQA) add into dk/dv without races. The
// first product into a tile of dq, dk or dv overwrites it and rows no
// block reaches are zeroed here, so callers need not zero-fill the outputs
// (3 MiB per GPT layer and step).
// `learned`, when given, holds one zeroed float64 buffer per tensor the
// score mod names in learned(): each thread adds into its own copies, merged
// at its end (tasks of different batches touch the same entries).
template <class T, class ScoreMod, class MaskMod>
void backward(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv,
              const Shapes& s, const BlockMask<MaskMod>& m, const ScoreMod& score_mod,
              std::vector<std::vector<double>>* learned = nullptr) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t bs = m.block_size, nk = m.num_kv_blocks(), nq = m.num_q_blocks();
  std::mutex merge;
  auto zero_rows = [](T* p, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r) std::fill(p + r * ld, p + r * ld + cols, T(0));
  };
  parallel_for(0, s.B * s.Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<std::vector<double>> local;
    std::vector<double*> local_ptrs;
    if (learned) {
      for (const auto& buf : *learned) local.emplace_back(buf.size(), 0.0);
      for (auto& buf : local) local_ptrs.push_back(buf.data());
    }
    aligned_vector<T> delta(static_cast<size_t>(s.group * s.L)), kt(static_cast<size_t>(s.E * bs)),
        vt(static_cast<size_t>(s.Ev * bs));
    // Scores, their gradients and d score_mod: written before they are read.
    const auto p = uninitialized_aligned<T>(static_cast<size_t>(bs * bs)),
               dp = uninitialized_aligned<T>(static_cast<size_t>(bs * bs)),
               deriv = uninitialized_aligned<T>(static_cast<size_t>(bs * bs));
    // The scores before the mod, for a mod whose learned gradients need them.
    std::vector<T> raw(LearnsAtScore<ScoreMod> ? static_cast<size_t>(bs * bs) : 0);
    // Which kFlexTile-row tiles have been written: of dq per (query head of
    // the group, query block), of dk and dv in the current KV block.
    const int64_t row_tiles = (bs + kFlexTile - 1) / kFlexTile;
    std::vector<char> dq_written(static_cast<size_t>(s.group * nq * row_tiles)), kv_written(static_cast<size_t>(row_tiles));
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / s.Hkv, hk = task % s.Hkv;
      std::fill(dq_written.begin(), dq_written.end(), 0);
      const T* K = s.k_st.row(k, s.kv_batch(b), hk, 0);
      const T* V = s.v_st.row(v, s.kv_batch(b), hk, 0);
      // dk, dv have q's batch size; run() sums them over a broadcast batch.
      T* dK = s.dk_st.row(dk, b, hk, 0);
      T* dV = s.dv_st.row(dv, b, hk, 0);
      // delta_i = dO_i . O_i, for every query row of the group.
      for (int64_t g = 0; g < s.group; ++g) {
        const int64_t h = hk * s.group + g;
        for (int64_t i = 0; i < s.L; ++i)
          delta[g * s.L + i] = dot(s.do_st.row(dout, b, h, i), s.o_st.row(out, b, h, i), s.Ev);
      }
      for (int64_t kb = 0; kb < nk; ++kb) {
        const int64_t k0 = kb * bs, cols = std::min(s.S, k0 + bs) - k0;
        transpose_block(K + k0 * s.k_st.l, cols, s.E, s.k_st.l, kt.data(), bs);
        transpose_block(V + k0 * s.v_st.l, cols, s.Ev, s.v_st.l, vt.data(), bs);
        std::fill(kv_written.begin(), kv_written.end(), 0);
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t h = hk * s.group + g, off = (b * s.Hq + h) * s.L;
          const BlockList bl = block_list(m.q_num_blocks, m.q_indices, m.full_q_num_blocks, m.full_q_indices, m.B, m.H,
                                          b, h, kb);
          for (int64_t n = 0; n < bl.n_partial + bl.n_full; ++n) {
            const bool partial = n < bl.n_partial;
            const int64_t qb = partial ? bl.partial[n] : bl.full[n - bl.n_partial];
            const int64_t i0 = qb * bs, rows = std::min(s.L, i0 + bs) - i0;
            const uint64_t* bits = partial ? m.partial_bits_of(b, h, qb, kb) : nullptr;
            const int64_t words = m.bit_words();
            // Per group of rows, on the group's keys [lo, hi) (Note [Tiles of
            // a partial block]); p, dp and deriv hold them from column 0.
            for_row_groups(bits, words, rows, cols, [&](int64_t r0, int64_t gr, int64_t j0, int64_t w) {
              const T* Q = s.q_st.row(q, b, h, i0 + r0);
              const T* dO = s.do_st.row(dout, b, h, i0 + r0);
              T* pg = p.get() + r0 * bs;
              T* dpg = dp.get() + r0 * bs;
              gemm<T>(gr, w, s.E, static_cast<T>(s.scale), Q, s.q_st.l, 1, kt.data() + j0, bs, pg, bs, false);
              gemm<T>(gr, w, s.Ev, T(1), dO, s.do_st.l, 1, vt.data() + j0, bs, dpg, bs, false);
              // The mods (and d score_mod / d score through the dual number),
              // then P and dS in one pass over the group.
              constexpr bool kPlain = std::is_same_v<ScoreMod, NoScoreMod>;
              for (int64_t r = 0; r < gr; ++r) {
                const int64_t i = i0 + r0 + r;
                T* pr = pg + r * bs;
                T* dr = deriv.get() + (r0 + r) * bs;
                if constexpr (!kPlain)
                  for (int64_t j = 0; j < w; ++j) {
                    if constexpr (LearnsAtScore<ScoreMod>) raw[static_cast<size_t>((r0 + r) * bs + j)] = pr[j];
                    const Dual<T> sd = score_mod(Dual<T>(pr[j], T(1)), b, h, i, k0 + j0 + j);
                    pr[j] = sd.v, dr[j] = sd.d;
                  }
                apply_mods(pr, w, partial, b, h, i, k0 + j0, NoScoreMod{}, m.mask_mod,
                           bits ? bits + (r0 + r) * words + j0 / 64 : nullptr);
                // P is 0 where masked; a 0 derivative there keeps a score_mod's
                // inf or NaN derivative out of dS.
                if constexpr (!kPlain)
                  if (partial)
                    for (int64_t j = 0; j < w; ++j)
                      if (pr[j] == kNegInf) dr[j] = 0;
              }
              const T* lse_rows = lse + off + i0 + r0;
              const T* delta_rows = delta.data() + g * s.L + i0 + r0;
              const T* d_mod = kPlain ? nullptr : deriv.get() + r0 * bs;
              bool learned_grads = false;
              if constexpr (LearnsTensors<ScoreMod>) learned_grads = learned != nullptr;
              if (!learned_grads) {
                softmax_grad<T>(pg, dpg, d_mod, gr, w, bs, lse_rows, delta_rows, static_cast<T>(s.scale));
              } else if constexpr (LearnsTensors<ScoreMod>) {
                // dp = dLoss / d(score_mod's output) first: the learned
                // tensors' gradients need it before the chain rule to the score.
                softmax_grad<T>(pg, dpg, nullptr, gr, w, bs, lse_rows, delta_rows, T(1));
                for (int64_t r = 0; r < gr; ++r)
                  for (int64_t j = 0; j < w; ++j) {
                    T& g_ = dpg[r * bs + j];
                    if (g_ == T(0)) {
                    } else if constexpr (LearnsAtScore<ScoreMod>) {
                      score_mod.backward_learned_at(static_cast<double>(g_), raw[static_cast<size_t>((r0 + r) * bs + j)],
                                                    b, h, i0 + r0 + r, k0 + j0 + j, local_ptrs.data());
                    } else {
                      score_mod.backward_learned(static_cast<double>(g_), b, h, i0 + r0 + r, k0 + j0 + j,
                                                 local_ptrs.data());
                    }
                    g_ *= d_mod[r * bs + j] * static_cast<T>(s.scale);
                  }
              }
              // dV, dK rows [lo, hi) of the block and dQ rows of the group:
              // the first product into a tile overwrites it.
              for_written_runs(kv_written.data(), j0, j0 + w, [&](int64_t a, int64_t e, bool written) {
                gemm<T>(e - a, s.Ev, gr, T(1), pg + (a - j0), 1, bs, dO, s.do_st.l, dV + (k0 + a) * s.dv_st.l,
                        s.dv_st.l, written);
                gemm<T>(e - a, s.E, gr, T(1), dpg + (a - j0), 1, bs, Q, s.q_st.l, dK + (k0 + a) * s.dk_st.l,
                        s.dk_st.l, written);
              });
              char* q_done = dq_written.data() + (g * nq + qb) * row_tiles;
              for_written_runs(q_done, r0, r0 + gr, [&](int64_t a, int64_t e, bool written) {
                gemm<T>(e - a, s.E, w, T(1), dpg + (a - r0) * bs, bs, 1, K + (k0 + j0) * s.k_st.l, s.k_st.l,
                        s.dq_st.row(dq, b, h, i0 + a), s.dq_st.l, written);
              });
            });
          }
        }
        for (int64_t t = 0; t * kFlexTile < cols; ++t)
          if (!kv_written[static_cast<size_t>(t)]) {
            const int64_t a = t * kFlexTile, n = std::min(kFlexTile, cols - a);
            zero_rows(dK + (k0 + a) * s.dk_st.l, n, s.E, s.dk_st.l);
            zero_rows(dV + (k0 + a) * s.dv_st.l, n, s.Ev, s.dv_st.l);
          }
      }
      for (int64_t g = 0; g < s.group; ++g)
        for (int64_t qb = 0; qb < nq; ++qb)
          for (int64_t t = 0; t < row_tiles; ++t)
            if (!dq_written[static_cast<size_t>((g * nq + qb) * row_tiles + t)]) {
              const int64_t i = qb * bs + t * kFlexTile;
              if (i < s.L)
                zero_rows(s.dq_st.row(dq, b, hk * s.group + g, i), std::min(kFlexTile, s.L - i), s.E, s.dq_st.l);
            }
    }
    if (learned) {
      std::lock_guard<std::mutex> lock(merge);
      for (size_t t = 0; t < local.size(); ++t)
        for (size_t e = 0; e < local[t].size(); ++e) (*learned)[t][e] += local[t][e];
    }
  });
}

template <class T>
Tensor as_compute(const Tensor& t) {
  return t.to(dtype_of<T>::value).contiguous();
}

// Note [flex_attention's output layout]
// As in PyTorch, the output follows q's layout: for q a (B, H, L, E) view
// of (B, L, H, E) memory (the heads of a fused QKV projection) the op's
// output is (B, L, H, Ev), handed out as its (B, H, L, Ev) transpose, so
// that `out.transpose(1, 2).reshape({B, L, H * Ev})` is a view, not a copy.
// The backward formula reads out and its gradient through the same
// transpose. With L == 1 or H == 1 both layouts are the same memory.
inline bool rows_hold_heads(const Tensor& q) { return q.stride(2) > q.stride(1); }

// An empty (B, H, L, Ev) output in q's layout; sets s.o_st to match.
inline Tensor empty_output(const Tensor& q, Shapes& s, DType dt) {
  const Tensor out = rows_hold_heads(q) ? empty({s.B, s.L, s.Hq, s.Ev}, dt).transpose(1, 2) : empty({s.B, s.Hq, s.L, s.Ev}, dt);
  s.o_st = row_strides(out);
  return out;
}

// Decoding over a bfloat16 K/V cache, without gradients: the cache is read
// as stored instead of converted to float32 first (half the bytes).
template <class ScoreMod, class MaskMod>
FlexOutput decode_bf16(const Tensor& q, const Tensor& k, const Tensor& v, Shapes s, const BlockMask<MaskMod>& m,
                       const ScoreMod& score_mod, const FlexOptions& opt) {
  NoGradGuard no_grad;
  const Tensor qc = as_compute<float>(q), kc = k.contiguous(), vc = v.contiguous();
  Tensor out = empty_output(q, s, kFloat32), lse = empty({s.B, s.Hq, s.L}, kFloat32);
  forward_decode(qc.data_ptr<float>(), kc.data_ptr<BFloat16>(), vc.data_ptr<BFloat16>(), out.data_ptr<float>(),
                 lse.data_ptr<float>(), s, m, score_mod, decode_partitions(s, m, opt.kv_partitions));
  return {out.to(q.dtype()), opt.return_lse ? lse : Tensor{}};
}

// Note [flex_attention as an op]
// With stateless mods (empty types: NoScoreMod, CausalMask, capture-less
// lambdas; nothing learned) and q, k, v at the compute dtype, flex_attention
// is the dispatcher op "flex_attention" (out, lse), whose backward formula
// calls "flex_attention_backward". So kiln::compile records it as one graph
// node (no graph break), its compiled backward calls the backward kernel,
// and eager autograd goes through the same formula. The mods are template
// parameters: each pair registers its two kernels once per process and the
// op names them by number (attr "kernel"); the block mask travels as the
// op's int32 inputs and its sizes as attrs (src/attention/flex_op.cpp).
using FlexOpKernel = void (*)(const OpCall&);
int64_t register_flex_kernels(FlexOpKernel forward, FlexOpKernel backward);
// {out, lse}, both at q's dtype, through the dispatcher.
std::vector<Tensor> call_flex_op(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m,
                                 int64_t kernel, const FlexOptions& opt);
// The block mask (op inputs from `first` on, sizes from attrs) and options of an op call.
void mask_from_op(const OpCall& c, size_t first, BlockMaskData& m);
FlexOptions options_from_op(const Attrs& a);

template <class ScoreMod, class MaskMod>
constexpr bool kStatelessMods = std::is_empty_v<ScoreMod> && std::is_empty_v<MaskMod> &&
                                std::is_default_constructible_v<ScoreMod> &&
                                std::is_default_constructible_v<MaskMod> && !LearnsTensors<ScoreMod>;

// An operand the tiled kernels can read in place (rows with a contiguous
// last dim, as the heads of a fused QKV projection are), else a copy.
inline Tensor rows_in_place(const Tensor& t) { return t.dim() == 4 && t.stride(3) == 1 ? t : t.contiguous(); }

// inputs q, k, v, block mask; outputs out (Note [flex_attention's output layout]), lse.
template <class T, class ScoreMod, class MaskMod>
void op_forward_typed(const OpCall& c) {
  BlockMask<MaskMod> m{MaskMod{}};
  mask_from_op(c, 3, m);
  const FlexOptions opt = options_from_op(c.attrs);
  const Tensor out_bhle = rows_hold_heads(c.inputs[0]) ? c.outputs[0].transpose(1, 2) : c.outputs[0];
  T* out = c.outputs[0].data_ptr<T>();
  T* lse = c.outputs[1].data_ptr<T>();
  Shapes s = check_inputs(c.inputs[0], c.inputs[1], c.inputs[2], m, opt);  // sizes only
  if (c.outputs[0].numel() == 0) return;  // an empty batch, head or query set: nothing to do
  if (s.S == 0) {  // no keys: every row attends to nothing, as a fully masked row
    c.outputs[0].zero_();
    c.outputs[1].fill_(-std::numeric_limits<double>::infinity());
    return;
  }
  s.o_st = row_strides(out_bhle);
  if constexpr (std::is_same_v<T, float>) {
    // Only decoding needs contiguous operands; the tiled kernel reads rows
    // in place (below), so the copies are made only once decoding is chosen.
    if (decode_eligible(s, m, opt.kv_partitions)) {
      const Tensor q = c.inputs[0].contiguous(), k = c.inputs[1].contiguous(), v = c.inputs[2].contiguous();
      forward_decode(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out, lse, s, m, ScoreMod{},
                     decode_partitions(s, m, opt.kv_partitions));
      return;
    }
  }
  const Tensor q = rows_in_place(c.inputs[0]), k = rows_in_place(c.inputs[1]), v = rows_in_place(c.inputs[2]);
  s.q_st = row_strides(q), s.k_st = row_strides(k), s.v_st = row_strides(v);
  forward<T>(q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), out, lse, s, m, ScoreMod{});
}

// inputs q, k, v, out, lse, grad of out, block mask; outputs dq, dk, dv.
template <class T, class ScoreMod, class MaskMod>
void op_backward_typed(const OpCall& c) {
  BlockMask<MaskMod> m{MaskMod{}};
  mask_from_op(c, 6, m);
  const FlexOptions opt = options_from_op(c.attrs);
  std::vector<Tensor> in;
  for (size_t i = 0; i < 6; ++i) in.push_back(i == 4 ? c.inputs[i].contiguous() : rows_in_place(c.inputs[i]));
  Shapes s = check_inputs(in[0], in[1], in[2], m, opt);
  if (in[0].numel() == 0 || s.S == 0) {  // nothing attended: no gradient flows
    for (const Tensor& g : c.outputs) g.zero_();
    return;
  }
  s.q_st = row_strides(in[0]), s.k_st = row_strides(in[1]), s.v_st = row_strides(in[2]);
  s.o_st = row_strides(in[3]), s.do_st = row_strides(in[5]);
  // The outputs are (B, L, H, E): the gradients of head views of a (B, L,
  // H * E) projection, written where that projection's gradient needs them
  // (every element: backward() zeroes what no block reaches).
  const Tensor dq = c.outputs[0].transpose(1, 2);
  // k and v broadcast over the batch: their gradients are summed over it.
  const bool per_batch = s.Bkv != s.B;
  const Tensor dk = per_batch ? empty({s.B, s.Hkv, s.S, s.E}, dtype_of<T>::value) : c.outputs[1].transpose(1, 2);
  const Tensor dv = per_batch ? empty({s.B, s.Hkv, s.S, s.Ev}, dtype_of<T>::value) : c.outputs[2].transpose(1, 2);
  s.dq_st = row_strides(dq), s.dk_st = row_strides(dk), s.dv_st = row_strides(dv);
  backward<T>(in[0].data_ptr<T>(), in[1].data_ptr<T>(), in[2].data_ptr<T>(), in[3].data_ptr<T>(), in[4].data_ptr<T>(),
              in[5].data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(), dv.data_ptr<T>(), s, m, ScoreMod{}, nullptr);
  if (per_batch)
    c.outputs[1].copy_(dk.sum({0}, true).transpose(1, 2)), c.outputs[2].copy_(dv.sum({0}, true).transpose(1, 2));
}

template <class ScoreMod, class MaskMod>
void op_forward(const OpCall& c) {
  if (c.inputs[0].dtype() == kFloat64) op_forward_typed<double, ScoreMod, MaskMod>(c);
  else op_forward_typed<float, ScoreMod, MaskMod>(c);
}
template <class ScoreMod, class MaskMod>
void op_backward(const OpCall& c) {
  if (c.inputs[0].dtype() == kFloat64) op_backward_typed<double, ScoreMod, MaskMod>(c);
  else op_backward_typed<float, ScoreMod, MaskMod>(c);
}

// The CapturedTensors a score_mod reads at the corners of the (b, h, q_idx,
// kv_idx) space (Note [Tensors a score_mod captures]). A read of a tensor
// that requires grad which became a plain number before meeting the score
// is refused here: its gradient would be lost.
template <class T, class ScoreMod>
std::vector<Tensor> captured_tensors(const ScoreMod& score_mod, const Shapes& s) {
  CaptureTape tape;
  TapeScope scope(&tape);
  std::vector<Tensor> found;
  for (int corner = 0; corner < 16; ++corner) {
    const int64_t b = corner & 1 ? s.B - 1 : 0, h = corner & 2 ? s.Hq - 1 : 0;
    const int64_t qi = corner & 4 ? s.L - 1 : 0, kv = corner & 8 ? s.S - 1 : 0;
    tape.start(-1);
    (void)score_mod(Dual<T>(T(0), T(1)), b, h, qi, kv);
    for (size_t k = 0; k < tape.reads.size(); ++k) {
      const Tensor& t = *tape.reads[k].source;
      check(tape.met[k] || !t.requires_grad(), "flex_attention", "the score_mod used a read of a CapturedTensor ",
            shape_text(t.sizes()), " that requires grad as a plain number before it met the score (arithmetic "
            "with a float constant? write double constants), so its gradient would be lost");
      if (std::none_of(found.begin(), found.end(), [&](const Tensor& f) { return f.impl() == t.impl(); }))
        found.push_back(t);
    }
  }
  return found;
}

template <class T, class ScoreMod, class MaskMod>
FlexOutput run(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreMod& score_mod,
               const BlockMask<MaskMod>& m, const FlexOptions& opt) {
  Shapes s = check_inputs(q, k, v, m, opt);
  std::vector<Tensor> learned;
  if constexpr (LearnsTensors<ScoreMod>) {
    learned = score_mod.learned();
  } else if constexpr (!std::is_empty_v<ScoreMod>) {
    // A mod with state may read CapturedTensors: differentiate the ones
    // that require grad (Note [Tensors a score_mod captures]).
    if (is_grad_enabled() && s.B * s.Hq * s.L * s.S > 0) {
      std::vector<Tensor> found = captured_tensors<T>(score_mod, s);
      if (std::any_of(found.begin(), found.end(), [](const Tensor& t) { return t.requires_grad(); }))
        return run<T>(q, k, v, CapturedScoreMod<ScoreMod>{score_mod, std::move(found)}, m, opt);
    }
  }
  const bool learns = std::any_of(learned.begin(), learned.end(), [](const Tensor& t) { return t.requires_grad(); });
  if constexpr (kStatelessMods<ScoreMod, MaskMod>) {
    if (q.dtype() == dtype_of<T>::value && k.dtype() == q.dtype() && v.dtype() == q.dtype()) {
      static const int64_t kernel =
          register_flex_kernels(&op_forward<ScoreMod, MaskMod>, &op_backward<ScoreMod, MaskMod>);
      const std::vector<Tensor> r = call_flex_op(q, k, v, m, kernel, opt);
      Tensor lse_out;
      if (opt.return_lse) {
        NoGradGuard no_grad;
        lse_out = r[1].detach().to(kFloat32);
      }
      return {r[0], lse_out};
    }
  }
  if (s.B * s.Hq * s.L == 0 || s.S == 0) {
    // (The op above handles these itself.) No rows, or no keys (each row then attends to nothing: out 0, lse -inf,
    // as a fully masked row). The kernels assume at least one of each.
    return {zeros({s.B, s.Hq, s.L, s.Ev}, q.dtype()), opt.return_lse ? full({s.B, s.Hq, s.L}, -std::numeric_limits<double>::infinity(), kFloat32) : Tensor{}};
  }
  if constexpr (std::is_same_v<T, float>) {
    const bool records = is_grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad() || learns);
    if (!records && k.dtype() == kBFloat16 && decode_eligible(s, m, opt.kv_partitions))
      return decode_bf16(q, k, v, s, m, score_mod, opt);
  }
  Tensor qc, kc, vc;
  {
    NoGradGuard no_grad;
    qc = as_compute<T>(q), kc = as_compute<T>(k), vc = as_compute<T>(v);
  }
  Tensor out = empty_output(q, s, dtype_of<T>::value);
  // The backward pass needs lse at the compute precision; callers get float32.
  Tensor lse = empty({s.B, s.Hq, s.L}, dtype_of<T>::value);
  bool decoded = false;
  if constexpr (std::is_same_v<T, float>) {
    if (decode_eligible(s, m, opt.kv_partitions)) {
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
  std::vector<Tensor> inputs = {q, k, v};
  if (learns) inputs.insert(inputs.end(), learned.begin(), learned.end());
  std::vector<Shape> learned_sizes;
  std::vector<DType> learned_dtypes;
  for (const Tensor& t : learned) learned_sizes.push_back(t.sizes()), learned_dtypes.push_back(t.dtype());
  autograd::record_function("flex_attention", inputs, {result},
                            [=](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
                              NoGradGuard no_grad;
                              const Tensor go = as_compute<T>(grads[0]);
                              Tensor dq = empty(qc.sizes(), dtype_of<T>::value),
                                     dk = empty({s.B, s.Hkv, s.S, s.E}, dtype_of<T>::value),
                                     dv = empty({s.B, s.Hkv, s.S, s.Ev}, dtype_of<T>::value);
                              std::vector<std::vector<double>> dlearned;
                              for (const Shape& sz : learned_sizes)
                                dlearned.emplace_back(
                                    static_cast<size_t>(std::accumulate(sz.begin(), sz.end(), int64_t{1}, std::multiplies<>())),
                                    0.0);
                              backward<T>(qc.data_ptr<T>(), kc.data_ptr<T>(), vc.data_ptr<T>(), saved_out.data_ptr<T>(),
                                          lse.data_ptr<T>(), go.data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(),
                                          dv.data_ptr<T>(), s, m, score_mod, learns ? &dlearned : nullptr);
                              if constexpr (LearnsAtScore<ScoreMod>)
                                check(!score_mod.missed->load(), "flex_attention",
                                      "the score_mod read a CapturedTensor that requires grad which it did not read "
                                      "at any corner of the (b, h, q_idx, kv_idx) space, or used a read as a plain "
                                      "number before it met the score: its gradient cannot be computed");
                              if (s.Bkv != s.B) dk = dk.sum({0}, true), dv = dv.sum({0}, true);
                              std::vector<Tensor> out_grads = {dq.to(dq_t), dk.to(dk_t), dv.to(dv_t)};
                              if (learns)
                                for (size_t t = 0; t < dlearned.size(); ++t) {
                                  Tensor g = empty(learned_sizes[t], kFloat64);
                                  std::copy(dlearned[t].begin(), dlearned[t].end(), g.data_ptr<double>());
                                  out_grads.push_back(g.to(learned_dtypes[t]));
                                }
                              return out_grads;
                            });
  Tensor lse_out;
  if (opt.return_lse) {
    NoGradGuard no_grad;
    lse_out = lse.to(kFloat32);
  }
  return {result, lse_out};
}

}  // namespace attention_detail

// q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev); k and v may have
// batch 1 (broadcast, as for a shared or paged cache). Differentiable in q,
// k, v, the tensors a score mod names in learned() (HasLearnedTensors) and
// the CapturedTensors it reads (Note [Tensors a score_mod captures]).
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
  check(q.dim() == 4 && k.dim() == 4, "flex_attention", "expected 4-D q and k but got ", shape_text(q.sizes()), " and ",
        shape_text(k.sizes()));
  const auto m = create_block_mask(NoopMask{}, 1, 1, q.size(2), k.size(2));
  return flex_attention(q, k, v, score_mod, m, options);
}

}  // namespace kiln
