// PagedKVCache: attention over pages scattered through the physical cache
// equals attention over each sequence's own contiguous keys and values.
#include <vector>

#include "kiln/paged_attention.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Causal over each sequence's own length: query row i of sequence b sits at
// position len[b] - L + i.
struct RaggedCausal {
  Tensor lens;  // (B) int64
  int64_t L;
  bool operator()(int64_t b, int64_t, int64_t q, int64_t kv) const {
    const int64_t n = lens.data_ptr<int64_t>()[b];
    return kv < n && n - L + q >= kv;
  }
};

void check_paged_matches_contiguous(DType dt, int64_t L, FlexOptions opt) {
  const std::vector<int64_t> lens = {37, 70, 5};
  const int64_t B = 3, H = 2, D = 8, page = 16;
  PagedKVCache cache(/*n_pages=*/12, page, /*max_batch_size=*/4, H, D, dt);
  std::vector<Tensor> ks, vs;
  for (int64_t b = 0; b < B; ++b)
    ks.push_back(randn({1, H, lens[b], D}, kFloat64).to(dt)), vs.push_back(randn({1, H, lens[b], D}, kFloat64).to(dt));
  // Grow the sequences in turns so their pages interleave in the cache, and
  // write the keys through sequence slots 1, 3, 0 (not 0, 1, 2).
  const std::vector<int64_t> slot = {1, 3, 0};
  for (int64_t upto = page; upto < 70 + page; upto += page)
    for (int64_t b = 0; b < B; ++b) cache.reserve(slot[b], std::min(upto, lens[b]));
  EXPECT_EQ(cache.free_pages(), 12 - (3 + 5 + 1));
  for (int64_t b = 0; b < B; ++b)
    cache.assign(tensor<int64_t>({slot[b]}), arange(lens[b]), ks[b], vs[b]);

  Tensor q = randn({B, H, L, D}, kFloat64).to(dt);
  Tensor lens_t = tensor<int64_t>(lens);
  const auto logical = create_block_mask(RaggedCausal{lens_t, L}, B, 1, L, 70, page);
  const auto physical = cache.convert_logical_block_mask(logical, tensor<int64_t>(slot));
  const Tensor out = flex_attention(q, cache.k_cache(), cache.v_cache(), NoScoreMod{}, physical, opt).out;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lens[b];
    auto own = [n, L](int64_t, int64_t, int64_t qi, int64_t kv) { return n - L + qi >= kv; };
    const Tensor want = flex_attention(q.narrow(0, b, 1), ks[b], vs[b], NoScoreMod{},
                                       create_block_mask(own, 1, 1, L, n, page), opt).out;
    expect_close(out.narrow(0, b, 1), values(want), dt == kFloat64 ? 1e-12 : 1e-5, 1e-6,
                 "sequence " + std::to_string(b) + " L=" + std::to_string(L));
  }
}

TEST(PagedKVCache, AttentionOverPagesMatchesContiguousSequences) {
  manual_seed(50);
  check_paged_matches_contiguous(kFloat64, 4, {});
  check_paged_matches_contiguous(kFloat32, 4, {});
  FlexOptions split;
  split.kv_partitions = 3;  // flash decoding over the pages
  check_paged_matches_contiguous(kFloat32, 1, split);
  FlexOptions whole;
  whole.kv_partitions = 1;
  check_paged_matches_contiguous(kFloat32, 1, whole);
}

// Each (sequence, position) lands in its page's slot: two sequences at
// once, positions per sequence out of order and across page ends, values
// converted to the cache's dtype and read through a transposed view.
TEST(PagedKVCache, AssignWritesEachPositionToItsPagesSlot) {
  manual_seed(51);
  const int64_t H = 2, D = 3, page = 4, T = 6;
  PagedKVCache cache(/*n_pages=*/6, page, /*max_batch_size=*/3, H, D, kFloat32);
  cache.reserve(2, 5), cache.reserve(0, 3), cache.reserve(2, 12), cache.reserve(0, 9);  // interleaved pages
  const Tensor pos = tensor<int64_t>({2, 3, 4, 5, 11, 10, 0, 8, 1, 2, 3, 4});
  const Tensor positions = pos.view({2, T});
  const Tensor k = randn({2, T, H, D}, kFloat64).transpose(1, 2), v = randn({2, T, H, D}, kFloat64).transpose(1, 2);
  const Tensor seqs = tensor<int64_t>({2, 0});
  cache.assign(seqs, positions, k, v);
  const Tensor table = cache.page_table();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t seq = seqs.data_ptr<int64_t>()[b], p = positions.select(0, b).data_ptr<int64_t>()[t];
      const int64_t slot = table.select(0, seq).data_ptr<int64_t>()[p / page] * page + p % page;
      const std::string what = "sequence " + std::to_string(seq) + " position " + std::to_string(p);
      expect_close(cache.k_cache().select(0, 0).select(1, slot), values(k.select(0, b).select(1, t).to(kFloat32)), 0, 0,
                   what + " k");
      expect_close(cache.v_cache().select(0, 0).select(1, slot), values(v.select(0, b).select(1, t).to(kFloat32)), 0, 0,
                   what + " v");
    }
}

TEST(PagedKVCache, ReserveEraseAndPageTable) {
  PagedKVCache cache(4, 8, 2, 1, 4);
  cache.reserve(0, 9);  // two pages
  EXPECT_EQ(cache.capacity(0), 16);
  cache.reserve(1, 8);
  cache.reserve(0, 16);  // already backed
  EXPECT_EQ(cache.free_pages(), 1);
  EXPECT_EQ(values(cache.page_table().select(0, 0)), (std::vector<double>{0, 1, -1, -1}));
  EXPECT_EQ(values(cache.page_table().select(0, 1)), (std::vector<double>{2, -1, -1, -1}));
  cache.erase(0);
  EXPECT_EQ(cache.free_pages(), 3);
  EXPECT_EQ(cache.capacity(0), 0);
  cache.reserve(1, 32);  // takes the pages sequence 0 gave back
  EXPECT_EQ(cache.free_pages(), 0);
}

TEST(PagedKVCache, Errors) {
  PagedKVCache cache(2, 8, 2, 2, 4);
  expect_error([&] { PagedKVCache(0, 8, 1, 1, 1); }, {"[PagedKVCache]", "n_pages=0"});
  expect_error([&] { cache.reserve(0, 17); }, {"[PagedKVCache.reserve]", "needs 3 more pages", "2 of 2 are free"});
  expect_error([&] { cache.reserve(2, 1); }, {"[PagedKVCache.reserve]", "batch index 2"});
  cache.reserve(0, 8);
  const Tensor kv = randn({1, 2, 2, 4});
  expect_error([&] { cache.assign(tensor<int64_t>({0}), tensor<int64_t>({7, 8}), kv, kv); },
               {"[PagedKVCache.assign]", "position 8", "capacity 8"});
  expect_error([&] { cache.assign(tensor<int64_t>({0}), tensor<int64_t>({0, 1}), randn({1, 3, 2, 4}), kv); },
               {"[PagedKVCache.assign]", "(B, 2, T, 4)", "[1, 3, 2, 4]"});
  const auto wrong_block = create_block_mask(CausalMask{}, 1, 1, 4, 8, 4);
  expect_error([&] { cache.convert_logical_block_mask(wrong_block, tensor<int64_t>({0})); },
               {"[PagedKVCache.convert_logical_block_mask]", "block_size (4)", "page size (8)"});
}

}  // namespace
}  // namespace kiln::test
