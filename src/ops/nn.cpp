// Neural-network functions with fused kernels: softmax, log_softmax,
// layer_norm, rms_norm, embedding, one_hot.
#include <algorithm>
#include <limits>

#include "ops/op_util.h"

namespace kiln {
namespace {

using Grads = std::vector<Tensor>;
using Ctx = autograd::BackwardContext;

constexpr autograd::BackwardDef kSoftmaxGrad{[](const Ctx& c) -> Grads {
                                               const int64_t dim = c.attrs.get_int("dim");
                                               const Tensor& y = c.outputs[0];
                                               const Tensor& g = c.grads[0];
                                               if (c.attrs.get_bool("log")) return {g - exp(y) * sum(g, {dim}, true)};
                                               return {y * (g - sum(g * y, {dim}, true))};
                                             },
                                             autograd::kSaveOutputs};
const OpDef& kSoftmax = register_op(ops::with_backward(
    OpDef{"softmax", "softmax(Tensor self, int dim, bool log) -> Tensor", OpKind::Compute, ops::same_as_first},
    &kSoftmaxGrad));

// Recomputes the statistics from the saved input (cheap next to storing them).
constexpr autograd::BackwardDef kLayerNormGrad{
    [](const Ctx& c) -> Grads {
      const Tensor& x = c.inputs[0];
      const int64_t n = c.attrs.get_int("n");
      const double eps = c.attrs.get_double("eps");
      const bool rms = c.attrs.get_bool("rms"), has_w = c.attrs.get_bool("has_weight"),
                 has_b = c.attrs.get_bool("has_bias");
      const Shape rows_shape = {x.numel() / std::max<int64_t>(n, 1), n};
      const Tensor xr = x.reshape(rows_shape), gr = c.grads[0].reshape(rows_shape);
      const Tensor mu = rms ? zeros({rows_shape[0], 1}, x.options()) : mean(xr, {1}, true);
      const Tensor xc = xr - mu;
      const Tensor rstd = rsqrt(mean(xc * xc, {1}, true) + eps);
      const Tensor xhat = xc * rstd;
      const Tensor w = has_w ? c.inputs[1].reshape({1, n}) : Tensor();
      const Tensor gw_in = has_w ? gr * w : gr;  // dL/dxhat
      Tensor gx = rms ? rstd * (gw_in - xhat * mean(gw_in * xhat, {1}, true))
                      : rstd * (gw_in - mean(gw_in, {1}, true) - xhat * mean(gw_in * xhat, {1}, true));
      Grads out{gx.reshape(c.input_meta[0].sizes)};
      if (has_w) out.push_back(sum(gr * xhat, {0}).reshape(c.input_meta[1].sizes));
      if (has_b) out.push_back(sum(gr, {0}).reshape(c.input_meta[has_w ? 2 : 1].sizes));
      return out;
    },
    autograd::kSaveInputs};
const OpDef& kLayerNorm = register_op(ops::with_backward(
    OpDef{"layer_norm",
          "layer_norm(Tensor input, Tensor? weight, Tensor? bias, int n, float eps, bool rms, bool has_weight, bool "
          "has_bias) -> Tensor",
          OpKind::Compute, ops::same_as_first},
    &kLayerNormGrad));

std::vector<TensorMeta> embedding_shape(std::span<const Tensor> in, const Attrs&) {
  Shape s = in[1].sizes();
  s.push_back(in[0].size(1));
  return ops::one_output(s, in[0].dtype());
}
// padding_idx (-1: none) is read by the backward only: that row gets no
// gradient (its lookups' gradients are dropped).
constexpr autograd::BackwardDef kEmbeddingGrad{
    [](const Ctx& c) -> Grads {
      const Shape& weight = c.input_meta[0].sizes;
      const Tensor flat = c.inputs[1].reshape({-1, 1}).to(kInt64);
      Tensor g = c.grads[0].reshape({-1, weight[1]});
      const int64_t pad = c.attrs.get_int("padding_idx");
      if (pad >= 0) g = where(eq(flat, wrapped_scalar(pad)), zeros_like(g), g);
      return {scatter_add(zeros(weight, g.options()), 0, flat.expand({flat.size(0), weight[1]}), g), Tensor()};
    },
    autograd::kSaveInputs};
const OpDef& kEmbedding = register_op(
    ops::with_backward(OpDef{"embedding", "embedding(Tensor weight, Tensor indices, int padding_idx) -> Tensor",
                             OpKind::Compute, embedding_shape},
                       &kEmbeddingGrad));

std::vector<TensorMeta> one_hot_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  s.push_back(a.get_int("num_classes"));
  return ops::one_output(s, kInt64);
}
const OpDef& kOneHot = register_op(ops::with_backward(
    OpDef{"one_hot", "one_hot(Tensor self, int num_classes) -> Tensor", OpKind::Compute, one_hot_shape},
    &autograd::kNotDifferentiable));

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check(is_floating(x.dtype()), op, "expected a floating point tensor but got ", x.dtype());
  const int64_t d = ops::wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return log ? zeros_like(x) : ones_like(x);
  return ops::call(kSoftmax, {x}, {{"dim", d}, {"log", log}});
}

Tensor norm_impl(const char* op, bool rms, const Tensor& x, const Shape& shape, const Tensor& w, const Tensor& b,
                 double eps) {
  check(is_floating(x.dtype()), op, "expected a floating point input but got ", x.dtype());
  const int64_t k = static_cast<int64_t>(shape.size());
  check(k >= 1 && x.dim() >= k && Shape(x.sizes().end() - k, x.sizes().end()) == shape, op,
        "normalized_shape ", ops::shape_text(shape), " does not match the trailing dims of the input of shape ",
        ops::shape_text(x.sizes()));
  for (const Tensor* p : {&w, &b}) {
    if (!p->defined()) continue;
    check(p->sizes() == shape, op, "expected weight and bias of shape ", ops::shape_text(shape), " but got ",
          ops::shape_text(p->sizes()));
    check(p->dtype() == x.dtype(), op, "expected weight and bias of dtype ", x.dtype(), " but got ", p->dtype());
  }
  std::vector<Tensor> in{x};
  if (w.defined()) in.push_back(w);
  if (b.defined()) in.push_back(b);
  Attrs a{{"n", shape_numel(shape)}, {"eps", eps}, {"has_weight", w.defined()}, {"has_bias", b.defined()},
          {"rms", rms}};
  return dispatch1(kLayerNorm, std::span<const Tensor>(in), a);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

Tensor layer_norm(const Tensor& x, Shape shape, const Tensor& w, const Tensor& b, double eps) {
  return norm_impl("layer_norm", false, x, shape, w, b, eps);
}

Tensor rms_norm(const Tensor& x, Shape shape, const Tensor& w, std::optional<double> eps) {
  // PyTorch's default eps is the machine epsilon of the input's dtype.
  double e = std::numeric_limits<float>::epsilon();
  if (x.dtype() == kFloat64) e = std::numeric_limits<double>::epsilon();
  if (x.dtype() == kFloat16) e = 0.0009765625;
  if (x.dtype() == kBFloat16) e = 0.0078125;
  return norm_impl("rms_norm", true, x, shape, w, Tensor(), eps.value_or(e));
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type) {
  check(weight.dim() == 2, "embedding", "expected a 2-D weight but got shape ", ops::shape_text(weight.sizes()));
  check(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding",
        "expected indices of dtype int64 or int32 but got ", indices.dtype());
  const int64_t rows = weight.size(0);
  int64_t pad = -1;
  if (padding_idx) {
    check(*padding_idx >= -rows && *padding_idx < rows, "embedding", "padding_idx ", *padding_idx,
          " must be within the ", rows, " rows of the weight");
    pad = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  if (max_norm) {
    // PyTorch's embedding_renorm_: the rows looked up, scaled in place (no
    // history) to norm at most max_norm.
    check(*max_norm > 0, "embedding", "max_norm must be positive but got ", *max_norm);
    // Through a detached alias: the weight's storage, no history.
    const Tensor w = weight.detach();
    const Tensor used = std::get<0>(unique(indices.to(kInt64)));
    if (used.numel() > 0) {
      check(amin(used).item<int64_t>() >= 0 && amax(used).item<int64_t>() < rows, "embedding", "an index is out of range for ",
            rows, " rows");
      const Tensor picked = index_select(w, 0, used);
      const Tensor norms = norm(picked.to(kFloat64), norm_type, {1}, true);
      const Tensor scale = where(gt(norms, wrapped_scalar(*max_norm)), *max_norm / (norms + 1e-7), ones_like(norms));
      w.index_copy_(0, used, (picked * scale).to(w.dtype()));
    }
  }
  return ops::call(kEmbedding, {weight, indices}, {{"padding_idx", pad}});
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check(indices.dtype() == kInt64, "one_hot", "expected an int64 tensor but got ", indices.dtype());
  if (num_classes < 0) {
    check(indices.numel() > 0, "one_hot", "cannot infer num_classes from an empty tensor");
    num_classes = amax(indices).item<int64_t>() + 1;
  }
  return ops::call(kOneHot, {indices}, {{"num_classes", num_classes}});
}

}  // namespace kiln
