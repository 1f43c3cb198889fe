// A CNN on Fashion-MNIST (Debian's dataset-fashion-mnist): two conv3x3-BN-
// ReLU-maxpool stages (32, 64 channels), linear 3136 -> 128, dropout,
// linear 128 -> 10, AdamW, batch 64; images/s and test accuracy per epoch.
// Usage: fashion_mnist [--epochs N] [--batches N (per epoch, 0: all)]
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <iostream>

using namespace kiln;

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto flag = [&](const std::string& name, int fallback) {
    const auto it = std::find(args.begin(), args.end(), name);
    return it != args.end() && it + 1 != args.end() ? std::stoi(*(it + 1)) : fallback;
  };
  const int epochs = flag("--epochs", 2), batches = flag("--batches", 0);
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  auto images = [&](const std::string& f) { return io::load_idx(dir + f).view({-1, 1, 28, 28}).to(kFloat32) / 255.0; };
  auto labels = [&](const std::string& f) { return io::load_idx(dir + f).to(kInt64); };
  auto train = std::make_shared<data::TensorDataset>(
      std::vector<Tensor>{images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz")});
  const Tensor test_x = images("t10k-images-idx3-ubyte.gz"), test_y = labels("t10k-labels-idx1-ubyte.gz");
  manual_seed(0);
  auto stage = [](int64_t in, int64_t out) {
    return std::vector<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Conv2d>(in, out, Shape{3}, nn::ConvOptions{.padding = {1}}),
        std::make_shared<nn::BatchNorm2d>(out), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(Shape{2})};
  };
  nn::Sequential model;
  for (const auto& m : stage(1, 32)) model.push_back(m);
  for (const auto& m : stage(32, 64)) model.push_back(m);
  for (const auto& m : std::vector<std::shared_ptr<nn::UnaryModule>>{
           std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3136, 128), std::make_shared<nn::ReLU>(),
           std::make_shared<nn::Dropout>(0.25), std::make_shared<nn::Linear>(128, 10)})
    model.push_back(m);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
  data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 2});
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model.train();
    const auto start = std::chrono::steady_clock::now();
    int64_t seen = 0, steps = 0;
    for (const data::Example& batch : loader) {
      if (batches > 0 && steps++ == batches) break;
      const Tensor loss = nn::cross_entropy(model(batch[0]), batch[1]);
      opt.zero_grad(), loss.backward(), opt.step();
      seen += batch[0].size(0);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    NoGradGuard no_grad;
    model.eval();
    double correct = 0;
    for (int64_t i = 0; i < test_x.size(0); i += 1000)
      correct += sum(eq(argmax(model(test_x.narrow(0, i, 1000)), 1), test_y.narrow(0, i, 1000))).item<double>();
    std::cout << "epoch " << epoch + 1 << ": " << seen / seconds << " images/s, test accuracy "
              << correct / static_cast<double>(test_x.size(0)) << std::endl;
  }
}
