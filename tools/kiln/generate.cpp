// `kiln generate`: samples text from a checkpoint of `kiln train`.
#include <iostream>

#include "checkpoint.h"
#include "commands.h"
#include "flags.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

struct GenerateArgs {
  std::string ckpt = "model.safetensors", prompt = "\n", quantize = "none";
  int64_t tokens = 200, top_k = 0, seed = 0;
  double temperature = 0.8;
};

void run(const GenerateArgs& a) {
  check(!a.prompt.empty(), "generate", "the prompt must not be empty");
  manual_seed(static_cast<uint64_t>(a.seed));
  auto model = load_model(a.ckpt);
  model->eval();
  if (a.quantize == "int8") std::cerr << "int8: " << quant::quantize_dynamic(*model) << " Linear layers quantized\n";
  const auto ids = io::encode(a.prompt);
  Tensor idx = tensor<int64_t>(ids).view({1, -1});
  Tensor out = model->generate(idx, a.tokens, a.temperature, a.top_k);
  std::vector<int64_t> toks(out.data_ptr<int64_t>(), out.data_ptr<int64_t>() + out.numel());
  std::cout << io::decode(toks) << std::endl;
}

}  // namespace

void add_generate(CLI::App& app, bool execute) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "sample text from a trained checkpoint");
  cmd->add_option("--ckpt", a->ckpt, "checkpoint written by kiln train");
  cmd->add_option("--prompt", a->prompt, "text to continue");
  add_int_flag(*cmd, "--tokens", a->tokens, 0, 1 << 24, "bytes to generate");
  add_real_flag(*cmd, "--temperature", a->temperature, 0, 1e6, "sampling temperature (0 = greedy)");
  add_int_flag(*cmd, "--top-k", a->top_k, 0, kIntMax, "sample among the k most likely (0 = all)");
  add_int_flag(*cmd, "--seed", a->seed, 0, kIntMax, "random seed");
  cmd->add_option("--quantize", a->quantize, "none, or int8: dynamic quantization of every Linear (int8 weights)")
      ->check(CLI::IsMember({"none", "int8"}));
  cmd->callback([a, execute] {
    if (execute) run(*a);
  });
}

}  // namespace kiln::cli
