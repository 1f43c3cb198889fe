// batch_norm, group_norm, instance_norm against statistics computed here
// in float64 (running statistics by hand: momentum and the unbiased
// variance), gradcheck; the convolution, pooling and norm modules:
// PyTorch's names, shapes, initialisation bounds, train/eval behaviour, a
// small CNN that trains; errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

// Per-channel (over N and spatial) mean and biased variance of (N, C, ...).
std::pair<std::vector<double>, std::vector<double>> channel_stats(const Tensor& x) {
  const int64_t C = x.size(1), inner = x.numel() / (x.size(0) * C);
  const std::vector<double> v = values(x.contiguous());
  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
  const double n = static_cast<double>(x.size(0) * inner);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t b = 0; b < x.size(0); ++b)
      for (int64_t i = 0; i < inner; ++i) mean[static_cast<size_t>(c)] += v[static_cast<size_t>((b * C + c) * inner + i)] / n;
    for (int64_t b = 0; b < x.size(0); ++b)
      for (int64_t i = 0; i < inner; ++i) {
        const double d = v[static_cast<size_t>((b * C + c) * inner + i)] - mean[static_cast<size_t>(c)];
        var[static_cast<size_t>(c)] += d * d / n;
      }
  }
  return {mean, var};
}

TEST(Normalization, BatchNormTrainingEvalAndRunningStatistics) {
  manual_seed(6001);
  for (Layout layout : all_layouts()) {
    const Tensor x = make_input({4, 3, 5, 6}, layout, kFloat64);
    const Tensor w = randn({3}, kFloat64), b = randn({3}, kFloat64);
    Tensor rm = randn({3}, kFloat64), rv = rand({3}, kFloat64) + 0.5;
    const std::vector<double> rm0 = values(rm), rv0 = values(rv);
    const auto [mean, var] = channel_stats(x);
    const Tensor y = nn::batch_norm(x, rm, rv, w, b, true, 0.3, 1e-5);
    const std::vector<double> xv = values(x.contiguous()), wv = values(w), bv = values(b);
    std::vector<double> want;
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = (i / 30) % 3;
      want.push_back((xv[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * wv[c] + bv[c]);
    }
    expect_close(y, want, 1e-10, 1e-10, std::string("training ") + layout_name(layout));
    std::vector<double> want_rm, want_rv;
    for (size_t c = 0; c < 3; ++c) {
      want_rm.push_back(0.7 * rm0[c] + 0.3 * mean[c]);
      want_rv.push_back(0.7 * rv0[c] + 0.3 * var[c] * 120.0 / 119.0);  // unbiased: n = 4 * 5 * 6
    }
    expect_close(rm, want_rm, 1e-12, 1e-12, "running_mean");
    expect_close(rv, want_rv, 1e-12, 1e-12, "running_var");
    // Evaluation uses the running statistics and changes nothing.
    const std::vector<double> rm_before = values(rm);
    const Tensor e = nn::batch_norm(x, rm, rv, w, b, false);
    std::vector<double> want_eval;
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = (i / 30) % 3;
      want_eval.push_back((xv[i] - want_rm[c]) / std::sqrt(want_rv[c] + 1e-5) * wv[c] + bv[c]);
    }
    expect_close(e, want_eval, 1e-10, 1e-10, "eval");
    expect_close(rm, rm_before, 0, 0, "running_mean unchanged by eval");
  }
}

TEST(Normalization, GroupAndInstanceNorm) {
  manual_seed(6002);
  const Tensor x = randn({2, 6, 4, 3}, kFloat64), w = randn({6}, kFloat64), b = randn({6}, kFloat64);
  // group_norm with 2 groups: each (sample, group of 3 channels) normalised.
  const std::vector<double> xv = values(x), wv = values(w), bv = values(b);
  std::vector<double> want(xv.size());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t g = 0; g < 2; ++g) {
      const int64_t begin = (n * 6 + g * 3) * 12, count = 36;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < count; ++i) mean += xv[static_cast<size_t>(begin + i)] / count;
      for (int64_t i = 0; i < count; ++i) var += std::pow(xv[static_cast<size_t>(begin + i)] - mean, 2) / count;
      for (int64_t i = 0; i < count; ++i) {
        const size_t c = static_cast<size_t>(g * 3 + i / 12);
        want[static_cast<size_t>(begin + i)] = (xv[static_cast<size_t>(begin + i)] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
      }
    }
  expect_close(nn::group_norm(x, 2, w, b), want, 1e-10, 1e-10, "group_norm");
  // instance_norm is group_norm with one channel per group (no affine here).
  expect_close(nn::instance_norm(x), values(nn::group_norm(x, 6)), 1e-12, 1e-12, "instance_norm");
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{nn::group_norm(in[0], 3, in[1], in[2])}; },
      {randn({2, 6, 3}, kFloat64).requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{nn::batch_norm(in[0], {}, {}, in[1], in[2], true)};
      },
      {randn({4, 6, 3}, kFloat64).requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()}));
}

// batch_norm's training kernel: float32 against float64 (forward and every
// gradient, odd sizes, 2-D to 5-D inputs, with and without the affine
// step, the input's gradient asked for or not), gradcheck without weight
// or bias, a zero-size batch of spatial size 0 rejected as PyTorch does.
TEST(Normalization, BatchNormKernelFloat32AndGradients) {
  manual_seed(6004);
  for (const Shape& shape : std::vector<Shape>{{5, 3}, {3, 4, 7}, {2, 5, 3, 3}, {2, 2, 3, 1, 2}})
    for (bool affine : {true, false})
      for (bool input_grad : {true, false}) {
        if (!affine && !input_grad) continue;  // nothing to differentiate
        const Tensor x64 = randn(shape, kFloat64) * 3 + 1, w64 = randn({shape[1]}, kFloat64), b64 = randn({shape[1]}, kFloat64);
        const Tensor gy = randn(shape, kFloat64);
        std::vector<Tensor> got[2];
        for (DType dt : {kFloat64, kFloat32}) {
          const Tensor x = x64.to(dt).detach().requires_grad_(input_grad);
          const Tensor w = affine ? w64.to(dt).detach().requires_grad_() : Tensor(), b = affine ? b64.to(dt).detach().requires_grad_() : Tensor();
          const Tensor y = nn::batch_norm(x, {}, {}, w, b, true);
          (y * gy.to(dt)).sum().backward();
          got[dt == kFloat32] = {y, input_grad ? x.grad() : Tensor(), affine ? w.grad() : Tensor(), affine ? b.grad() : Tensor()};
        }
        const std::string what = shape_str(shape) + (affine ? " affine" : "") + (input_grad ? " input grad" : "");
        for (size_t i = 0; i < 4; ++i)
          if (got[0][i].defined()) expect_close(got[1][i], values(got[0][i]), 1e-4, 1e-4, what + " output " + std::to_string(i));
      }
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{nn::batch_norm(in[0], {}, {}, {}, {}, true)}; },
      {randn({3, 2, 2, 3}, kFloat64).requires_grad_()}));
  // The weight alone (no bias), through a non-contiguous input.
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{nn::batch_norm(in[0].transpose(0, 2), {}, {}, in[1], {}, true)};
      },
      {randn({3, 2, 4}, kFloat64).requires_grad_(), randn({2}, kFloat64).requires_grad_()}));
}

TEST(Normalization, ModulesHavePyTorchsNamesAndBehaviour) {
  manual_seed(6003);
  nn::Conv2d conv(4, 8, {3}, {.stride = {2}, .padding = {1}, .groups = 2});
  EXPECT_EQ(conv.weight.sizes(), (Shape{8, 2, 3, 3}));
  const double bound = 1.0 / std::sqrt(2.0 * 9);
  EXPECT_LE(amax(abs(conv.weight)).item<double>(), bound);
  EXPECT_LE(amax(abs(conv.bias)).item<double>(), bound);
  const Tensor x = randn({2, 4, 9, 9});
  expect_close(conv(x), values(nn::conv2d(x, conv.weight, conv.bias, {2}, {1}, {1}, 2)), 0, 0, "Conv2d");
  nn::Conv1d reflect(2, 3, {3}, {.padding = {1}, .padding_mode = "reflect"});
  const Tensor s = randn({1, 2, 6});
  expect_close(reflect(s), values(nn::conv1d(pad(s, {1, 1}, "reflect"), reflect.weight, reflect.bias)), 0, 0,
               "padding_mode reflect");
  nn::ConvTranspose2d up(4, 2, {2}, {.stride = {2}});
  EXPECT_EQ(up(x).sizes(), (Shape{2, 2, 18, 18}));
  nn::BatchNorm2d bn(4);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}));
  bn(x), bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  bn.eval();
  const Tensor before = bn.running_mean.clone();
  bn(x);
  EXPECT_EQ(values(bn.running_mean), values(before));
  nn::BatchNorm1d cumulative(3, 1e-5, std::nullopt);  // momentum None: the running mean is the plain average
  const Tensor a = randn({5, 3}), b = randn({5, 3});
  cumulative(a), cumulative(b);
  expect_close(cumulative.running_mean, values((a.mean({0}) + b.mean({0})) / 2.0), 1e-6, 1e-6, "cumulative average");
  EXPECT_EQ(nn::GroupNorm(2, 4).named_parameters().size(), 2u);
  // A small CNN trains: loss falls on a fixed batch.
  nn::Sequential cnn{std::make_shared<nn::Conv2d>(1, 4, Shape{3}, nn::ConvOptions{.padding = {1}}),
                     std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(Shape{2}), std::make_shared<nn::AdaptiveAvgPool2d>(Shape{2}),
                     std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16, 3)};
  const Tensor images = randn({8, 1, 8, 8});
  const Tensor labels = randint(0, 3, {8});
  optim::Adam opt(cnn.parameters(), {.lr = 0.05});
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    opt.zero_grad();
    const Tensor loss = nn::cross_entropy(cnn(images), labels);
    loss.backward();
    opt.step();
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.5);
}

TEST(Normalization, Errors) {
  expect_error([] { nn::batch_norm(randn({1, 3}), {}, {}, {}, {}, true); }, {"[batch_norm]", "more than 1 value"});
  expect_error([] { nn::batch_norm(randn({4, 3}), zeros({2}), ones({3})); }, {"[batch_norm]", "running_mean", "[3]"});
  expect_error([] { nn::batch_norm(randn({4, 3}), {}, {}); }, {"[batch_norm]", "running_mean and running_var"});
  expect_error([] { nn::group_norm(randn({2, 6, 3}), 4); }, {"[group_norm]", "divisible by num_groups (4)"});
  expect_error([] { nn::instance_norm(randn({2, 6})); }, {"[instance_norm]", "(N, C, spatial...)"});
  nn::BatchNorm2d bn(3);
  expect_error([&] { bn(randn({2, 3, 4})); }, {"[BatchNorm2d]", "4-D", "[2, 3, 4]"});
  expect_error([&] { bn(randn({2, 4, 4, 4})); }, {"[BatchNorm2d]", "3 channels"});
  expect_error([] { nn::Conv2d(3, 4, {3}, {.groups = 2}); }, {"[Conv2d]", "divisible by groups (2)"});
  expect_error([] { nn::Conv2d(3, 4, {3}, {.padding_mode = "mirror"}); }, {"[Conv2d]", "'mirror'"});
}

}  // namespace
}  // namespace kiln::test
