// `kiln train`: trains the character-level GPT on a text file (default: the
// fortunes corpus) with AdamW and a warmup + cosine schedule (with --task
// fashion-mnist, the CNN of fashion_mnist.h instead), reporting
// progress on stderr and validation loss every --eval-every steps. With
// --nproc N it starts N ranks of itself (kiln run's launcher) that train
// data-parallel: each takes 1/N of every batch (the same batches one process
// would draw), and DistributedDataParallel averages the gradients; rank 0
// reports and saves.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "app.h"
#include "checkpoint.h"
#include "commands.h"
#include "fashion_mnist.h"
#include "flags.h"
#include "progress.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

// An architecture flag: with --resume, given or not, the checkpoint decides.
struct ArchFlag {
  const char* name;
  const CLI::Option* option;
  const int64_t* value;
  int64_t nn::GPTConfig::*field;
};

struct TrainArgs {
  std::string data, out = "model.safetensors", separator;
  int64_t layers = 4, heads = 4, width = 128, context = 128, batch = 16, steps = 1300;
  int64_t eval_every = 100, eval_batches = 16, warmup = 30, seed = 0, threads = 0, nproc = 1, experts = 0;
  double lr = 4e-3, min_lr = 4e-4, weight_decay = 0.1, clip = 1.0, time_limit = 0;
  bool resume = false, overwrite = false;
  bool compile = false;  // the whole step (forward, backward, clipping, AdamW) under kiln::compile
  std::vector<ArchFlag> arch_flags;
  // --task fashion-mnist: the CNN job (fashion_mnist.h), its own flags and defaults.
  std::string task = "gpt";
  int64_t epochs = 5;
  std::vector<const CLI::Option*> gpt_only, cnn_only;
  const CLI::Option *batch_option = nullptr, *lr_option = nullptr, *out_option = nullptr;
};

// The CNN job's arguments: its defaults where a shared flag was not given;
// a GPT-only flag is refused by name rather than silently ignored.
CnnTrainArgs cnn_arguments(const TrainArgs& a) {
  for (const CLI::Option* o : a.gpt_only)
    check(o->count() == 0, "train", o->get_name(), " applies to the GPT task, not to --task fashion-mnist");
  CnnTrainArgs c;
  c.data_dir = a.data, c.epochs = a.epochs, c.seed = a.seed, c.threads = a.threads, c.time_limit = a.time_limit;
  c.resume = a.resume, c.overwrite = a.overwrite;
  c.out = a.out_option->count() ? a.out : "fashion_mnist.safetensors";
  if (a.batch_option->count()) c.batch = a.batch;
  if (a.lr_option->count()) c.lr = a.lr;
  return c;
}

// This rank's rows of a batch every rank drew alike (all of it in a
// single process).
Tensor my_rows(const Tensor& t, int64_t batch) {
  if (!distributed::is_initialized()) return t;
  const int64_t W = distributed::get_world_size(), r = distributed::get_rank();
  return t.slice(0, r * batch / W, (r + 1) * batch / W).contiguous();
}

// The mean over ranks of a value each computed on its rows.
double mean_over_ranks(double v) {
  if (!distributed::is_initialized()) return v;
  Tensor t = full({1}, v);
  distributed::default_group().all_reduce(t, distributed::ReduceOp::Avg);
  return t.item<double>();
}

double eval_loss(nn::GPT& model, const io::TextDataset& data, const TrainArgs& a) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  // The same validation windows at every evaluation, from a stream of their
  // own: losses compare across evaluations, and evaluating never moves the
  // training batches' stream (a run resumed from a checkpoint written after
  // an evaluation draws what the uninterrupted run draws).
  Generator validation = validation_generator(static_cast<uint64_t>(a.seed));
  for (int64_t i = 0; i < a.eval_batches; ++i) {
    auto [x, y] = data.batch(true, a.batch, model.config().block_size, validation);
    x = my_rows(x, a.batch), y = my_rows(y, a.batch);
    total += nn::cross_entropy(model.forward(x).view({-1, model.config().vocab_size}), y.view({-1})).item<double>();
  }
  model.train();
  return mean_over_ranks(total / static_cast<double>(a.eval_batches));
}

// With --resume the architecture comes from the checkpoint; a flag that says
// otherwise is refused by name rather than silently ignored.
void check_resume_flags(const TrainArgs& a, const nn::GPTConfig& c) {
  for (const ArchFlag& f : a.arch_flags)
    check(f.option->count() == 0 || *f.value == c.*f.field, "train", f.name, " ", *f.value,
          " conflicts with the checkpoint '", a.out, "', which has ", c.*f.field,
          ": drop the flag to resume, or train a new model");
}

// The whole model's tensors when its experts are sharded over the ranks:
// each rank's experts gathered (collective; rank 0 saves them).
nn::StateDict gathered_state(nn::GPT& model) {
  distributed::ProcessGroup& pg = distributed::default_group();
  nn::StateDict sd = model.state_dict();
  const int64_t E = model.config().n_experts, per_rank = E / pg.size();
  for (size_t i = 0; i < model.blocks.size(); ++i) {
    const std::string prefix = "blocks." + std::to_string(i) + ".mlp.experts.";
    const int64_t first = model.blocks[i].moe->first_local_expert();
    for (const char* kind : {"up.weight", "up.bias", "down.weight", "down.bias"}) {
      std::vector<Tensor> local;
      for (int64_t j = 0; j < per_rank; ++j) local.push_back(sd.at(prefix + std::to_string(first + j) + "." + kind));
      const Tensor mine = stack(local);
      Shape sizes = mine.sizes();
      sizes[0] = E;
      Tensor all = empty(sizes, mine.dtype());
      pg.all_gather(all, mine);
      for (int64_t e = 0; e < E; ++e) sd[prefix + std::to_string(e) + "." + kind] = all.select(0, e).clone();
    }
  }
  return sd;
}

// clip_grad_norm_ when the experts are sharded: the norm is over every
// rank's experts and the shared parameters once, so every rank scales by the
// same factor (each rank's own norm would let the shared parameters drift
// apart across ranks).
void clip_sharded_grad_norm(nn::GPT& model, double max_norm) {
  NoGradGuard no_grad;
  double shared = 0, local = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.grad().defined()) continue;
    const double sq = sum(p.grad() * p.grad()).item<double>();
    (nn::MoE::is_expert_parameter(name) ? local : shared) += sq;
  }
  Tensor t = full({1}, local);
  distributed::default_group().all_reduce(t, distributed::ReduceOp::Sum);
  const double coef = max_norm / (std::sqrt(shared + t.item<double>()) + 1e-6);
  if (coef >= 1) return;
  for (const Tensor& p : model.parameters())
    if (p.grad().defined()) p.grad().mul_(coef);
}

// `kiln train --nproc N` in the launcher: N ranks of this same command line.
void launch_data_parallel(const TrainArgs& a) {
  check(a.batch % a.nproc == 0, "train", "--batch ", a.batch, " must be a multiple of --nproc ", a.nproc,
        " (each rank takes an equal share of every batch)");
  check(!a.compile, "train", "--compile with --nproc is not supported yet (the compiled step does not run "
        "DistributedDataParallel's gradient hooks)");
  std::vector<std::string> command = cli_arguments();
  command[0] = "/proc/self/exe";
  const std::string failure = launch_ranks(single_node_job(static_cast<int>(a.nproc)), 5.0, command);
  check(failure.empty(), "train", failure);
}

void run(const TrainArgs& a) {
  const bool launcher = a.nproc > 1 && std::getenv("KILN_JOB_SECRET") == nullptr;
  if (launcher) {
    check_checkpoint_destination(a.out, a.resume, a.overwrite);
    return launch_data_parallel(a);
  }
  if (a.nproc > 1) {
    distributed::init_process_group("auto");
    check(distributed::get_world_size() == a.nproc, "train", "--nproc ", a.nproc, " but the job has ",
          distributed::get_world_size(), " ranks");
  }
  const int64_t top_k = nn::GPTConfig{}.expert_top_k;
  check(a.experts == 0 || a.experts >= top_k, "train", "--experts ", a.experts, " must be 0 (a dense MLP) or at least ",
        top_k, " (each token goes to its top ", top_k, " experts)");
  // Experts are sharded over the ranks: each rank holds n_experts / nproc.
  const bool sharded_experts = a.nproc > 1 && a.experts > 0;
  check(!sharded_experts || a.experts % a.nproc == 0, "train", "--experts ", a.experts,
        " must be a multiple of --nproc ", a.nproc, " (each rank holds an equal share of the experts)");
  check(!(sharded_experts && a.resume), "train", "--resume of a run with --experts and --nproc is not supported yet "
        "(its checkpoint holds no optimizer state for the sharded experts); resume it with --nproc 1");
  const bool rank0 = !distributed::is_initialized() || distributed::get_rank() == 0;
  if (rank0) check_checkpoint_destination(a.out, a.resume, a.overwrite);
  check(a.resume || a.width % a.heads == 0, "train", "--width ", a.width, " must be a multiple of --heads ", a.heads);
  if (a.threads > 0) set_num_threads(static_cast<int>(a.threads));
  else if (a.nproc > 1) set_num_threads(1);  // one thread per rank
  manual_seed(static_cast<uint64_t>(a.seed));
  const std::string text = a.data.empty() ? default_corpus() : io::read_file(a.data);
  const io::TextDataset data(text, 0.1, static_cast<uint64_t>(a.seed), a.separator);
  if (rank0)
    std::cerr << "data: " << data.train_tokens() << " train / " << data.val_tokens() << " validation bytes from "
            << data.documents() << " documents split by " << (data.split_by_position() ? "position" : "document")
            << ", " << data.duplicates_removed() << " duplicate documents removed\n";

  nn::GPTConfig cfg;
  cfg.block_size = a.context, cfg.n_layer = a.layers, cfg.n_head = a.heads, cfg.n_embd = a.width;
  cfg.n_experts = a.experts;
  distributed::ProcessGroup* expert_group = sharded_experts ? &distributed::default_group() : nullptr;
  TrainState st{0, static_cast<uint64_t>(a.seed), Tensor()};
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
    check_resume_flags(a, cfg);
    check(st.step < a.steps, "train", "the checkpoint '", a.out, "' is at step ", st.step, " and --steps is ", a.steps,
          ": nothing to train (raise --steps)");
    opt = make_opt(*model);
    load_optimizer(a.out, *opt);
    if (st.rng_state.defined()) set_rng_state(st.rng_state);  // the exact stream
    else manual_seed(static_cast<uint64_t>(a.seed) + static_cast<uint64_t>(st.step));  // older checkpoints: fresh batches
    if (rank0) std::cerr << "resumed from " << a.out << " at step " << st.step << "\n";
  } else {
    model = std::make_unique<nn::GPT>(cfg, expert_group);
    opt = make_opt(*model);
  }
  // Both splits must hold a window of the context, found before the first
  // step (the first evaluation, after all the training, used to find out).
  for (const bool validation : {false, true}) {
    const int64_t tokens = validation ? data.val_tokens() : data.train_tokens();
    check(tokens > cfg.block_size + 1, "train", "the ", validation ? "validation" : "training", " split of ",
          a.data.empty() ? std::string("the default corpus") : "'" + a.data + "'", " has ", tokens,
          " tokens, too few for --context ", cfg.block_size, ": use a longer text or a shorter context");
  }
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (distributed::is_initialized())
    ddp = std::make_unique<nn::DistributedDataParallel>(
        *model, distributed::default_group(), 25.0,
        sharded_experts ? std::function<bool(const std::string&)>(nn::MoE::is_expert_parameter) : nullptr);
  if (rank0)
    std::cerr << "model: " << model->num_parameters() << " parameters (" << cfg.n_layer << " layers, " << cfg.n_head
            << " heads, width " << cfg.n_embd << ", context " << cfg.block_size
            << (cfg.n_experts ? ", " + std::to_string(cfg.n_experts) + " experts (top " +
                                    std::to_string(cfg.expert_top_k) + ")" : std::string())
            << (sharded_experts ? " sharded over the ranks" : "") << "), " << get_num_threads()
            << " threads" << (ddp ? " per rank, " + std::to_string(a.nproc) + " ranks" : "") << "\n";

  auto loss_of = [&](const Tensor& x, const Tensor& y) {
    return nn::cross_entropy(model->forward(x).view({-1, cfg.vocab_size}), y.view({-1}));
  };
  // One training step. Compiled, the whole step is one graph: the forward's
  // fused loops, its backward traced into the same graph (Note [Backward
  // inside a trace]), the clipping and AdamW's update.
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = loss_of(x, y);
    opt->zero_grad();
    loss.backward();
    if (sharded_experts) clip_sharded_grad_norm(*model, a.clip);
    else optim::clip_grad_norm_(model->parameters(), a.clip);
    opt->step();
    return loss;
  };
  auto compiled_step = compile(train_step);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = st.step;
  double loss_ema = 0;
  Progress progress;
  for (; st.step < a.steps; ++st.step) {
    opt->set_lr(optim::warmup_cosine_lr(st.step, a.warmup, a.steps, a.lr, a.min_lr));
    auto [x, y] = data.batch(false, a.batch, cfg.block_size);
    x = my_rows(x, a.batch), y = my_rows(y, a.batch);
    const Tensor loss = a.compile ? compiled_step(x, y) : train_step(x, y);
    const double l = mean_over_ranks(loss.item<double>());
    check(std::isfinite(l), "train", "the loss is ", l, " at step ", st.step + 1, " (learning rate ", opt->lr(),
          "): stopping; '", a.out, "' keeps its last finite state");
    loss_ema = st.step == first ? l : 0.9 * loss_ema + 0.1 * l;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ddp && a.time_limit > 0) {  // every rank stops at the same step
      Tensor e = full({1}, elapsed);
      distributed::default_group().all_reduce(e, distributed::ReduceOp::Max);
      elapsed = e.item<double>();
    }
    const double done = static_cast<double>(st.step + 1 - first);
    const double tps = done * static_cast<double>(a.batch * cfg.block_size) / elapsed;
    const bool last = st.step + 1 == a.steps || (a.time_limit > 0 && elapsed > a.time_limit);
    const bool eval = (st.step + 1) % a.eval_every == 0 || last;
    if (rank0) progress.report(st.step + 1, a.steps, loss_ema, tps, "tok/s", elapsed,
                    elapsed / done * static_cast<double>(a.steps - st.step - 1), eval);
    if (eval) {
      if (rank0) progress.end_line();
      const double val = eval_loss(*model, data, a);
      check(std::isfinite(val), "train", "the validation loss is ", val, " at step ", st.step + 1, ": stopping; '",
            a.out, "' keeps its last finite state");
      const TrainState saved{st.step + 1, st.seed, get_rng_state()};
      if (sharded_experts) {
        const nn::StateDict all = gathered_state(*model);  // collective
        if (rank0) save_checkpoint(a.out, all, cfg, nullptr, saved);
      }
      if (rank0) {
        std::cout << "step " << st.step + 1 << ": train loss " << loss_ema << ", validation loss " << val
                  << " nats/char (" << hms(elapsed) << ")" << std::endl;
        if (!sharded_experts) save_checkpoint(a.out, *model, opt.get(), saved);
      }
    }
    if (last) {
      ++st.step;
      break;
    }
  }
  if (rank0) std::cout << "saved " << a.out << "\n";
}

}  // namespace

void add_train(CLI::App& app, bool execute) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "train the character-level GPT, or a CNN on Fashion-MNIST (--task fashion-mnist)");
  cmd->add_option("--task", a->task, "what to train: gpt (the character-level GPT) or fashion-mnist (a CNN)")
      ->check(CLI::IsMember({"gpt", "fashion-mnist"}));
  cmd->add_option("--data", a->data,
                  "gpt: UTF-8 text file (default: the fortunes corpus); fashion-mnist: the IDX files' directory "
                  "(default: Debian's dataset-fashion-mnist)");
  a->gpt_only.push_back(cmd->add_option("--separator", a->separator,
                  "a line holding only this separates documents (default: '%' when the text has such lines)"));
  a->out_option = cmd->add_option("--out", a->out, "checkpoint path (safetensors; default model.safetensors, "
                                  "fashion_mnist.safetensors for --task fashion-mnist)");
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing checkpoint at --out");
  a->arch_flags = {
      {"--layers", add_int_flag(*cmd, "--layers", a->layers, 1, 4096, "transformer blocks"), &a->layers,
       &nn::GPTConfig::n_layer},
      {"--heads", add_int_flag(*cmd, "--heads", a->heads, 1, 4096, "attention heads"), &a->heads,
       &nn::GPTConfig::n_head},
      {"--width", add_int_flag(*cmd, "--width", a->width, 1, 1 << 16, "embedding width"), &a->width,
       &nn::GPTConfig::n_embd},
      {"--context", add_int_flag(*cmd, "--context", a->context, 1, 1 << 20, "context length"), &a->context,
       &nn::GPTConfig::block_size},
      {"--experts", add_int_flag(*cmd, "--experts", a->experts, 0, 1024,
                                 "mixture-of-experts MLPs with this many experts, 2 per token (0: dense)"),
       &a->experts, &nn::GPTConfig::n_experts}};
  for (const ArchFlag& f : a->arch_flags) a->gpt_only.push_back(f.option);
  a->gpt_only.push_back(add_int_flag(*cmd, "--steps", a->steps, 1, int64_t{1} << 40, "optimizer steps in total"));
  a->cnn_only.push_back(add_int_flag(*cmd, "--epochs", a->epochs, 1, 1 << 20, "fashion-mnist: epochs in total (5)"));
  a->batch_option = add_int_flag(*cmd, "--batch", a->batch, 1, 1 << 20, "sequences per step (fashion-mnist: images, 64)");
  a->lr_option = add_real_flag(*cmd, "--lr", a->lr, 1e-12, 1e3, "peak learning rate (fashion-mnist: 1e-3)");
  add_int_flag(*cmd, "--seed", a->seed, 0, kIntMax, "random seed");
  a->gpt_only.push_back(add_int_flag(*cmd, "--eval-every", a->eval_every, 1, kIntMax, "steps between validation losses"));
  add_real_flag(*cmd, "--time-limit", a->time_limit, 0, 1e9, "stop (and save) after this many seconds; 0 = no limit");
  add_int_flag(*cmd, "--threads", a->threads, 1, 4096, "threads (default: all cores; one per rank with --nproc)");
  a->gpt_only.push_back(
      add_int_flag(*cmd, "--nproc", a->nproc, 1, 1024, "train data-parallel with this many ranks on this machine"));
  cmd->add_flag("--resume", a->resume, "continue from the checkpoint at --out (its architecture, its step)");
  a->gpt_only.push_back(cmd->add_flag("--compile", a->compile,
                                      "run each whole step (forward, backward, clipping, AdamW) as one kiln::compile graph"));
  cmd->callback([a, execute] {
    if (a->task == "fashion-mnist") {
      const CnnTrainArgs c = cnn_arguments(*a);
      if (execute) train_fashion_mnist(c);
      return;
    }
    for (const CLI::Option* o : a->cnn_only)
      check(o->count() == 0, "train", o->get_name(), " applies to --task fashion-mnist, not to the GPT task");
    if (execute) run(*a);
  });
}

}  // namespace kiln::cli
