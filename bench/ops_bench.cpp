// kiln-bench-ops: elementwise ops, reductions and softmax against the memory
// copy bandwidth measured here; matmul against cblas_sgemm called directly;
// layer_norm, softmax and the per-op latency of a 1-element add against
// libtorch 1.13 when it is built in. All inputs are random. `--json` prints one JSON object per line.
#include <cstring>
#include <vector>

#include "baselines.h"
#include "bench_util.h"
#include "kiln/kiln.h"
#include "peers/peer.h"

using namespace kiln;
using kiln::bench::parallel_copy;
using kiln::bench::sgemm_direct;
using kiln::bench::time_best;

namespace {

constexpr int64_t kN = 16 << 20;  // 16M float32 elements = 64 MiB

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::Reporter rep = kiln::bench::start_bench(argc, argv);
  const int threads = kiln::bench::kBenchThreads;

  Tensor x = randn({kN}), y = randn({kN}), out = empty({kN}), copy_dst = empty({kN});
  const double bytes = static_cast<double>(kN) * sizeof(float);
  auto copy = [&] { parallel_copy(x.data_ptr<float>(), copy_dst.data_ptr<float>(), kN); };
  // Bandwidth cases: bytes read + written per second, kiln op vs memcpy.
  auto bandwidth_case = [&](const char* name, double moved, const std::function<void()>& op) {
    auto [t_op, t_copy] = kiln::bench::time_pair(op, copy);
    rep.report("ops", name, "GB/s", moved / t_op / 1e9, "copy_bandwidth", 2 * bytes / t_copy / 1e9);
  };
  bandwidth_case("add_16M_f32", 3 * bytes, [&] { add_out(out, x, y); });
  bandwidth_case("mul_16M_f32", 3 * bytes, [&] { mul_out(out, x, y); });
  Tensor s;
  bandwidth_case("sum_16M_f32", bytes, [&] { s = sum(x); });
  // Transcendentals (edge-correct forms, Note [Float32 at the edges]): a
  // kernel is compute-bound where it falls below the copy.
  Tensor u;
  bandwidth_case("exp_16M_f32", 2 * bytes, [&] { u = exp(x); });
  bandwidth_case("log_16M_f32", 2 * bytes, [&] { u = log(x); });
  bandwidth_case("sin_16M_f32", 2 * bytes, [&] { u = sin(x); });
  bandwidth_case("sigmoid_16M_f32", 2 * bytes, [&] { u = sigmoid(x); });
  bandwidth_case("silu_16M_f32", 2 * bytes, [&] { u = silu(x); });
  bandwidth_case("gelu_16M_f32", 2 * bytes, [&] { u = gelu(x); });
  bandwidth_case("gelu_tanh_16M_f32", 2 * bytes, [&] { u = gelu(x, "tanh"); });
  Tensor xs = x.view({kN / 1024, 1024}), sm;
  bandwidth_case("softmax_16M_f32_rows1024", 2 * bytes, [&] { sm = softmax(xs, -1); });

  for (int64_t n : {512, 1024, 2048}) {
    Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n}), c2 = empty({n, n});
    auto [t_kiln, t_blas] =
        kiln::bench::time_pair([&] { matmul_out(c, a, b); }, [&] { sgemm_direct(a, b, c2); }, 5);
    const double flop = 2.0 * n * n * n;
    rep.report("ops", "matmul_" + std::to_string(n) + "_f32", "GFLOP/s", flop / t_kiln / 1e9, "sgemm_direct",
               flop / t_blas / 1e9);
  }

  const int64_t rows = 8192, cols = 1024;
  Tensor lx = randn({rows, cols}), lw = randn({cols}), lb = randn({cols}), ly;
  const double t_ln = time_best([&] { ly = layer_norm(lx, {cols}, lw, lb); });
  Tensor sy;
  const double t_sm2 = time_best([&] { sy = softmax(lx, -1); });
  // Per-op overhead: an eager add of two 1-element tensors, per call.
  constexpr int kCalls = 20000;
  Tensor sa = randn({1}), sb = randn({1}), sc;
  const double t_small = time_best([&] {
                           for (int i = 0; i < kCalls; ++i) sc = add(sa, sb);
                         }) /
                         kCalls;
  if (auto torch_small = kiln::bench::peer::small_add_seconds_per_call(kCalls))
    rep.report("ops", "small_op_latency", "us", t_small * 1e6, "libtorch", *torch_small * 1e6, false);
  if (auto torch_ln = kiln::bench::peer::layer_norm_seconds(rows, cols, threads)) {
    rep.report("ops", "layer_norm_8192x1024_f32", "ms", t_ln * 1e3, "libtorch", *torch_ln * 1e3, false);
    rep.report("ops", "softmax_8192x1024_f32", "ms", t_sm2 * 1e3, "libtorch",
               *kiln::bench::peer::softmax_seconds(rows, cols, threads) * 1e3, false);
  } else {
    std::fprintf(stderr, "libtorch not built in: peer cases skipped (install libtorch-dev and rebuild)\n");
  }
  return 0;
}
