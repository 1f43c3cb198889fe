// kiln-bench-ops: elementwise ops, reductions and softmax against the memory
// copy bandwidth measured here; matmul against cblas_sgemm called directly;
// layer_norm and softmax against libtorch 1.13 when it is built in. All
// inputs are random. `--json` prints one JSON object per line.
#include <cblas.h>

#include <cstring>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"
#include "peers/peer.h"

using namespace kiln;
using kiln::bench::time_best;

namespace {

constexpr int64_t kN = 16 << 20;  // 16M float32 elements = 64 MiB

// Bytes read + written per second by a parallel memcpy of n floats.
double copy_bandwidth(const float* src, float* dst, int64_t n) {
  const double s = time_best([&] {
    parallel_for(0, n, 1 << 18, [&](int64_t b, int64_t e) {
      std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(float));
    });
  });
  return 2.0 * n * sizeof(float) / s;
}

double sgemm_gflops(int64_t n) {
  Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n});
  const int in = static_cast<int>(n);
  const double s = time_best(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, in, in, in, 1.0f, a.data_ptr<float>(), in,
                    b.data_ptr<float>(), in, 0.0f, c.data_ptr<float>(), in);
      },
      3);
  return 2.0 * n * n * n / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Reporter rep;
  for (int i = 1; i < argc; ++i) rep.json = rep.json || std::strcmp(argv[i], "--json") == 0;
  const int threads = 2;
  set_num_threads(threads);
  manual_seed(0);

  Tensor x = randn({kN}), y = randn({kN}), out = empty({kN});
  const double bw = copy_bandwidth(x.data_ptr<float>(), out.data_ptr<float>(), kN) / 1e9;
  const double bytes = static_cast<double>(kN) * sizeof(float);

  const double t_add = time_best([&] { add_out(out, x, y); });
  rep.report("ops", "add_16M_f32", "GB/s", 3 * bytes / t_add / 1e9, "copy_bandwidth", bw);
  const double t_mul = time_best([&] { mul_out(out, x, y); });
  rep.report("ops", "mul_16M_f32", "GB/s", 3 * bytes / t_mul / 1e9, "copy_bandwidth", bw);
  Tensor s;
  const double t_sum = time_best([&] { s = sum(x); });
  rep.report("ops", "sum_16M_f32", "GB/s", bytes / t_sum / 1e9, "copy_bandwidth", bw);
  Tensor xs = x.view({kN / 1024, 1024}), sm;
  const double t_sm = time_best([&] { sm = softmax(xs, -1); });
  rep.report("ops", "softmax_16M_f32_rows1024", "GB/s", 2 * bytes / t_sm / 1e9, "copy_bandwidth", bw);

  for (int64_t n : {512, 1024, 2048}) {
    Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n});
    const double t = time_best([&] { matmul_out(c, a, b); }, 3);
    rep.report("ops", "matmul_" + std::to_string(n) + "_f32", "GFLOP/s", 2.0 * n * n * n / t / 1e9,
               "sgemm_direct", sgemm_gflops(n));
  }

  const int64_t rows = 8192, cols = 1024;
  Tensor lx = randn({rows, cols}), lw = randn({cols}), lb = randn({cols}), ly;
  const double t_ln = time_best([&] { ly = layer_norm(lx, {cols}, lw, lb); });
  Tensor sy;
  const double t_sm2 = time_best([&] { sy = softmax(lx, -1); });
  if (auto torch_ln = kiln::bench::peer::layer_norm_seconds(rows, cols, threads)) {
    rep.report("ops", "layer_norm_8192x1024_f32", "ms", t_ln * 1e3, "libtorch", *torch_ln * 1e3, false);
    rep.report("ops", "softmax_8192x1024_f32", "ms", t_sm2 * 1e3, "libtorch",
               *kiln::bench::peer::softmax_seconds(rows, cols, threads) * 1e3, false);
  } else {
    std::fprintf(stderr, "libtorch not built in: peer cases skipped (install libtorch-dev and rebuild)\n");
  }
  return 0;
}
