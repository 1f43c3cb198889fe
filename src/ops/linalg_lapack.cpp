// The linalg decompositions and solvers whose kernels run LAPACK
// (src/kernels/cpu/linalg_kernels.cpp): inv, solve, det, slogdet, cholesky,
// qr, eigh, svd. Each op is declared with its backward, written with
// differentiable ops (these ones included), so double backward works.
// The formulas are PyTorch's (real case): Giles' for inv, solve, det;
// Murray's for cholesky; Townsend's for svd; the ones for qr and eigh follow
// from A = Q R and A V = V diag(w) (derivations in the comments).
#include <climits>

#include "kiln/error.h"
#include "kiln/linalg.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

Shape batch_of(const Tensor& A) { return Shape(A.sizes().begin(), A.sizes().end() - 2); }
Shape batch_with(const Tensor& A, std::initializer_list<int64_t> tail) {
  Shape s = batch_of(A);
  s.insert(s.end(), tail);
  return s;
}

// The identity's complement (0 on the diagonal, 1 elsewhere), and 1/E off
// the diagonal with 0 on it: the eigenvalue (or squared singular value)
// gaps. The diagonal is moved off 0 before the reciprocal, so its
// derivative is finite there too (a double backward multiplies it by 0).
Tensor off_diagonal_reciprocal(const Tensor& gaps) {
  const Tensor I = eye(gaps.size(-1), {}, gaps.options());
  return reciprocal(gaps + I) * (1 - I);
}

std::vector<TensorMeta> batch_shape(std::span<const Tensor> in, const Attrs&) {
  return ops::one_output(batch_of(in[0]), in[0].dtype());
}
std::vector<TensorMeta> slogdet_shape(std::span<const Tensor> in, const Attrs&) {
  return {{batch_of(in[0]), in[0].dtype()}, {batch_of(in[0]), in[0].dtype()}};
}
std::vector<TensorMeta> solve_shape(std::span<const Tensor> in, const Attrs&) {
  return ops::one_output(in[1].sizes(), in[0].dtype());
}
std::vector<TensorMeta> qr_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& A = in[0];
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const std::string& mode = a.get_string("mode");
  const Shape Q = mode == "r" ? Shape{0} : batch_with(A, {m, mode == "complete" ? m : k});
  return {{Q, A.dtype()}, {batch_with(A, {mode == "complete" ? m : k, n}), A.dtype()}};
}
std::vector<TensorMeta> eigh_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& A = in[0];
  return {{batch_with(A, {A.size(-1)}), A.dtype()}, {a.get_bool("compute_v") ? A.sizes() : Shape{0}, A.dtype()}};
}
std::vector<TensorMeta> svd_shape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& A = in[0];
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const bool full = a.get_bool("full_matrices"), uv = a.get_bool("compute_uv");
  return {{uv ? batch_with(A, {m, full ? m : k}) : Shape{0}, A.dtype()},
          {batch_with(A, {k}), A.dtype()},
          {uv ? batch_with(A, {full ? n : k, n}) : Shape{0}, A.dtype()}};
}

// d(A^{-1}) = -A^{-1} dA A^{-1}.
constexpr autograd::BackwardDef kInvGrad{[](const BackwardContext& c) -> Grads {
  const Tensor Yt = mT(c.outputs[0]);
  return {-matmul(matmul(Yt, c.grads[0]), Yt)};
}, autograd::kSaveOutputs};
const OpDef& kInv = register_op(ops::with_backward(
    OpDef{"linalg_inv", "linalg_inv(Tensor A) -> Tensor", OpKind::Compute, ops::same_as_first}, &kInvGrad));

// X = A^{-1} B: gB = A^{-T} g, gA = -gB X^T.
constexpr autograd::BackwardDef kSolveGrad{[](const BackwardContext& c) -> Grads {
  const Tensor gB = linalg::solve(mT(c.inputs[0]), c.grads[0]);
  return {-matmul(gB, mT(c.outputs[0])), gB};
}, autograd::kSaveBoth};
const OpDef& kSolve = register_op(ops::with_backward(
    OpDef{"linalg_solve", "linalg_solve(Tensor A, Tensor B) -> Tensor", OpKind::Compute, solve_shape}, &kSolveGrad));

// d det / dA is the cofactor matrix, det(A) A^{-T} when A is invertible;
// for a singular A (where it is still defined, and nonzero at rank n - 1)
// it is det(U) det(V) U diag(prod_{j != i} s_j) V^T from A = U S V^T.
Tensor cofactors(const Tensor& A, const Tensor& d) {
  if (all(ne(d, zeros_like(d))).item<bool>()) return d.unsqueeze(-1).unsqueeze(-1) * mT(linalg::inv(A));
  const auto [U, S, Vh] = linalg::svd(A, false);
  const int64_t k = S.size(-1);
  const Tensor one = ones_like(S.narrow(-1, 0, 1));
  const Tensor before = cat({one, cumprod(S, -1).narrow(-1, 0, k - 1)}, -1);  // prod_{j < i} s_j
  const Tensor after = flip(cat({one, cumprod(flip(S, {-1}), -1).narrow(-1, 0, k - 1)}, -1), {-1});
  const Tensor signs = (linalg::det(U) * linalg::det(Vh)).unsqueeze(-1).unsqueeze(-1);
  return signs * matmul(U * (before * after).unsqueeze(-2), Vh);
}
constexpr autograd::BackwardDef kDetGrad{[](const BackwardContext& c) -> Grads {
  return {c.grads[0].unsqueeze(-1).unsqueeze(-1) * cofactors(c.inputs[0], c.outputs[0])};
}, autograd::kSaveBoth};
const OpDef& kDet =
    register_op(ops::with_backward(OpDef{"linalg_det", "linalg_det(Tensor A) -> Tensor", OpKind::Compute, batch_shape},
                                   &kDetGrad));

// d log|det A| = tr(A^{-1} dA); the sign is piecewise constant.
constexpr autograd::BackwardDef kSlogdetGrad{[](const BackwardContext& c) -> Grads {
  return {c.grads[1].unsqueeze(-1).unsqueeze(-1) * mT(linalg::inv(c.inputs[0]))};
}, autograd::kSaveInputs};
const OpDef& kSlogdet = register_op(ops::with_backward(
    OpDef{"linalg_slogdet", "linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)", OpKind::Compute,
          slogdet_shape},
    &kSlogdetGrad));

// A = L L^T: L^{-1} dA L^{-T} = 2 sym(L^{-1} dL) with L^{-1} dL lower
// triangular, so dL = L Phi(L^{-1} dA L^{-T}), Phi taking the lower
// triangle with the diagonal halved; its adjoint gives
// gA = sym(L^{-T} Phi(L^T gL) L^{-1}) (dA is symmetric).
constexpr autograd::BackwardDef kCholeskyGrad{[](const BackwardContext& c) -> Grads {
  const bool upper = c.attrs.get_bool("upper");
  const Tensor L = upper ? mT(c.outputs[0]) : c.outputs[0];
  const Tensor gL = upper ? mT(c.grads[0]) : c.grads[0];
  Tensor P = tril(matmul(mT(L), gL));
  P = P - 0.5 * diag_embed(diagonal(P, 0, -2, -1));
  const Tensor left = linalg::solve(mT(L), P);             // L^{-T} P
  const Tensor gA = mT(linalg::solve(mT(L), mT(left)));  // L^{-T} P L^{-1}
  return {0.5 * (gA + mT(gA))};
}, autograd::kSaveOutputs};
const OpDef& kCholesky = register_op(ops::with_backward(
    OpDef{"linalg_cholesky", "linalg_cholesky(Tensor A, bool upper) -> Tensor", OpKind::Compute, ops::same_as_first},
    &kCholeskyGrad));

// A = Q R with rows >= columns, Q^T Q = I, R upper triangular and
// invertible. X = Q^T dA R^{-1} = C + dR R^{-1} with C = Q^T dQ skew and
// dR R^{-1} upper triangular, so C is X's strictly lower part minus its
// transpose. With M = gR R^T - Q^T gQ, <gQ, dQ> + <gR, dR> =
// <gQ R^{-T}, dA> + <N, X>, N = triu(M) + triu(M, 1)^T, so
// gA = (gQ + Q N) R^{-T}.
constexpr autograd::BackwardDef kQrGrad{[](const BackwardContext& c) -> Grads {
  const Tensor& A = c.inputs[0];
  const std::string& mode = c.attrs.get_string("mode");
  const int64_t m = A.size(-2), n = A.size(-1);
  check(m >= n && (mode != "complete" || m == n), "linalg.qr",
        "the derivative is implemented for inputs with rows >= columns (mode 'complete' only when square) but got "
        "shape ", shape_text(A.sizes()), " and mode '", mode, "'");
  Tensor Q = c.outputs[0], gQ = c.grads[0];
  if (mode == "r") {  // Q was not returned: its gradient is zero
    Q = std::get<0>(linalg::qr(A));
    gQ = zeros_like(Q);
  }
  const Tensor& R = c.outputs[1];
  const Tensor M = matmul(c.grads[1], mT(R)) - matmul(mT(Q), gQ);
  const Tensor N = triu(M) + mT(triu(M, 1));
  return {mT(linalg::solve(R, mT(gQ + matmul(Q, N))))};
}, autograd::kSaveBoth};
const OpDef& kQr = register_op(ops::with_backward(
    OpDef{"linalg_qr", "linalg_qr(Tensor A, str mode) -> (Tensor Q, Tensor R)", OpKind::Compute, qr_shape}, &kQrGrad));

// A V = V diag(w): dw_i = v_i^T dA v_i and dV = V (F o V^T dA V) with
// F_ij = 1 / (w_j - w_i) off the diagonal. For symmetric dA the adjoint is
// gA = V (diag(gw) + F o skew(V^T gV)) V^T, skew(G) = (G - G^T) / 2: a
// symmetric gradient, as PyTorch's.
constexpr autograd::BackwardDef kEighGrad{[](const BackwardContext& c) -> Grads {
  const Tensor& w = c.outputs[0];
  const bool vectors = c.attrs.get_bool("compute_v");
  const Tensor V = vectors ? c.outputs[1] : std::get<1>(linalg::eigh(c.inputs[0], c.attrs.get_string("UPLO")));
  Tensor inner = diag_embed(c.grads[0]);
  if (vectors) {
    const Tensor G = matmul(mT(V), c.grads[1]);
    inner = inner + off_diagonal_reciprocal(w.unsqueeze(-2) - w.unsqueeze(-1)) * (0.5 * (G - mT(G)));
  }
  return {matmul(matmul(V, inner), mT(V))};
}, autograd::kSaveBoth};
const OpDef& kEigh = register_op(ops::with_backward(
    OpDef{"linalg_eigh", "linalg_eigh(Tensor A, str UPLO, bool compute_v) -> (Tensor eigenvalues, Tensor eigenvectors)",
          OpKind::Compute, eigh_shape},
    &kEighGrad));

// Townsend's formula, A = U S V^T reduced (k = min(m, n)), F_ij =
// 1 / (s_j^2 - s_i^2) off the diagonal:
//   gA = U [(F o (U^T gU - gU^T U)) S + diag(gS) + S (F o (V^T gV - gV^T V))] V^T
//        + (I - U U^T) gU S^{-1} V^T + U S^{-1} gV^T (I - V V^T).
// Full U, Vh of a non-square A: the extra columns are arbitrary, so only S
// may carry a gradient (PyTorch's rule).
Tensor svd_backward(const Tensor& U, const Tensor& S, const Tensor& Vh, const Tensor& gU, const Tensor& gS,
                    const Tensor& gVh) {
  const int64_t m = U.size(-2), n = Vh.size(-1);
  const Tensor Ut = mT(U), V = mT(Vh), gV = mT(gVh);
  const Tensor F = off_diagonal_reciprocal((S * S).unsqueeze(-2) - (S * S).unsqueeze(-1));
  const Tensor UtgU = matmul(Ut, gU), VtgV = matmul(Vh, gV);
  const Tensor inner = F * (UtgU - mT(UtgU)) * S.unsqueeze(-2) + diag_embed(gS) + S.unsqueeze(-1) * (F * (VtgV - mT(VtgV)));
  Tensor gA = matmul(matmul(U, inner), Vh);
  const Tensor inv_S = reciprocal(S);
  if (m > n) gA = gA + matmul((gU - matmul(U, UtgU)) * inv_S.unsqueeze(-2), Vh);
  if (n > m) gA = gA + matmul(U, inv_S.unsqueeze(-1) * (mT(gV) - matmul(mT(VtgV), Vh)));
  return gA;
}
constexpr autograd::BackwardDef kSvdGrad{[](const BackwardContext& c) -> Grads {
  const Tensor& A = c.inputs[0];
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  if (!c.attrs.get_bool("compute_uv")) {  // svdvals: gA = U diag(gS) V^T
    const auto [U, S, Vh] = linalg::svd(A, false);
    return {matmul(U * c.grads[1].unsqueeze(-2), Vh)};
  }
  Tensor U = c.outputs[0], Vh = c.outputs[2], gU = c.grads[0], gVh = c.grads[2];
  if (c.attrs.get_bool("full_matrices") && m != n) {
    check(!any(ne(gU, zeros_like(gU))).item<bool>() && !any(ne(gVh, zeros_like(gVh))).item<bool>(), "linalg.svd",
          "the derivative through U or Vh is not defined with full_matrices=True for the non-square shape ",
          shape_text(A.sizes()), "; use full_matrices=False");
    U = U.narrow(-1, 0, k), gU = gU.narrow(-1, 0, k), Vh = Vh.narrow(-2, 0, k), gVh = gVh.narrow(-2, 0, k);
  }
  return {svd_backward(U, c.outputs[1], Vh, gU, c.grads[1], gVh)};
}, autograd::kSaveBoth};
const OpDef& kSvd = register_op(ops::with_backward(
    OpDef{"linalg_svd", "linalg_svd(Tensor A, bool full_matrices, bool compute_uv) -> (Tensor U, Tensor S, Tensor Vh)",
          OpKind::Compute, svd_shape},
    &kSvdGrad));

// Float matrices (..., m, n) whose sides fit LAPACK's 32-bit integers.
void check_matrices(const char* op, const Tensor& A, bool square) {
  check(A.dtype() == kFloat32 || A.dtype() == kFloat64, op, "expected a float32 or float64 tensor but got ", A.dtype());
  check(A.dim() >= 2, op, "expected a matrix or a batch of matrices (2 or more dims) but got shape ",
        shape_text(A.sizes()));
  check(!square || A.size(-1) == A.size(-2), op, "expected a square matrix or a batch of them but got shape ",
        shape_text(A.sizes()));
  check(A.size(-1) * A.size(-2) <= INT_MAX, op, "a matrix of shape ", shape_text(A.sizes()),
        " is larger than LAPACK's 32-bit sizes allow");
}

}  // namespace

namespace linalg {

Tensor inv(const Tensor& A) {
  check_matrices("linalg.inv", A, true);
  return ops::call(kInv, {A});
}

Tensor solve(const Tensor& A, const Tensor& B, bool left) {
  check_matrices("linalg.solve", A, true);
  check(B.dtype() == A.dtype(), "linalg.solve", "expected B of A's dtype ", A.dtype(), " but got ", B.dtype());
  // PyTorch's rule: B is a (batch of) vector(s) when it is 1-D or has A's
  // dims without the last.
  const bool vector = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == batch_with(A, {A.size(-1)}));
  if (!left) return vector ? solve(mT(A), B) : mT(solve(mT(A), mT(B)));  // X A = B is A^T X^T = B^T
  const Tensor Bm = vector ? B.unsqueeze(-1) : B;
  check(Bm.dim() >= 2 && Bm.size(-2) == A.size(-1), "linalg.solve", "A of shape ", shape_text(A.sizes()),
        " and B of shape ", shape_text(B.sizes()), " do not fit: expected B of shape (..., ", A.size(-1),
        ", k) or (..., ", A.size(-1), ")");
  const Shape batch = broadcast_shapes(batch_of(A), batch_of(Bm), "linalg.solve");
  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {A.size(-1), A.size(-1)});
  b_shape.insert(b_shape.end(), {Bm.size(-2), Bm.size(-1)});
  const Tensor X = ops::call(kSolve, {A.expand(a_shape), Bm.expand(b_shape)});
  return vector ? X.squeeze(-1) : X;
}

Tensor det(const Tensor& A) {
  check_matrices("linalg.det", A, true);
  return ops::call(kDet, {A});
}

std::tuple<Tensor, Tensor> slogdet(const Tensor& A) {
  check_matrices("linalg.slogdet", A, true);
  const std::vector<Tensor> r = dispatch(kSlogdet, std::vector<Tensor>{A});
  return {r[0], r[1]};
}

Tensor cholesky(const Tensor& A, bool upper) {
  check_matrices("linalg.cholesky", A, true);
  return ops::call(kCholesky, {A}, {{"upper", upper}});
}

std::tuple<Tensor, Tensor> qr(const Tensor& A, const std::string& mode) {
  check_matrices("linalg.qr", A, false);
  check(mode == "reduced" || mode == "complete" || mode == "r", "linalg.qr",
        "expected mode 'reduced', 'complete' or 'r' but got '", mode, "'");
  const std::vector<Tensor> r = dispatch(kQr, std::vector<Tensor>{A}, {{"mode", mode}});
  return {r[0], r[1]};
}

namespace {
std::vector<Tensor> eigh_call(const Tensor& A, const std::string& UPLO, bool vectors, const char* op) {
  check_matrices(op, A, true);
  check(UPLO == "L" || UPLO == "U", op, "expected UPLO 'L' or 'U' but got '", UPLO, "'");
  return dispatch(kEigh, std::vector<Tensor>{A}, {{"UPLO", UPLO}, {"compute_v", vectors}});
}
}  // namespace

std::tuple<Tensor, Tensor> eigh(const Tensor& A, const std::string& UPLO) {
  const std::vector<Tensor> r = eigh_call(A, UPLO, true, "linalg.eigh");
  return {r[0], r[1]};
}
Tensor eigvalsh(const Tensor& A, const std::string& UPLO) { return eigh_call(A, UPLO, false, "linalg.eigvalsh")[0]; }

std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& A, bool full_matrices) {
  check_matrices("linalg.svd", A, false);
  const std::vector<Tensor> r =
      dispatch(kSvd, std::vector<Tensor>{A}, {{"full_matrices", full_matrices}, {"compute_uv", true}});
  return {r[0], r[1], r[2]};
}

Tensor svdvals(const Tensor& A) {
  check_matrices("linalg.svdvals", A, false);
  return dispatch(kSvd, std::vector<Tensor>{A}, {{"full_matrices", false}, {"compute_uv", false}})[1];
}

}  // namespace linalg

namespace {
const bool registered = [] {
  ops::def<&linalg::inv>("linalg_inv(Tensor A) -> Tensor");
  ops::def<&linalg::solve>("linalg_solve(Tensor A, Tensor B, *, bool left=True) -> Tensor");
  ops::def<&linalg::det>("linalg_det(Tensor A) -> Tensor");
  ops::def<&linalg::slogdet>("linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)");
  ops::def<&linalg::cholesky>("linalg_cholesky(Tensor A, *, bool upper=False) -> Tensor");
  ops::def<&linalg::qr>("linalg_qr(Tensor A, str mode='reduced') -> (Tensor Q, Tensor R)");
  ops::def<&linalg::eigh>("linalg_eigh(Tensor A, str UPLO='L') -> (Tensor eigenvalues, Tensor eigenvectors)");
  ops::def<&linalg::eigvalsh>("linalg_eigvalsh(Tensor A, str UPLO='L') -> Tensor");
  ops::def<&linalg::svd>("linalg_svd(Tensor A, bool full_matrices=True) -> (Tensor U, Tensor S, Tensor Vh)");
  ops::def<&linalg::svdvals>("linalg_svdvals(Tensor A) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
