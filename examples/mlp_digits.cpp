// An MLP on Fashion-MNIST (Debian's dataset-fashion-mnist; its train and test
// images share no exact duplicate): DataLoader, AdamW, OneCycleLR, a checkpoint
// per epoch and resuming. Usage: mlp_digits [--epochs N] [--stop-after N] [--resume]
#include <kiln/kiln.h>

#include <algorithm>
#include <iostream>

using namespace kiln;

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto flag = [&](const std::string& name, int fallback) {
    const auto it = std::find(args.begin(), args.end(), name);
    return it != args.end() && it + 1 != args.end() ? std::stoi(*(it + 1)) : fallback;
  };
  const int epochs = flag("--epochs", 2), stop_after = flag("--stop-after", epochs);
  const bool resume = std::find(args.begin(), args.end(), "--resume") != args.end();
  const std::string dir = "/usr/share/datasets/fashion-mnist/", out = "mlp_digits.safetensors";
  auto images = [&](const std::string& f) { return io::load_idx(dir + f).view({-1, 784}).to(kFloat32) / 255.0; };
  auto labels = [&](const std::string& f) { return io::load_idx(dir + f).to(kInt64); };
  auto train = std::make_shared<data::TensorDataset>(
      std::vector<Tensor>{images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz")});
  const Tensor test_x = images("t10k-images-idx3-ubyte.gz"), test_y = labels("t10k-labels-idx1-ubyte.gz");
  manual_seed(0);
  nn::Sequential model({std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
  optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
  data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .num_workers = 2});
  optim::OneCycleLR schedule(opt, 3e-3, epochs * loader.size());
  int start = 0;
  if (resume) {  // weights, optimizer, schedule, and the generator that shuffles
    const io::SafetensorsFile f = io::load_safetensors(out);
    model.load_state_dict(nn::select_prefix(f.tensors, "model.")), opt.load_state_dict(nn::select_prefix(f.tensors, "optim."));
    schedule.load_state_dict(nn::select_prefix(f.tensors, "schedule.")), set_rng_state(f.tensors.at("rng_state"));
    start = std::stoi(f.metadata.at("epoch"));
  }
  for (int epoch = start; epoch < stop_after; ++epoch) {
    model.train();
    for (const data::Example& batch : loader) {
      const Tensor loss = nn::cross_entropy(model(batch[0]), batch[1]);
      opt.zero_grad(), loss.backward(), opt.step(), schedule.step();
    }
    NoGradGuard no_grad;
    model.eval();
    std::cout << "epoch " << epoch + 1 << ": test accuracy " << mean(eq(argmax(model(test_x), 1), test_y).to(kFloat64)).item<double>() << std::endl;
    nn::StateDict all = nn::add_prefix(model.state_dict(), "model."), o = nn::add_prefix(opt.state_dict(), "optim.");
    all.merge(o), all.merge(nn::add_prefix(schedule.state_dict(), "schedule.")), all.emplace("rng_state", get_rng_state());
    io::save_safetensors(out, all, {{"epoch", std::to_string(epoch + 1)}});
  }
}
