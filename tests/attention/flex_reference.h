// FlexAttention's tests: a dense float64 reference built from ops
// (materialised scores, explicit mask, softmax) and the comparison of
// flex_attention's forward and backward with it, shared by the test files
// of tests/attention (split so that no one file takes long to compile).
#pragma once
#include <cmath>
#include <limits>
#include <string>

#include "kiln/attention.h"
#include "kiln/detail/attention_simd.h"
#include "test_util.h"

namespace kiln::test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Dense reference. mask (B, Hq, L, S) bool, bias (Hq, L, S) added to the
// scaled scores (may be undefined), softcap applied after the bias when > 0.
struct Dense {
  Tensor out, lse;
};
inline Dense dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& bias,
                             double softcap) {
  const int64_t Hq = q.size(1), Hkv = k.size(1), group = Hq / Hkv;
  const Tensor heads = div(arange(Hq), wrapped_scalar(group)).to(kInt64);
  const Tensor ke = index_select(k, 1, heads), ve = index_select(v, 1, heads);
  Tensor s = matmul(q, ke.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  if (softcap > 0) s = tanh(s / softcap) * softcap;
  if (bias.defined()) s = s + bias;
  s = masked_fill(s, logical_not(mask), -kInf);
  const Tensor lse = logsumexp(s, {-1});
  const Tensor dead = eq(lse, wrapped_scalar(-kInf)).unsqueeze(-1);
  const Tensor p = where(dead, zeros_like(s), softmax(s, -1));
  return {matmul(p, ve), lse};
}

template <class MaskMod>
Tensor dense_mask(const MaskMod& m, int64_t B, int64_t H, int64_t L, int64_t S) {
  Tensor t = empty({B, H, L, S}, kBool);
  bool* p = t.data_ptr<bool>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) *p++ = m(b, h, i, j);
  return t;
}

struct Inputs {
  Tensor q, k, v;
};
inline Inputs make_qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t S, int64_t E, int64_t Ev,
                       DType dt = kFloat64) {
  return {randn({B, Hq, L, E}, kFloat64).to(dt).requires_grad_(),
          randn({B, Hkv, S, E}, kFloat64).to(dt).requires_grad_(),
          randn({B, Hkv, S, Ev}, kFloat64).to(dt).requires_grad_()};
}

// Compares forward, lse and the q/k/v gradients with the dense reference.
template <class ScoreMod, class MaskMod>
void check_against_dense(const std::string& what, const Inputs& in, const ScoreMod& sm, const BlockMask<MaskMod>& bm,
                         const Tensor& bias, double softcap, FlexOptions opt = {}) {
  opt.return_lse = true;
  const int64_t B = in.q.size(0), Hq = in.q.size(1), L = in.q.size(2), S = in.k.size(2);
  FlexOutput got = flex_attention(in.q, in.k, in.v, sm, bm, opt);
  const Tensor q64 = in.q.to(kFloat64).detach().requires_grad_(), k64 = in.k.to(kFloat64).detach().requires_grad_(),
               v64 = in.v.to(kFloat64).detach().requires_grad_();
  Dense ref = dense_attention(q64, k64, v64, dense_mask(bm.mask_mod, B, Hq, L, S), bias, softcap);
  const bool f64 = in.q.dtype() == kFloat64;
  const double tol = f64 ? 1e-10 : (in.q.dtype() == kFloat32 ? 1e-5 : 3e-2);
  expect_close(got.out, values(ref.out), tol, tol, what + " out");
  expect_close(got.lse, values(ref.lse), 1e-5, 1e-5, what + " lse");
  // Gradients: float64 exactly, float32 (the SIMD GEMM path) within its precision.
  if (!f64 && in.q.dtype() != kFloat32) return;
  const double gtol = f64 ? 1e-9 : 2e-4;
  const Tensor go = randn(ref.out.sizes(), kFloat64);
  auto want = autograd::grad({ref.out}, {q64, k64, v64}, {go});
  auto have = autograd::grad({got.out}, {in.q, in.k, in.v}, {go.to(in.q.dtype())});
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) expect_close(have[i], values(want[i]), gtol, gtol, what + " " + names[i]);
}

}  // namespace kiln::test
