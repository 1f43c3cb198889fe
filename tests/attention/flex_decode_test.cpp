// FlexAttention's decoding kernels (flash decoding, bf16 caches, the online
// softmax) against float64 (attention/flex_reference.h).
#include "attention/flex_reference.h"

namespace kiln::test {
namespace {

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
        FlexOutput a = w ? flex_attention(in.q, in.k, in.v, NoScoreMod{}, wm, o)
                         : flex_attention(in.q, in.k, in.v, NoScoreMod{}, dm, o);
        FlexOutput b = w ? flex_attention(in.q, in.k, in.v, NoScoreMod{}, wm, one)
                         : flex_attention(in.q, in.k, in.v, NoScoreMod{}, dm, one);
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
  for (int64_t j = 0; j < cols; j += 5) s[j] = kNegInf;        // masked keys in row 0
  for (int64_t j = 0; j < cols; ++j) s[3 * ld + j] = kNegInf;  // row 3: nothing visible
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
      auto window = [L](int64_t, int64_t, int64_t qi, int64_t kv) {
        return kv <= S - L + qi && S - L + qi - kv <= 150;
      };
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

}  // namespace
}  // namespace kiln::test
