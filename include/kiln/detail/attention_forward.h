// The tiled flex_attention forward kernel.
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include "kiln/detail/attention_tiles.h"

namespace kiln::attention_detail {

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

}  // namespace kiln::attention_detail

KILN_API_END
