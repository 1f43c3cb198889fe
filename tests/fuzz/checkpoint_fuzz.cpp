// libFuzzer target: the checkpoint loader of `kiln train` / `kiln generate`
// (metadata included): load, run one forward step, load the optimizer.
#include "checkpoint.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_input("ckpt", data, size);
  try {
    kiln::cli::TrainState st;
    auto model = kiln::cli::load_model(path, &st);
    kiln::NoGradGuard no_grad;
    (void)model->forward(kiln::zeros({1, 1}, kiln::kInt64)).sum().item<double>();
    kiln::optim::AdamW opt(model->parameters(), kiln::optim::AdamWOptions{});
    kiln::cli::load_optimizer(path, opt);
  } catch (const kiln::Error&) {
  }
  return 0;
}
