// FlexAttention on CPU (PyTorch's torch.nn.attention.flex_attention):
// attention with a user score_mod(score, b, h, q_idx, kv_idx) and a block-
// sparse mask built from mask_mod(b, h, q_idx, kv_idx). The mods are template
// parameters, so the compiler inlines them into the kernel loops.
// Kernels: kiln/detail/attention_*.h (tiled forward and backward built on one
// SIMD GEMM micro-kernel, flash decoding); paged KV cache:
// kiln/paged_attention.h.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cmath>
#include <concepts>
#include <optional>
#include <string>
#include <vector>

#include "kiln/attention_captured.h"
#include "kiln/ops.h"
#include "kiln/tensor.h"

namespace kiln {

// The block structure of a mask, PyTorch's BlockMask fields: for each
// (b, h, query block) the KV blocks that are partially masked (the kernel
// calls mask_mod inside them) and those fully unmasked, and the same
// transposed (per KV block, for the backward pass). B or H may be 1
// (broadcast). int32 tensors, index lists padded with 0 past the count.
struct BlockMaskData {
  int64_t B = 1, H = 1, q_len = 0, kv_len = 0, block_size = 128;
  Tensor kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices;  // (B, H, nq), (B, H, nq, nkv)
  Tensor q_num_blocks, q_indices, full_q_num_blocks, full_q_indices;      // (B, H, nkv), (B, H, nkv, nq)
  // mask_mod's values inside the partial blocks, one bit per (q, kv), as
  // create_block_mask evaluated them: (B, H, nq, most partial blocks of a
  // row, block_size, words of 64 keys) int64, bit kv % 64 of word kv / 64
  // of row q. The kernels mask with these bits in SIMD instead of calling
  // mask_mod per element (a header template, compiled for the caller's
  // baseline ISA). Empty when not kept (lists built another way, or the
  // bits would exceed kMaxPartialBitsBytes): the kernels call mask_mod.
  Tensor partial_bits;
  static constexpr int64_t kMaxPartialBitsBytes = int64_t{32} << 20;

  int64_t bit_words() const { return (block_size + 63) / 64; }
  // The bits of partial block n of (b, h, query block qb), block_size rows
  // of bit_words() words; nullptr when not kept.
  const uint64_t* partial_bits_block(int64_t b, int64_t h, int64_t qb, int64_t n) const;
  // The same found by KV block index kb (the backward walks the transposed lists).
  const uint64_t* partial_bits_of(int64_t b, int64_t h, int64_t qb, int64_t kb) const;

  int64_t num_q_blocks() const { return (q_len + block_size - 1) / block_size; }
  int64_t num_kv_blocks() const { return (kv_len + block_size - 1) / block_size; }
  // Percentage of (query block, KV block) pairs that are skipped entirely.
  double sparsity() const;
  // One line per query block of (b, h): '#' full, '+' partial, '.' skipped.
  std::string to_string(int64_t b = 0, int64_t h = 0) const;
  // Builds the transposed lists from the per-query-block ones.
  void build_transposed();
  // Moves the lists (and bits) to `device`: to meta for attention on meta
  // tensors, which keeps their shapes only.
  void move_to(Device device);
  // The (query, key) scores the forward kernel computes for one head: all
  // of the full blocks, the kept tiles of the partial ones (Note [Tiles of
  // a partial block]). Benchmarks count FLOPs with it.
  double computed_scores(int64_t b = 0, int64_t h = 0) const;
};

// Note [Tiles of a partial block]
// Inside a partial block whose mask bits are kept, the kernels work on
// groups of kFlexTile query rows, each over the keys from the first to the
// last one any of its rows keeps (the ends widened to the bits' 64-key words
// below and to whole kFlexTile-key tiles above; neighbouring groups with
// the same keys are joined); a group whose rows keep no key is skipped. A
// causal diagonal block of 128 computes 10 of its 16 tiles of 32 x 32, so
// large blocks cost what blocks of 32 would, in fewer, larger products.
// Skipped scores are masked ones: their probability is 0 and they add
// nothing to any output or gradient.
inline constexpr int64_t kFlexTile = 32;
struct ColumnSpan {
  int64_t lo = 0, hi = 0;
  int64_t width() const { return hi - lo; }
  bool empty() const { return hi <= lo; }
};
// The span of `rows` rows of a partial block (`bits`: their rows of `words`
// words, nullptr when not kept, giving [0, cols)).
ColumnSpan kept_columns(const uint64_t* bits, int64_t words, int64_t rows, int64_t cols);
// The group of a block's rows that starts at row r0: kFlexTile rows joined
// with the next ones while their span is the same (fewer, larger products),
// or all the rows when bits is null.
struct RowGroup {
  int64_t rows;
  ColumnSpan span;
};
RowGroup row_group(const uint64_t* bits, int64_t words, int64_t r0, int64_t rows, int64_t cols);
// Calls f(r0, n, j0, width) for each group of rows [r0, r0 + n) of a block
// that keeps keys [j0, j0 + width).
template <class F>
void for_row_groups(const uint64_t* bits, int64_t words, int64_t rows, int64_t cols, F f) {
  for (int64_t r0 = 0; r0 < rows;) {
    const RowGroup g = row_group(bits, words, r0, rows, cols);
    if (!g.span.empty()) f(r0, g.rows, g.span.lo, g.span.width());
    r0 += g.rows;
  }
}

template <class MaskMod>
struct BlockMask : BlockMaskData {
  explicit BlockMask(MaskMod m) : mask_mod(std::move(m)) {}  // lambdas have no default constructor
  MaskMod mask_mod;
};

// ---- standard mask_mods and score_mods (callables; combine with and_masks/or_masks)

struct NoopMask {
  bool operator()(int64_t, int64_t, int64_t, int64_t) const { return true; }
};
struct CausalMask {
  bool operator()(int64_t, int64_t, int64_t q, int64_t kv) const { return q >= kv; }
};
// Causal and at most `window` positions back.
struct SlidingWindowMask {
  int64_t window;
  bool operator()(int64_t, int64_t, int64_t q, int64_t kv) const { return q >= kv && q - kv <= window; }
};
// Bidirectional over the first `prefix` positions, causal after.
struct PrefixLMMask {
  int64_t prefix;
  bool operator()(int64_t, int64_t, int64_t q, int64_t kv) const { return kv < prefix || q >= kv; }
};
// Packed documents: attend only within the same document (ids per position,
// int64, shared by the batch or one row per batch element).
// The data pointer is read once here: the mask runs for every element of
// every partial block.
struct DocumentMask {
  explicit DocumentMask(Tensor ids)
      : doc_ids(std::move(ids)), ids_(doc_ids.data_ptr<int64_t>()), row_(doc_ids.dim() == 2 ? doc_ids.size(1) : 0) {}
  Tensor doc_ids;  // (S) or (B, S), int64, contiguous
  bool operator()(int64_t b, int64_t, int64_t q, int64_t kv) const {
    const int64_t* d = ids_ + b * row_;
    return d[q] == d[kv];
  }

 private:
  const int64_t* ids_;
  int64_t row_;
};
template <class A, class B>
struct AndMasks {
  A a;
  B b;
  bool operator()(int64_t bi, int64_t h, int64_t q, int64_t kv) const { return a(bi, h, q, kv) && b(bi, h, q, kv); }
};
template <class A, class B>
struct OrMasks {
  A a;
  B b;
  bool operator()(int64_t bi, int64_t h, int64_t q, int64_t kv) const { return a(bi, h, q, kv) || b(bi, h, q, kv); }
};
template <class A, class B>
AndMasks<A, B> and_masks(A a, B b) { return {a, b}; }
template <class A, class B>
OrMasks<A, B> or_masks(A a, B b) { return {a, b}; }

// Score mods are generic in the score type: the backward pass calls them on
// a dual number to get d(score_mod)/d(score).
//
// A score mod whose captured tensors may be learned (a bias table, ALiBi
// slopes) names them and the derivative with respect to them, so that
// flex_attention's backward pass also returns their gradients:
//   std::vector<Tensor> learned() const;
//   void backward_learned(double grad, int64_t b, int64_t h, int64_t q, int64_t kv,
//                         double* const* grads) const;
// grads[t] is a float64 buffer laid out like learned()[t] (contiguous), to
// which backward_learned adds grad * d(score_mod)/d(learned()[t]) for the
// score at (b, h, q, kv); grad is dLoss/d(score_mod's output).
template <class M>
concept HasLearnedTensors = requires(const M& m, double g, int64_t i, double* const* grads) {
  { m.learned() } -> std::convertible_to<std::vector<Tensor>>;
  m.backward_learned(g, i, i, i, i, grads);
};

struct NoScoreMod {
  template <class S>
  S operator()(S s, int64_t, int64_t, int64_t, int64_t) const { return s; }
};
// ALiBi: score + slope[h] * (kv - q), slopes float64 (H), learnable.
struct AlibiScore {
  Tensor slopes;
  template <class S>
  S operator()(S s, int64_t, int64_t h, int64_t q, int64_t kv) const {
    return s + S(slopes.data_ptr<double>()[h] * static_cast<double>(kv - q));
  }
  std::vector<Tensor> learned() const { return {slopes}; }
  void backward_learned(double g, int64_t, int64_t h, int64_t q, int64_t kv, double* const* grads) const {
    grads[0][h] += g * static_cast<double>(kv - q);
  }
};
// Tanh soft-capping: cap * tanh(score / cap).
struct SoftcapScore {
  double cap;
  template <class S>
  S operator()(S s, int64_t, int64_t, int64_t, int64_t) const {
    using std::tanh;
    return S(cap) * tanh(s / S(cap));
  }
};
// Relative position bias from a table (H, 2 * max_distance + 1), float64,
// indexed by kv - q clamped to [-max_distance, max_distance]; learnable.
struct RelativePositionBias {
  Tensor table;
  int64_t max_distance;
  template <class S>
  S operator()(S s, int64_t, int64_t h, int64_t q, int64_t kv) const {
    const int64_t d = std::clamp<int64_t>(kv - q, -max_distance, max_distance) + max_distance;
    return s + S(table.data_ptr<double>()[h * table.size(1) + d]);
  }
  std::vector<Tensor> learned() const { return {table}; }
  void backward_learned(double g, int64_t, int64_t h, int64_t q, int64_t kv, double* const* grads) const {
    grads[0][h * table.size(1) + std::clamp<int64_t>(kv - q, -max_distance, max_distance) + max_distance] += g;
  }
};

struct FlexOptions {
  std::optional<double> scale;  // default 1 / sqrt(E)
  bool enable_gqa = false;
  bool return_lse = false;
  // Flash decoding: split the KV sequence into this many partitions, run in
  // parallel and merged through their LSEs. 0 = automatic (see
  // Note [Flash decoding] in detail/attention_decode.h), 1 = never split (the
  // general tiled kernel).
  int64_t kv_partitions = 0;
};

struct FlexOutput {
  Tensor out;  // (B, Hq, L, Ev), q's dtype
  Tensor lse;  // (B, Hq, L) float32, natural log; defined when return_lse
};

}  // namespace kiln

// The kernels and op glue these templates instantiate.
#include "kiln/detail/attention_op.h"
#include "kiln/detail/block_mask_eval.h"

namespace kiln {

// Evaluates mask_mod on every (q, kv) of every block pair and classifies the
// blocks. Q_LEN and KV_LEN need not be multiples of block_size. The lists
// are computed on the CPU and then placed on `device` (the attention's).
template <class MaskMod>
BlockMask<MaskMod> create_block_mask(MaskMod mask_mod, int64_t B, int64_t H, int64_t q_len, int64_t kv_len,
                                     int64_t block_size = 128, Device device = kCPU) {
  check(B >= 1 && H >= 1 && q_len >= 0 && kv_len >= 0 && block_size >= 1, "create_block_mask",
        "invalid sizes B=", B, " H=", H, " Q_LEN=", q_len, " KV_LEN=", kv_len, " block_size=", block_size);
  BlockMask<MaskMod> m(mask_mod);
  m.B = B, m.H = H, m.q_len = q_len, m.kv_len = kv_len, m.block_size = block_size;
  auto held = attention_detail::make_zeroed<attention_detail::MaskEvaluatorOf<MaskMod>>(mask_mod);
  attention_detail::build_block_mask(m, attention_detail::keyed(held, held->mask_mod), device);
  return m;
}

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
  const auto m = create_block_mask(NoopMask{}, 1, 1, q.size(2), k.size(2), 128, q.device());
  return flex_attention(q, k, v, score_mod, m, options);
}

}  // namespace kiln

KILN_API_END
