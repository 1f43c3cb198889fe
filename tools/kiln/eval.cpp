// `kiln eval`: a checkpoint's held-out figure, float or int8 (--quantize
// int8: a CNN statically quantized, a GPT's Linear layers dynamically): the test accuracy of a
// `kiln train --task fashion-mnist` checkpoint, or the validation loss of a
// GPT checkpoint of `kiln train` (the validation windows its evaluations
// use, from the corpus it was trained on: --data or the fortunes).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "checkpoint.h"
#include "commands.h"
#include "fashion_mnist.h"
#include "flags.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

struct EvalArgs {
  std::string ckpt = "fashion_mnist.safetensors", data, quantize = "none";
  int64_t batches = 16, batch = 16;
};

// Refuses a --batch whose forward would not fit in this machine's memory
// (it would grow until the allocator failed, or the kernel's OOM killer
// came): the peak of one forward, roughly, is the logits with
// cross-entropy's two temporaries of them, and a layer's activations with
// its attention scores, in float32.
void check_batch_fits(const nn::GPTConfig& c, int64_t batch) {
  const double per_sequence = 4.0 * static_cast<double>(c.block_size) *
                              static_cast<double>(3 * c.vocab_size + 8 * c.n_embd + c.n_head * c.block_size);
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const double gib = 1024.0 * 1024 * 1024;
  const auto fits = static_cast<int64_t>(memory / 2 / per_sequence);
  check(static_cast<double>(batch) <= static_cast<double>(fits), "eval", "--batch ", batch, " needs about ",
        std::ceil(static_cast<double>(batch) * per_sequence / gib), " GiB for one forward of this model, over half of ",
        "this machine's ", std::floor(memory / gib), " GiB: use --batch ", std::max<int64_t>(fits, 1), " or less");
}

void eval_gpt(const EvalArgs& a) {
  TrainState st;
  auto model = load_model(a.ckpt, &st);
  check_batch_fits(model->config(), a.batch);
  model->eval();
  if (a.quantize == "int8") std::cerr << "int8: " << quant::quantize_dynamic(*model) << " Linear layers quantized\n";
  const std::string text = a.data.empty() ? default_corpus() : io::read_file(a.data);
  const io::TextDataset data(text, 0.1, st.seed);
  NoGradGuard no_grad;
  Generator validation = validation_generator(st.seed);
  const int64_t vocab = model->config().vocab_size, context = model->config().block_size;
  double total = 0;
  for (int64_t i = 0; i < a.batches; ++i) {
    auto [x, y] = data.batch(true, a.batch, context, validation);
    total += nn::cross_entropy(model->forward(x).view({-1, vocab}), y.view({-1})).item<double>();
  }
  std::cout << "validation loss " << total / static_cast<double>(a.batches) << " nats/char over " << a.batches
            << " batches of " << a.batch << " (" << a.ckpt << ", step " << st.step
            << (a.quantize == "int8" ? ", int8" : "") << ")" << std::endl;
}

void run(const EvalArgs& a) {
  const io::SafetensorsFile f = io::load_safetensors(a.ckpt);
  const auto format = f.metadata.find("format");
  if (format != f.metadata.end() && format->second == "kiln-gpt") return eval_gpt(a);
  eval_fashion_mnist(a.ckpt, a.data, a.quantize == "int8");
}

}  // namespace

void add_eval(CLI::App& app, bool execute) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "a checkpoint's test accuracy (fashion-mnist) or validation loss (GPT)");
  cmd->add_option("--ckpt", a->ckpt, "checkpoint written by kiln train");
  cmd->add_option("--data", a->data,
                  "fashion-mnist: the IDX files' directory (default: Debian's dataset-fashion-mnist); GPT: the "
                  "training text (default: the fortunes corpus)");
  cmd->add_option("--quantize", a->quantize, "none, or int8: the CNN statically quantized (calibrated on training images), a GPT's Linear layers dynamically")
      ->check(CLI::IsMember({"none", "int8"}));
  add_int_flag(*cmd, "--batches", a->batches, 1, 1 << 20, "GPT: validation batches (16, as kiln train)");
  add_int_flag(*cmd, "--batch", a->batch, 1, 1 << 20, "GPT: sequences per batch (16, as kiln train)");
  cmd->callback([a, execute] {
    if (execute) run(*a);
  });
}

}  // namespace kiln::cli
