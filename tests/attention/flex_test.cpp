// FlexAttention against a dense float64 reference built from ops
// (materialised scores, explicit mask, softmax), forward and backward.
#include <cmath>
#include <limits>

#include "kiln/attention.h"
#include "kiln/detail/attention_simd.h"
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Dense reference. mask (B, Hq, L, S) bool, bias (Hq, L, S) added to the
// scaled scores (may be undefined), softcap applied after the bias when > 0.
struct Dense {
  Tensor out, lse;
};
Dense dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& bias,
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
Inputs make_qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t S, int64_t E, int64_t Ev, DType dt = kFloat64) {
  return {randn({B, Hq, L, E}, kFloat64).to(dt).requires_grad_(), randn({B, Hkv, S, E}, kFloat64).to(dt).requires_grad_(),
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

TEST(FlexAttention, StandardMasksOddLengthsGqaAndBroadcast) {
  manual_seed(40);
  const int64_t B = 2, Hq = 4, Hkv = 2, L = 37, S = 53, E = 8, Ev = 6, bs = 16;
  Inputs in = make_qkv(B, Hq, Hkv, L, S, E, Ev);
  FlexOptions gqa;
  gqa.enable_gqa = true;
  Tensor docs = tensor<int64_t>(std::vector<int64_t>(S, 0));
  for (int64_t j = 0; j < S; ++j) docs.data_ptr<int64_t>()[j] = j < 10 ? 0 : (j < 30 ? 1 : 2);
  check_against_dense("noop", in, NoScoreMod{}, create_block_mask(NoopMask{}, 1, 1, L, S, bs), {}, 0, gqa);
  check_against_dense("causal", in, NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, L, S, bs), {}, 0, gqa);
  check_against_dense("causal per (B, H)", in, NoScoreMod{}, create_block_mask(CausalMask{}, B, Hq, L, S, bs), {}, 0, gqa);
  check_against_dense("sliding window", in, NoScoreMod{}, create_block_mask(SlidingWindowMask{7}, 1, 1, L, S, bs), {}, 0, gqa);
  check_against_dense("prefix lm", in, NoScoreMod{}, create_block_mask(PrefixLMMask{12}, 1, 1, L, S, bs), {}, 0, gqa);
  check_against_dense("document", in, NoScoreMod{}, create_block_mask(DocumentMask{docs}, 1, 1, L, S, bs), {}, 0, gqa);
  check_against_dense("and(causal, window)", in, NoScoreMod{},
                      create_block_mask(and_masks(CausalMask{}, SlidingWindowMask{20}), 1, 1, L, S, bs), {}, 0, gqa);
  check_against_dense("or(prefix, window)", in, NoScoreMod{},
                      create_block_mask(or_masks(PrefixLMMask{5}, SlidingWindowMask{3}), 1, Hq, L, S, bs), {}, 0, gqa);
  // k and v of batch 1 broadcast over q's batch (their gradients sum over it).
  Inputs shared{in.q, randn({1, Hkv, S, E}, kFloat64).requires_grad_(), randn({1, Hkv, S, Ev}, kFloat64).requires_grad_()};
  check_against_dense("kv batch broadcast", shared, NoScoreMod{}, create_block_mask(CausalMask{}, B, 1, L, S, bs), {}, 0, gqa);
  Inputs shared32{in.q.to(kFloat32).detach().requires_grad_(), shared.k.to(kFloat32).detach().requires_grad_(),
                  shared.v.to(kFloat32).detach().requires_grad_()};
  check_against_dense("f32 kv batch broadcast", shared32, NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, L, S, bs), {},
                      0, gqa);
}

TEST(FlexAttention, Float32TilesWideHeadsAndLongKeys) {
  // Shapes that reach every float32 path: blocks of 32 keys and heads of 40
  // and 48 (the 8-row GEMM tiles with 4-row, single-row and scalar-column
  // remainders), and keys of more than kKeptKeysBytes (4100 x 256 floats;
  // transposed per block instead of once per thread) with 5 query rows,
  // unsplit so the tiled kernel runs.
  manual_seed(48);
  FlexOptions gqa;
  gqa.enable_gqa = true;
  const Inputs wide = make_qkv(2, 4, 2, 77, 101, 40, 48, kFloat32);
  check_against_dense("wide heads causal", wide, NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, 77, 101, 32), {}, 0,
                      gqa);
  check_against_dense("wide heads window", wide, NoScoreMod{},
                      create_block_mask(SlidingWindowMask{40}, 2, 4, 77, 101, 32), {}, 0, gqa);
  // 12 tasks of 3 query blocks: chunks of the thread pool's split start
  // inside a head, so a thread moves on to another KV head's blocks.
  const Inputs heads = make_qkv(1, 4, 4, 70, 101, 40, 48, kFloat32);
  check_against_dense("per-head keys", heads, NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, 70, 101, 32), {}, 0);
  // Up to 4 query rows under a per-head mask (not flash decoding's case): the
  // tiled kernel takes scores as dot products against K rows in place; a
  // strided q (head view of a (B, L, H, E) tensor) is copied to rows first.
  for (int64_t rows_e : {3 * 1000 + 40, 4 * 1000 + 64}) {
    const int64_t L = rows_e / 1000, Ed = rows_e % 1000;
    Inputs few = make_qkv(2, 4, 2, L, 101, Ed, 48, kFloat32);
    const auto bm = create_block_mask(SlidingWindowMask{30}, 1, 4, L, 101, 32);
    check_against_dense("few rows " + std::to_string(L), few, NoScoreMod{}, bm, {}, 0, gqa);
    // Stateless mods run as the dispatcher op, which reads q's rows in place.
    few.q = randn({2, L, 4, Ed}, kFloat32).transpose(1, 2).detach().requires_grad_();
    check_against_dense("few strided rows " + std::to_string(L), few, NoScoreMod{},
                        create_block_mask(NoopMask{}, 1, 4, L, 101, 32), {}, 0, gqa);
  }
  const int64_t S = 4100, E = 256;
  ASSERT_GT(S * E * static_cast<int64_t>(sizeof(float)), attention_detail::kKeptKeysBytes);
  const Inputs longk = make_qkv(1, 2, 1, 5, S, E, 32, kFloat32);
  gqa.kv_partitions = 1;
  check_against_dense("long keys", longk, NoScoreMod{}, create_block_mask(NoopMask{}, 1, 1, 5, S, 128), {}, 0, gqa);
}

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

TEST(FlexAttention, ScoreModsWithCapturedTensors) {
  manual_seed(41);
  const int64_t L = 29, S = 29, H = 3, bs = 8;
  Inputs in = make_qkv(1, H, H, L, S, 5, 5);
  const auto causal = create_block_mask(CausalMask{}, 1, 1, L, S, bs);
  check_against_dense("softcap", in, SoftcapScore{2.0}, causal, {}, 2.0);
  Tensor slopes = tensor<double>({0.5, 0.25, 0.125});
  Tensor alibi = empty({H, L, S}, kFloat64);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) alibi.data_ptr<double>()[(h * L + i) * S + j] = slopes.data_ptr<double>()[h] * (j - i);
  check_against_dense("alibi", in, AlibiScore{slopes}, causal, alibi, 0);
  const int64_t maxd = 4;
  Tensor table = randn({H, 2 * maxd + 1}, kFloat64);
  Tensor rel = empty({H, L, S}, kFloat64);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j)
        rel.data_ptr<double>()[(h * L + i) * S + j] =
            table.data_ptr<double>()[h * (2 * maxd + 1) + std::clamp<int64_t>(j - i, -maxd, maxd) + maxd];
  check_against_dense("relative position bias", in, RelativePositionBias{table, maxd}, causal, rel, 0);
}

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
    const auto captured = create_block_mask([shift](int64_t, int64_t, int64_t qi, int64_t kv) { return qi + shift >= kv; },
                                            1, 1, L, S);
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
  check_against_dense("f32 sliding window", f, NoScoreMod{}, create_block_mask(SlidingWindowMask{5}, 1, 1, 37, 45, 16), {}, 0);
  auto shifted = [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv + 6; };
  check_against_dense("f32 shifted causal", f, SoftcapScore{4.0}, create_block_mask(shifted, 1, 1, 37, 45, 16), {}, 4.0);
  // Head dims and lengths that reach every tile shape of the backward GEMMs
  // (4-row and single-row tiles, two-vector, one-vector and scalar columns).
  FlexOptions gqa;
  gqa.enable_gqa = true;
  Inputs wide = make_qkv(2, 4, 2, 70, 75, 40, 72, kFloat32);
  check_against_dense("f32 causal E=40 Ev=72 GQA", wide, NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, 70, 75, 32),
                      {}, 0, gqa);
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

// Tensors captured by a score mod get gradients when they require grad: a
// relative-position bias table and ALiBi slopes, by gradcheck in float64 and
// against the dense reference (whose bias is built from the table by ops).
TEST(FlexAttention, GradientsOfLearnedScoreModTensors) {
  manual_seed(46);
  const int64_t L = 11, S = 13, H = 2, maxd = 3, W = 2 * maxd + 1;
  Inputs in = make_qkv(2, H, H, L, S, 3, 2);
  const auto bm = create_block_mask(SlidingWindowMask{6}, 1, 1, L, S, 4);
  Tensor table = randn({H, W}, kFloat64).requires_grad_(), slopes = randn({H}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{flex_attention(t[0], t[1], t[2], RelativePositionBias{t[3], maxd}, bm).out};
      },
      {in.q, in.k, in.v, table}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{flex_attention(t[0], t[1], t[2], AlibiScore{t[3]}, bm).out}; },
      {in.q.detach(), in.k.detach(), in.v.detach(), slopes}));
  // float32 attention, float64 table: the table's gradient against the dense
  // float64 reference, where bias[h, i, j] = table[h, clamp(j - i) + maxd]
  // is an index_select, so its gradient flows back to the table by ops.
  Tensor idx = empty({L * S}, kInt64);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) idx.data_ptr<int64_t>()[i * S + j] = std::clamp<int64_t>(j - i, -maxd, maxd) + maxd;
  const Tensor q32 = in.q.to(kFloat32).detach().requires_grad_(), k32 = in.k.to(kFloat32).detach(),
               v32 = in.v.to(kFloat32).detach();
  const Tensor go = randn({2, H, L, 2}, kFloat64);
  flex_attention(q32, k32, v32, RelativePositionBias{table, maxd}, bm).out.backward(go.to(kFloat32));
  const Tensor got = table.grad().clone();
  const Tensor ref_table = table.detach().requires_grad_();
  const Tensor bias = index_select(ref_table, 1, idx).reshape({H, L, S});
  dense_attention(in.q.detach(), in.k.detach(), in.v.detach(), dense_mask(SlidingWindowMask{6}, 2, H, L, S), bias, 0)
      .out.backward(go);
  expect_close(got, values(ref_table.grad()), 1e-4, 1e-5, "table gradient, float32 attention");
  EXPECT_FALSE(k32.grad().defined());  // inputs that do not require grad get none
}

// A score_mod lambda that reads tensors through CapturedTensors (Note
// [Tensors a score_mod captures]): per-head scales multiplying the score
// and a relative-position bias, both learned. gradcheck in float64, and the
// gradients of float32 attention against the dense float64 reference.
TEST(FlexAttention, GradientsOfTensorsALambdaCaptures) {
  manual_seed(47);
  const int64_t L = 9, S = 12, H = 2, maxd = 3, W = 2 * maxd + 1;
  Inputs in = make_qkv(2, H, H, L, S, 3, 2);
  const auto bm = create_block_mask(SlidingWindowMask{5}, 1, 1, L, S, 4);
  auto mod_of = [maxd](const Tensor& scale, const Tensor& table) {
    return [scale = CapturedTensor(scale), bias = CapturedTensor(table), maxd](auto s, int64_t, int64_t h, int64_t q,
                                                                               int64_t kv) {
      return s * scale(h) + bias(h, std::clamp<int64_t>(kv - q, -maxd, maxd) + maxd) * 0.5;
    };
  };
  const Tensor scale = (rand({H}, kFloat64) + 0.5).requires_grad_(), table = randn({H, W}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{flex_attention(t[0], t[1], t[2], mod_of(t[3], t[4]), bm).out};
      },
      {in.q, in.k, in.v, scale, table}));
  // float32 attention and a float32 table: against the dense reference,
  // whose scores are scaled and biased by ops.
  Tensor idx = empty({L * S}, kInt64);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) idx.data_ptr<int64_t>()[i * S + j] = std::clamp<int64_t>(j - i, -maxd, maxd) + maxd;
  const Tensor table32 = table.detach().to(kFloat32).requires_grad_(), scale64 = scale.detach().requires_grad_();
  const Tensor q32 = in.q.to(kFloat32).detach().requires_grad_(), k32 = in.k.to(kFloat32).detach(),
               v32 = in.v.to(kFloat32).detach();
  const Tensor go = randn({2, H, L, 2}, kFloat64);
  flex_attention(q32, k32, v32, mod_of(scale64, table32), bm).out.backward(go.to(kFloat32));
  ASSERT_TRUE(table32.grad().defined() && scale64.grad().defined());
  const Tensor ref_table = table.detach().requires_grad_(), ref_scale = scale.detach().requires_grad_();
  const Tensor qs = in.q.detach() * ref_scale.reshape({1, H, 1, 1});  // (q k^T / sqrt(E)) * scale[h]
  const Tensor bias = index_select(ref_table, 1, idx).reshape({H, L, S}) * 0.5;
  dense_attention(qs, in.k.detach(), in.v.detach(), dense_mask(SlidingWindowMask{5}, 2, H, L, S), bias, 0)
      .out.backward(go);
  expect_close(table32.grad(), values(ref_table.grad()), 1e-4, 1e-5, "bias table gradient");
  expect_close(scale64.grad(), values(ref_scale.grad()), 1e-4, 1e-5, "scale gradient");
  // Reads see the tensor as it is at the call (an optimizer's update shows).
  const Tensor before = flex_attention(q32, k32, v32, mod_of(scale64, table32), bm).out.detach();
  {
    NoGradGuard g;
    table32.mul_(2.0);  // (a shift of every entry would cancel in the softmax)
  }
  const Tensor after = flex_attention(q32, k32, v32, mod_of(scale64, table32), bm).out.detach();
  EXPECT_GT((after - before).abs().max().item<double>(), 1e-3);
}

// Reads that would lose a gradient, and bad reads, are errors that say so.
TEST(FlexAttention, CapturedTensorMisuseIsRefused) {
  manual_seed(48);
  Inputs in = make_qkv(1, 2, 2, 5, 5, 3, 2);
  const Tensor table = randn({2, 5}).requires_grad_();
  const CapturedTensor bias(table);
  // A float constant is taken for a score: the read became a plain number.
  auto lossy = [bias](auto s, int64_t, int64_t h, int64_t, int64_t kv) { return s + bias(h, kv) * 0.5f; };
  expect_error([&] { flex_attention(in.q, in.k, in.v, lossy); }, {"flex_attention", "CapturedTensor", "plain number"});
  {
    NoGradGuard g;  // nothing to differentiate: fine
    flex_attention(in.q, in.k, in.v, lossy);
  }
  auto out_of_range = [bias](auto s, int64_t, int64_t h, int64_t, int64_t kv) { return s + bias(h, kv + 1); };
  expect_error([&] { flex_attention(in.q, in.k, in.v, out_of_range); }, {"CapturedTensor", "index 5", "dim 1", "size 5"});
  auto one_index = [bias](auto s, int64_t, int64_t h, int64_t, int64_t) { return s + bias(h); };
  expect_error([&] { flex_attention(in.q, in.k, in.v, one_index); }, {"CapturedTensor", "2-d", "1 indices"});
  expect_error([] { CapturedTensor(zeros({3}, kInt64)); }, {"CapturedTensor", "float32 or float64", "int64"});
  // A tensor read only away from every corner of the score space.
  const Tensor hidden = zeros({1}).requires_grad_();
  auto interior = [bias, h2 = CapturedTensor(hidden)](auto s, int64_t, int64_t h, int64_t q, int64_t kv) {
    return q == 2 && kv == 2 ? s + h2(0) : s + bias(h, kv);
  };
  const Tensor out = flex_attention(in.q, in.k, in.v, interior).out;
  expect_error([&] { out.sum().backward(); }, {"flex_attention", "did not read", "corner"});
}

TEST(FlexAttention, BlockMaskListsMatchADenseEvaluation) {
  const int64_t L = 70, S = 45, bs = 16;
  const auto m = create_block_mask(SlidingWindowMask{20}, 2, 1, L, S, bs);
  const int64_t nq = m.num_q_blocks(), nk = m.num_kv_blocks();
  EXPECT_EQ(nq, 5);
  EXPECT_EQ(nk, 3);
  int64_t used = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t qb = 0; qb < nq; ++qb) {
      std::vector<char> kind(nk, '.');
      const int64_t row = b * nq + qb;
      for (int64_t c = 0; c < m.kv_num_blocks.data_ptr<int32_t>()[row]; ++c)
        kind[m.kv_indices.data_ptr<int32_t>()[row * nk + c]] = '+';
      for (int64_t c = 0; c < m.full_kv_num_blocks.data_ptr<int32_t>()[row]; ++c)
        kind[m.full_kv_indices.data_ptr<int32_t>()[row * nk + c]] = '#';
      for (int64_t kb = 0; kb < nk; ++kb) {
        int64_t on = 0, all = 0;
        for (int64_t i = qb * bs; i < std::min(L, (qb + 1) * bs); ++i)
          for (int64_t j = kb * bs; j < std::min(S, (kb + 1) * bs); ++j) on += m.mask_mod(b, 0, i, j), ++all;
        const char want = on == 0 ? '.' : (on == all ? '#' : '+');
        EXPECT_EQ(kind[kb], want) << "b " << b << " q block " << qb << " kv block " << kb;
        used += want != '.';
        // The transposed lists name the same pairs.
        const int64_t trow = b * nk + kb;
        bool listed = false;
        const Tensor& n = want == '#' ? m.full_q_num_blocks : m.q_num_blocks;
        const Tensor& ix = want == '#' ? m.full_q_indices : m.q_indices;
        for (int64_t c = 0; c < n.data_ptr<int32_t>()[trow]; ++c) listed = listed || ix.data_ptr<int32_t>()[trow * nq + c] == qb;
        if (want != '.') {
          EXPECT_TRUE(listed);
        }
      }
    }
  EXPECT_NEAR(m.sparsity(), 100.0 * (1.0 - used / 30.0), 1e-9);
  // The partial blocks' bits hold mask_mod's values, found by list position
  // and by KV block index alike (bits past the lengths are unread).
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int64_t c = 0; c < m.kv_num_blocks.data_ptr<int32_t>()[b * nq + qb]; ++c) {
        const int64_t kb = m.kv_indices.data_ptr<int32_t>()[(b * nq + qb) * nk + c];
        const uint64_t* bits = m.partial_bits_block(b, 0, qb, c);
        ASSERT_NE(bits, nullptr);
        EXPECT_EQ(m.partial_bits_of(b, 0, qb, kb), bits);
        for (int64_t i = qb * bs; i < std::min(L, (qb + 1) * bs); ++i)
          for (int64_t j = kb * bs; j < std::min(S, (kb + 1) * bs); ++j) {
            const int64_t r = i - qb * bs, col = j - kb * bs;
            EXPECT_EQ(((bits[r * m.bit_words() + col / 64] >> (col % 64)) & 1) != 0, m.mask_mod(b, 0, i, j))
                << "b " << b << " q " << i << " kv " << j;
          }
      }
  const auto causal = create_block_mask(CausalMask{}, 1, 1, 64, 64, 16);
  EXPECT_NE(causal.to_string().find("+...\n#+..\n##+.\n###+\n"), std::string::npos) << causal.to_string();
  EXPECT_NEAR(causal.sparsity(), 37.5, 1e-9);
}

// Inside a partial block the kernels compute, per group of 32 rows, the
// keys from the group's first kept one (down to a 64-key word) to its last
// (up to a 32-key tile); computed_scores counts those, which benchmarks use.
TEST(FlexAttention, ComputedScoresCountTheKeptTilesOfPartialBlocks) {
  // Causal, one block of 128: row groups keep 32, 64, 96, 128 keys.
  EXPECT_EQ(create_block_mask(CausalMask{}, 1, 1, 128, 128).computed_scores(), 32.0 * (32 + 64 + 96 + 128));
  // Two blocks: the full block below the diagonal counts whole.
  EXPECT_EQ(create_block_mask(CausalMask{}, 1, 1, 256, 256).computed_scores(), 2 * 10240.0 + 128 * 128);
  // A window's lower edge: in block (1, 0) row r keeps keys >= r + 1, so
  // groups 0-1 start at word 0 (joined, all 128 keys), groups 2-3 at key 64.
  const auto window = create_block_mask(SlidingWindowMask{127}, 1, 1, 256, 256);
  EXPECT_EQ(window.computed_scores(), 2 * 10240.0 + 64 * 128 + 64 * 64);
  // Without bits (lists built another way) partial blocks count whole; a
  // block length no multiple of 32 ends the last tile at the sequence end;
  // rows that keep nothing in a block count nothing.
  auto no_bits = window;
  no_bits.partial_bits = Tensor();
  EXPECT_EQ(no_bits.computed_scores(), 3 * 128.0 * 128);
  EXPECT_EQ(create_block_mask(CausalMask{}, 1, 1, 40, 40).computed_scores(), 32.0 * 32 + 8 * 40);
  const auto late = create_block_mask([](int64_t, int64_t, int64_t q, int64_t kv) { return q >= 100 && kv < 10; }, 1, 1,
                                      128, 128);
  EXPECT_EQ(late.computed_scores(), 32.0 * 32);  // rows 96-127, keys 0-31
  // Per (b, h) of a mask that does not broadcast.
  Tensor lens = tensor(std::vector<int64_t>{0, 64});
  const auto per_batch = create_block_mask(
      [lens](int64_t b, int64_t, int64_t q, int64_t kv) { return kv <= q && q >= lens.data_ptr<int64_t>()[b]; }, 2, 1,
      128, 128);
  EXPECT_EQ(per_batch.computed_scores(0, 0), 10240.0);
  EXPECT_EQ(per_batch.computed_scores(1, 0), 32.0 * (96 + 128));
}

// The kernels mask partial blocks with create_block_mask's bits, or call
// mask_mod when a block mask has none (lists built another way): both give
// the same results, forward and backward, through the dispatcher op
// (stateless mask) and the autograd closure (a mask holding a tensor), at
// a block size whose rows are two words and cols no multiple of the SIMD width.
TEST(FlexAttention, MaskBitsAndMaskModAgree) {
  manual_seed(47);
  const int64_t B = 2, Hq = 4, Hkv = 2, L = 157, S = 213, E = 16, bs = 100;
  const auto scattered = [](int64_t, int64_t, int64_t q, int64_t kv) { return (q * 7 + kv * 3) % 5 != 0 && kv <= q + 40; };
  Tensor docs = empty({S}, kInt64);
  for (int64_t j = 0; j < S; ++j) docs.data_ptr<int64_t>()[j] = j / 37;
  FlexOptions gqa;
  gqa.enable_gqa = true;
  auto compare = [&](const auto& bm, const std::string& what) {
    auto without = bm;
    without.partial_bits = Tensor();
    ASSERT_GT(bm.partial_bits.numel(), 0) << what;
    for (DType dt : {kFloat32, kFloat64}) {
      const Inputs in = make_qkv(B, Hq, Hkv, L, S, E, E, dt);
      const FlexOutput a = flex_attention(in.q, in.k, in.v, NoScoreMod{}, bm, gqa),
                       b = flex_attention(in.q, in.k, in.v, NoScoreMod{}, without, gqa);
      // With bits the kernels skip the tiles no row keeps (Note [Tiles of a
      // partial block]): the same sums, grouped differently.
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      expect_close(a.out, values(b.out), tol, tol, what + " out");
      const Tensor go = randn(a.out.sizes(), kFloat64).to(dt);
      auto ga = autograd::grad({a.out}, {in.q, in.k, in.v}, {go}), gb = autograd::grad({b.out}, {in.q, in.k, in.v}, {go});
      for (int i = 0; i < 3; ++i) expect_close(ga[i], values(gb[i]), tol, tol, what + " grad " + std::to_string(i));
    }
    check_against_dense(what + " vs dense", make_qkv(B, Hq, Hkv, L, S, E, E, kFloat32), NoScoreMod{}, bm, {}, 0, gqa);
  };
  compare(create_block_mask(scattered, B, 1, L, S, bs), "scattered");
  compare(create_block_mask(and_masks(DocumentMask{docs}, SlidingWindowMask{60}), 1, Hq, L, S, bs), "document window");
}

TEST(FlexAttention, FlashDecodingMatchesTheUnsplitKernel) {
  manual_seed(45);
  for (int64_t L : {1, 3}) {
    const int64_t S = 301, Hq = 8, Hkv = 2, E = 16;  // last block of 13: odd key tails
    Inputs in = make_qkv(2, Hq, Hkv, L, S, E, E, kFloat32);
    Tensor docs = empty({S}, kInt64);
    for (int64_t j = 0; j < S; ++j) docs.data_ptr<int64_t>()[j] = j < 100 ? 0 : 1;
    // Decoding at the end of the sequence: query i sits at position S - L + i.
    auto window = [L](int64_t, int64_t, int64_t q, int64_t kv) { return kv <= S - L + q && S - L + q - kv <= 90; };
    auto doc = [L, docs](int64_t, int64_t, int64_t q, int64_t kv) {
      return docs.data_ptr<int64_t>()[kv] == docs.data_ptr<int64_t>()[S - L + q];
    };
    const auto wm = create_block_mask(window, 1, 1, L, S, 32);
    const auto dm = create_block_mask(doc, 1, 1, L, S, 32);
    for (int64_t parts : {0, 1, 3, 7}) {
      FlexOptions o;
      o.enable_gqa = true, o.return_lse = true, o.kv_partitions = parts;
      FlexOptions one = o;
      one.kv_partitions = 1;
      for (const auto* name : {"window", "document"}) {
        const bool w = std::string(name) == "window";
        FlexOutput a = w ? flex_attention(in.q, in.k, in.v, NoScoreMod{}, wm, o) : flex_attention(in.q, in.k, in.v, NoScoreMod{}, dm, o);
        FlexOutput b = w ? flex_attention(in.q, in.k, in.v, NoScoreMod{}, wm, one) : flex_attention(in.q, in.k, in.v, NoScoreMod{}, dm, one);
        expect_close(a.out, values(b.out), 1e-5, 1e-6, std::string(name) + " split " + std::to_string(parts));
        expect_close(a.lse, values(b.lse), 1e-5, 1e-6, std::string(name) + " lse split " + std::to_string(parts));
      }
    }
    FlexOptions o;
    o.enable_gqa = true, o.kv_partitions = 4;
    check_against_dense("decode softcap window", in, SoftcapScore{3.0}, wm, {}, 3.0, o);
    // A bfloat16 cache, read as stored, against float32 on the same values.
    NoGradGuard no_grad;
    const Tensor qb = in.q.to(kBFloat16), kb = in.k.to(kBFloat16), vb = in.v.to(kBFloat16);
    o.return_lse = true;
    FlexOutput low = flex_attention(qb, kb, vb, NoScoreMod{}, wm, o);
    FlexOutput ref = flex_attention(qb.to(kFloat32), kb.to(kFloat32), vb.to(kFloat32), NoScoreMod{}, wm, o);
    EXPECT_EQ(low.out.dtype(), kBFloat16);
    expect_close(low.out, values(ref.out), 1e-2, 1e-2, "bf16 cache decode");
    expect_close(low.lse, values(ref.lse), 1e-5, 1e-5, "bf16 cache decode lse");
  }
}

// The bf16 cache decode reads K and V as stored; on AVX-512 CPUs with
// AVX512-BF16 it uses the dot-product instruction when E and Ev are
// multiples of 32 (E = 40 takes the widening kernels there), on Arm CPUs
// with FEAT_BF16 BFMMLA and BFDOT when they are multiples of 8 (the arm64
// suite runs this on qemu's max CPU, which has them, and on Neoverse N1,
// which has not). Against
// float64 on the same bf16 values: GQA groups of 4 (four-row tiles) and 3
// (single rows), a block of odd length at the end (S = 301, blocks of 32),
// Ev = 96 (not a multiple of 64), a sliding window, split and unsplit.
// Flash decoding's P V keeps 4 x 4 tiles of the accumulator in registers on
// 32-register targets, then 4 x 1 tiles; 4 x 2 elsewhere; then scalars:
// value widths that end in each of those tails (Ev = 24 + 16 m, 200 ends in
// 8 scalars), GQA groups of 4 (one 4-row tile) and 6 (a tile plus two
// single rows), float32 against the float64 reference.
TEST(FlexAttention, DecodeValueRowsOfEveryWidthMatchFloat64) {
  manual_seed(47);
  const int64_t S = 333;  // 10 blocks of 32 and a tail of 13 keys
  for (int64_t Ev : {64, 80, 144, 200, 272})
    for (int64_t group : {4, 6}) {
      Inputs in = make_qkv(1, 2 * group, 2, 1, S, 24, Ev, kFloat32);
      FlexOptions o;
      o.enable_gqa = true, o.kv_partitions = 3;
      check_against_dense("decode Ev " + std::to_string(Ev) + " group " + std::to_string(group), in, NoScoreMod{},
                          create_block_mask(NoopMask{}, 1, 1, 1, S, 32), {}, 0, o);
    }
}

// Flash decoding takes runs of consecutive KV blocks as one chunk (dots, one
// softmax update, P V) and applies the mods block by block inside it: a
// position-dependent score mod (ALiBi) and a document mask whose one partial
// block starts a run of full ones, against float64.
TEST(FlexAttention, DecodeRunsOfBlocksApplyModsAtTheirPositions) {
  manual_seed(48);
  const int64_t S = 301, Hq = 4, L = 1;
  Inputs in = make_qkv(1, Hq, 1, L, S, 16, 16, kFloat32);
  Tensor docs = empty({S}, kInt64);
  for (int64_t j = 0; j < S; ++j) docs.data_ptr<int64_t>()[j] = j < 100 ? 0 : 1;
  auto doc = [docs](int64_t, int64_t, int64_t, int64_t kv) { return docs.data_ptr<int64_t>()[kv] == 1; };
  Tensor slopes = tensor<double>({0.5, 0.25, 0.125, 0.0625});
  Tensor alibi = empty({Hq, L, S}, kFloat64);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t j = 0; j < S; ++j) alibi.data_ptr<double>()[h * S + j] = slopes.data_ptr<double>()[h] * 0.01 * j;
  Tensor scaled = slopes * 0.01;
  for (int64_t parts : {0, 2}) {
    FlexOptions o;
    o.enable_gqa = true, o.kv_partitions = parts;
    check_against_dense("decode alibi documents parts " + std::to_string(parts), in, AlibiScore{scaled},
                        create_block_mask(doc, 1, 1, L, S, 32), alibi, 0, o);
  }
}

// The softmax step every float32 kernel shares (its exp is kiln's own, for
// arguments <= 0), against float64 on scores far below and above the
// running max, masked (-inf) scores, a fully masked row and odd lengths, on
// each SIMD target the tests run under.
TEST(FlexAttention, OnlineSoftmaxStepMatchesFloat64) {
  manual_seed(49);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t rows = 4, cols = 37, ld = 40;
  const Tensor u = rand({rows, ld}, kFloat64);
  std::vector<float> s(rows * ld), mx = {kNegInf, 5.0f, 50.0f, 1.0f}, l = {0.0f, 2.5f, 1.0f, 3.0f}, corr(rows);
  for (int64_t i = 0; i < rows * ld; ++i) s[i] = static_cast<float>(-120.0 + 130.0 * u.data_ptr<double>()[i]);
  for (int64_t j = 0; j < cols; j += 5) s[j] = kNegInf;           // masked keys in row 0
  for (int64_t j = 0; j < cols; ++j) s[3 * ld + j] = kNegInf;     // row 3: nothing visible
  const std::vector<float> s0 = s, mx0 = mx, l0 = l;
  attention_simd::online_softmax(s.data(), rows, cols, ld, mx.data(), l.data(), corr.data());
  for (int64_t r = 0; r < rows; ++r) {
    double bmax = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < cols; ++j) bmax = std::max(bmax, static_cast<double>(s0[r * ld + j]));
    if (std::isinf(bmax)) {
      EXPECT_EQ(corr[r], 1.0f) << "row " << r;
      EXPECT_EQ(mx[r], mx0[r]);
      EXPECT_EQ(l[r], l0[r]);
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(s[r * ld + j], 0.0f) << "row " << r << " key " << j;
      continue;
    }
    const double m = std::max(static_cast<double>(mx0[r]), bmax);
    const double c = std::isinf(mx0[r]) ? 0.0 : std::exp(mx0[r] - m);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) {
      // exp of the float32 difference the kernel takes (its rounding
      // alone is up to 4e-6 relative at -70)
      const double p = std::exp(static_cast<double>(s0[r * ld + j] - static_cast<float>(m)));
      sum += p;
      EXPECT_NEAR(s[r * ld + j], p, 1e-6 * p + 1e-37) << "row " << r << " key " << j << " score " << s0[r * ld + j];
    }
    EXPECT_EQ(mx[r], static_cast<float>(m)) << "row " << r;
    EXPECT_NEAR(corr[r], c, 1e-6 * c) << "row " << r;
    EXPECT_NEAR(l[r], l0[r] * c + sum, 1e-6 * (l0[r] * c + sum)) << "row " << r;
  }
}

TEST(FlexAttention, BFloat16CacheDecodeMatchesFloat64) {
  manual_seed(46);
  NoGradGuard no_grad;
  const int64_t S = 301;
  for (const auto& [Hq, E, Ev] : {std::tuple{8, 64, 96}, std::tuple{6, 128, 32}, std::tuple{8, 40, 40}})
    for (int64_t L : {1, 2}) {
      const Tensor q = randn({1, Hq, L, E}).to(kBFloat16), k = randn({1, 2, S, E}).to(kBFloat16),
                   v = randn({1, 2, S, Ev}).to(kBFloat16);
      auto window = [L](int64_t, int64_t, int64_t qi, int64_t kv) { return kv <= S - L + qi && S - L + qi - kv <= 150; };
      // Keys 64-95 hidden from every row (a gap between runs of blocks);
      // query row 0 sees only keys 0-39, so every run after the gap has
      // nothing visible to it, and its state (acc, max, sum) must stay.
      auto gap = [](int64_t, int64_t, int64_t qi, int64_t kv) { return kv < 40 || (qi > 0 && kv >= 100); };
      const auto full = create_block_mask(NoopMask{}, 1, 1, L, S, 32);
      const auto wm = create_block_mask(window, 1, 1, L, S, 32);
      const auto gm = create_block_mask(gap, 1, 1, L, S, 32);
      for (int64_t parts : {0, 1, 3}) {
        FlexOptions o;
        o.enable_gqa = true, o.return_lse = true, o.kv_partitions = parts;
        const std::string what = "Hq " + std::to_string(Hq) + " E " + std::to_string(E) + " L " + std::to_string(L) +
                                 " parts " + std::to_string(parts);
        auto check = [&](const std::string& mask_name, const auto& bm) {
          FlexOutput got = flex_attention(q, k, v, NoScoreMod{}, bm, o);
          FlexOutput ref = flex_attention(q.to(kFloat64), k.to(kFloat64), v.to(kFloat64), NoScoreMod{}, bm, o);
          EXPECT_EQ(got.out.dtype(), kBFloat16);
          // Output and probabilities are rounded to bf16 (2^-9 relative).
          expect_close(got.out, values(ref.out), 1e-2, 1e-2, what + " " + mask_name + " out");
          expect_close(got.lse, values(ref.lse), 1e-5, 1e-5, what + " " + mask_name + " lse");
        };
        check("full", full);
        check("window", wm);
        check("gap", gm);
      }
    }
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
  expect_error([&] { flex_attention(randn({2, 4, 8, 4}), randn({3, 2, 8, 4}), randn({3, 2, 8, 4}), NoScoreMod{}, o); },
               {"[flex_attention]", "batch size or 1", "[3, 2, 8, 4]"});
}

}  // namespace
}  // namespace kiln::test
