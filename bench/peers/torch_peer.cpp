// libtorch 1.13 timings for the peer comparisons of kiln-bench-ops.
#include <torch/torch.h>

#include "bench_util.h"
#include "peers/peer.h"

namespace kiln::bench::peer {

std::optional<double> layer_norm_seconds(long rows, long cols, int threads) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);  // libtorch's GEMMs go through the same OpenBLAS
  torch::NoGradGuard no_grad;
  auto x = torch::randn({rows, cols});
  auto w = torch::randn({cols}), b = torch::randn({cols});
  torch::Tensor y;
  return time_best([&] { y = torch::layer_norm(x, {cols}, w, b, 1e-5); });
}

std::optional<double> softmax_seconds(long rows, long cols, int threads) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);  // libtorch's GEMMs go through the same OpenBLAS
  torch::NoGradGuard no_grad;
  auto x = torch::randn({rows, cols});
  torch::Tensor y;
  return time_best([&] { y = torch::softmax(x, -1); });
}

std::optional<double> small_add_seconds_per_call(int calls) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({1}), b = torch::randn({1});
  torch::Tensor y;
  return time_best([&] {
           for (int i = 0; i < calls; ++i) y = torch::add(a, b);
         }) /
         calls;
}

std::optional<double> dense_causal_attention_seconds(long heads, long len, long dim, int threads) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);  // libtorch's GEMMs go through the same OpenBLAS
  torch::NoGradGuard no_grad;
  auto q = torch::randn({1, heads, len, dim}), k = torch::randn({1, heads, len, dim}), v = torch::randn({1, heads, len, dim});
  const auto mask = torch::ones({len, len}, torch::kBool).triu(1);
  torch::Tensor y;
  return time_best(
      [&] {
        auto s = torch::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(dim)));
        y = torch::matmul(torch::softmax(s.masked_fill(mask, -INFINITY), -1), v);
      },
      2);
}

}  // namespace kiln::bench::peer
