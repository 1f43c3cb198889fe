// The second main job: a small CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist). `kiln train --task fashion-mnist` trains it
// (progress bar, test accuracy per epoch, a checkpoint per epoch, --resume);
// `kiln eval` reports a checkpoint's test accuracy.
#pragma once
#include <string>

#include "kiln/nn.h"

namespace kiln::cli {

struct CnnTrainArgs {
  std::string data_dir, out;
  int64_t epochs = 5, batch = 64, seed = 0, threads = 0;
  double lr = 1e-3, weight_decay = 1e-4, time_limit = 0;
  bool resume = false, overwrite = false;
};

// The network, built into `m` (modules are not moved: their parameters are
// registered by address).
void build_fashion_mnist_cnn(nn::Sequential& m);

void train_fashion_mnist(const CnnTrainArgs& a);
// Test accuracy of a checkpoint written by train_fashion_mnist, printed;
// with int8, the model statically quantized first (BatchNorm folded into
// the convolutions, calibrated on the first 2,000 training images).
void eval_fashion_mnist(const std::string& ckpt, const std::string& data_dir, bool int8 = false);

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace kiln::cli
