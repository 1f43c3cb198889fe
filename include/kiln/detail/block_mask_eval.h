// create_block_mask's mask_mod evaluation as the kernels of the ops
// "block_mask_lists" and "block_mask_partial_bits" (src/attention/
// block_mask_ops.cpp): the mask_mod travels in the op's "mask_mod"
// attribute (an OpaqueAttr), as flex_attention's mods do.
// Internal to kiln/attention.h (after BlockMaskData), whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/runtime.h"

namespace kiln::attention_detail {

struct MaskEvaluator {
  virtual ~MaskEvaluator() = default;
  // outputs kv_num_blocks, full_kv_num_blocks (B, H, nq), kv_indices,
  // full_kv_indices (B, H, nq, max(nkv, 1)), int32, zeroed by the caller.
  virtual void lists(const OpCall& c) const = 0;
  // inputs kv_num_blocks, kv_indices; output the bits of each row's partial
  // blocks (B, H, nq, most, block_size, words) int64.
  virtual void partial_bits(const OpCall& c) const = 0;
};

// The sizes of a block mask op call (its attributes; no lists).
inline BlockMaskData mask_sizes(const Attrs& a) {
  BlockMaskData z;
  read_mask_sizes(a, z);
  return z;
}

template <class MaskMod>
struct MaskEvaluatorOf final : MaskEvaluator {
  explicit MaskEvaluatorOf(MaskMod m) : mask_mod(std::move(m)) {}
  MaskMod mask_mod;

  // The bits of block (row, kb) into `bits` (block_size rows of words);
  // returns how many of its in-range (q, kv) pairs are kept and how many there are.
  std::pair<int64_t, int64_t> evaluate(const BlockMaskData& z, int64_t row, int64_t kb, uint64_t* bits) const {
    const int64_t H = z.H, nq = z.num_q_blocks(), bs = z.block_size, words = z.bit_words();
    const int64_t b = row / (H * nq), h = (row / nq) % H, qb = row % nq;
    int64_t on = 0, total = 0;
    if (bits) std::fill(bits, bits + bs * words, uint64_t{0});
    for (int64_t q = qb * bs; q < std::min(z.q_len, (qb + 1) * bs); ++q)
      for (int64_t kv = kb * bs; kv < std::min(z.kv_len, (kb + 1) * bs); ++kv) {
        const int64_t j = kv - kb * bs;
        if (mask_mod(b, h, q, kv)) {
          ++on;
          if (bits) bits[(q - qb * bs) * words + j / 64] |= uint64_t{1} << (j % 64);
        }
        ++total;
      }
    return {on, total};
  }

  void lists(const OpCall& c) const override {
    const BlockMaskData z = mask_sizes(c.attrs);
    const int64_t nk = z.num_kv_blocks(), width = std::max<int64_t>(nk, 1);
    int32_t* pn = c.outputs[0].data_ptr<int32_t>();
    int32_t* fn = c.outputs[1].data_ptr<int32_t>();
    int32_t* pi = c.outputs[2].data_ptr<int32_t>();
    int32_t* fi = c.outputs[3].data_ptr<int32_t>();
    parallel_for(0, z.B * z.H * z.num_q_blocks(), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row)
        for (int64_t kb = 0; kb < nk; ++kb) {
          const auto [on, total] = evaluate(z, row, kb, nullptr);
          if (on == 0) continue;
          if (on == total) fi[row * width + fn[row]++] = static_cast<int32_t>(kb);
          else pi[row * width + pn[row]++] = static_cast<int32_t>(kb);
        }
    });
  }

  void partial_bits(const OpCall& c) const override {
    const BlockMaskData z = mask_sizes(c.attrs);
    const int32_t* pn = c.inputs[0].data_ptr<int32_t>();
    const int32_t* pi = c.inputs[1].data_ptr<int32_t>();
    const int64_t width = c.inputs[1].size(3), most = c.outputs[0].size(3), block_words = z.block_size * z.bit_words();
    auto* dst = reinterpret_cast<uint64_t*>(c.outputs[0].data_ptr<int64_t>());
    parallel_for(0, z.B * z.H * z.num_q_blocks(), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        for (int64_t n = 0; n < pn[row]; ++n) evaluate(z, row, pi[row * width + n], dst + (row * most + n) * block_words);
        std::fill(dst + (row * most + pn[row]) * block_words, dst + (row + 1) * most * block_words, uint64_t{0});
      }
    });
  }
};

// Per column, the rows whose lists hold it (ascending): counts and lists,
// through the op "block_mask_transpose".
std::pair<Tensor, Tensor> transpose_block_lists(const Tensor& num_blocks, const Tensor& indices, int64_t columns);
// Fills m's lists (and bits, unless too large) through the ops, builds the
// transposed lists, and moves them to `device`.
void build_block_mask(BlockMaskData& m, OpaqueAttr evaluator, Device device);

}  // namespace kiln::attention_detail

KILN_API_END
