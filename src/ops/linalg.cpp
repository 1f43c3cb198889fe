// mm, bmm, matmul (torch.matmul's 1-D and batch-broadcast rules) and linear.
// The kernel (kernels/cpu/matmul_kernel.cpp) sees (..., M, K) x (..., K, N)
// with equal batch dims, broadcast ones having stride 0.
#include "ops/op_util.h"

namespace kiln {
namespace {

// The op takes what the front end hands it: operands of one rank >= 2 whose
// batch dims agree (broadcast ones expanded); kiln::matmul's 1-D and
// broadcasting rules run before dispatch.
std::vector<TensorMeta> matmul_shape(std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  check(a.dim() >= 2 && a.dim() == b.dim() && a.size(-1) == b.size(-2) &&
            Shape(a.sizes().begin(), a.sizes().end() - 2) == Shape(b.sizes().begin(), b.sizes().end() - 2),
        "matmul", "the op takes (..., M, K) and (..., K, N) with equal batch dims but got ",
        ops::shape_text(a.sizes()), " and ", ops::shape_text(b.sizes()), " (kiln::matmul broadcasts first)");
  Shape s(in[0].sizes().begin(), in[0].sizes().end() - 1);
  s.push_back(in[1].size(-1));
  return ops::one_output(s, in[0].dtype());
}

using Grads = std::vector<Tensor>;
using Ctx = autograd::BackwardContext;
Tensor transpose_last(const Tensor& t) { return t.transpose(-1, -2); }

// Gradients of a and b in a @ b (matmul, and bmm_bias's first two).
Grads bmm_grads(const Ctx& c) {
  const Tensor& g = c.grads[0];
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
constexpr autograd::BackwardDef kMatmulGrad{bmm_grads, autograd::kSaveInputs};
constexpr autograd::BackwardDef kMatmulBiasGrad{
    [](const Ctx& c) -> Grads {  // matmul + a bias row
      Grads g = bmm_grads(c);
      g.push_back(c.needs_input_grad[2] ? ops::sum_to(c.grads[0], c.input_meta[2].sizes) : Tensor());
      return g;
    },
    autograd::kSaveInputs};

const OpDef& kMatmul = register_op(ops::with_backward(
    OpDef{"matmul", "matmul(Tensor self, Tensor other) -> Tensor", OpKind::Compute, matmul_shape}, &kMatmulGrad));
// kiln::compile's form of matmul followed by a bias add (Note [Bias
// in the GEMM] in kernels/cpu/matmul_kernel.cpp).
const OpDef& kMatmulBias = register_op(ops::with_backward(
    OpDef{"bmm_bias", "bmm_bias(Tensor self, Tensor mat2, Tensor bias) -> Tensor", OpKind::Compute, matmul_shape},
    &kMatmulBiasGrad));

void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  check(a.dtype() == b.dtype(), op, "expected both operands to have the same dtype, but got ", a.dtype(), " and ",
        b.dtype());
  check(a.dtype() != kBool, op, "is not supported for bool tensors");
  check(a.size(-1) == b.size(b.dim() == 1 ? 0 : -2), op, "shapes cannot be multiplied (",
        ops::shape_text(a.sizes()), " and ", ops::shape_text(b.sizes()), ")");
}

// a (..., M, K) and b (..., K, N), batch dims broadcast against each other.
Tensor batched(const Tensor& a, const Tensor& b, Tensor* out) {
  const Shape ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  Shape sa = batch, sb = batch;
  sa.push_back(a.size(-2)), sa.push_back(a.size(-1));
  sb.push_back(b.size(-2)), sb.push_back(b.size(-1));
  if (out) {
    ops::call_out(kMatmul, *out, {a.expand(sa), b.expand(sb)});
    return *out;
  }
  return ops::call(kMatmul, {a.expand(sa), b.expand(sb)});
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check(a.dim() == 2 && b.dim() == 2, "mm", "expected 2-D tensors but got ", ops::shape_text(a.sizes()), " and ",
        ops::shape_text(b.sizes()));
  check_pair(a, b, "mm");
  return batched(a, b, nullptr);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check(a.dim() == 3 && b.dim() == 3, "bmm", "expected 3-D tensors but got ", ops::shape_text(a.sizes()), " and ",
        ops::shape_text(b.sizes()));
  check(a.size(0) == b.size(0), "bmm", "batch sizes differ: ", ops::shape_text(a.sizes()), " and ",
        ops::shape_text(b.sizes()));
  check_pair(a, b, "bmm");
  return batched(a, b, nullptr);
}

static Tensor matmul_impl(const Tensor& a, const Tensor& b, Tensor* out) {
  check(a.dim() >= 1 && b.dim() >= 1, "matmul", "both arguments need at least 1 dimension, but got ",
        ops::shape_text(a.sizes()), " and ", ops::shape_text(b.sizes()));
  check_pair(a, b, "matmul");
  // 1-D operands become matrices and the added dim is removed afterwards.
  if (a.dim() >= 3 && b.dim() == 2 && !out) {
    // (..., M, K) x (K, N): one (... * M, K) x (K, N) product, as torch.matmul
    // folds it, so the weight's gradient is one product too rather than a
    // product per batch entry summed over the batch.
    Shape rows = a.sizes();
    rows.back() = b.size(1);
    return batched(a.reshape({-1, a.size(-1)}), b, nullptr).view(rows);
  }
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  if (a.dim() > 1 && b.dim() > 1) return batched(a2, b2, out);
  Tensor r = batched(a2, b2, nullptr);
  if (a.dim() == 1) r = r.squeeze(-2);
  if (b.dim() == 1) r = r.squeeze(-1);
  if (out) {
    out->copy_(r);
    return *out;
  }
  return r;
}

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul_impl(a, b, nullptr); }
Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  matmul_impl(a, b, &out);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check(weight.dim() == 2, "linear", "expected a 2-D weight but got ", ops::shape_text(weight.sizes()));
  check(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear", "input of shape ", ops::shape_text(x.sizes()),
        " does not match weight of shape ", ops::shape_text(weight.sizes()), " (in_features ", weight.size(1), ")");
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

}  // namespace kiln
