// kiln-bench-attention: FlexAttention prefill against this machine's sgemm
// rate (FLOPs of the computed blocks and tiles only), against dense attention in
// libtorch 1.13, and decoding against the memory copy bandwidth.
#include <cmath>
#include <cstring>
#include <random>

#include "baselines.h"
#include "bench_util.h"
#include "kiln/attention.h"
#include "kiln/kiln.h"
#include "peers/peer.h"

using namespace kiln;
using kiln::bench::time_best;

namespace {

// FLOPs of QK^T and PV over what the kernels compute: the blocks the mask
// lists, less the tiles of partial blocks that no row keeps.
double block_flops(const BlockMaskData& m, int64_t heads_per_mask, int64_t E, int64_t Ev) {
  double scores = 0;
  for (int64_t b = 0; b < m.B; ++b)
    for (int64_t h = 0; h < m.H; ++h) scores += m.computed_scores(b, h);
  return scores * static_cast<double>(heads_per_mask) * 2.0 * static_cast<double>(E + Ev);
}

template <class MaskMod>
void prefill_case(const kiln::bench::Reporter& rep, const std::string& name, int64_t H, int64_t S, int64_t E,
                  const MaskMod& mask, double sgemm) {
  Tensor q = randn({1, H, S, E}), k = randn({1, H, S, E}), v = randn({1, H, S, E});
  const auto bm = create_block_mask(mask, 1, 1, S, S);
  FlexOutput r;
  const double t = time_best([&] { r = flex_attention(q, k, v, NoScoreMod{}, bm); }, 2);
  rep.report("attention", name, "GFLOP/s", block_flops(bm, H, E, E) / t / 1e9, "sgemm_rate", sgemm);
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::Reporter rep = kiln::bench::start_bench(argc, argv);
  const int threads = kiln::bench::kBenchThreads;
  const double sgemm = kiln::bench::sgemm_gflops(2048);

  prefill_case(rep, "prefill_causal", 8, 4096, 64, CausalMask{}, sgemm);
  {
    Tensor q = randn({1, 8, 4096, 64}), k = randn({1, 8, 4096, 64}), v = randn({1, 8, 4096, 64});
    const auto bm = create_block_mask(CausalMask{}, 1, 1, 4096, 4096);
    FlexOutput r;
    const double t = time_best([&] { r = flex_attention(q, k, v, NoScoreMod{}, bm); }, 2);
    if (auto dense = kiln::bench::peer::dense_causal_attention_seconds(8, 4096, 64, threads))
      rep.report("attention", "prefill_causal", "ms", t * 1e3, "libtorch_dense", *dense * 1e3, false);
  }
  prefill_case(rep, "prefill_sliding_window", 8, 8192, 64, SlidingWindowMask{256}, sgemm);
  {
    // 8 documents of random lengths packed into one row of 4096.
    std::mt19937 rng(0);
    std::vector<int64_t> cuts = {0, 4096};
    for (int i = 0; i < 7; ++i) cuts.push_back(std::uniform_int_distribution<int64_t>(1, 4095)(rng));
    std::sort(cuts.begin(), cuts.end());
    Tensor ids = empty({4096}, kInt64);
    for (size_t d = 0; d + 1 < cuts.size(); ++d)
      for (int64_t j = cuts[d]; j < cuts[d + 1]; ++j) ids.data_ptr<int64_t>()[j] = static_cast<int64_t>(d);
    prefill_case(rep, "prefill_document", 8, 4096, 64, and_masks(CausalMask{}, DocumentMask{ids}), sgemm);
  }
  {
    // Forward + backward of the prefill_causal case.
    Tensor q = randn({1, 8, 4096, 64}).requires_grad_(), k = randn({1, 8, 4096, 64}).requires_grad_(),
           v = randn({1, 8, 4096, 64}).requires_grad_();
    const auto bm = create_block_mask(CausalMask{}, 1, 1, 4096, 4096);
    const double t = time_best([&] { flex_attention(q, k, v, NoScoreMod{}, bm).out.sum().backward(); }, 1);
    // Forward 2 matmuls, backward 5 (recomputed scores, dV, dP, dQ, dK).
    rep.report("attention", "prefill_causal_fwd_bwd", "GFLOP/s", block_flops(bm, 8, 64, 64) * 3.5 / t / 1e9,
               "sgemm_rate", sgemm);
  }
  // Decoding is bandwidth-bound: timed alternately with the copy baseline
  // (this host's bandwidth drifts from one second to the next).
  const int64_t copy_n = 16 << 20;
  Tensor copy_src = randn({copy_n}), copy_dst = empty({copy_n});
  auto copy = [&] { kiln::bench::parallel_copy(copy_src.data_ptr<float>(), copy_dst.data_ptr<float>(), copy_n); };
  const double copy_bytes = 2.0 * static_cast<double>(copy_n) * sizeof(float);
  const int64_t read_n = 64 << 20;  // 256 MiB, as much as the float32 K and V
  Tensor read_src = randn({read_n});
  const double read_bytes = static_cast<double>(read_n) * sizeof(float);
  for (DType kv_dtype : {kFloat32, kBFloat16}) {
    const int64_t S = 32768, Hq = 32, Hkv = 8, E = 128;
    Tensor q = randn({1, Hq, 1, E}).to(kv_dtype), k = randn({1, Hkv, S, E}).to(kv_dtype), v = randn({1, Hkv, S, E}).to(kv_dtype);
    FlexOptions o;
    o.enable_gqa = true;
    FlexOutput r;
    const auto [t, t_copy] = kiln::bench::time_pair([&] { r = flex_attention(q, k, v, NoScoreMod{}, o); }, copy, 15);
    const double bytes = 2.0 * static_cast<double>(k.numel()) * static_cast<double>(k.element_size());
    rep.report("attention", std::string("decode_") + dtype_name(kv_dtype), "GB/s", bytes / t / 1e9, "copy_bandwidth",
               copy_bytes / t_copy / 1e9);
    // The same against reading alone (K and V are only read): the fastest
    // read of 256 MiB found on this host is kiln's own sum (AVX-512 loads
    // into four accumulators, no software prefetch), 80-98 GB/s when the
    // copy runs at 85-100; a scalar-compiled read loop reached only 53-77.
    Tensor read_sum;
    const auto [t2, t_read] = kiln::bench::time_pair([&] { r = flex_attention(q, k, v, NoScoreMod{}, o); },
                                                     [&] { read_sum = sum(read_src); }, 15);
    rep.report("attention", std::string("decode_") + dtype_name(kv_dtype), "GB/s", bytes / t2 / 1e9, "read_bandwidth",
               read_bytes / t_read / 1e9);
    if (kv_dtype == kFloat32) {
      // Flash decoding against kv_partitions = 1, which runs the general tiled
      // kernel (one task per query head and block; each query head reads K
      // and V itself). Here B * Hkv = 8 tasks already fill 2 threads, so the
      // automatic choice is one partition per KV head: the gain measured is
      // the GQA-shared, transpose-free decode kernel, not the split itself.
      FlexOptions one = o;
      one.kv_partitions = 1;
      const double t1 = time_best([&] { r = flex_attention(q, k, v, NoScoreMod{}, one); }, 3);
      rep.report("attention", "decode_split", "GB/s", bytes / t / 1e9, "one_partition", bytes / t1 / 1e9);
    }
  }
  return 0;
}
