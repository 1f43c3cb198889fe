// `kiln train`: trains the character-level GPT on a text file (default: the
// fortunes corpus) with AdamW and a warmup + cosine schedule, reporting
// progress on stderr and validation loss every --eval-every steps.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "checkpoint.h"
#include "commands.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

struct TrainArgs {
  std::string data, out = "model.safetensors";
  int64_t layers = 4, heads = 4, width = 128, context = 128, batch = 16, steps = 1300;
  int64_t eval_every = 100, eval_batches = 16, warmup = 30;
  double lr = 4e-3, min_lr = 4e-4, weight_decay = 0.1, clip = 1.0, time_limit = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool resume = false;
  bool compile = false;  // the loss (forward and, through it, backward) under kiln::compile
};

double eval_loss(nn::GPT& model, const io::TextDataset& data, const TrainArgs& a) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t i = 0; i < a.eval_batches; ++i) {
    auto [x, y] = data.batch(true, a.batch, a.context);
    total += nn::cross_entropy(model.forward(x).view({-1, model.config().vocab_size}), y.view({-1})).item<double>();
  }
  model.train();
  return total / static_cast<double>(a.eval_batches);
}

std::string hms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

void run(const TrainArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  manual_seed(a.seed);
  const std::string text = a.data.empty() ? default_corpus() : io::read_file(a.data);
  const io::TextDataset data(text, 0.1, a.seed);
  std::cerr << "data: " << data.train_tokens() << " train / " << data.val_tokens() << " validation bytes, "
            << data.duplicates_removed() << " duplicate documents removed\n";

  nn::GPTConfig cfg;
  cfg.block_size = a.context, cfg.n_layer = a.layers, cfg.n_head = a.heads, cfg.n_embd = a.width;
  TrainState st{0, a.seed};
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  auto make_opt = [&](nn::GPT& m) {
    optim::AdamWOptions o;
    o.lr = a.lr, o.beta2 = 0.99, o.weight_decay = a.weight_decay;
    return std::make_unique<optim::AdamW>(m.parameters(), o);
  };
  if (a.resume) {
    model = load_model(a.out, &st);
    cfg = model->config();
    opt = make_opt(*model);
    load_optimizer(a.out, *opt);
    manual_seed(a.seed + static_cast<uint64_t>(st.step));  // fresh batches, not a replay of the first ones
    std::cerr << "resumed from " << a.out << " at step " << st.step << "\n";
  } else {
    model = std::make_unique<nn::GPT>(cfg);
    opt = make_opt(*model);
  }
  std::cerr << "model: " << model->num_parameters() << " parameters (" << cfg.n_layer << " layers, " << cfg.n_head
            << " heads, width " << cfg.n_embd << ", context " << cfg.block_size << "), " << get_num_threads()
            << " threads\n";

  auto loss_of = [&](const Tensor& x, const Tensor& y) {
    return nn::cross_entropy(model->forward(x).view({-1, cfg.vocab_size}), y.view({-1}));
  };
  // Compiled, the forward runs its fused loops, its backward is compiled too
  // (Note [Compiled backward]) and so is AdamW's update (Note [Writes to
  // real tensors]); clipping needs the norm's value and stays eager.
  auto compiled_loss = compile(loss_of);
  auto compiled_step = compile([&] { opt->step(); });
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = st.step;
  double loss_ema = 0;
  for (; st.step < a.steps; ++st.step) {
    opt->lr = optim::warmup_cosine_lr(st.step, a.warmup, a.steps, a.lr, a.min_lr);
    auto [x, y] = data.batch(false, a.batch, a.context);
    Tensor loss = a.compile ? compiled_loss(x, y) : loss_of(x, y);
    opt->zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), a.clip);
    if (a.compile) compiled_step();
    else opt->step();
    const double l = loss.item<double>();
    loss_ema = st.step == first ? l : 0.9 * loss_ema + 0.1 * l;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double done = static_cast<double>(st.step + 1 - first);
    const double tps = done * static_cast<double>(a.batch * a.context) / elapsed;
    std::fprintf(stderr, "\rstep %lld/%lld | loss %.3f | %.0f tok/s | ETA %s   ", static_cast<long long>(st.step + 1),
                 static_cast<long long>(a.steps), loss_ema, tps,
                 hms(elapsed / done * static_cast<double>(a.steps - st.step - 1)).c_str());
    const bool last = st.step + 1 == a.steps || (a.time_limit > 0 && elapsed > a.time_limit);
    if ((st.step + 1) % a.eval_every == 0 || last) {
      std::fprintf(stderr, "\n");
      std::cout << "step " << st.step + 1 << ": train loss " << loss_ema << ", validation loss "
                << eval_loss(*model, data, a) << " nats/char (" << hms(elapsed) << ")" << std::endl;
      save_checkpoint(a.out, *model, opt.get(), TrainState{st.step + 1, st.seed});
    }
    if (last) {
      ++st.step;
      break;
    }
  }
  std::cout << "saved " << a.out << "\n";
}

}  // namespace

void add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "train the character-level GPT");
  cmd->add_option("--data", a->data, "UTF-8 text file (default: the fortunes corpus)");
  cmd->add_option("--out", a->out, "checkpoint path (safetensors)");
  cmd->add_option("--layers", a->layers, "transformer blocks");
  cmd->add_option("--heads", a->heads, "attention heads");
  cmd->add_option("--width", a->width, "embedding width");
  cmd->add_option("--context", a->context, "context length");
  cmd->add_option("--steps", a->steps, "optimizer steps in total");
  cmd->add_option("--batch", a->batch, "sequences per step");
  cmd->add_option("--lr", a->lr, "peak learning rate");
  cmd->add_option("--seed", a->seed, "random seed");
  cmd->add_option("--eval-every", a->eval_every, "steps between validation losses");
  cmd->add_option("--time-limit", a->time_limit, "stop (and save) after this many seconds; 0 = no limit");
  cmd->add_option("--threads", a->threads, "threads (default: all cores)");
  cmd->add_flag("--resume", a->resume, "continue from the checkpoint at --out");
  cmd->add_flag("--compile", a->compile, "run the loss, its backward and the AdamW update through kiln::compile");
  cmd->callback([a] { run(*a); });
}

}  // namespace kiln::cli
