// FlexAttention against a dense float64 reference (attention/flex_reference.h),
// forward and backward: masks, GQA, tiles, captured tensors (layouts:
// flex_layout_test.cpp).
#include "attention/flex_reference.h"

namespace kiln::test {
namespace {

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

}  // namespace
}  // namespace kiln::test
