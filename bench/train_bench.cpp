// kiln-bench-train: training tokens/s of the default GPT of `kiln train`
// (forward, backward, clipping, AdamW step) against the same model and
// optimizer in libtorch 1.13, same threads and batch. Random token data.
// With --profile, prints where kiln's step time goes by op.
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>

#include "bench_util.h"
#include "kiln/kiln.h"
#include "peers/peer.h"

using namespace kiln;

namespace {

// Times every op call (kernels included) by name, for --profile.
class OpTimer : public DispatchMode {
 public:
  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = dispatch(op, in, attrs, out);
    auto& e = totals[op.name];
    e.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    e.second += 1;
    return r;
  }
  std::map<std::string, std::pair<double, int64_t>> totals;
};

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Reporter rep;
  bool profile = false;
  for (int i = 1; i < argc; ++i) {
    rep.json = rep.json || std::strcmp(argv[i], "--json") == 0;
    profile = profile || std::strcmp(argv[i], "--profile") == 0;
  }
  const int threads = 2, steps = 10;
  set_num_threads(threads);
  manual_seed(0);
  nn::GPTConfig cfg;  // the defaults of `kiln train`
  const int64_t batch = 16;  // kiln train's default
  nn::GPT model(cfg);
  optim::AdamWOptions o;
  o.lr = 4e-3, o.beta2 = 0.99, o.weight_decay = 0.1;
  optim::AdamW opt(model.parameters(), o);
  auto step = [&] {
    Tensor x = randint(0, cfg.vocab_size, {batch, cfg.block_size});
    Tensor y = randint(0, cfg.vocab_size, {batch, cfg.block_size});
    Tensor loss = nn::cross_entropy(model.forward(x).view({-1, cfg.vocab_size}), y.view({-1}));
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
  };
  step(), step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double kiln_tps = steps * batch * cfg.block_size / s;
  auto torch_tps = kiln::bench::peer::gpt_train_tokens_per_second(cfg.n_layer, cfg.n_head, cfg.n_embd,
                                                                  cfg.block_size, cfg.vocab_size, batch, steps, threads);
  if (torch_tps) rep.report("train", "gpt_default_step", "tokens/s", kiln_tps, "libtorch", *torch_tps);
  else std::fprintf(stderr, "libtorch not built in; kiln: %.0f tokens/s\n", kiln_tps);

  if (profile) {
    OpTimer timer;
    {
      ModeGuard g(&timer);
      for (int i = 0; i < 3; ++i) step();
    }
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [name, e] : timer.totals) {
      rows.emplace_back(e.first, name);
      total += e.first;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "op time over 3 steps (outermost calls, %.3f s in ops):\n", total);
    for (size_t i = 0; i < rows.size() && i < 15; ++i)
      std::fprintf(stderr, "  %-16s %7.1f ms  %5.1f%%  (%lld calls)\n", rows[i].second.c_str(), rows[i].first * 1e3,
                   100 * rows[i].first / total, static_cast<long long>(timer.totals[rows[i].second].second));
  }
  return 0;
}
