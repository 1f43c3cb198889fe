// FlexAttention at the edges: fully masked rows, empty sizes, low precision,
// the scale option, gradcheck with softcap and window, errors (against the
// dense float64 reference of attention/flex_reference.h).
#include "attention/flex_reference.h"

namespace kiln::test {
namespace {

TEST(FlexAttention, FullyMaskedRowsGiveZeroAndMinusInfinity) {
  manual_seed(42);
  Inputs in = make_qkv(1, 2, 2, 20, 20, 4, 4);
  auto shifted = [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv + 3; };  // rows 0-2 see nothing
  const auto bm = create_block_mask(shifted, 1, 1, 20, 20, 8);
  FlexOptions o;
  o.return_lse = true;
  FlexOutput r = flex_attention(in.q, in.k, in.v, NoScoreMod{}, bm, o);
  const auto out = values(r.out), lse = values(r.lse);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lse[i], -kInf);
    for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(out[i * 4 + e], 0.0);
  }
  EXPECT_FALSE(std::isnan(sum(r.out).item<double>()));
  check_against_dense("shifted causal", in, NoScoreMod{}, bm, {}, 0);
}

// Empty batches, heads or queries give empty outputs, and no keys give the
// fully masked row's answer (0, lse -inf), on the op path (stateless mods,
// with gradients) and the eager one (a capturing mask, bf16 decode); an
// empty batch used to divide by zero when picking the decode split.
TEST(FlexAttention, EmptyBatchesQueriesAndKeys) {
  for (auto [B, L, S] : std::vector<std::array<int64_t, 3>>{{0, 4, 8}, {2, 0, 8}, {2, 4, 0}, {2, 1, 0}, {0, 1, 8}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " L " << L << " S " << S);
    const Tensor q = randn({B, 2, L, 16}), k = randn({B, 2, S, 16}), v = randn({B, 2, S, 16});
    const int64_t shift = 1;
    const auto captured =
        create_block_mask([shift](int64_t, int64_t, int64_t qi, int64_t kv) { return qi + shift >= kv; }, 1, 1, L, S);
    const auto causal = create_block_mask(CausalMask{}, 1, 1, L, S);
    FlexOptions o;
    o.return_lse = true;
    const Tensor qg = q.clone().requires_grad_(true);
    const FlexOutput op = flex_attention(qg, k, v, NoScoreMod{}, causal, o);
    op.out.sum().backward();
    const FlexOutput eager = flex_attention(q, k, v, NoScoreMod{}, captured, o);
    const FlexOutput bf16 = flex_attention(q.to(kBFloat16), k.to(kBFloat16), v.to(kBFloat16), NoScoreMod{}, captured);
    for (const Tensor& out : {op.out, eager.out, bf16.out}) {
      EXPECT_EQ(out.sizes(), Shape({B, 2, L, 16}));
      for (double x : values(out)) EXPECT_EQ(x, 0.0);
    }
    for (const Tensor& lse : {op.lse, eager.lse})
      for (double x : values(lse)) EXPECT_EQ(x, -kInf);
    ASSERT_TRUE(qg.grad().defined());
    for (double x : values(qg.grad())) EXPECT_EQ(x, 0.0);
  }
}

TEST(FlexAttention, LowPrecisionAndScaleOption) {
  manual_seed(43);
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    Inputs in = make_qkv(1, 2, 2, 33, 33, 16, 16, dt);
    FlexOutput r = flex_attention(in.q, in.k, in.v, NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, 33, 33, 16));
    EXPECT_EQ(r.out.dtype(), dt);
    EXPECT_FALSE(r.lse.defined());  // only with return_lse
    check_against_dense(std::string("causal ") + dtype_name(dt), in, NoScoreMod{},
                        create_block_mask(CausalMask{}, 1, 1, 33, 33, 16), {}, 0);
  }
  // float32 rows in groups of four, with rows that see nothing in some blocks (or at all).
  Inputs f = make_qkv(1, 2, 2, 37, 45, 16, 16, kFloat32);
  check_against_dense("f32 sliding window", f, NoScoreMod{}, create_block_mask(SlidingWindowMask{5}, 1, 1, 37, 45, 16),
                      {}, 0);
  auto shifted = [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv + 6; };
  check_against_dense("f32 shifted causal", f, SoftcapScore{4.0}, create_block_mask(shifted, 1, 1, 37, 45, 16), {},
                      4.0);
  // Head dims and lengths that reach every tile shape of the backward GEMMs
  // (4-row and single-row tiles, two-vector, one-vector and scalar columns).
  FlexOptions gqa;
  gqa.enable_gqa = true;
  Inputs wide = make_qkv(2, 4, 2, 70, 75, 40, 72, kFloat32);
  check_against_dense("f32 causal E=40 Ev=72 GQA", wide, NoScoreMod{},
                      create_block_mask(CausalMask{}, 1, 1, 70, 75, 32), {}, 0, gqa);
  Inputs in = make_qkv(1, 1, 1, 9, 9, 4, 4);
  FlexOptions o;
  o.scale = 0.3;
  FlexOutput r = flex_attention(in.q, in.k, in.v, NoScoreMod{}, o);
  // scale 0.3 equals the default scale applied to q * 0.3 * sqrt(E).
  FlexOutput ref = flex_attention((in.q * (0.3 * 2.0)).detach(), in.k.detach(), in.v.detach());
  expect_close(r.out, values(ref.out), 1e-12, 1e-12, "scale option");
}

TEST(FlexAttention, GradcheckWithSoftcapAndWindow) {
  manual_seed(44);
  Inputs in = make_qkv(1, 2, 1, 6, 7, 3, 2);
  FlexOptions o;
  o.enable_gqa = true;
  const auto bm = create_block_mask(SlidingWindowMask{2}, 1, 1, 6, 7, 4);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{flex_attention(v[0], v[1], v[2], SoftcapScore{1.5}, bm, o).out};
      },
      {in.q, in.k, in.v}));
}

TEST(FlexAttention, Errors) {
  Tensor q = randn({1, 4, 8, 4}), k = randn({1, 2, 8, 4}), v = randn({1, 2, 8, 4});
  expect_error([&] { flex_attention(q, k, v); }, {"[flex_attention]", "enable_gqa"});
  FlexOptions o;
  o.enable_gqa = true;
  expect_error([&] { flex_attention(randn({1, 3, 8, 4}), k, v, NoScoreMod{}, o); }, {"[flex_attention]", "multiple"});
  expect_error([&] { flex_attention(q, randn({1, 2, 8, 5}), v, NoScoreMod{}, o); }, {"[flex_attention]", "head dim"});
  expect_error([&] { flex_attention(q, k, v.to(kFloat64), NoScoreMod{}, o); }, {"[flex_attention]", "float64"});
  const auto bm = create_block_mask(CausalMask{}, 1, 1, 16, 16, 8);
  expect_error([&] { flex_attention(q, k, v, NoScoreMod{}, bm, o); }, {"[flex_attention]", "Q_LEN=16"});
  expect_error([&] { flex_attention(q.view({4, 8, 4}), k, v); }, {"[flex_attention]", "4-D"});
  expect_error(
      [&] {
        flex_attention(randn({2, 4, 8, 4}), randn({3, 2, 8, 4}), randn({3, 2, 8, 4}), NoScoreMod{}, o);
      },
      {"[flex_attention]", "batch size or 1", "[3, 2, 8, 4]"});
}

}  // namespace
}  // namespace kiln::test
