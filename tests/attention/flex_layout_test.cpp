// FlexAttention against the dense float64 reference (attention/flex_reference.h)
// on the layouts of its operands: heads as views of a fused projection, the
// output following the layout of q.
#include "attention/flex_reference.h"

namespace kiln::test {
namespace {

TEST(FlexAttention, StridedHeadsOfAFusedProjection) {
  // q, k, v as head views of one (B, L, 3 * H * E) projection and a strided
  // output gradient, as in the GPT: read in place (rows with a contiguous last
  // dim), forward and gradients equal to the dense reference.
  manual_seed(47);
  const int64_t B = 2, L = 37, H = 4, E = 8, bs = 16;
  for (DType dt : {kFloat64, kFloat32}) {
    const Tensor base = randn({B, L, 3 * H * E}, kFloat64).to(dt).requires_grad_();
    auto heads = [&](const Tensor& t, int64_t i) {
      return t.narrow(2, i * H * E, H * E).view({B, L, H, E}).transpose(1, 2);
    };
    const auto bm = create_block_mask(CausalMask{}, 1, 1, L, L, bs);
    const Tensor out = flex_attention(heads(base, 0), heads(base, 1), heads(base, 2), NoScoreMod{}, bm).out;
    const Tensor b64 = base.to(kFloat64).detach().requires_grad_();
    const Dense ref =
        dense_attention(heads(b64, 0), heads(b64, 1), heads(b64, 2), dense_mask(CausalMask{}, B, H, L, L), {}, 0);
    const double tol = dt == kFloat64 ? 1e-10 : 1e-5, gtol = dt == kFloat64 ? 1e-9 : 2e-4;
    const std::string what = dt == kFloat64 ? "float64" : "float32";
    expect_close(out, values(ref.out), tol, tol, what + " out");
    // The output follows q's layout (as in PyTorch): its (B, L, H, E)
    // transpose is contiguous, so merging the heads is a view.
    EXPECT_TRUE(out.transpose(1, 2).is_contiguous()) << what;
    const Tensor go = randn({B, L, H, E}, kFloat64).transpose(1, 2);
    const Tensor want = autograd::grad({ref.out}, {b64}, {go})[0];
    const Tensor have = autograd::grad({out}, {base}, {go.to(dt)})[0];
    expect_close(have, values(want), gtol, gtol, what + " d(projection)");
  }
}

TEST(FlexAttention, OutputFollowsTheLayoutOfQ) {
  // Contiguous q: contiguous output. q a view of (B, L, H, E) memory, with
  // GQA and with few query rows (flash decoding, forced): output in that
  // layout, values equal to the dense reference.
  manual_seed(48);
  const int64_t B = 2, H = 4, Hkv = 2, E = 8, S = 300, bs = 32;
  FlexOptions gqa;
  gqa.enable_gqa = true;
  for (int64_t L : {int64_t{3}, int64_t{45}}) {
    FlexOptions opt = gqa;
    if (L == 3) opt.kv_partitions = 4;
    const Tensor k = randn({B, Hkv, S, E}), v = randn({B, Hkv, S, E});
    const auto bm = create_block_mask(SlidingWindowMask{100}, 1, 1, L, S, bs);
    const Tensor mask = dense_mask(bm.mask_mod, B, H, L, S);
    for (bool rows : {false, true}) {
      const Tensor q = rows ? randn({B, L, H, E}).transpose(1, 2) : randn({B, H, L, E});
      const Tensor out = flex_attention(q, k, v, NoScoreMod{}, bm, opt).out;
      const std::string what = "L=" + std::to_string(L) + (rows ? " q rows hold heads" : " contiguous q");
      ASSERT_EQ(out.sizes(), (Shape{B, H, L, E})) << what;
      EXPECT_TRUE(rows ? out.transpose(1, 2).is_contiguous() : out.is_contiguous()) << what;
      const Dense ref = dense_attention(q.to(kFloat64), k.to(kFloat64), v.to(kFloat64), mask, {}, 0);
      expect_close(out, values(ref.out), 1e-5, 1e-5, what);
    }
  }
}

}  // namespace
}  // namespace kiln::test
