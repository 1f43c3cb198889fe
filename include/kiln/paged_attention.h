// A paged KV cache for FlexAttention (PyTorch's experimental
// torch.nn.attention.experimental._paged_attention.PagedAttention): the keys
// and values of every sequence live in one physical cache of fixed-size
// pages, and a page table maps each sequence's logical pages to physical
// ones, so sequences of different lengths share the memory without padding
// each to the longest. Attention runs over the physical cache through a
// block mask whose KV blocks are pages (block_size == page_size).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <vector>

#include "kiln/attention.h"

namespace kiln {

// mask_mod over physical positions: maps a physical KV position to the
// sequence's logical one through a snapshot of the page table; pages the
// sequence does not own are masked.
template <class MaskMod>
struct PagedMask {
  MaskMod logical;
  Tensor physical_to_logical;  // (batch, n_pages) int64, -1 where unowned
  int64_t page_size;
  int64_t kv_len;  // the logical mask's KV_LEN: a last page may be filled only in part
  bool operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const {
    const int64_t page = kv / page_size;
    const int64_t lp = physical_to_logical.data_ptr<int64_t>()[b * physical_to_logical.size(1) + page];
    const int64_t pos = lp * page_size + kv % page_size;
    return lp >= 0 && pos < kv_len && logical(b, h, q, pos);
  }
};

class PagedKVCache {
 public:
  // n_pages pages of page_size positions, shared by up to max_batch_size
  // sequences, each with `heads` heads of head_dim.
  PagedKVCache(int64_t n_pages, int64_t page_size, int64_t max_batch_size, int64_t heads, int64_t head_dim,
               DType dtype = kFloat32);

  // Makes positions [0, seq_len) of sequence batch_idx backed by pages,
  // taking free pages as needed; an error when none are left.
  void reserve(int64_t batch_idx, int64_t seq_len);
  // Returns the sequence's pages to the free list.
  void erase(int64_t batch_idx);
  // Writes k_val, v_val (B, H, T, D) of sequences batch_idx (B, int64) at
  // their logical positions input_pos (B, T) or (T) (int64), which must be
  // reserved.
  void assign(const Tensor& batch_idx, const Tensor& input_pos, const Tensor& k_val, const Tensor& v_val);

  // The physical caches (1, H, n_pages * page_size, D); pass them as k and v
  // of flex_attention (their batch of 1 broadcasts over the queries').
  const Tensor& k_cache() const { return k_; }
  const Tensor& v_cache() const { return v_; }
  int64_t page_size() const { return page_size_; }
  int64_t n_pages() const { return n_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t capacity(int64_t batch_idx) const;  // reserved positions
  // (max_batch_size, n_pages) int64: physical page of each logical page, -1 if none.
  const Tensor& page_table() const { return page_table_; }

  // The logical block mask of sequences batch_idx (its B must be 1 or their
  // number; block_size must equal page_size) turned into one over the
  // physical cache: each logical KV block becomes the page that holds it
  // (blocks past a sequence's reservation are dropped; a short last block
  // becomes partial), and mask_mod is wrapped to translate physical
  // positions back.
  template <class MaskMod>
  BlockMask<PagedMask<MaskMod>> convert_logical_block_mask(const BlockMask<MaskMod>& logical,
                                                           const Tensor& batch_idx) const {
    const Tensor p2l = physical_to_logical_rows(batch_idx);
    BlockMask<PagedMask<MaskMod>> m(PagedMask<MaskMod>{logical.mask_mod, p2l, page_size_, logical.kv_len});
    convert_lists(logical, batch_idx, m);
    return m;
  }

 private:
  Tensor physical_to_logical_rows(const Tensor& batch_idx) const;
  void convert_lists(const BlockMaskData& logical, const Tensor& batch_idx, BlockMaskData& physical) const;
  int64_t check_batch(int64_t batch_idx, const char* op) const;

  int64_t n_pages_, page_size_, max_batch_;
  Tensor k_, v_;
  Tensor page_table_, physical_to_logical_;  // (max_batch, n_pages) int64
  std::vector<int64_t> free_;                 // physical pages, taken from the back
};

}  // namespace kiln

KILN_API_END
