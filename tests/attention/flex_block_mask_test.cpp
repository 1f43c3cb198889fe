// FlexAttention's block masks against a dense evaluation of their mask mods:
// lists, partial blocks, bits (attention/flex_reference.h).
#include "attention/flex_reference.h"

namespace kiln::test {
namespace {

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
        for (int64_t c = 0; c < n.data_ptr<int32_t>()[trow]; ++c)
          listed = listed || ix.data_ptr<int32_t>()[trow * nq + c] == qb;
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
  const auto late =
      create_block_mask([](int64_t, int64_t, int64_t q, int64_t kv) { return q >= 100 && kv < 10; }, 1, 1, 128, 128);
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
  const auto scattered = [](int64_t, int64_t, int64_t q, int64_t kv) {
    return (q * 7 + kv * 3) % 5 != 0 && kv <= q + 40;
  };
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
      auto ga = autograd::grad({a.out}, {in.q, in.k, in.v}, {go}),
           gb = autograd::grad({b.out}, {in.q, in.k, in.v}, {go});
      for (int i = 0; i < 3; ++i) expect_close(ga[i], values(gb[i]), tol, tol, what + " grad " + std::to_string(i));
    }
    check_against_dense(what + " vs dense", make_qkv(B, Hq, Hkv, L, S, E, E, kFloat32), NoScoreMod{}, bm, {}, 0, gqa);
  };
  compare(create_block_mask(scattered, B, 1, L, S, bs), "scattered");
  compare(create_block_mask(and_masks(DocumentMask{docs}, SlidingWindowMask{60}), 1, Hq, L, S, bs), "document window");
}

}  // namespace
}  // namespace kiln::test
