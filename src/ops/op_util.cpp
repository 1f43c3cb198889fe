// Helpers shared by the op front ends; see op_util.h.
#include "ops/op_util.h"

#include <algorithm>

namespace kiln::ops {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  check(dim >= -n && dim < n, op, "dimension out of range (expected to be in range of [", -n, ", ", n - 1,
        "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

Shape reduction_dims(const Tensor& x, const Shape& dims, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, x.dim(), op));
  std::sort(out.begin(), out.end());
  check(std::adjacent_find(out.begin(), out.end()) == out.end(), op, "dim appears multiple times in the list of dims ",
        shape_text(dims));
  if (x.dim() == 0) out.clear();
  return out;
}

Shape reduced_shape(const Shape& sizes, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    const bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

// One output's metadata, built in place: `return {{sizes, dtype}}` copies
// the sizes once more through the initializer list, on every op call.
std::vector<TensorMeta> one_output(Shape sizes, DType dtype) {
  std::vector<TensorMeta> m;
  m.emplace_back(std::move(sizes), dtype);
  return m;
}

std::vector<TensorMeta> same_as_first(std::span<const Tensor> in, const Attrs&) {
  return one_output(in[0].sizes(), in[0].dtype());
}

void follow_memory_format(TensorMeta& m, const Tensor& x) {
  const MemoryFormat f = x.dim() >= 4 ? x.suggest_memory_format() : MemoryFormat::Contiguous;
  if (f != MemoryFormat::Contiguous) m.strides = memory_format_strides(m.sizes, f);
}

std::vector<TensorMeta> asked_gradients(const Attrs& a, DType dtype, const Shape& input, const Shape& weight,
                                        const Shape& bias, const Tensor& format_of) {
  auto asked = [&](const char* name, const Shape& sizes) {
    return TensorMeta(a.get_bool(name) ? sizes : Shape{0}, dtype);
  };
  std::vector<TensorMeta> m = {asked("input_grad", input), asked("weight_grad", weight), asked("bias_grad", bias)};
  if (a.get_bool("input_grad")) follow_memory_format(m[0], format_of);
  return m;
}

namespace {

// The first input with the output's sizes sets its memory format.
std::vector<TensorMeta> pointwise_output(std::span<const Tensor> in, Shape sizes, DType dtype) {
  std::vector<TensorMeta> m = one_output(std::move(sizes), dtype);
  if (m[0].sizes.size() < 4) return m;
  for (const Tensor& t : in)
    if (t.sizes() == m[0].sizes) {
      follow_memory_format(m[0], t);
      break;
    }
  return m;
}

}  // namespace

std::vector<TensorMeta> pointwise_like_first(std::span<const Tensor> in, const Attrs&) {
  return pointwise_output(in, in[0].sizes(), in[0].dtype());
}

std::vector<TensorMeta> broadcast_all(std::span<const Tensor> in, const Attrs&) {
  Shape s = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].sizes() != s) s = broadcast_shapes(s, in[i].sizes());
  return pointwise_output(in, std::move(s), in[0].dtype());
}

std::vector<TensorMeta> broadcast_to_bool(std::span<const Tensor> in, const Attrs& a) {
  auto m = broadcast_all(in, a);
  m[0].dtype = kBool;
  return m;
}

std::vector<TensorMeta> from_size_attrs(std::span<const Tensor>, const Attrs& a) {
  auto m = one_output(a.get_shape("size"), a.get_dtype("dtype"));
  m[0].device = a.get_device("device");
  return m;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.size(d) != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? g : sum(g, dims, true);
  return r.reshape(shape);
}

}  // namespace kiln::ops
