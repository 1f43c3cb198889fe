// kiln-bench-vision: conv2d forward and forward + backward on LeNet- and
// ResNet-like shapes, in GFLOP/s, against the machine's limit for an
// im2col convolution: cblas_sgemm called directly on the GEMMs the
// convolution amounts to (per group: (N * outputs) x (C/groups * k * k) x
// (O/groups); three of them for forward + backward), and against libtorch
// 1.13 (Debian's libtorch-dev, oneDNN 2.6 inside) on the same call, with
// the geometric mean of those ratios; then the Fashion-MNIST CNN's training
// images/s against the same network in libtorch; then the int8 dynamic
// Linear against kiln's float32 Linear and libtorch's dynamic quantized one. Inputs are random.
// With KILN_BENCH_PYTHON naming a Python with torch (`make bench-pytorch`
// installs PyTorch 2.9 from PyPI for it), the conv and CNN cases are also
// reported against that PyTorch, run first by peers/torch_vision.py.
// `--json` prints one JSON object per line.
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "baselines.h"
#include "bench_util.h"
#include "kiln/kiln.h"
#include "peers/peer.h"
#include "fashion_mnist.h"

using namespace kiln;
using kiln::bench::time_best;
using kiln::bench::time_best_for;

namespace {

struct Case {
  const char* name;
  kiln::bench::peer::ConvShape s;
};

// kiln's training images/s of the Fashion-MNIST CNN (kiln train --task
// fashion-mnist's network and optimizer), random images.
double cnn_train_images_per_second(int64_t batch, int steps, bool channels_last) {
  nn::Sequential model;
  kiln::cli::build_fashion_mnist_cnn(model);
  Tensor x = randn({batch, 1, 28, 28});
  const Tensor y = randint(0, 10, {batch});
  if (channels_last) model.to(MemoryFormat::ChannelsLast), x = x.contiguous(MemoryFormat::ChannelsLast);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
  auto step = [&] {
    opt.zero_grad();
    nn::cross_entropy(model(x), y).backward();
    opt.step();
  };
  step(), step();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return static_cast<double>(batch * steps) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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

// PyTorch's figures from peers/torch_vision.py (seconds per conv case,
// images/s of the CNN step) and its version, or none without KILN_BENCH_PYTHON.
struct PythonPeer {
  std::string name;
  std::map<std::string, double> value;
};
PythonPeer python_peer() {
  PythonPeer peer;
  const char* python = std::getenv("KILN_BENCH_PYTHON");
  if (!python || !*python) return peer;
  const std::string command = std::string(python) + " " + KILN_TORCH_VISION_PY + " --threads " +
                              std::to_string(kiln::bench::kBenchThreads) + " --conv-seconds " +
                              std::to_string(kiln::bench::peer::kConvSeconds);
  FILE* out = popen(command.c_str(), "r");
  if (!out) return peer;
  char line[4096];
  while (std::fgets(line, sizeof line, out)) {
    const auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_object() || !row.contains("case")) continue;
    if (row["case"] == "version") peer.name = "pytorch_" + row["torch"].get<std::string>();
    else if (row.contains("seconds")) peer.value[row["case"]] = row["seconds"].get<double>();
    else if (row.contains("images_per_second")) peer.value[row["case"]] = row["images_per_second"].get<double>();
  }
  if (pclose(out) != 0 || peer.name.empty()) {
    std::fprintf(stderr, "kiln-bench-vision: %s failed; no PyTorch figures\n", command.c_str());
    return {};
  }
  return peer;
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::Reporter rep = kiln::bench::start_bench(argc, argv);
  const PythonPeer pytorch = python_peer();  // first, alone on the machine
  // kiln's figure beside PyTorch's, made from its value by `figure` (seconds to GFLOP/s).
  auto against_pytorch = [&](const std::string& name, const std::string& unit, double kiln_value,
                             const std::function<double(double)>& figure) {
    if (const auto it = pytorch.value.find(name); it != pytorch.value.end())
      rep.report("vision", name, unit, kiln_value, pytorch.name, figure(it->second));
  };
  const std::vector<Case> cases = {
      {"lenet_64x1x28x28_32c3", {64, 1, 28, 28, 32, 3, 1, 1, 1}},
      {"resnet_32x64x56x56_64c3", {32, 64, 56, 56, 64, 3, 1, 1, 1}},
      {"resnet_32x128x28x28_128c3", {32, 128, 28, 28, 128, 3, 1, 1, 1}},
      {"proj_32x64x56x56_256c1", {32, 64, 56, 56, 256, 1, 1, 0, 1}},
      {"depthwise_32x128x28x28_c3", {32, 128, 28, 28, 128, 3, 1, 1, 128}},
  };
  double log_ratio_sum = 0;
  int peer_cases = 0;
  // The geometric mean counts the row-major cases (the figure); the
  // channels-last ones are reported beside libtorch in channels_last.
  auto against_torch = [&](const std::string& name, double flops, double kiln_seconds, std::optional<double> torch_seconds,
                           bool in_mean) {
    if (!torch_seconds) return;
    rep.report("vision", name, "GFLOP/s", flops / kiln_seconds / 1e9, "libtorch_1.13", flops / *torch_seconds / 1e9);
    if (in_mean) log_ratio_sum += std::log(*torch_seconds / kiln_seconds), ++peer_cases;
  };
  for (const bool channels_last : {false, true})
    for (const Case& c : cases) {
      const auto& s = c.s;
      const std::string name = std::string(c.name) + (channels_last ? "_channels_last" : "");
      const MemoryFormat f = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
      const int64_t OH = (s.H + 2 * s.padding - s.k) / s.stride + 1, OW = (s.W + 2 * s.padding - s.k) / s.stride + 1;
      const int64_t m = s.N * OH * OW, kk = s.C / s.groups * s.k * s.k, n = s.O / s.groups;
      const double flops = 2.0 * static_cast<double>(m * kk * n * s.groups);
      const Tensor x = randn({s.N, s.C, s.H, s.W}).contiguous(f),
                   w = (randn({s.O, s.C / s.groups, s.k, s.k}) * 0.1).contiguous(f), b = randn({s.O});
      Tensor y;
      const double t_fwd = time_best_for([&] {
        NoGradGuard no_grad;
        y = nn::conv2d(x, w, b, {s.stride}, {s.padding}, {1}, s.groups);
      }, 3, kiln::bench::peer::kConvSeconds);
      const double g_fwd = gemm_seconds(m, kk, n, s.groups, 1);
      rep.report("vision", "conv2d_fwd_" + name, "GFLOP/s", flops / t_fwd / 1e9, "sgemm_direct", flops / g_fwd / 1e9);
      against_torch("conv2d_fwd_" + name, flops, t_fwd,
                    kiln::bench::peer::conv2d_seconds(s, false, kiln::bench::kBenchThreads, channels_last), !channels_last);
      against_pytorch("conv2d_fwd_" + name, "GFLOP/s", flops / t_fwd / 1e9, [&](double t) { return flops / t / 1e9; });
      const Tensor xg = x.clone().contiguous(f).requires_grad_(), wg = w.clone().contiguous(f).requires_grad_(),
                   bg = b.clone().requires_grad_();
      const Tensor grad = randn(y.sizes()).contiguous(f);
      const double t_train = time_best_for([&] {
        xg.set_grad({}), wg.set_grad({}), bg.set_grad({});
        nn::conv2d(xg, wg, bg, {s.stride}, {s.padding}, {1}, s.groups).backward(grad);
      }, 3, kiln::bench::peer::kConvSeconds);
      rep.report("vision", "conv2d_fwd_bwd_" + name, "GFLOP/s", 3 * flops / t_train / 1e9, "sgemm_direct",
                 3 * flops / (3 * g_fwd) / 1e9);
      against_torch("conv2d_fwd_bwd_" + name, 3 * flops, t_train,
                    kiln::bench::peer::conv2d_seconds(s, true, kiln::bench::kBenchThreads, channels_last), !channels_last);
      against_pytorch("conv2d_fwd_bwd_" + name, "GFLOP/s", 3 * flops / t_train / 1e9,
                      [&](double t) { return 3 * flops / t / 1e9; });
    }
  if (peer_cases > 0) {  // the geometric mean of the ratios, as one line (kiln and baseline: 1 and its inverse)
    const double geomean = std::exp(log_ratio_sum / peer_cases);
    rep.report("vision", "conv2d_geomean_vs_libtorch", "ratio", geomean, "libtorch_1.13", 1.0);
  }
  // int8 dynamic Linear 1024 -> 1024 against kiln's float32 Linear and libtorch's quantized one.
  for (const int64_t m : {1, 16, 64, 256}) {
    const Tensor xi = randn({m, 1024}), weight = randn({1024, 1024}) * 0.1, bias = randn({1024});
    const quant::Int8Weight wq = quant::quantize_weight(weight);
    Tensor yi;
    const double t_int8 = time_best([&] { yi = quant::linear_dynamic(xi, wq, bias); });
    const double t_float = time_best([&] {
      NoGradGuard no_grad;
      yi = linear(xi, weight, bias);
    });
    const std::string name = "linear_dynamic_int8_1024x1024_b" + std::to_string(m);
    rep.report("vision", name, "us", t_int8 * 1e6, "kiln_float32_linear", t_float * 1e6, false);
    if (const auto t_torch = kiln::bench::peer::linear_dynamic_seconds(m, 1024, 1024, kiln::bench::kBenchThreads))
      rep.report("vision", name, "us", t_int8 * 1e6, "libtorch_1.13_onednn_int8", *t_torch * 1e6, false);
  }
  const int64_t batch = 64;
  const double kiln_ips = cnn_train_images_per_second(batch, 30, false);
  if (const auto torch_ips = kiln::bench::peer::cnn_train_images_per_second(batch, 30, kiln::bench::kBenchThreads))
    rep.report("vision", "fashion_mnist_cnn_train_b64", "images/s", kiln_ips, "libtorch_1.13", *torch_ips);
  // The figure for PyTorch 1.13 on this network, measured once on this machine's kind.
  rep.report("vision", "fashion_mnist_cnn_train_b64", "images/s", kiln_ips, "pytorch_1.13_issue_figure", 2540);
  against_pytorch("fashion_mnist_cnn_train_b64", "images/s", kiln_ips, [](double ips) { return ips; });
  // Both in channels_last (the model's weights and the batch).
  const double kiln_ips_cl = cnn_train_images_per_second(batch, 30, true);
  if (const auto torch_ips = kiln::bench::peer::cnn_train_images_per_second(batch, 30, kiln::bench::kBenchThreads, true))
    rep.report("vision", "fashion_mnist_cnn_train_b64_channels_last", "images/s", kiln_ips_cl, "libtorch_1.13", *torch_ips);
  against_pytorch("fashion_mnist_cnn_train_b64_channels_last", "images/s", kiln_ips_cl, [](double ips) { return ips; });
  return 0;
}
