// Joining, splitting and indexing: cat, stack, split, chunk, gather,
// scatter, index_select, tril/triu, sort, topk, argsort.
#include "ops/op_util.h"

namespace kiln {
namespace {

using ops::shape_str;

// The backward formulas, written with ordinary ops.
using autograd::kSaveInputs;
using autograd::kSaveNone;
using autograd::kSaveOutputs;
using Ctx = autograd::BackwardContext;
using Grads = std::vector<Tensor>;
const Shape& in_shape(const Ctx& c, size_t i = 0) { return c.input_meta[i].sizes; }

std::vector<TensorMeta> cat_shape(std::span<const Tensor> in, const Attrs& a) {
  const int64_t d = a.get_int("dim");
  Shape s;
  int64_t total = 0;
  for (const Tensor& t : in) {
    if (t.numel() == 0 && t.dim() == 1) continue;  // PyTorch skips legacy 1-D empty tensors
    if (s.empty()) s = t.sizes();
    total += t.size(d);
  }
  if (s.empty()) s = in[0].sizes();
  else s[d] = total;
  return ops::one_output(s, a.get_dtype("dtype"));
}
// Each input its slice of the gradient (a skipped legacy empty one, zeros).
constexpr autograd::BackwardDef kCatGrad{[](const Ctx& c) -> Grads {
                                           const int64_t dim = c.attrs.get_int("dim");
                                           Grads out;
                                           int64_t off = 0;
                                           for (const TensorMeta& m : c.input_meta) {
                                             if (m.sizes.size() == 1 && m.sizes[0] == 0 && c.grads[0].dim() != 1) {
                                               out.push_back(zeros(m.sizes, TensorOptions(m.dtype).device(m.device)));
                                               continue;
                                             }
                                             out.push_back(c.grads[0].narrow(dim, off, m.sizes[dim]));
                                             off += m.sizes[dim];
                                           }
                                           return out;
                                         },
                                         kSaveNone};
const OpDef& kCat = register_op(ops::with_backward(
    OpDef{"cat", "cat(Tensor[] tensors, int dim, *, ScalarType dtype) -> Tensor", OpKind::Compute, cat_shape},
    &kCatGrad));

std::vector<TensorMeta> gather_shape(std::span<const Tensor> in, const Attrs&) {
  return ops::one_output(in[1].sizes(), in[0].dtype());
}
constexpr autograd::BackwardDef kGatherGrad{
    [](const Ctx& c) -> Grads {
      return {scatter_add(zeros(in_shape(c), c.grads[0].options()), c.attrs.get_int("dim"), c.inputs[1], c.grads[0]),
              Tensor()};
    },
    kSaveInputs};
const OpDef& kGather = register_op(ops::with_backward(
    OpDef{"gather", "gather(Tensor self, int dim, Tensor index) -> Tensor", OpKind::Compute, gather_shape},
    &kGatherGrad));
// add: both get g (src at the indices); overwrite: the overwritten places get none.
constexpr autograd::BackwardDef kScatterGrad{
    [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor& idx = c.inputs[1];
      const Tensor& g = c.grads[0];
      Tensor gx = c.attrs.get_bool("add") ? g : scatter(g, dim, idx, zeros(idx.sizes(), g.options()));
      // src may be larger than index: only its leading index-shaped block was read.
      return {gx, Tensor(), ops::block_in_zeros(gather(g, dim, idx), in_shape(c, 2), idx)};
    },
    kSaveInputs};
const OpDef& kScatter = register_op(
    ops::with_backward(OpDef{"scatter", "scatter(Tensor self, int dim, Tensor index, Tensor src, bool add) -> Tensor",
                             OpKind::Compute, ops::same_as_first},
                       &kScatterGrad));

std::vector<TensorMeta> index_select_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  if (!s.empty()) s[a.get_int("dim")] = in[1].numel();
  return ops::one_output(s, in[0].dtype());
}
constexpr autograd::BackwardDef kIndexSelectGrad{
    [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor& g = c.grads[0];
      Shape view(g.dim(), 1);
      view[dim] = g.size(dim);
      const Tensor idx = c.inputs[1].reshape(view).to(kInt64).expand(g.sizes());
      return {scatter_add(zeros(in_shape(c), g.options()), dim, idx, g), Tensor()};
    },
    kSaveInputs};
const OpDef& kIndexSelect =
    register_op(ops::with_backward(OpDef{"index_select", "index_select(Tensor self, int dim, Tensor index) -> Tensor",
                                         OpKind::Compute, index_select_shape},
                                   &kIndexSelectGrad));
constexpr autograd::BackwardDef kTrilGrad{
    [](const Ctx& c) -> Grads { return {tril(c.grads[0], c.attrs.get_int("diagonal"))}; }, kSaveNone};
constexpr autograd::BackwardDef kTriuGrad{
    [](const Ctx& c) -> Grads { return {triu(c.grads[0], c.attrs.get_int("diagonal"))}; }, kSaveNone};
const OpDef& kTril = register_op(ops::with_backward(
    OpDef{"tril", "tril(Tensor self, int diagonal=0) -> Tensor", OpKind::Compute, ops::same_as_first}, &kTrilGrad));
const OpDef& kTriu = register_op(ops::with_backward(
    OpDef{"triu", "triu(Tensor self, int diagonal=0) -> Tensor", OpKind::Compute, ops::same_as_first}, &kTriuGrad));

std::vector<TensorMeta> sort_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  if (!s.empty()) s[a.get_int("dim")] = a.get_int("k");
  return {{s, in[0].dtype()}, {s, kInt64}};
}
// The values' gradient added back at their indices.
constexpr autograd::BackwardDef kSortGrad{
    [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      if (in_shape(c).empty()) return {c.grads[0]};
      return {scatter_add(zeros(in_shape(c), c.grads[0].options()), dim, c.outputs[1], c.grads[0])};
    },
    kSaveOutputs};
const OpDef& kSort = register_op(ops::with_backward(
    OpDef{"sort", "sort(Tensor self, int dim, bool descending, bool stable, int k) -> (Tensor values, Tensor indices)",
          OpKind::Compute, sort_shape},
    &kSortGrad));

void check_index(const Tensor& x, int64_t d, const Tensor& index, const char* op) {
  check(index.dtype() == kInt64 || index.dtype() == kInt32, op, "expected an int64 or int32 index but got ",
        index.dtype());
  check(index.dim() == x.dim() || (x.dim() == 0 && index.dim() <= 1), op, "index of shape ", shape_text(index.sizes()),
        " must have as many dims as the input of shape ", shape_text(x.sizes()));
  for (int64_t i = 0; i < x.dim(); ++i)
    check(i == d || index.size(i) <= x.size(i), op, "index of shape ", shape_text(index.sizes()),
          " is larger than the input of shape ", shape_text(x.sizes()), " at dim ", i);
}

}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  check(!ts.empty(), "cat", "expected a non-empty list of tensors");
  const Tensor* ref = &ts[0];
  for (const Tensor& t : ts)
    if (!(t.numel() == 0 && t.dim() == 1)) {
      ref = &t;
      break;
    }
  const int64_t d = ops::wrap_dim(dim, ref->dim(), "cat");
  check(ref->dim() > 0, "cat", "zero-dimensional tensors cannot be concatenated");
  DType dt = ts[0].dtype();
  for (const Tensor& t : ts) dt = promote_types(dt, t.dtype());
  std::vector<Tensor> in;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!(t.numel() == 0 && t.dim() == 1)) {
      check(t.dim() == ref->dim(), "cat", "tensors must have the same number of dims: tensor 0 has ", ref->dim(),
            " but tensor ", i, " has ", t.dim());
      for (int64_t k = 0; k < t.dim(); ++k)
        check(k == d || t.size(k) == ref->size(k), "cat", "sizes of tensors must match except in dimension ", d,
              ": expected size ", ref->size(k), " but got size ", t.size(k), " for tensor number ", i);
    }
    in.push_back(t.to(dt));
  }
  return dispatch1(kCat, std::span<const Tensor>(in), {{"dim", d}, {"dtype", dt}});
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  check(!ts.empty(), "stack", "expected a non-empty list of tensors");
  const int64_t d = ops::wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> un;
  for (size_t i = 0; i < ts.size(); ++i) {
    check(ts[i].sizes() == ts[0].sizes(), "stack", "expects each tensor to be equal size, but got ",
          shape_text(ts[0].sizes()), " at entry 0 and ", shape_text(ts[i].sizes()), " at entry ", i);
    un.push_back(ts[i].unsqueeze(d));
  }
  return cat(un, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "split");
  check(split_size > 0 || (split_size == 0 && x.size(d) == 0), "split", "split_size must be positive but got ",
        split_size);
  std::vector<Tensor> out;
  const int64_t n = x.size(d);
  if (n == 0) return {x};
  for (int64_t s = 0; s < n; s += split_size) out.push_back(x.narrow(d, s, std::min(split_size, n - s)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const Shape& sizes, int64_t dim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  check(total == x.size(d), "split", "split sizes ", shape_text(sizes), " must sum to the dim's size ", x.size(d));
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check(chunks > 0, "chunk", "number of chunks must be greater than 0 but got ", chunks);
  const int64_t d = ops::wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1), d);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "gather");
  check_index(x, d, index, "gather");
  return ops::call(kGather, {x, index}, {{"dim", d}});
}

Tensor ops::leading_block(const Tensor& src, const Tensor& index) {
  Tensor b = src;
  for (int64_t d = 0; d < index.dim(); ++d) b = b.narrow(d, 0, index.size(d));
  return b;
}

Tensor ops::block_in_zeros(const Tensor& block_grad, const Shape& src_sizes, const Tensor& index) {
  if (block_grad.sizes() == src_sizes) return block_grad;
  const Tensor full_grad = zeros(src_sizes, block_grad.options());
  leading_block(full_grad, index).copy_(block_grad);
  return full_grad;
}

int64_t ops::check_scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const char* op) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), op);
  check_index(x, d, index, op);
  check(src.dim() == index.dim(), op, "src of shape ", shape_text(src.sizes()), " must have as many dims as index ",
        shape_text(index.sizes()));
  for (int64_t i = 0; i < index.dim(); ++i)
    check(index.size(i) <= src.size(i), op, "index of shape ", shape_text(index.sizes()),
          " is larger than src of shape ", shape_text(src.sizes()));
  return d;
}

static Tensor scatter_impl(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, bool add,
                           const char* op) {
  const int64_t d = ops::check_scatter(x, dim, index, src, op);
  return ops::call(kScatter, {x, index, src.to(x.dtype())}, {{"dim", d}, {"add", add}});
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl(x, dim, index, src, false, "scatter");
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl(x, dim, index, src, true, "scatter_add");
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "index_select");
  check(index.dtype() == kInt64 || index.dtype() == kInt32, "index_select",
        "expected an int64 or int32 index but got ", index.dtype());
  check(index.dim() <= 1, "index_select", "index must be 0-D or 1-D but has shape ", shape_text(index.sizes()));
  check(x.dim() > 0, "index_select", "cannot index a 0-dim tensor");
  return ops::call(kIndexSelect, {x, index}, {{"dim", d}});
}

static Tensor triangle(const OpDef& op, const Tensor& x, int64_t diagonal) {
  check(x.dim() >= 2, op.name.c_str(), "expected a tensor with at least 2 dims but got shape ", shape_text(x.sizes()));
  return ops::call(op, {x}, {{"diagonal", diagonal}});
}
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(kTril, x, diagonal); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(kTriu, x, diagonal); }

static std::tuple<Tensor, Tensor> sort_impl(const Tensor& x, int64_t dim, bool desc, bool stable, int64_t k,
                                            const char* op) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return {x.clone(), zeros({}, TensorOptions(kInt64).device(x.device()))};
  const Tensor in[] = {x};
  auto r = dispatch(kSort, in, {{"dim", d}, {"descending", desc}, {"stable", stable}, {"k", k}});
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(ops::wrap_dim(dim, x.dim(), "sort"));
  return sort_impl(x, dim, descending, stable, n, "sort");
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(ops::wrap_dim(dim, x.dim(), "topk"));
  check(k >= 0 && k <= n, "topk", "k (", k, ") is out of range for a dimension of size ", n);
  // Results are always sorted: a partial sort costs the same here.
  return sort_impl(x, dim, largest, false, k, "topk");
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return std::get<1>(sort(x, dim, descending, true)); }

}  // namespace kiln
