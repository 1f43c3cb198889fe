// create_block_mask's work as dispatcher ops (the dispatcher, its modes and
// the profiler see it; another device can register its own kernels):
// "block_mask_lists" and "block_mask_partial_bits" evaluate the mask_mod
// (kiln/detail/block_mask_eval.h), "block_mask_transpose" builds the
// per-KV-block lists the backward pass walks.
#include "kiln/attention.h"

namespace kiln::attention_detail {
namespace {

const MaskEvaluator& evaluator_of(const Attrs& a) {
  return *static_cast<const MaskEvaluator*>(a.get_opaque("mask_mod").object.get());
}

// The lists are computed on the CPU (create_block_mask moves them after).
TensorMeta on_cpu(Shape sizes, DType dtype) { return {std::move(sizes), dtype, {}, 0, kCPU}; }

std::vector<TensorMeta> lists_shape(std::span<const Tensor>, const Attrs& a) {
  const BlockMaskData z = mask_sizes(a);
  const Shape counts = {z.B, z.H, z.num_q_blocks()}, lists = {z.B, z.H, z.num_q_blocks(), std::max<int64_t>(z.num_kv_blocks(), 1)};
  return {on_cpu(counts, kInt32), on_cpu(counts, kInt32), on_cpu(lists, kInt32), on_cpu(lists, kInt32)};
}
void lists_kernel(const OpCall& c) {
  for (const Tensor& t : c.outputs) t.zero_();
  evaluator_of(c.attrs).lists(c);
}

std::vector<TensorMeta> partial_bits_shape(std::span<const Tensor>, const Attrs& a) {
  const BlockMaskData z = mask_sizes(a);
  return {on_cpu({z.B, z.H, z.num_q_blocks(), a.get_int("most"), z.block_size, z.bit_words()}, kInt64)};
}

// inputs: per-row counts (B, H, rows) and lists (B, H, rows, width) of
// columns; outputs the same transposed: per column, its rows in ascending order.
std::vector<TensorMeta> transpose_shape(std::span<const Tensor> in, const Attrs& a) {
  check(in.size() == 2 && in[0].dim() == 3 && in[1].dim() == 4 && in[0].dtype() == kInt32 && in[1].dtype() == kInt32,
        "block_mask_transpose", "expected int32 counts (B, H, rows) and lists (B, H, rows, width)");
  const int64_t cols = a.get_int("columns"), rows = in[0].size(2);
  return {on_cpu({in[0].size(0), in[0].size(1), cols}, kInt32),
          on_cpu({in[0].size(0), in[0].size(1), cols, std::max<int64_t>(rows, 1)}, kInt32)};
}
void transpose_kernel(const OpCall& c) {
  const Tensor num = c.inputs[0].contiguous(), idx = c.inputs[1].contiguous();
  c.outputs[0].zero_(), c.outputs[1].zero_();
  const int64_t BH = num.size(0) * num.size(1), rows = num.size(2), cols = c.outputs[0].size(2);
  const int64_t width = idx.size(3), twidth = c.outputs[1].size(3);
  const int32_t* n = num.data_ptr<int32_t>();
  const int32_t* ix = idx.data_ptr<int32_t>();
  int32_t* tn = c.outputs[0].data_ptr<int32_t>();
  int32_t* ti = c.outputs[1].data_ptr<int32_t>();
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t r = 0; r < rows; ++r)  // ascending rows keep each transposed list sorted
      for (int64_t k = 0; k < n[bh * rows + r]; ++k) {
        const int64_t col = ix[(bh * rows + r) * width + k];
        ti[(bh * cols + col) * twidth + tn[bh * cols + col]++] = static_cast<int32_t>(r);
      }
}

// Integer lists: no gradient.
OpDef mask_op(std::string name, std::string schema, ShapeFn shape, KernelFn kernel) {
  OpDef d{std::move(name), std::move(schema), OpKind::Compute, shape, {kernel}};
  d.backward = &autograd::kNotDifferentiable;
  d.runs_while_tracing = true;
  return d;
}
const OpDef& kLists = register_op(mask_op(
    "block_mask_lists",
    "block_mask_lists(Any mask_mod, int B, int H, int q_len, int kv_len, int block_size) -> (Tensor, Tensor, Tensor, "
    "Tensor)",
    lists_shape, lists_kernel));
const OpDef& kPartialBits = register_op(mask_op(
    "block_mask_partial_bits",
    "block_mask_partial_bits(Tensor kv_num_blocks, Tensor kv_indices, Any mask_mod, int B, int H, int q_len, "
    "int kv_len, int block_size, int most) -> Tensor",
    partial_bits_shape, [](const OpCall& c) { evaluator_of(c.attrs).partial_bits(c); }));
const OpDef& kTranspose = register_op(mask_op(
    "block_mask_transpose", "block_mask_transpose(Tensor num_blocks, Tensor indices, int columns) -> (Tensor, Tensor)",
    transpose_shape, transpose_kernel));

}  // namespace

std::pair<Tensor, Tensor> transpose_block_lists(const Tensor& num_blocks, const Tensor& indices, int64_t columns) {
  std::vector<Tensor> r = dispatch(kTranspose, std::vector<Tensor>{num_blocks, indices}, Attrs{{"columns", columns}});
  return {r[0], r[1]};
}

void build_block_mask(BlockMaskData& m, OpaqueAttr evaluator, Device device) {
  Attrs attrs = mask_size_attrs(m);
  attrs.set("mask_mod", std::move(evaluator));
  std::vector<Tensor> lists = dispatch(kLists, {}, attrs);
  m.kv_num_blocks = lists[0], m.full_kv_num_blocks = lists[1], m.kv_indices = lists[2], m.full_kv_indices = lists[3];
  // The bits of each row's partial blocks, unless they would be too large
  // (the kernels then call mask_mod).
  const int64_t rows = m.B * m.H * m.num_q_blocks(), block_words = m.block_size * m.bit_words();
  const int32_t* counts = m.kv_num_blocks.data_ptr<int32_t>();
  const int64_t most = rows == 0 ? 0 : *std::max_element(counts, counts + rows);
  if (most > 0 && rows * most * block_words * 8 <= BlockMaskData::kMaxPartialBitsBytes) {
    attrs.set("most", most);
    m.partial_bits = dispatch(kPartialBits, std::vector<Tensor>{m.kv_num_blocks, m.kv_indices}, attrs)[0];
  }
  m.build_transposed();
  if (device != kCPU) m.move_to(device);
}

}  // namespace kiln::attention_detail
