// View ops: each shape function computes the new sizes, strides and offset;
// the dispatcher builds an alias of input 0's storage from them (no kernel,
// no copy).
#include <algorithm>
#include <numeric>
#include <optional>

#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using ops::shape_str;
using ops::wrap_dim;

TensorMeta meta_of(const Tensor& t) { return {t.sizes(), t.dtype(), t.strides(), t.storage_offset()}; }

// Strides for viewing `t` with `shape` without copying, if possible
// (PyTorch's computeStride): each run of old dims that is contiguous within
// itself can be split or merged freely.
std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  const Shape& os = t.sizes();
  const Shape& ost = t.strides();
  Shape ns(shape.size());
  if (t.numel() == 0 || t.dim() == 0) return contiguous_strides(shape);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// Resolves one -1 in a requested shape.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      check(infer < 0, op, "only one dimension can be inferred in shape ", shape_text(shape));
      infer = static_cast<int64_t>(i);
    } else {
      check(shape[i] >= 0, op, "invalid shape dimension ", shape[i], " in ", shape_text(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    check(known != 0 && numel % known == 0, op, "shape ", shape_text(shape), " is invalid for input of size ", numel);
    out[infer] = numel / known;
  }
  check(shape_numel(out) == numel, op, "shape ", shape_text(shape), " is invalid for input of size ", numel);
  return out;
}

std::vector<TensorMeta> view_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  Shape shape = infer_shape(a.get_shape("size"), t.numel(), "view");
  auto st = view_strides(t, shape);
  check(st.has_value(), "view", "size ", shape_text(shape), " is not compatible with the input's size ",
        shape_text(t.sizes()), " and stride ", shape_text(t.strides()), "; use reshape() instead");
  return {{shape, t.dtype(), *st, t.storage_offset()}};
}

std::vector<TensorMeta> permute_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  const Shape& dims = a.get_shape("dims");
  check(static_cast<int64_t>(dims.size()) == t.dim(), "permute", "number of dims ", dims.size(),
        " doesn't match the input's ", t.dim(), " dims");
  TensorMeta m = meta_of(t);
  std::vector<bool> seen(t.dim(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], t.dim(), "permute");
    check(!seen[d], "permute", "repeated dim ", dims[i], " in ", shape_text(dims));
    seen[d] = true;
    m.sizes[i] = t.size(d);
    m.strides[i] = t.stride(d);
  }
  return {m};
}

std::vector<TensorMeta> expand_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  const Shape& size = a.get_shape("size");
  check(static_cast<int64_t>(size.size()) >= t.dim(), "expand", "the number of sizes provided (", size.size(),
        ") must be greater or equal to the number of dimensions in the tensor (", t.dim(), ")");
  TensorMeta m{size, t.dtype(), Shape(size.size(), 0), t.storage_offset()};
  const int64_t off = static_cast<int64_t>(size.size()) - t.dim();
  for (int64_t i = 0; i < static_cast<int64_t>(size.size()); ++i) {
    if (i < off) {
      check(size[i] >= 0, "expand", "the expanded size ", size[i], " is not allowed in a leading dimension");
      continue;
    }
    const int64_t s = t.size(i - off);
    if (size[i] == -1 || size[i] == s) {
      m.sizes[i] = s;
      m.strides[i] = t.stride(i - off);
    } else {
      check(s == 1, "expand", "the expanded size of the tensor (", size[i], ") must match the existing size (", s,
            ") at non-singleton dimension ", i, ". Target sizes: ", shape_text(size), ". Tensor sizes: ",
            shape_text(t.sizes()));
    }
  }
  return {m};
}

std::vector<TensorMeta> slice_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  check(t.dim() > 0, "slice", "cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(a.get_int("dim"), t.dim(), "slice");
  const int64_t step = a.get_int("step");
  check(step > 0, "slice", "step must be positive but got ", step);
  const int64_t n = t.size(d);
  auto clampi = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
  const int64_t start = clampi(a.get_int("start")), end = std::max(clampi(a.get_int("end")), start);
  TensorMeta m = meta_of(t);
  m.sizes[d] = (end - start + step - 1) / step;
  m.strides[d] = t.stride(d) * step;
  m.storage_offset += start * t.stride(d);
  return {m};
}

std::vector<TensorMeta> select_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  check(t.dim() > 0, "select", "cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(a.get_int("dim"), t.dim(), "select");
  int64_t i = a.get_int("index");
  check(i >= -t.size(d) && i < t.size(d), "select", "index ", i, " is out of range for dimension ", d, " with size ",
        t.size(d));
  if (i < 0) i += t.size(d);
  TensorMeta m = meta_of(t);
  m.storage_offset += i * t.stride(d);
  m.sizes.erase(m.sizes.begin() + d);
  m.strides.erase(m.strides.begin() + d);
  return {m};
}

// squeeze (dim < 0 means every size-1 dim) and unsqueeze.
std::vector<TensorMeta> squeeze_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  TensorMeta m{{}, t.dtype(), {}, t.storage_offset()};
  const bool all = !a.has("dim");
  const int64_t d = all ? -1 : wrap_dim(a.get_int("dim"), t.dim(), "squeeze");
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) == 1 && (all || i == d)) continue;
    m.sizes.push_back(t.size(i));
    m.strides.push_back(t.stride(i));
  }
  return {m};
}

std::vector<TensorMeta> unsqueeze_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  const int64_t d = wrap_dim(a.get_int("dim"), t.dim() + 1, "unsqueeze");
  TensorMeta m = meta_of(t);
  const int64_t st = d < t.dim() ? t.size(d) * t.stride(d) : 1;
  m.sizes.insert(m.sizes.begin() + d, 1);
  m.strides.insert(m.strides.begin() + d, st);
  return {m};
}

std::vector<TensorMeta> unfold_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  const int64_t d = wrap_dim(a.get_int("dim"), t.dim(), "unfold");
  const int64_t size = a.get_int("size"), step = a.get_int("step");
  const int64_t n = t.dim() == 0 ? 1 : t.size(d);
  check(size >= 0 && size <= n, "unfold", "maximum size for tensor at dimension ", d, " is ", n, " but size is ", size);
  check(step > 0, "unfold", "step is ", step, " but must be > 0");
  TensorMeta m = meta_of(t);
  if (t.dim() > 0) {
    m.sizes[d] = (n - size) / step + 1;
    m.strides[d] = t.stride(d) * step;
  }
  m.sizes.push_back(size);
  m.strides.push_back(t.dim() == 0 ? 1 : t.stride(d));
  return {m};
}

std::vector<TensorMeta> as_strided_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  const Shape& size = a.get_shape("size");
  const Shape& stride = a.get_shape("stride");
  const int64_t off = a.get_int("storage_offset");
  // Note [Checked sizes]; the dispatcher checks every view the same way, this
  // says it in elements, as as_strided's arguments are.
  const size_t need = layout_extent_nbytes(size, stride, off, t.dtype(), "as_strided") / t.element_size();
  const size_t capacity = t.impl()->storage->nbytes() / t.element_size();
  check(need <= capacity, "as_strided", "view of size ", shape_text(size), " and stride ", shape_text(stride),
        " at offset ", off, " needs ", need, " elements but the storage has ", capacity);
  return {{size, t.dtype(), stride, off}};
}

// The diagonal of each (dim1, dim2) plane as the last dim: its stride is
// the sum of theirs; it starts at (max(-offset, 0), max(offset, 0)).
std::vector<TensorMeta> diagonal_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  const char* op = "diagonal";
  check(t.dim() >= 2, op, "expected a tensor of at least 2 dims but got shape ", shape_text(t.sizes()));
  const int64_t d1 = wrap_dim(a.get_int("dim1"), t.dim(), op), d2 = wrap_dim(a.get_int("dim2"), t.dim(), op);
  check(d1 != d2, op, "dim1 and dim2 must differ but both are ", d1);
  const int64_t offset = a.get_int("offset");
  const int64_t row0 = std::max<int64_t>(-offset, 0), col0 = std::max<int64_t>(offset, 0);
  const int64_t n = std::max<int64_t>(0, std::min(t.size(d1) - row0, t.size(d2) - col0));
  TensorMeta m{{}, t.dtype(), {}, n == 0 ? t.storage_offset() : t.storage_offset() + row0 * t.stride(d1) + col0 * t.stride(d2)};
  for (int64_t i = 0; i < t.dim(); ++i)
    if (i != d1 && i != d2) m.sizes.push_back(t.size(i)), m.strides.push_back(t.stride(i));
  m.sizes.push_back(n), m.strides.push_back(t.stride(d1) + t.stride(d2));
  return {m};
}

std::vector<TensorMeta> alias_shape(std::span<const Tensor> in, const Attrs&) { return {meta_of(in[0])}; }

OpDef view_def(const char* name, const char* schema, ShapeFn f) { return OpDef{name, schema, OpKind::View, f, {}}; }

// The views' backward formulas, written with ordinary ops.
using autograd::kSaveNone;
using Ctx = autograd::BackwardContext;
using Grads = std::vector<Tensor>;
const Shape& in_shape(const Ctx& c) { return c.input_meta[0].sizes; }
OpDef view_def(const char* name, const char* schema, ShapeFn f, const autograd::BackwardDef* backward) {
  return ops::with_backward(view_def(name, schema, f), backward);
}
// view, squeeze, unsqueeze: the gradient reshaped back.
constexpr autograd::BackwardDef kReshapeGrad{[](const Ctx& c) -> Grads { return {c.grads[0].reshape(in_shape(c))}; },
                                             kSaveNone};
constexpr autograd::BackwardDef kAliasGrad{[](const Ctx& c) -> Grads { return {c.grads[0]}; }, kSaveNone};
constexpr autograd::BackwardDef kPermuteGrad{[](const Ctx& c) -> Grads {
                                               const Shape& dims = c.attrs.get_shape("dims");
                                               Shape inv(dims.size());
                                               for (size_t i = 0; i < dims.size(); ++i)
                                                 inv[(dims[i] + dims.size()) % dims.size()] = static_cast<int64_t>(i);
                                               return {c.grads[0].permute(inv)};
                                             },
                                             kSaveNone};
constexpr autograd::BackwardDef kExpandGrad{
    [](const Ctx& c) -> Grads { return {ops::sum_to(c.grads[0], in_shape(c))}; }, kSaveNone};
constexpr autograd::BackwardDef kSliceGrad{
    [](const Ctx& c) -> Grads {
      const auto& a = c.attrs;
      return {slice_backward(c.grads[0], in_shape(c), a.get_int("dim"), a.get_int("start"), a.get_int("end"),
                             a.get_int("step"))};
    },
    kSaveNone};
constexpr autograd::BackwardDef kSelectGrad{
    [](const Ctx& c) -> Grads {
      return {select_backward(c.grads[0], in_shape(c), c.attrs.get_int("dim"), c.attrs.get_int("index"))};
    },
    kSaveNone};
// Windows may overlap: each window's gradient is added back into place.
constexpr autograd::BackwardDef kUnfoldGrad{
    [](const Ctx& c) -> Grads {
      const Tensor& g = c.grads[0];
      const int64_t dim = c.attrs.get_int("dim"), size = c.attrs.get_int("size"), step = c.attrs.get_int("step");
      Tensor z = zeros(in_shape(c), g.options());
      if (in_shape(c).empty()) return {g.reshape({})};
      const int64_t nd = static_cast<int64_t>(in_shape(c).size());
      const int64_t d = dim < 0 ? dim + nd : dim;
      Shape perm;  // the window dim (last in the gradient) goes back to position d
      for (int64_t i = 0; i < d; ++i) perm.push_back(i);
      perm.push_back(nd - 1);
      for (int64_t i = d; i < nd - 1; ++i) perm.push_back(i);
      for (int64_t w = 0; w < g.size(d); ++w) z.narrow(d, w * step, size).add_(g.select(d, w).permute(perm));
      return {z};
    },
    kSaveNone};

const OpDef& kView =
    register_op(view_def("view", "view(Tensor(a) self, int[] size) -> Tensor(a)", view_shape, &kReshapeGrad));
const OpDef& kPermute =
    register_op(view_def("permute", "permute(Tensor(a) self, int[] dims) -> Tensor(a)", permute_shape, &kPermuteGrad));
const OpDef& kExpand =
    register_op(view_def("expand", "expand(Tensor(a) self, int[] size) -> Tensor(a)", expand_shape, &kExpandGrad));
const OpDef& kSlice = register_op(view_def(
    "slice", "slice(Tensor(a) self, int dim, int start, int end, int step) -> Tensor(a)", slice_shape, &kSliceGrad));
const OpDef& kSelect = register_op(
    view_def("select", "select(Tensor(a) self, int dim, int index) -> Tensor(a)", select_shape, &kSelectGrad));
const OpDef& kSqueeze =
    register_op(view_def("squeeze", "squeeze(Tensor(a) self, int? dim) -> Tensor(a)", squeeze_shape, &kReshapeGrad));
const OpDef& kUnsqueeze = register_op(
    view_def("unsqueeze", "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", unsqueeze_shape, &kReshapeGrad));
const OpDef& kUnfold = register_op(
    view_def("unfold", "unfold(Tensor(a) self, int dim, int size, int step) -> Tensor(a)", unfold_shape, &kUnfoldGrad));
const OpDef& kAsStrided = register_op(view_def("as_strided", "as_strided(Tensor(a) self, int[] size, int[] stride, int storage_offset) -> Tensor(a)", as_strided_shape));
// Its gradient: zeros of the input's shape with the gradient written through the same diagonal.
std::vector<Tensor> diagonal_backward(const autograd::BackwardContext& c) {
  const Tensor g = zeros(c.input_meta[0].sizes, c.grads[0].options());
  diagonal(g, c.attrs.get_int("offset"), c.attrs.get_int("dim1"), c.attrs.get_int("dim2")).copy_(c.grads[0]);
  return {g};
}
constexpr autograd::BackwardDef kDiagonalBackward{diagonal_backward, autograd::kSaveNone};
const OpDef& kDiagonal = register_op(ops::with_backward(
    view_def("diagonal", "diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)", diagonal_shape),
    &kDiagonalBackward));
const OpDef& kAlias = register_op(view_def("alias", "alias(Tensor(a) self) -> Tensor(a)", alias_shape, &kAliasGrad));
// detach is its own op, not an alias whose history is dropped afterwards,
// so that a trace (kiln::compile) sees where gradients stop.
const OpDef& kDetach =
    register_op(view_def("detach", "detach(Tensor(a) self) -> Tensor(a)", alias_shape, &autograd::kNotDifferentiable));

// Note [View backward ops]
// slice_backward / select_backward (as in PyTorch) are the gradients of
// slice and select: zeros of the input's shape with the gradient written
// through the same view. As compute ops they keep backward graphs free of
// in-place copies, so kiln::compile can trace them. The kernel composes a
// fill and a strided copy (ops called by a kernel are hidden from modes).
std::vector<TensorMeta> view_backward_shape(const char* name, const OpDef& view, std::span<const Tensor> in,
                                            const Attrs& a) {
  const Shape& input_sizes = a.get_shape("input_sizes");
  auto impl = std::make_shared<TensorImpl>();  // metadata only, for the view's shape function
  impl->sizes = input_sizes;
  impl->strides = contiguous_strides(input_sizes);
  impl->dtype = in[0].dtype();
  const Tensor probe[] = {Tensor(std::move(impl))};
  const TensorMeta region = view.shape(std::span<const Tensor>(probe, 1), a)[0];
  check(in[0].sizes() == region.sizes, name, "grad of shape ", shape_text(in[0].sizes()), " does not match the ",
        view.name, " of ", shape_text(input_sizes), ", which has shape ", shape_text(region.sizes));
  return ops::one_output(input_sizes, in[0].dtype());
}
template <const OpDef& (*View)()>
void view_backward_kernel(const OpCall& c) {
  const Tensor& out = c.outputs[0];
  out.zero_();
  const TensorMeta region = View().shape(std::span<const Tensor>(&out, 1), c.attrs)[0];
  out.as_strided(region.sizes, region.strides, region.storage_offset).copy_(c.inputs[0]);
}
const OpDef& slice_op() { return kSlice; }
const OpDef& select_op() { return kSelect; }
// Their own gradients (second derivatives): the same view of the gradient.
constexpr autograd::BackwardDef kSliceBackwardGrad{
    [](const Ctx& c) -> Grads {
      const auto& a = c.attrs;
      return {c.grads[0].slice(a.get_int("dim"), a.get_int("start"), a.get_int("end"), a.get_int("step"))};
    },
    kSaveNone};
constexpr autograd::BackwardDef kSelectBackwardGrad{
    [](const Ctx& c) -> Grads { return {c.grads[0].select(c.attrs.get_int("dim"), c.attrs.get_int("index"))}; },
    kSaveNone};
const OpDef& kSliceBackward = register_op(ops::with_backward(
    OpDef{
        "slice_backward",
        "slice_backward(Tensor grad, int[] input_sizes, int dim, int start, int end, int step) -> Tensor",
        OpKind::Compute,
        [](std::span<const Tensor> in, const Attrs& a) { return view_backward_shape("slice_backward", kSlice, in, a); },
        {view_backward_kernel<slice_op>}},
    &kSliceBackwardGrad));
const OpDef& kSelectBackward = register_op(
    ops::with_backward(OpDef{"select_backward",
                             "select_backward(Tensor grad, int[] input_sizes, int dim, int index) -> Tensor",
                             OpKind::Compute,
                             [](std::span<const Tensor> in, const Attrs& a) {
                               return view_backward_shape("select_backward", kSelect, in, a);
                             },
                             {view_backward_kernel<select_op>}},
                       &kSelectBackwardGrad));

}  // namespace

Tensor slice_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t start, int64_t end,
                      int64_t step) {
  return ops::call(kSliceBackward, {grad},
                   {{"input_sizes", input_sizes}, {"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
}
Tensor select_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t index) {
  return ops::call(kSelectBackward, {grad}, {{"input_sizes", input_sizes}, {"dim", dim}, {"index", index}});
}

Tensor Tensor::view(Shape shape) const { return ops::call(kView, {*this}, {{"size", std::move(shape)}}); }

Tensor Tensor::reshape(Shape shape) const {
  Shape s = infer_shape(shape, numel(), "reshape");
  if (view_strides(*this, s)) return view(std::move(s));
  return contiguous().view(std::move(s));  // row-major: clone() keeps a channels-last format
}

Tensor Tensor::permute(Shape dims) const { return ops::call(kPermute, {*this}, {{"dims", std::move(dims)}}); }

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) {
    wrap_dim(d0, 0, "transpose"), wrap_dim(d1, 0, "transpose");
    return ops::call(kAlias, {*this});
  }
  Shape dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(d0, dim(), "transpose")], dims[wrap_dim(d1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::t() const {
  check(dim() <= 2, "t", "expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? ops::call(kAlias, {*this}) : transpose(0, 1);
}

Tensor Tensor::expand(Shape shape) const { return ops::call(kExpand, {*this}, {{"size", std::move(shape)}}); }

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  return ops::call(kSlice, {*this}, {{"dim", d}, {"start", start.value_or(0)},
                                     {"end", end.value_or(std::numeric_limits<int64_t>::max() / 2)}, {"step", step}});
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  check(dim() > 0, "narrow", "cannot be applied to a 0-dim tensor");
  const int64_t wd = wrap_dim(d, dim(), "narrow");
  const int64_t n = size(wd);
  if (start < 0) start += n;
  check(start >= 0 && length >= 0 && start + length <= n, "narrow", "start (", start, ") + length (", length,
        ") exceeds dimension size (", n, ")");
  return slice(wd, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  return ops::call(kSelect, {*this}, {{"dim", d}, {"index", index}});
}
Tensor Tensor::squeeze() const { return ops::call(kSqueeze, {*this}); }
Tensor Tensor::squeeze(int64_t d) const { return ops::call(kSqueeze, {*this}, {{"dim", d}}); }
Tensor Tensor::unsqueeze(int64_t d) const { return ops::call(kUnsqueeze, {*this}, {{"dim", d}}); }

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  check(s <= e, "flatten", "start_dim (", start_dim, ") cannot come after end_dim (", end_dim, ")");
  Shape shape(sizes().begin(), sizes().begin() + s);
  int64_t mid = 1;
  for (int64_t i = s; i <= e; ++i) mid *= size(i);
  shape.push_back(mid);
  shape.insert(shape.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::unfold(int64_t d, int64_t size, int64_t step) const {
  return ops::call(kUnfold, {*this}, {{"dim", d}, {"size", size}, {"step", step}});
}

Tensor Tensor::as_strided(Shape sizes, Shape strides, std::optional<int64_t> offset) const {
  return ops::call(kAsStrided, {*this}, {{"size", std::move(sizes)}, {"stride", std::move(strides)},
                                         {"storage_offset", offset.value_or(storage_offset())}});
}

Tensor Tensor::detach() const {
  Tensor out = ops::call(kDetach, {*this});
  out.impl()->autograd.reset();
  return out;
}

Tensor broadcast_to(const Tensor& t, Shape shape) { return t.expand(std::move(shape)); }

Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  return ops::call(kDiagonal, {x}, {{"offset", offset}, {"dim1", dim1}, {"dim2", dim2}});
}

namespace {
const bool registered = [] {
  ops::def<&diagonal>("diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)");
  return true;
}();
}  // namespace

}  // namespace kiln
