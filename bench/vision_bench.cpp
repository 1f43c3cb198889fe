// kiln-bench-vision: conv2d forward and forward + backward on LeNet- and
// ResNet-like shapes, in GFLOP/s, against the machine's limit for an
// im2col convolution: cblas_sgemm called directly on the GEMMs the
// convolution amounts to (per group: (N * outputs) x (C/groups * k * k) x
// (O/groups); three of them for forward + backward). The libtorch 1.13
// peer (oneDNN) is still to come. Inputs are random. `--json` prints one
// JSON object per line.
#include <cblas.h>

#include <string>
#include <vector>

#include "baselines.h"
#include "bench_util.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::bench::time_best;

namespace {

struct Case {
  const char* name;
  int64_t N, C, H, W, O, k, stride, padding, groups;
};

// The seconds of `groups` direct sgemms of m x kk by kk x n, OpenBLAS on
// the bench's threads.
double gemm_seconds(int64_t m, int64_t kk, int64_t n, int64_t groups, int repeats) {
  const Tensor a = randn({m, kk}), b = randn({kk, n}), c = empty({m, n});
  const kiln::bench::OpenBlasThreads threads(kiln::bench::kBenchThreads);
  return time_best([&] {
    for (int r = 0; r < repeats; ++r)
      for (int64_t g = 0; g < groups; ++g)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(kk), 1.0f, a.data_ptr<float>(), static_cast<int>(kk), b.data_ptr<float>(),
                    static_cast<int>(n), 0.0f, c.data_ptr<float>(), static_cast<int>(n));
  }, 3);
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::Reporter rep = kiln::bench::start_bench(argc, argv);
  const std::vector<Case> cases = {
      {"lenet_64x1x28x28_32c3", 64, 1, 28, 28, 32, 3, 1, 1, 1},
      {"resnet_32x64x56x56_64c3", 32, 64, 56, 56, 64, 3, 1, 1, 1},
      {"resnet_32x128x28x28_128c3", 32, 128, 28, 28, 128, 3, 1, 1, 1},
      {"proj_32x64x56x56_256c1", 32, 64, 56, 56, 256, 1, 1, 0, 1},
      {"depthwise_32x128x28x28_c3", 32, 128, 28, 28, 128, 3, 1, 1, 128},
  };
  for (const Case& c : cases) {
    const int64_t OH = (c.H + 2 * c.padding - c.k) / c.stride + 1, OW = (c.W + 2 * c.padding - c.k) / c.stride + 1;
    const int64_t m = c.N * OH * OW, kk = c.C / c.groups * c.k * c.k, n = c.O / c.groups;
    const double flops = 2.0 * static_cast<double>(m * kk * n * c.groups);
    const Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C / c.groups, c.k, c.k}) * 0.1, b = randn({c.O});
    Tensor y;
    const double t_fwd = time_best([&] {
      NoGradGuard no_grad;
      y = nn::conv2d(x, w, b, {c.stride}, {c.padding}, {1}, c.groups);
    }, 3);
    const double g_fwd = gemm_seconds(m, kk, n, c.groups, 1);
    rep.report("vision", std::string("conv2d_fwd_") + c.name, "GFLOP/s", flops / t_fwd / 1e9, "sgemm_direct",
               flops / g_fwd / 1e9);
    const Tensor xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_(), bg = b.clone().requires_grad_();
    const Tensor grad = randn(y.sizes());
    const double t_train = time_best([&] {
      xg.set_grad({}), wg.set_grad({}), bg.set_grad({});
      nn::conv2d(xg, wg, bg, {c.stride}, {c.padding}, {1}, c.groups).backward(grad);
    }, 3);
    rep.report("vision", std::string("conv2d_fwd_bwd_") + c.name, "GFLOP/s", 3 * flops / t_train / 1e9,
               "sgemm_direct", 3 * flops / (3 * g_fwd) / 1e9);
  }
  return 0;
}
