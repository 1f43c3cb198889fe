// Backward formulas of reductions, matmul, the nn functions, views and
// indexing ops, written with ordinary ops.
#include <algorithm>
#include <numeric>

#include "autograd/graph.h"
#include "kiln/ops.h"

namespace kiln::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Ctx = BackwardContext;

const Tensor& g0(const Ctx& c) { return c.grads[0]; }
const Shape& in_shape(const Ctx& c, size_t i = 0) { return c.input_meta[i].sizes; }

// g of a reduction (keepdim or not) reshaped so it broadcasts against the input.
Tensor keepdim_grad(const Tensor& g, const Shape& input, const Shape& dims) {
  Shape s = input;
  for (int64_t d : dims) s[d] = 1;
  if (input.empty()) s = {};
  return g.reshape(s);
}

Tensor transpose_last(const Tensor& t) { return t.transpose(-1, -2); }

// Gradients of a and b in a @ b (matmul, and bmm_bias's first two).
Grads bmm_grads(const Ctx& c) {
  const Tensor& g = g0(c);
  // A column-major b (linear's weight.t()) gets its gradient in its own
  // layout, (g^T a)^T, so the weight's gradient arrives contiguous and
  // is not copied again when it is accumulated. (Its layout from the
  // metadata: b itself is read only for a's gradient.)
  const TensorMeta& b = c.input_meta[1];
  const size_t nb = b.strides.size();
  const bool b_columns = nb >= 2 && b.strides[nb - 2] == 1 && b.strides[nb - 1] != 1;
  Tensor gb;
  if (c.needs_input_grad[1])
    gb = b_columns ? transpose_last(matmul(transpose_last(g), c.inputs[0])) : matmul(transpose_last(c.inputs[0]), g);
  return {c.needs_input_grad[0] ? matmul(g, transpose_last(c.inputs[1])) : Tensor(), gb};
}

const struct Register {
  Register() {
    register_backward("sum", [](const Ctx& c) -> Grads {
      return {keepdim_grad(g0(c), in_shape(c), c.attrs.get_shape("dims")).expand(in_shape(c)).to(c.input_meta[0].dtype)};
    }, kSaveNone);
    register_backward("prod", [](const Ctx& c) -> Grads {
      // d(prod)/dx_i = prod / x_i; inputs with zeros use a where() to avoid 0/0.
      const Shape& dims = c.attrs.get_shape("dims");
      const Tensor& x = c.inputs[0];
      const Tensor y = keepdim_grad(c.outputs[0], in_shape(c), dims);
      const Tensor g = keepdim_grad(g0(c), in_shape(c), dims);
      const Tensor is_zero = eq(x, wrapped_scalar(0));
      const Tensor safe = where(is_zero, ones_like(x), x);
      const Tensor others = prod(safe, dims, true);  // product of the non-zero entries
      const Tensor zero_count = sum(is_zero.to(x.dtype()), dims, true);
      // One zero: its gradient is the product of the others; two or more: all zero.
      const Tensor when_zero = where(eq(zero_count, wrapped_scalar(1)), others, zeros_like(others));
      return {g * where(is_zero, when_zero.expand(x.sizes()), y / safe)};
    }, kSaveBoth);
    for (const char* name : {"amax", "amin"})
      register_backward(name, [](const Ctx& c) -> Grads {
        const Shape& dims = c.attrs.get_shape("dims");
        const Tensor& x = c.inputs[0];
        const Tensor y = keepdim_grad(c.outputs[0], in_shape(c), dims);
        const Tensor mask = eq(x, y).to(x.dtype());
        return {keepdim_grad(g0(c), in_shape(c), dims) * mask / sum(mask, dims, true)};
      }, kSaveBoth);
    // max.dim / min.dim: the values' gradient scattered at the indices.
    for (const char* op : {"max.dim", "min.dim"})
      register_backward(op, [](const Ctx& c) -> Grads {
        const int64_t dim = c.attrs.get_int("dim");
        if (in_shape(c).empty()) return {g0(c)};
        const bool kept = c.attrs.get_bool("keepdim");
        const Tensor index = kept ? c.outputs[1] : c.outputs[1].unsqueeze(dim);
        const Tensor g = kept ? g0(c) : g0(c).unsqueeze(dim);
        return {scatter(zeros(in_shape(c), g.options()), dim, index, g)};
      }, kSaveOutputs);
    register_backward("cumsum", [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor g = g0(c).to(c.input_meta[0].dtype);
      // A scan the other way: cumsum's gradient is a reversed cumsum, and a reversed one's a forward one.
      return {c.attrs.get_bool("reverse") ? cumsum(g, dim) : cumsum_backward(g, dim)};
    }, kSaveNone);
    register_backward("sort", [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      if (in_shape(c).empty()) return {g0(c)};
      return {scatter_add(zeros(in_shape(c), g0(c).options()), dim, c.outputs[1], g0(c))};
    }, kSaveOutputs);

    register_backward("matmul", bmm_grads, kSaveInputs);
    register_backward("bmm_bias", [](const Ctx& c) -> Grads {  // matmul + a bias row
      Grads g = bmm_grads(c);
      g.push_back(c.needs_input_grad[2] ? sum_to(g0(c), c.input_meta[2].sizes) : Tensor());
      return g;
    }, kSaveInputs);

    register_backward("softmax", [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor& y = c.outputs[0];
      const Tensor& g = g0(c);
      if (c.attrs.get_bool("log")) return {g - exp(y) * sum(g, {dim}, true)};
      return {y * (g - sum(g * y, {dim}, true))};
    }, kSaveOutputs);
    register_backward("layer_norm", [](const Ctx& c) -> Grads {
      // Recomputes the statistics from the saved input (cheap next to storing them).
      const Tensor& x = c.inputs[0];
      const int64_t n = c.attrs.get_int("n");
      const double eps = c.attrs.get_double("eps");
      const bool rms = c.attrs.get_bool("rms"), has_w = c.attrs.get_bool("has_weight"),
                 has_b = c.attrs.get_bool("has_bias");
      const Shape rows_shape = {x.numel() / std::max<int64_t>(n, 1), n};
      const Tensor xr = x.reshape(rows_shape), gr = g0(c).reshape(rows_shape);
      const Tensor mu = rms ? zeros({rows_shape[0], 1}, x.options()) : mean(xr, {1}, true);
      const Tensor xc = xr - mu;
      const Tensor rstd = rsqrt(mean(xc * xc, {1}, true) + eps);
      const Tensor xhat = xc * rstd;
      const Tensor w = has_w ? c.inputs[1].reshape({1, n}) : Tensor();
      const Tensor gw_in = has_w ? gr * w : gr;  // dL/dxhat
      Tensor gx = rms ? rstd * (gw_in - xhat * mean(gw_in * xhat, {1}, true))
                      : rstd * (gw_in - mean(gw_in, {1}, true) - xhat * mean(gw_in * xhat, {1}, true));
      Grads out{gx.reshape(in_shape(c))};
      if (has_w) out.push_back(sum(gr * xhat, {0}).reshape(in_shape(c, 1)));
      if (has_b) out.push_back(sum(gr, {0}).reshape(in_shape(c, has_w ? 2 : 1)));
      return out;
    }, kSaveInputs);
    register_backward("embedding", [](const Ctx& c) -> Grads {
      const int64_t d = in_shape(c)[1];
      const Tensor flat = c.inputs[1].reshape({-1, 1}).to(kInt64);
      Tensor g = g0(c).reshape({-1, d});
      // The padding row gets no gradient: its lookups' gradients are dropped.
      const int64_t pad = c.attrs.get_int("padding_idx");
      if (pad >= 0) g = where(eq(flat, wrapped_scalar(pad)), zeros_like(g), g);
      return {scatter_add(zeros(in_shape(c), g.options()), 0, flat.expand({flat.size(0), d}), g), Tensor()};
    }, kSaveInputs);
    register_backward("index_select", [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor& g = g0(c);
      Shape view(g.dim(), 1);
      view[dim] = g.size(dim);
      const Tensor idx = c.inputs[1].reshape(view).to(kInt64).expand(g.sizes());
      return {scatter_add(zeros(in_shape(c), g.options()), dim, idx, g), Tensor()};
    }, kSaveInputs);
    register_backward("gather", [](const Ctx& c) -> Grads {
      return {scatter_add(zeros(in_shape(c), g0(c).options()), c.attrs.get_int("dim"), c.inputs[1], g0(c)), Tensor()};
    }, kSaveInputs);
    register_backward("scatter", [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      const Tensor& idx = c.inputs[1];
      const Tensor& g = g0(c);
      // add: both get g (src at the indices); overwrite: the overwritten places get none.
      Tensor gx = c.attrs.get_bool("add") ? g : scatter(g, dim, idx, zeros(idx.sizes(), g.options()));
      // src may be larger than index: only its leading index-shaped block was read.
      return {gx, Tensor(), ops::block_in_zeros(gather(g, dim, idx), in_shape(c, 2), idx)};
    }, kSaveInputs);
    register_backward("cat", [](const Ctx& c) -> Grads {
      const int64_t dim = c.attrs.get_int("dim");
      Grads out;
      int64_t off = 0;
      for (const TensorMeta& m : c.input_meta) {
        if (m.sizes.size() == 1 && m.sizes[0] == 0 && g0(c).dim() != 1) {
          out.push_back(zeros(m.sizes, TensorOptions(m.dtype).device(m.device)));
          continue;
        }
        out.push_back(g0(c).narrow(dim, off, m.sizes[dim]));
        off += m.sizes[dim];
      }
      return out;
    }, kSaveNone);
    register_backward("tril", [](const Ctx& c) -> Grads { return {tril(g0(c), c.attrs.get_int("diagonal"))}; },
                      kSaveNone);
    register_backward("triu", [](const Ctx& c) -> Grads { return {triu(g0(c), c.attrs.get_int("diagonal"))}; },
                      kSaveNone);

    // Views
    register_backward("view", [](const Ctx& c) -> Grads { return {g0(c).reshape(in_shape(c))}; }, kSaveNone);
    register_backward("alias", [](const Ctx& c) -> Grads { return {g0(c)}; }, kSaveNone);
    register_backward("squeeze", [](const Ctx& c) -> Grads { return {g0(c).reshape(in_shape(c))}; }, kSaveNone);
    register_backward("unsqueeze", [](const Ctx& c) -> Grads { return {g0(c).reshape(in_shape(c))}; }, kSaveNone);
    register_backward("permute", [](const Ctx& c) -> Grads {
      const Shape& dims = c.attrs.get_shape("dims");
      Shape inv(dims.size());
      for (size_t i = 0; i < dims.size(); ++i) inv[(dims[i] + dims.size()) % dims.size()] = static_cast<int64_t>(i);
      return {g0(c).permute(inv)};
    }, kSaveNone);
    register_backward("expand", [](const Ctx& c) -> Grads { return {sum_to(g0(c), in_shape(c))}; }, kSaveNone);
    register_backward("slice", [](const Ctx& c) -> Grads {
      const auto& a = c.attrs;
      return {slice_backward(g0(c), in_shape(c), a.get_int("dim"), a.get_int("start"), a.get_int("end"),
                             a.get_int("step"))};
    }, kSaveNone);
    register_backward("select", [](const Ctx& c) -> Grads {
      return {select_backward(g0(c), in_shape(c), c.attrs.get_int("dim"), c.attrs.get_int("index"))};
    }, kSaveNone);
    register_backward("slice_backward", [](const Ctx& c) -> Grads {
      const auto& a = c.attrs;
      return {g0(c).slice(a.get_int("dim"), a.get_int("start"), a.get_int("end"), a.get_int("step"))};
    }, kSaveNone);
    register_backward("select_backward", [](const Ctx& c) -> Grads {
      return {g0(c).select(c.attrs.get_int("dim"), c.attrs.get_int("index"))};
    }, kSaveNone);
    register_backward("unfold", [](const Ctx& c) -> Grads {
      // Windows may overlap: add each window's gradient back into place.
      const int64_t dim = c.attrs.get_int("dim"), size = c.attrs.get_int("size"), step = c.attrs.get_int("step");
      Tensor z = zeros(in_shape(c), g0(c).options());
      if (in_shape(c).empty()) return {g0(c).reshape({})};
      const int64_t d = dim < 0 ? dim + static_cast<int64_t>(in_shape(c).size()) : dim;
      const int64_t nd = static_cast<int64_t>(in_shape(c).size());
      Shape perm;  // the window dim (last in the gradient) goes back to position d
      for (int64_t i = 0; i < d; ++i) perm.push_back(i);
      perm.push_back(nd - 1);
      for (int64_t i = d; i < nd - 1; ++i) perm.push_back(i);
      for (int64_t w = 0; w < g0(c).size(d); ++w) z.narrow(d, w * step, size).add_(g0(c).select(d, w).permute(perm));
      return {z};
    }, kSaveNone);
  }
} register_formulas;

}  // namespace
}  // namespace kiln::autograd
