// The libtorch 1.13 twin of kiln's GPT for kiln-bench-train: pre-norm blocks,
// causal attention with an explicit mask, tanh-GELU MLP, tied head, AdamW.
#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "bench_util.h"
#include "peers/peer.h"

namespace kiln::bench::peer {
namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl(long c, long h) : heads(h) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    qkv = register_module("qkv", torch::nn::Linear(c, 3 * c));
    proj = register_module("proj", torch::nn::Linear(c, c));
    fc = register_module("fc", torch::nn::Linear(c, 4 * c));
    fc2 = register_module("fc2", torch::nn::Linear(4 * c, c));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    const long B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads;
    auto h = qkv(ln1(x)).split(C, 2);
    auto q = h[0].view({B, T, heads, D}).transpose(1, 2);
    auto k = h[1].view({B, T, heads, D}).transpose(1, 2);
    auto v = h[2].view({B, T, heads, D}).transpose(1, 2);
    auto att = torch::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(D)));
    att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, C});
    x = x + proj(y);
    return x + fc2(torch::gelu(fc(ln2(x)), "tanh"));
  }
  long heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

std::optional<double> gpt_train_tokens_per_second(long layers, long heads, long width, long context, long vocab,
                                                  long batch, int steps, int threads) {
  torch::set_num_threads(threads);
  const OpenBlasThreads blas(threads);  // libtorch's GEMMs go through the same OpenBLAS
  torch::manual_seed(0);
  auto wte = torch::nn::Embedding(vocab, width);
  auto wpe = torch::nn::Embedding(context, width);
  auto ln_f = torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}));
  std::vector<Block> blocks;
  std::vector<torch::Tensor> params;
  for (long i = 0; i < layers; ++i) blocks.emplace_back(width, heads);
  for (auto* m : std::initializer_list<torch::nn::Module*>{wte.get(), wpe.get(), ln_f.get()})
    for (auto& p : m->parameters()) params.push_back(p);
  for (auto& b : blocks)
    for (auto& p : b->parameters()) params.push_back(p);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(4e-3).betas({0.9, 0.99}).weight_decay(0.1));
  const auto mask = torch::ones({context, context}, torch::kBool).triu(1);
  const auto pos = torch::arange(context);
  auto step = [&] {
    auto x = torch::randint(0, vocab, {batch, context});
    auto y = torch::randint(0, vocab, {batch, context});
    auto h = wte(x) + wpe(pos);
    for (auto& b : blocks) h = b->forward(h, mask);
    auto logits = torch::matmul(ln_f(h), wte->weight.t());
    auto loss = torch::nn::functional::cross_entropy(logits.view({-1, vocab}), y.view({-1}));
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    opt.step();
  };
  step(), step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(steps) * batch * context / s;
}

}  // namespace kiln::bench::peer
