// Flash decoding: the forward for few query rows (Note [Flash decoding]).
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include "kiln/detail/attention_forward.h"

namespace kiln::attention_detail {

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
// tiled (measured with B=1, Hq=8, Hkv 8 or 2, S=4096, E=64 on two threads:
// decoding wins at L=32, the tiles from about L=64, and by far for a GPT
// training batch, L=S=128 in one block of 128).
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
      // and bfloat16 much faster with runs of 8 blocks than one at a time,
      // 16 about the same, 32 slower). Since bfloat16 P V prefetches in
      // address order, 16 blocks beat 8 (7 of 8 alternating runs, for both
      // dtypes), 32 no
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

}  // namespace kiln::attention_detail

KILN_API_END
