// The non-template parts of FlexAttention: BlockMask's transposed lists,
// picture and sparsity, and the input checks of flex_attention.
#include <bit>
#include <cmath>
#include <sstream>
#include <tuple>

#include "kiln/attention.h"

namespace kiln {

void BlockMaskData::move_to(Device device) {
  for (Tensor* t : {&kv_num_blocks, &kv_indices, &full_kv_num_blocks, &full_kv_indices, &q_num_blocks, &q_indices,
                    &full_q_num_blocks, &full_q_indices, &partial_bits})
    if (t->defined()) *t = t->to(device);
}

namespace attention_detail {
Attrs mask_size_attrs(const BlockMaskData& m) {
  return {{"B", m.B}, {"H", m.H}, {"q_len", m.q_len}, {"kv_len", m.kv_len}, {"block_size", m.block_size}};
}
void read_mask_sizes(const Attrs& a, BlockMaskData& m) {
  m.B = a.get_int("B"), m.H = a.get_int("H"), m.q_len = a.get_int("q_len"), m.kv_len = a.get_int("kv_len");
  m.block_size = a.get_int("block_size");
}
}  // namespace attention_detail

void BlockMaskData::build_transposed() {
  const int64_t nk = num_kv_blocks();
  std::tie(q_num_blocks, q_indices) = attention_detail::transpose_block_lists(kv_num_blocks, kv_indices, nk);
  std::tie(full_q_num_blocks, full_q_indices) =
      attention_detail::transpose_block_lists(full_kv_num_blocks, full_kv_indices, nk);
}

namespace {
// The (b, h, query block) row of the per-query-block lists; B, H broadcast.
int64_t list_row(const BlockMaskData& m, int64_t b, int64_t h, int64_t qb) {
  return ((m.B == 1 ? 0 : b) * m.H + (m.H == 1 ? 0 : h)) * m.num_q_blocks() + qb;
}
}  // namespace

const uint64_t* BlockMaskData::partial_bits_block(int64_t b, int64_t h, int64_t qb, int64_t n) const {
  if (!partial_bits.defined() || partial_bits.numel() == 0) return nullptr;
  return reinterpret_cast<const uint64_t*>(partial_bits.data_ptr<int64_t>()) +
         (list_row(*this, b, h, qb) * partial_bits.size(3) + n) * block_size * bit_words();
}

const uint64_t* BlockMaskData::partial_bits_of(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
  if (!partial_bits.defined() || partial_bits.numel() == 0) return nullptr;
  const int64_t row = list_row(*this, b, h, qb);
  const int32_t* list = kv_indices.data_ptr<int32_t>() + row * kv_indices.size(3);
  for (int64_t n = 0; n < kv_num_blocks.data_ptr<int32_t>()[row]; ++n)
    if (list[n] == kb) return partial_bits_block(b, h, qb, n);
  return nullptr;
}

ColumnSpan kept_columns(const uint64_t* bits, int64_t words, int64_t rows, int64_t cols) {
  if (!bits) return {0, cols};
  int64_t lo = cols, hi = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t w = 0; w < words; ++w)
      if (const uint64_t x = bits[r * words + w]) {
        lo = std::min<int64_t>(lo, w * 64 + std::countr_zero(x));
        hi = std::max<int64_t>(hi, w * 64 + 64 - std::countl_zero(x));
      }
  if (hi <= lo) return {};
  return {lo / 64 * 64, std::min(cols, (hi + kFlexTile - 1) / kFlexTile * kFlexTile)};
}

RowGroup row_group(const uint64_t* bits, int64_t words, int64_t r0, int64_t rows, int64_t cols) {
  if (!bits) return {rows - r0, {0, cols}};
  int64_t n = std::min(kFlexTile, rows - r0);
  const ColumnSpan span = kept_columns(bits + r0 * words, words, n, cols);
  while (r0 + n < rows) {
    const int64_t more = std::min(kFlexTile, rows - r0 - n);
    const ColumnSpan next = kept_columns(bits + (r0 + n) * words, words, more, cols);
    if (next.lo != span.lo || next.hi != span.hi) break;
    n += more;
  }
  return {n, span};
}

double BlockMaskData::computed_scores(int64_t b, int64_t h) const {
  const int64_t nq = num_q_blocks(), words = bit_words();
  const int64_t row0 = list_row(*this, b, h, 0);
  const int32_t *pn = kv_num_blocks.data_ptr<int32_t>(), *fn = full_kv_num_blocks.data_ptr<int32_t>();
  const int32_t *pi = kv_indices.data_ptr<int32_t>(), *fi = full_kv_indices.data_ptr<int32_t>();
  const int64_t width = kv_indices.size(3);
  double scores = 0;
  for (int64_t qb = 0; qb < nq; ++qb) {
    const int64_t row = row0 + qb, rows = std::min(q_len, (qb + 1) * block_size) - qb * block_size;
    auto cols_of = [&](int64_t kb) { return std::min(kv_len, (kb + 1) * block_size) - kb * block_size; };
    for (int32_t c = 0; c < fn[row]; ++c) scores += static_cast<double>(rows * cols_of(fi[row * width + c]));
    for (int32_t c = 0; c < pn[row]; ++c) {
      const uint64_t* bits = partial_bits_block(b, h, qb, c);
      const int64_t cols = cols_of(pi[row * width + c]);
      for_row_groups(bits, words, rows, cols,
                     [&](int64_t, int64_t n, int64_t, int64_t width) { scores += static_cast<double>(n * width); });
    }
  }
  return scores;
}

double BlockMaskData::sparsity() const {
  const double total = static_cast<double>(B * H * num_q_blocks() * num_kv_blocks());
  if (total == 0) return 0;
  const double used = sum(kv_num_blocks).item<double>() + sum(full_kv_num_blocks).item<double>();
  return 100.0 * (1.0 - used / total);
}

std::string BlockMaskData::to_string(int64_t b, int64_t h) const {
  check(b >= 0 && b < B && h >= 0 && h < H, "BlockMask", "to_string(", b, ", ", h, ") outside B=", B, ", H=", H);
  const int64_t nq = num_q_blocks(), nk = num_kv_blocks();
  std::ostringstream os;
  os << "BlockMask(B=" << B << ", H=" << H << ", Q_LEN=" << q_len << ", KV_LEN=" << kv_len
     << ", block_size=" << block_size << ", sparsity=" << sparsity() << "%)\n";
  const int64_t row0 = (b * H + h) * nq;
  for (int64_t qb = 0; qb < nq; ++qb) {
    std::string line(static_cast<size_t>(nk), '.');
    for (int64_t c = 0; c < kv_num_blocks.data_ptr<int32_t>()[row0 + qb]; ++c)
      line[kv_indices.data_ptr<int32_t>()[(row0 + qb) * kv_indices.size(3) + c]] = '+';
    for (int64_t c = 0; c < full_kv_num_blocks.data_ptr<int32_t>()[row0 + qb]; ++c)
      line[full_kv_indices.data_ptr<int32_t>()[(row0 + qb) * full_kv_indices.size(3) + c]] = '#';
    os << line << "\n";
  }
  return os.str();
}

namespace attention_detail {

Shapes check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m, const FlexOptions& o) {
  const char* op = "flex_attention";
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, "expected 4-D q, k, v (B, H, L, E) but got ",
        shape_text(q.sizes()), ", ", shape_text(k.sizes()), ", ", shape_text(v.sizes()));
  check(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), op,
        "expected q, k, v of one floating dtype but got ", q.dtype(), ", ", k.dtype(), ", ", v.dtype());
  Shapes s{};
  s.B = q.size(0), s.Hq = q.size(1), s.Hkv = k.size(1), s.L = q.size(2), s.S = k.size(2), s.E = q.size(3);
  s.Ev = v.size(3), s.group = 1, s.Bkv = k.size(0);
  check((k.size(0) == s.B || k.size(0) == 1) && v.size(0) == k.size(0), op,
        "k and v need q's batch size or 1 (broadcast) but got q ", shape_text(q.sizes()), ", k ", shape_text(k.sizes()),
        ", v ", shape_text(v.sizes()));
  check(k.size(3) == s.E, op, "q and k need the same head dim, got ", s.E, " and ", k.size(3));
  check(v.size(1) == s.Hkv && v.size(2) == s.S, op, "k ", shape_text(k.sizes()), " and v ", shape_text(v.sizes()),
        " need the same heads and length");
  if (s.Hq != s.Hkv) {
    check(o.enable_gqa, op, "q has ", s.Hq, " heads and k/v ", s.Hkv, ": set enable_gqa for grouped-query attention");
    check(s.Hkv > 0 && s.Hq % s.Hkv == 0, op, "with enable_gqa, q heads (", s.Hq, ") must be a multiple of kv heads (",
          s.Hkv, ")");
    s.group = s.Hq / s.Hkv;
  }
  check((m.B == 1 || m.B == s.B) && (m.H == 1 || m.H == s.Hq), op, "block mask of B=", m.B, ", H=", m.H,
        " does not broadcast to B=", s.B, ", H=", s.Hq);
  check(m.q_len == s.L && m.kv_len == s.S, op, "block mask was built for Q_LEN=", m.q_len, ", KV_LEN=", m.kv_len,
        " but q has length ", s.L, " and k ", s.S);
  s.scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(s.E)));
  s.q_st = {s.Hq * s.L * s.E, s.L * s.E, s.E};
  s.o_st = s.do_st = {s.Hq * s.L * s.Ev, s.L * s.Ev, s.Ev};
  s.k_st = {s.Hkv * s.S * s.E, s.S * s.E, s.E};
  s.v_st = {s.Hkv * s.S * s.Ev, s.S * s.Ev, s.Ev};
  s.dq_st = s.q_st;
  s.dk_st = s.k_st, s.dv_st = s.v_st;  // per q batch: b strides as for Bkv == B
  s.dk_st.b = s.Hkv * s.S * s.E, s.dv_st.b = s.Hkv * s.S * s.Ev;
  return s;
}

RowStrides row_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

}  // namespace attention_detail
}  // namespace kiln
