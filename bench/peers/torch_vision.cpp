// libtorch 1.13 timings for kiln-bench-vision: conv2d (which libtorch runs
// through oneDNN 2.6 where its heuristics pick it) and the Fashion-MNIST
// CNN's training step, and its dynamic quantized Linear (Debian's build
// has no FBGEMM: the oneDNN quantization engine), on random data.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/quantized/PackedParams.h>
#include <torch/torch.h>

#include <chrono>

#include "bench_util.h"
#include "peers/peer.h"

namespace kiln::bench::peer {

std::optional<double> conv2d_seconds(const ConvShape& s, bool backward, int threads, bool channels_last) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);
  auto x = torch::randn({s.N, s.C, s.H, s.W}), w = torch::randn({s.O, s.C / s.groups, s.k, s.k}) * 0.1,
       b = torch::randn({s.O});
  if (channels_last) {
    x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    w = w.contiguous(torch::MemoryFormat::ChannelsLast);
  }
  if (!backward) {
    torch::NoGradGuard no_grad;
    torch::Tensor y;
    return time_best_for([&] { y = torch::conv2d(x, w, b, s.stride, s.padding, 1, s.groups); }, 3, kConvSeconds);
  }
  x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
  const auto grad = torch::randn_like(torch::conv2d(x, w, b, s.stride, s.padding, 1, s.groups));
  return time_best_for([&] {
    x.mutable_grad() = torch::Tensor(), w.mutable_grad() = torch::Tensor(), b.mutable_grad() = torch::Tensor();
    torch::conv2d(x, w, b, s.stride, s.padding, 1, s.groups).backward(grad);
  }, 3, kConvSeconds);
}

namespace {
struct FashionCnn : torch::nn::Module {
  torch::nn::Sequential net{
      torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)), torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
      torch::nn::MaxPool2d(2), torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)),
      torch::nn::BatchNorm2d(64), torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Flatten(),
      torch::nn::Linear(3136, 128), torch::nn::ReLU(), torch::nn::Dropout(0.25), torch::nn::Linear(128, 10)};
  FashionCnn() { register_module("net", net); }
};
}  // namespace

std::optional<double> cnn_train_images_per_second(long batch, int steps, int threads, bool channels_last) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);
  FashionCnn model;
  auto x = torch::randn({batch, 1, 28, 28});
  const auto y = torch::randint(0, 10, {batch}, torch::kLong);
  if (channels_last) {  // model.to(memory_format=torch.channels_last): the 4-D weights
    torch::NoGradGuard no_grad;
    for (auto& p : model.parameters())
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  }
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4));
  auto step = [&] {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model.net->forward(x), y).backward();
    opt.step();
  };
  step(), step();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return static_cast<double>(batch * steps) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::optional<double> linear_dynamic_seconds(long batch, long in, long out, int threads) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);
  const auto& engines = at::globalContext().supportedQEngines();
  if (std::find(engines.begin(), engines.end(), at::QEngine::ONEDNN) == engines.end()) return std::nullopt;
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  const auto w = torch::randn({out, in}) * 0.1, b = torch::randn({out}), x = torch::randn({batch, in});
  const auto qw = at::quantize_per_tensor(w, (w.abs().max() / 127).item<double>(), 0, at::kQInt8);
  using Packed = c10::intrusive_ptr<LinearPackedParamsBase>;
  auto& dispatcher = c10::Dispatcher::singleton();
  const Packed packed = dispatcher.findSchemaOrThrow("quantized::linear_prepack", "")
                            .typed<Packed(at::Tensor, c10::optional<at::Tensor>)>()
                            .call(qw, b);
  const auto linear = dispatcher.findSchemaOrThrow("quantized::linear_dynamic", "")
                          .typed<at::Tensor(at::Tensor, const Packed&, bool)>();
  torch::NoGradGuard no_grad;
  torch::Tensor y;
  return time_best([&] { y = linear.call(x, packed, false); });
}

}  // namespace kiln::bench::peer
