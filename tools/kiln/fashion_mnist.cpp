// See fashion_mnist.h. The network is the issue's: two conv3x3-BN-ReLU-
// maxpool stages (32, 64 channels), linear 3136 -> 128, ReLU, dropout 0.25,
// linear 128 -> 10; AdamW with a warmup + cosine schedule per step.
// A checkpoint holds the model under "model.", AdamW under "optim.", the
// epochs done, the seed and the generator's state, so --resume continues
// the run as if never stopped.
#include "fashion_mnist.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <unordered_set>

#include "checkpoint.h"
#include "flags.h"
#include "kiln/kiln.h"
#include "progress.h"

namespace kiln::cli {
namespace {

const char* kFormat = "kiln-cnn-fashion-mnist";
constexpr double kMean = 0.2860, kStd = 0.3530;  // of the training images' pixels (scaled to [0, 1])

struct Split {
  Tensor images, labels;  // (N, 1, 28, 28) float32 normalised; (N) int64
};

struct Data {
  Split train, test;
  int64_t test_duplicates = 0;  // test images also in the training set, left out of the test split
};

Tensor raw_images(const std::string& dir, const char* file) {
  const std::string path = dir + "/" + file;
  check(std::filesystem::exists(path), "train", "no ", path, ": install Debian's 'dataset-fashion-mnist' package ",
        "(make demo and make test do) or pass --data DIR");
  const Tensor t = io::load_idx(path);
  check(t.dim() == 3 && t.size(1) == 28 && t.size(2) == 28 && t.dtype() == kUInt8, "train", path,
        " is not an IDX file of 28x28 uint8 images");
  return t.contiguous();
}

Tensor raw_labels(const std::string& dir, const char* file, int64_t n) {
  const Tensor t = io::load_idx(dir + "/" + file).to(kInt64);
  check(t.dim() == 1 && t.size(0) == n, "train", dir, "/", file, " does not hold ", n, " labels");
  check(n == 0 || (amin(t).item<int64_t>() >= 0 && amax(t).item<int64_t>() < 10), "train", dir, "/", file,
        " has labels outside [0, 10)");
  return t;
}

Tensor normalised(const Tensor& raw) { return (raw.to(kFloat32).unsqueeze(1) / 255.0 - kMean) / kStd; }

// The official split, less any test image whose pixels equal a training
// image's (Fashion-MNIST has none; the check keeps the figure honest).
Data load_data(const std::string& dir) {
  const Tensor train = raw_images(dir, "train-images-idx3-ubyte.gz"), test = raw_images(dir, "t10k-images-idx3-ubyte.gz");
  const Tensor train_y = raw_labels(dir, "train-labels-idx1-ubyte.gz", train.size(0));
  const Tensor test_y = raw_labels(dir, "t10k-labels-idx1-ubyte.gz", test.size(0));
  auto image = [](const Tensor& t, int64_t i) {
    return std::string_view(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()) + i * 784, 784);
  };
  std::unordered_set<std::string_view> seen;
  for (int64_t i = 0; i < train.size(0); ++i) seen.insert(image(train, i));
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < test.size(0); ++i)
    if (!seen.count(image(test, i))) keep.push_back(i);
  const Tensor kept = tensor<int64_t>(keep);
  Data d{{normalised(train), train_y}, {normalised(index_select(test, 0, kept)), index_select(test_y, 0, kept)}, 0};
  d.test_duplicates = test.size(0) - kept.numel();
  return d;
}

double accuracy(nn::Sequential& model, const Split& s) {
  NoGradGuard no_grad;
  model.eval();
  double correct = 0;
  for (int64_t i = 0; i < s.images.size(0); i += 1000) {
    const int64_t n = std::min<int64_t>(1000, s.images.size(0) - i);
    correct += sum(eq(argmax(model(s.images.narrow(0, i, n)), 1), s.labels.narrow(0, i, n))).item<double>();
  }
  model.train();
  return s.images.size(0) ? correct / static_cast<double>(s.images.size(0)) : 0;
}

struct Checkpoint {
  int64_t epochs_done = 0;
  uint64_t seed = 0;
  Tensor rng_state;
};

void save(const std::string& path, const nn::Sequential& model, const optim::AdamW& opt, const Checkpoint& c) {
  nn::StateDict all = nn::add_prefix(model.state_dict(), "model.");
  all.merge(nn::add_prefix(opt.state_dict(), "optim."));
  all.emplace("rng_state", c.rng_state);
  io::save_safetensors(path, all, {{"format", kFormat}, {"epochs", std::to_string(c.epochs_done)},
                                   {"seed", std::to_string(c.seed)}});
}

// The file's model tensors loaded into `model` (load_state_dict checks
// every name and shape), its epoch count and seed read back.
io::SafetensorsFile load(const std::string& path, nn::Sequential& model, Checkpoint* c) {
  io::SafetensorsFile f = io::load_safetensors(path);
  const auto format = f.metadata.find("format");
  check(format != f.metadata.end() && format->second == kFormat, "checkpoint", "'", path,
        "' is not a Fashion-MNIST checkpoint of kiln train --task fashion-mnist (metadata format is not \"", kFormat,
        "\")");
  model.load_state_dict(nn::select_prefix(f.tensors, "model."));
  if (c) {
    c->epochs_done = checkpoint_meta_int(f, "epochs", 0, 1 << 30);
    c->seed = static_cast<uint64_t>(checkpoint_meta_int(f, "seed", 0, kIntMax));
    const auto rng = f.tensors.find("rng_state");
    check(rng != f.tensors.end() && rng->second.dtype() == kUInt8 && rng->second.sizes() == Shape{16}, "checkpoint",
          "'", path, "' has no uint8 tensor 'rng_state' of shape [16]");
    c->rng_state = rng->second;
  }
  return f;
}

}  // namespace

void build_fashion_mnist_cnn(nn::Sequential& m) {
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{1, 32}, {32, 64}}) {
    m.push_back(std::make_shared<nn::Conv2d>(in, out, Shape{3}, nn::ConvOptions{.padding = {1}}));
    m.push_back(std::make_shared<nn::BatchNorm2d>(out));
    m.push_back(std::make_shared<nn::ReLU>());
    m.push_back(std::make_shared<nn::MaxPool2d>(Shape{2}));
  }
  m.push_back(std::make_shared<nn::Flatten>());
  m.push_back(std::make_shared<nn::Linear>(3136, 128));
  m.push_back(std::make_shared<nn::ReLU>());
  m.push_back(std::make_shared<nn::Dropout>(0.25));
  m.push_back(std::make_shared<nn::Linear>(128, 10));
}

void train_fashion_mnist(const CnnTrainArgs& a) {
  check_checkpoint_destination(a.out, a.resume, a.overwrite);
  if (a.threads > 0) set_num_threads(static_cast<int>(a.threads));
  const Data data = load_data(a.data_dir.empty() ? kFashionMnistDir : a.data_dir);
  std::cerr << "data: " << data.train.images.size(0) << " training / " << data.test.images.size(0)
            << " test images (" << data.test_duplicates << " test images equal to a training image left out)\n";
  manual_seed(static_cast<uint64_t>(a.seed));
  nn::Sequential model;
  build_fashion_mnist_cnn(model);
  optim::AdamW opt(model.parameters(), {.lr = a.lr, .weight_decay = a.weight_decay});
  Checkpoint state{0, static_cast<uint64_t>(a.seed), Tensor()};
  if (a.resume) {
    load(a.out, model, &state);
    opt.load_state_dict(nn::select_prefix(io::load_safetensors(a.out).tensors, "optim."));
    set_rng_state(state.rng_state);
    check(state.epochs_done < a.epochs, "train", "the checkpoint '", a.out, "' has ", state.epochs_done,
          " epochs done and --epochs is ", a.epochs, ": nothing to train (raise --epochs)");
    std::cerr << "resumed from " << a.out << " after epoch " << state.epochs_done << "\n";
  }
  std::cerr << "model: " << model.parameters().size() << " parameter tensors, batch " << a.batch << ", "
            << get_num_threads() << " threads\n";
  auto train_set = std::make_shared<data::TensorDataset>(std::vector<Tensor>{data.train.images, data.train.labels});
  data::DataLoader loader(train_set, {.batch_size = a.batch, .shuffle = true, .num_workers = 1});
  const int64_t steps_per_epoch = (data.train.images.size(0) + a.batch - 1) / a.batch;
  const int64_t total_steps = steps_per_epoch * a.epochs, warmup = steps_per_epoch / 10;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  Progress progress;
  int64_t step = state.epochs_done * steps_per_epoch, images = 0;
  const int64_t first_step = step;
  for (int64_t epoch = state.epochs_done; epoch < a.epochs; ++epoch) {
    double loss_ema = 0;
    for (const data::Example& batch : loader) {
      opt.set_lr(optim::warmup_cosine_lr(step, warmup, total_steps, a.lr, a.lr / 20));
      const Tensor loss = nn::cross_entropy(model(batch[0]), batch[1]);
      opt.zero_grad(), loss.backward(), opt.step();
      const double l = loss.item<double>();
      check(std::isfinite(l), "train", "the loss is ", l, " at step ", step + 1, ": stopping; '", a.out,
            "' keeps its last finite state");
      loss_ema = loss_ema == 0 ? l : 0.95 * loss_ema + 0.05 * l;
      ++step, images += batch[0].size(0);
      const double t = elapsed(), rate = static_cast<double>(images) / t;
      const double eta = t / static_cast<double>(step - first_step) * static_cast<double>(total_steps - step);
      progress.report(step, total_steps, loss_ema, rate, "images/s", t, eta, false);
    }
    progress.end_line();
    const double acc = accuracy(model, data.test);
    state.epochs_done = epoch + 1, state.rng_state = get_rng_state();
    save(a.out, model, opt, state);
    std::cout << "epoch " << epoch + 1 << ": train loss " << loss_ema << ", test accuracy " << 100 * acc << "% ("
              << static_cast<int64_t>(static_cast<double>(images) / elapsed()) << " images/s, "
              << hms(elapsed()) << "), saved " << a.out << std::endl;
    if (a.time_limit > 0 && elapsed() > a.time_limit && epoch + 1 < a.epochs) {
      std::cout << "time limit reached after epoch " << epoch + 1 << " (--resume continues)" << std::endl;
      break;
    }
  }
}

void eval_fashion_mnist(const std::string& ckpt, const std::string& data_dir, bool int8) {
  nn::Sequential model;
  build_fashion_mnist_cnn(model);
  Checkpoint state;
  load(ckpt, model, &state);
  const Data data = load_data(data_dir.empty() ? kFashionMnistDir : data_dir);
  if (int8) {  // static post-training quantization, calibrated on the first training images
    NoGradGuard no_grad;
    model.eval();
    quant::fuse_conv_bn(model);
    quant::prepare(model);
    const int64_t calibration = std::min<int64_t>(2000, data.train.images.size(0));
    for (int64_t i = 0; i < calibration; i += 500)
      model(data.train.images.narrow(0, i, std::min<int64_t>(500, calibration - i)));
    std::cerr << "int8: " << quant::convert(model) << " layers quantized (BatchNorm folded, calibrated on " << calibration
              << " training images)\n";
  }
  std::cout << "test accuracy " << 100 * accuracy(model, data.test) << "% on " << data.test.images.size(0)
            << " images (" << ckpt << ", after " << state.epochs_done << " epochs" << (int8 ? ", int8" : "") << ")"
            << std::endl;
}

}  // namespace kiln::cli
