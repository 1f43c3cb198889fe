// The tiled flex_attention backward kernel.
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include "kiln/detail/attention_decode.h"

namespace kiln::attention_detail {

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

}  // namespace kiln::attention_detail

KILN_API_END
