// Copies, conversions and tensor factories. Every factory is an op without
// tensor inputs (its shape function reads the size and dtype attributes), so
// a tracer sees factories like any other op.
#include <cmath>

#include "core/convert.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using ops::call;

// A copy in another dtype and, with a `device` attribute, on another device.
// preserve_format: the copy keeps the input's memory format (channels-last
// stays so), as clone() and to() do in PyTorch; without it the copy is
// row-major (contiguous(), copies into a given tensor).
std::vector<TensorMeta> to_copy_shape(std::span<const Tensor> in, const Attrs& a) {
  auto m = ops::one_output(in[0].sizes(), a.get_dtype("dtype"));
  if (a.has("device")) m[0].device = a.get_device("device");
  if (a.has("preserve_format") && a.get_bool("preserve_format")) ops::follow_memory_format(m[0], in[0]);
  return m;
}
// The gradient goes back to the input's dtype and device.
constexpr autograd::BackwardDef kToCopyGrad{[](const autograd::BackwardContext& c) -> std::vector<Tensor> {
                                              return {c.grads[0].to(*c.input_meta[0].device, c.input_meta[0].dtype)};
                                            },
                                            autograd::kSaveNone};
const OpDef& kToCopy = register_op(ops::with_backward(
    OpDef{"_to_copy",
          "_to_copy(Tensor self, ScalarType dtype, *, Device? device=None, bool preserve_format=False) -> Tensor",
          OpKind::Compute, to_copy_shape},
    &kToCopyGrad));

OpDef factory(const char* name, const char* schema) {
  return ops::with_backward(OpDef{name, schema, OpKind::Compute, ops::from_size_attrs}, &autograd::kNotDifferentiable);
}
const OpDef& kFill = register_op(factory("full", "full(int[] size, Scalar value, *, ScalarType dtype, Device device) -> Tensor"));
const OpDef& kArange = register_op(factory("arange", "arange(int[] size, Scalar start, Scalar step, *, ScalarType dtype, Device device) -> Tensor"));
const OpDef& kLinspace = register_op(factory("linspace", "linspace(int[] size, Scalar start, Scalar end, *, ScalarType dtype, Device device) -> Tensor"));
const OpDef& kEye = register_op(factory("eye", "eye(int[] size, *, ScalarType dtype, Device device) -> Tensor"));

Tensor wrapped_fill(double value, DType dt) {
  // Straight to memory, past the modes: under kiln::compile a C++ number is
  // then a graph input read at run time, not a constant of the graph (which
  // would recompile whenever the number changes). Not through the fill
  // kernel either: this runs for every number in every op call. The value
  // is converted as fill_kernel converts it.
  Tensor t = empty({}, TensorOptions(dt).device(kCPU));
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    *reinterpret_cast<T*>(t.impl()->data()) = convert<T>(value);
  });
  t.impl()->wrapped_number = true;
  return t;
}

// A C++ number (wrapped_scalar) converted for an op's computation: filled
// again in dtype dt, the value cast as _to_copy casts it. Converting it with
// _to_copy cost a dispatched kernel per number in eager mode and a node plus
// a graph input per number under compile. The value is read directly, not
// through item(), whose concrete-value hook would end a traced graph.
Tensor wrapped_number_as(const Tensor& x, DType dt) {
  const double v = visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    return convert<double>(*reinterpret_cast<const S*>(x.impl()->data()));
  });
  return wrapped_fill(v, dt);
}

Tensor make_factory(const OpDef& op, Shape size, DType dtype, Device device, Attrs a = {}) {
  shape_nbytes(size, dtype, op.name.c_str());
  a.set("size", std::move(size));
  a.set("dtype", dtype);
  a.set("device", device);
  return dispatch1(op, std::span<const Tensor>(), a);
}

}  // namespace

Tensor Tensor::to(DType t) const {
  if (dtype() == t) return *this;
  if (impl()->wrapped_number) return wrapped_number_as(*this, t);
  return call(kToCopy, {*this}, {{"dtype", t}, {"preserve_format", true}});
}
Tensor Tensor::to(Device device) const { return to(device, dtype()); }
Tensor Tensor::to(Device device, DType t) const {
  if (this->device() == device) return to(t);
  check(!is_meta(), "to", "cannot copy a tensor of size ", ops::shape_text(sizes()), " from the meta device to ",
        device, ": a meta tensor has no data (make the tensor on ", device, " instead)");
  return call(kToCopy, {*this}, {{"dtype", t}, {"device", device}, {"preserve_format", true}});
}
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : call(kToCopy, {*this}, {{"dtype", dtype()}}); }
// Through a permuted view: the copy is the row-major copy of the tensor
// viewed in the format's dim order, so it is differentiable as those are.
Tensor Tensor::contiguous(MemoryFormat f) const {
  check(f != MemoryFormat::Preserve, "contiguous", "preserve_format is not supported by contiguous (name a format)");
  if (is_contiguous(f)) return *this;
  if (f == MemoryFormat::Contiguous) return contiguous();
  memory_format_strides(sizes(), f, "contiguous");  // the rank check
  const bool is2d = f == MemoryFormat::ChannelsLast;
  const Shape to_last = is2d ? Shape{0, 2, 3, 1} : Shape{0, 2, 3, 4, 1};
  const Shape back = is2d ? Shape{0, 3, 1, 2} : Shape{0, 4, 1, 2, 3};
  return permute(to_last).contiguous().permute(back);
}
Tensor Tensor::clone() const { return call(kToCopy, {*this}, {{"dtype", dtype()}, {"preserve_format", true}}); }

const Tensor& Tensor::copy_(const Tensor& src, SourceLocation where) const {
  const detail::ApiCall call(where);
  const Shape s = broadcast_shapes(sizes(), src.sizes(), "copy_");
  check(s == sizes(), "copy_", "source of shape ", ops::shape_text(src.sizes()),
        " cannot be broadcast to the destination's shape ", ops::shape_text(sizes()));
  // Across devices too: into meta, only the checks (as PyTorch).
  ops::call_out(kToCopy, *this, {src.expand(sizes())}, {{"dtype", dtype()}, {"device", device()}});
  return *this;
}

const Tensor& Tensor::fill_(Scalar v, SourceLocation where) const {
  const detail::ApiCall call(where);
  ops::call_out(kFill, *this, {},
                {{"value", v.to_double()}, {"size", sizes()}, {"dtype", dtype()}, {"device", device()}});
  return *this;
}
const Tensor& Tensor::zero_(SourceLocation where) const {
  const detail::ApiCall call(where);
  return fill_(0);
}

Tensor full(Shape sizes, Scalar value, TensorOptions options) {
  return make_factory(kFill, std::move(sizes), options.dtype_or(value.dtype()), options.device_or_default(),
                      {{"value", value.to_double()}});
}
Tensor zeros(Shape sizes, TensorOptions options) { return full(std::move(sizes), 0, options.dtype(options.dtype_or(kFloat32))); }
Tensor ones(Shape sizes, TensorOptions options) { return full(std::move(sizes), 1, options.dtype(options.dtype_or(kFloat32))); }
// The *_like factories keep a channels-last tensor's format (empty_like's).
Tensor full_like(const Tensor& t, Scalar value) {
  if (t.suggest_memory_format() != MemoryFormat::Contiguous) {
    Tensor out = empty_like(t);
    out.fill_(value);
    return out;
  }
  return full(t.sizes(), value, TensorOptions(t.dtype()).device(t.device()));
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1); }

Tensor scalar_tensor(Scalar value, TensorOptions options) { return full({}, value, options); }
Tensor wrapped_scalar(Scalar value) {
  return wrapped_fill(value.to_double(), value.kind() == Scalar::Kind::Float ? kFloat64 : value.dtype());
}
Tensor ops::number_beside(const Tensor& t, Scalar v) {
  return is_floating(t.dtype()) ? wrapped_fill(v.to_double(), t.dtype()) : wrapped_scalar(v);
}

Tensor arange(Scalar end, TensorOptions options) { return arange(0, end, 1, options); }
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions options) {
  const double s = start.to_double(), e = end.to_double(), st = step.to_double();
  check(st != 0, "arange", "step must be nonzero");
  check((st > 0 && e >= s) || (st < 0 && e <= s), "arange", "upper bound and larger bound inconsistent with step sign");
  const bool any_float = start.kind() == Scalar::Kind::Float || end.kind() == Scalar::Kind::Float ||
                         step.kind() == Scalar::Kind::Float;
  const DType t = options.dtype_or(any_float ? default_dtype() : kInt64);
  const double count = std::ceil((e - s) / st);
  // 2^63 is exact in double; anything at or above it (or NaN) is no int64.
  check(count >= 0 && count < 9223372036854775808.0, "arange", "start ", s, ", end ", e, " and step ", st,
        " give ", count, " elements, which is not a valid size");
  const int64_t n = static_cast<int64_t>(count);
  return make_factory(kArange, {n}, t, options.device_or_default(), {{"start", s}, {"step", st}});
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  check(steps >= 0, "linspace", "number of steps must be non-negative but got ", steps);
  return make_factory(kLinspace, {steps}, options.dtype_or(kFloat32), options.device_or_default(),
                      {{"start", start}, {"end", end}});
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  check(n >= 0 && m.value_or(n) >= 0, "eye", "n and m must be non-negative");
  return make_factory(kEye, {n, m.value_or(n)}, options.dtype_or(kFloat32), options.device_or_default());
}

Tensor from_blob(void* data, Shape sizes, DType dtype, std::function<void(void*)> deleter) {
  Shape strides = contiguous_strides(sizes);
  return from_blob(data, std::move(sizes), std::move(strides), dtype, std::move(deleter));
}

Tensor from_blob(void* data, Shape sizes, Shape strides, DType dtype, std::function<void(void*)> deleter) {
  const size_t nbytes = layout_extent_nbytes(sizes, strides, 0, dtype, "from_blob");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(data, nbytes, std::move(deleter));
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace kiln
