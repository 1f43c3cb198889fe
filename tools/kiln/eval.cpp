// `kiln eval`: the test accuracy of a checkpoint of `kiln train --task
// fashion-mnist`.
#include "commands.h"
#include "fashion_mnist.h"

namespace kiln::cli {

void add_eval(CLI::App& app, bool execute) {
  struct EvalArgs {
    std::string ckpt = "fashion_mnist.safetensors", data;
  };
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "test accuracy of a Fashion-MNIST checkpoint (kiln train --task fashion-mnist)");
  cmd->add_option("--ckpt", a->ckpt, "checkpoint written by kiln train --task fashion-mnist");
  cmd->add_option("--data", a->data, "the IDX files' directory (default: Debian's dataset-fashion-mnist)");
  cmd->callback([a, execute] {
    if (execute) eval_fashion_mnist(a->ckpt, a->data);
  });
}

}  // namespace kiln::cli
