// PagedKVCache: page allocation, writes through the page table, and the
// logical-to-physical conversion of block masks.
#include "kiln/paged_attention.h"

#include "kiln/error.h"

namespace kiln {

PagedKVCache::PagedKVCache(int64_t n_pages, int64_t page_size, int64_t max_batch_size, int64_t heads,
                           int64_t head_dim, DType dtype)
    : n_pages_(n_pages), page_size_(page_size), max_batch_(max_batch_size) {
  check(n_pages > 0 && page_size > 0 && max_batch_size > 0 && heads > 0 && head_dim > 0, "PagedKVCache",
        "expected positive sizes but got n_pages=", n_pages, " page_size=", page_size,
        " max_batch_size=", max_batch_size, " heads=", heads, " head_dim=", head_dim);
  k_ = zeros({1, heads, n_pages * page_size, head_dim}, dtype);
  v_ = zeros({1, heads, n_pages * page_size, head_dim}, dtype);
  page_table_ = full({max_batch_size, n_pages}, -1, kInt64);
  physical_to_logical_ = full({max_batch_size, n_pages}, -1, kInt64);
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);  // page 0 is taken first
}

int64_t PagedKVCache::check_batch(int64_t batch_idx, const char* op) const {
  check(batch_idx >= 0 && batch_idx < max_batch_, op, "batch index ", batch_idx, " is outside [0, ", max_batch_, ")");
  return batch_idx;
}

int64_t PagedKVCache::capacity(int64_t batch_idx) const {
  const int64_t* row = page_table_.data_ptr<int64_t>() + check_batch(batch_idx, "PagedKVCache.capacity") * n_pages_;
  int64_t pages = 0;
  while (pages < n_pages_ && row[pages] >= 0) ++pages;  // logical pages are filled from 0 up
  return pages * page_size_;
}

void PagedKVCache::reserve(int64_t batch_idx, int64_t seq_len) {
  const char* op = "PagedKVCache.reserve";
  check_batch(batch_idx, op);
  const int64_t have = capacity(batch_idx) / page_size_, need = (seq_len + page_size_ - 1) / page_size_;
  check(need - have <= free_pages(), op, "sequence ", batch_idx, " needs ", need - have, " more pages of ",
        page_size_, " for length ", seq_len, " but ", free_pages(), " of ", n_pages_, " are free");
  int64_t* row = page_table_.data_ptr<int64_t>() + batch_idx * n_pages_;
  int64_t* p2l = physical_to_logical_.data_ptr<int64_t>() + batch_idx * n_pages_;
  for (int64_t lp = have; lp < need; ++lp) {
    const int64_t page = free_.back();
    free_.pop_back();
    row[lp] = page;
    p2l[page] = lp;
  }
}

void PagedKVCache::erase(int64_t batch_idx) {
  int64_t* row = page_table_.data_ptr<int64_t>() + check_batch(batch_idx, "PagedKVCache.erase") * n_pages_;
  int64_t* p2l = physical_to_logical_.data_ptr<int64_t>() + batch_idx * n_pages_;
  for (int64_t lp = 0; lp < n_pages_ && row[lp] >= 0; ++lp) {
    free_.push_back(row[lp]);
    p2l[row[lp]] = -1;
    row[lp] = -1;
  }
}

void PagedKVCache::assign(const Tensor& batch_idx, const Tensor& input_pos, const Tensor& k_val, const Tensor& v_val) {
  const char* op = "PagedKVCache.assign";
  const int64_t H = k_.size(1), D = k_.size(3);
  check(k_val.dim() == 4 && k_val.sizes() == v_val.sizes() && k_val.size(1) == H && k_val.size(3) == D, op,
        "expected k_val and v_val of shape (B, ", H, ", T, ", D, ") but got ", shape_text(k_val.sizes()), " and ",
        shape_text(v_val.sizes()));
  const int64_t B = k_val.size(0), T = k_val.size(2);
  check(batch_idx.dtype() == kInt64 && batch_idx.dim() == 1 && batch_idx.size(0) == B, op,
        "expected batch_idx of shape (", B, ") int64 but got ", shape_text(batch_idx.sizes()), " ", batch_idx.dtype());
  check(input_pos.dtype() == kInt64 && input_pos.size(-1) == T &&
            (input_pos.dim() == 1 || (input_pos.dim() == 2 && input_pos.size(0) == B)),
        op, "expected input_pos of shape (", T, ") or (", B, ", ", T, ") int64 but got ", shape_text(input_pos.sizes()),
        " ", input_pos.dtype());
  // Positions that follow each other within a page fill consecutive
  // slots: each such run is one copy_ (converting to the cache's dtype),
  // so the writes are ops the dispatcher, tracer and profiler see. The
  // cache keeps values, not history (as the memcpy it replaces).
  const NoGradGuard no_grad;
  const Tensor bi = batch_idx.contiguous(), pos = input_pos.contiguous();
  const int64_t* table = page_table_.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t seq = check_batch(bi.data_ptr<int64_t>()[b], op);
    const int64_t cap = capacity(seq);
    const int64_t* positions = pos.data_ptr<int64_t>() + (input_pos.dim() == 2 ? b * T : 0);
    auto slot_of = [&](int64_t t) {
      const int64_t p = positions[t];
      check(p >= 0 && p < cap, op, "position ", p, " of sequence ", seq, " is not reserved (capacity ", cap, ")");
      return table[seq * n_pages_ + p / page_size_] * page_size_ + p % page_size_;
    };
    for (int64_t t0 = 0; t0 < T;) {
      const int64_t first = slot_of(t0);
      int64_t n = 1;
      while (t0 + n < T && slot_of(t0 + n) == first + n) ++n;
      k_.narrow(2, first, n).copy_(k_val.narrow(0, b, 1).narrow(2, t0, n));
      v_.narrow(2, first, n).copy_(v_val.narrow(0, b, 1).narrow(2, t0, n));
      t0 += n;
    }
  }
}

Tensor PagedKVCache::physical_to_logical_rows(const Tensor& batch_idx) const {
  check(batch_idx.dtype() == kInt64 && batch_idx.dim() == 1, "PagedKVCache.convert_logical_block_mask",
        "expected batch_idx (B) int64 but got ", shape_text(batch_idx.sizes()), " ", batch_idx.dtype());
  const Tensor bi = batch_idx.contiguous();
  for (int64_t i = 0; i < bi.size(0); ++i) check_batch(bi.data_ptr<int64_t>()[i], "PagedKVCache.convert_logical_block_mask");
  return index_select(physical_to_logical_, 0, batch_idx).contiguous();
}

void PagedKVCache::convert_lists(const BlockMaskData& logical, const Tensor& batch_idx, BlockMaskData& m) const {
  const char* op = "PagedKVCache.convert_logical_block_mask";
  const int64_t nb = batch_idx.size(0);
  check(logical.block_size == page_size_, op, "the block mask's block_size (", logical.block_size,
        ") must equal the page size (", page_size_, ")");
  check(logical.B == 1 || logical.B == nb, op, "block mask of B=", logical.B, " for ", nb, " sequences");
  m.B = nb, m.H = logical.H, m.q_len = logical.q_len, m.kv_len = n_pages_ * page_size_, m.block_size = page_size_;
  const int64_t nq = logical.num_q_blocks(), nk = logical.num_kv_blocks(), width = n_pages_;
  m.kv_num_blocks = zeros({nb, m.H, nq}, kInt32);
  m.full_kv_num_blocks = zeros({nb, m.H, nq}, kInt32);
  m.kv_indices = zeros({nb, m.H, nq, width}, kInt32);
  m.full_kv_indices = zeros({nb, m.H, nq, width}, kInt32);
  // A logical last block shorter than a page reads a page that is only
  // partly the sequence's: it must go through the (wrapped) mask_mod.
  const bool short_last = logical.kv_len % page_size_ != 0;
  const Tensor bi = batch_idx.contiguous();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t* table = page_table_.data_ptr<int64_t>() + bi.data_ptr<int64_t>()[b] * n_pages_;
    for (int64_t h = 0; h < m.H; ++h)
      for (int64_t qb = 0; qb < nq; ++qb) {
        const int64_t lrow = ((logical.B == 1 ? 0 : b) * logical.H + h) * nq + qb, row = (b * m.H + h) * nq + qb;
        int32_t* pn = m.kv_num_blocks.data_ptr<int32_t>() + row;
        int32_t* fn = m.full_kv_num_blocks.data_ptr<int32_t>() + row;
        int32_t* pi = m.kv_indices.data_ptr<int32_t>() + row * width;
        int32_t* fi = m.full_kv_indices.data_ptr<int32_t>() + row * width;
        auto add = [&](int64_t kb, bool full) {
          if (kb >= n_pages_ || table[kb] < 0) return;  // past the reservation: no keys there
          if (full && !(short_last && kb == nk - 1)) fi[(*fn)++] = static_cast<int32_t>(table[kb]);
          else pi[(*pn)++] = static_cast<int32_t>(table[kb]);
        };
        const int64_t lwidth = logical.kv_indices.size(3);
        for (int32_t c = 0; c < logical.kv_num_blocks.data_ptr<int32_t>()[lrow]; ++c)
          add(logical.kv_indices.data_ptr<int32_t>()[lrow * lwidth + c], false);
        for (int32_t c = 0; c < logical.full_kv_num_blocks.data_ptr<int32_t>()[lrow]; ++c)
          add(logical.full_kv_indices.data_ptr<int32_t>()[lrow * lwidth + c], true);
      }
  }
  m.build_transposed();
}

}  // namespace kiln
