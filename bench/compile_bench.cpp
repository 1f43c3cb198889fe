// kiln-bench-compile: kiln::compile against the same functions run eagerly,
// in the same process, alternating runs (baseline `eager`).
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "baselines.h"
#include "bench_util.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::bench::time_pair;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::Reporter rep = kiln::bench::start_bench(argc, argv);
  // A private cache directory, so cold_compile really compiles.
  char dir[] = "/tmp/kiln-bench-compile-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("KILN_CACHE_DIR", dir, 1);

  {
    // 8 elementwise ops on 16M float32: eager writes 7 intermediates.
    auto chain = [](const Tensor& x, const Tensor& y) {
      Tensor t = x * y + 1.0;
      t = relu(t) * 0.5 - y;
      t = t * t + x;
      return t / 3.0;
    };
    const Tensor x = randn({16 << 20}), y = randn({16 << 20});
    auto f = compile(chain);
    auto [tc, te] = time_pair([&] { f(x, y); }, [&] { chain(x, y); }, 5);
    rep.report("compile", "elementwise_chain", "ms", tc * 1e3, "eager", te * 1e3, false);
  }
  {
    // layer_norm + GELU + residual on (8192, 1024).
    nn::LayerNorm ln(1024);
    auto block = [&](const Tensor& x) { return x + gelu(ln(x), "tanh"); };
    const Tensor x = randn({8192, 1024});
    NoGradGuard no_grad;
    auto f = compile(block);
    auto [tc, te] = time_pair([&] { f(x); }, [&] { block(x); }, 5);
    rep.report("compile", "norm_gelu_block", "ms", tc * 1e3, "eager", te * 1e3, false);
  }
  {
    // The GPT training step of `kiln train --compile`, batch 16: forward,
    // loss, backward, clipping and AdamW as one compiled graph (Note
    // [Backward inside a trace]), against the same step eagerly. Best of 15
    // alternating pairs: this host's speed drifts by 30% within minutes.
    nn::GPTConfig cfg;
    nn::GPT model(cfg);
    optim::AdamWOptions o;
    o.lr = 4e-3, o.beta2 = 0.99, o.weight_decay = 0.1;
    optim::AdamW opt(model.parameters(), o);
    const Tensor x = randint(0, cfg.vocab_size, {16, cfg.block_size}), y = randint(0, cfg.vocab_size, {16, cfg.block_size});
    auto step = [&] {
      Tensor loss = nn::cross_entropy(model.forward(x).view({-1, cfg.vocab_size}), y.view({-1}));
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      return loss;
    };
    auto compiled_step = compile(step);
    step();  // AdamW's state exists from here on, as in a run's later steps
    const auto t0 = std::chrono::steady_clock::now();
    compiled_step();
    const double cold = seconds_since(t0);
    auto [tc, te] = time_pair([&] { compiled_step(); }, [&] { step(); }, 15);
    rep.report("compile", "train_step", "ms", tc * 1e3, "eager", te * 1e3, false);
    rep.report("compile", "cold_compile", "ms", cold * 1e3, "eager", te * 1e3, false);
  }
  {
    // Per-call cost on a cache hit: 8 ops on 16 elements, so the arithmetic is negligible.
    auto tiny = [](const Tensor& x) {
      Tensor t = x * 2.0 + 1.0;
      t = relu(t) - x;
      t = t * t + x;
      return t / 3.0;
    };
    const Tensor x = randn({16});
    auto f = compile(tiny);
    const int calls = 2000;
    auto [tc, te] = time_pair([&] { for (int i = 0; i < calls; ++i) f(x); }, [&] { for (int i = 0; i < calls; ++i) tiny(x); }, 3);
    rep.report("compile", "cache_hit_overhead", "us/call", tc / calls * 1e6, "eager", te / calls * 1e6, false);
  }
  {
    // Sequence lengths 64, 96, 128, 80 in turn through an MLP block over
    // (4, T, 128): graphs compiled with automatic dynamic shapes (the
    // default) against one graph per length (dynamic=false).
    nn::LayerNorm ln(128);
    nn::Linear up(128, 512), down(512, 128);
    auto block = [&](const Tensor& x) { return x + down(gelu(up(ln(x)), "tanh")); };
    NoGradGuard no_grad;
    auto graphs = [&](std::optional<bool> dynamic) {
      CompileOptions o;
      o.dynamic = dynamic;
      auto f = compile(block, o);
      for (int64_t t : {64, 96, 128, 80}) f(randn({4, t, 128}));
      return f.recompiles() + 1;
    };
    rep.report("compile", "dynamic_lengths", "compiles", graphs(std::nullopt), "dynamic=false", graphs(false), false);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
