// int8 quantization: quantize/dequantize round trips within half a step
// (per tensor and per channel, qint8 and quint8, PyTorch's rounding), the
// u8 x s8 GEMM exact against an int64 reference on every int8 path this CPU
// has (extremes, odd sizes, K at the int32 limit), linear_dynamic against a
// float64 reference of the same quantization and against the float layer,
// quantize_dynamic on a Sequential and a GPT; errors.
#include <cmath>

#include "kiln/quantization.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Quantization, PerTensorRoundTripWithinHalfAStep) {
  manual_seed(7101);
  for (DType t : {kInt8, kUInt8}) {
    const int64_t lo = t == kInt8 ? -128 : 0, hi = t == kInt8 ? 127 : 255, zp = t == kInt8 ? -3 : 131;
    const double scale = 0.037;
    // Inside the representable range [(lo - zp) scale, (hi - zp) scale].
    const Tensor x = rand({7, 9}, kFloat64) * ((hi - lo) * scale) + (lo - zp) * scale;
    const quant::QuantizedTensor q = quant::quantize_per_tensor(x, scale, zp, t);
    EXPECT_EQ(q.int_repr().dtype(), t);
    EXPECT_EQ(q.q_scale(), scale);
    EXPECT_EQ(q.q_zero_point(), zp);
    const std::vector<double> xv = values(x), back = values(q.dequantize());
    for (size_t i = 0; i < xv.size(); ++i) ASSERT_LE(std::fabs(back[i] - xv[i]), scale / 2 + 1e-6) << i;
    // Outside it: clamped to the end values.
    const std::vector<double> ends = values(quant::quantize_per_tensor(tensor({-1e6, 1e6}), scale, zp, t).int_repr());
    EXPECT_EQ(ends, (std::vector<double>{static_cast<double>(lo), static_cast<double>(hi)}));
  }
  // Round half to even, as PyTorch: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0.
  const auto q = quant::quantize_per_tensor(tensor({0.5, 1.5, 2.5, -0.5, -1.5}), 1.0, 0, kInt8);
  EXPECT_EQ(values(q.int_repr()), (std::vector<double>{0, 2, 2, 0, -2}));
}

TEST(Quantization, PerChannelRoundTripAndAccessors) {
  manual_seed(7102);
  const Tensor x = randn({3, 4, 5}, kFloat64);
  const Tensor scales = tensor({0.01, 0.02, 0.05, 0.1}), zps = tensor<int64_t>({0, 10, -20, 5});
  const quant::QuantizedTensor q = quant::quantize_per_channel(x, scales, zps, 1, kInt8);
  EXPECT_EQ(q.qscheme(), quant::QScheme::PerChannelAffine);
  EXPECT_EQ(q.q_per_channel_axis(), 1);
  expect_close(q.q_per_channel_scales(), values(scales), 0, 0, "scales");
  expect_close(q.q_per_channel_zero_points(), values(zps), 0, 0, "zero points");
  const std::vector<double> xv = values(x), back = values(q.dequantize()), qv = values(q.int_repr());
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 5) % 4;
    const double s = values(scales)[c], z = values(zps)[c];
    const double want = std::clamp(std::nearbyint(static_cast<double>(static_cast<float>(xv[i]) * static_cast<float>(1.0 / s))) + z, -128.0, 127.0);
    ASSERT_EQ(qv[i], want) << i;
    if (want > -128 && want < 127) {
      ASSERT_LE(std::fabs(back[i] - xv[i]), s / 2 + 1e-6) << i;
    }
  }
  expect_error([&] { q.q_scale(); }, {"[q_scale]", "per-tensor"});
  expect_error([&] { quant::quantize_per_tensor(x, 0.1, 0, kInt8).q_per_channel_axis(); }, {"[q_per_channel_axis]"});
}

TEST(Quantization, Errors) {
  const Tensor x = randn({2, 3});
  expect_error([&] { quant::quantize_per_tensor(x, 0.1, 0, kInt32); }, {"[quantize_per_tensor]", "int8", "int32"});
  expect_error([&] { quant::quantize_per_tensor(x, 0, 0, kInt8); }, {"[quantize_per_tensor]", "positive finite scale"});
  expect_error([&] { quant::quantize_per_tensor(x, 0.1, 200, kInt8); }, {"[quantize_per_tensor]", "[-128, 127]", "200"});
  expect_error([&] { quant::quantize_per_tensor(ones({2}, kInt64), 0.1, 0, kInt8); }, {"[quantize_per_tensor]", "floating"});
  expect_error([&] { quant::quantize_per_channel(x, ones({2}), zeros({2}, kInt64), 1, kInt8); },
               {"[quantize_per_channel]", "shape [3]", "[2]"});
  expect_error([&] { quant::matmul_u8s8(ones({2, 3}, kInt8), ones({2, 3}, kInt8)); },
               {"[matmul_u8s8]", "uint8 (M, K)", "int8"});
  expect_error([&] { quant::matmul_u8s8(ones({2, 3}, kUInt8), ones({2, 4}, kInt8)); }, {"[matmul_u8s8]", "one K"});
  const quant::Int8Weight w = quant::quantize_weight(randn({4, 3}));
  expect_error([&] { quant::linear_dynamic(randn({2, 5}), w, {}); }, {"[linear_dynamic]", "3 input features", "[2, 5]"});
  expect_error([&] { quant::linear_dynamic(full({1, 3}, INFINITY), w, {}); }, {"[linear_dynamic]", "inf or NaN"});
  // NaN and inf anywhere in a long input (the SIMD body and the tail).
  for (int64_t at : {0, 37, 119}) {
    Tensor x = randn({40, 3}).reshape({-1});
    x.narrow(0, at, 1).fill_(at == 37 ? -INFINITY : NAN);
    expect_error([&] { quant::linear_dynamic(x.reshape({40, 3}), w, {}); }, {"[linear_dynamic]", "inf or NaN"});
  }
  expect_error([&] { quant::linear_dynamic(randn({2, 3}, kFloat64), w, {}); }, {"[linear_dynamic]", "float32"});
}

// Every int8 path this CPU and build can run: each capability's path.
std::vector<Capability> int8_capabilities() { return available_capabilities(); }

struct CapabilityRestore {
  Capability saved = cpu_capability();
  ~CapabilityRestore() { set_cpu_capability(saved); }
};

TEST(Quantization, Int8GemmExactOnEveryPath) {
  manual_seed(7103);
  const CapabilityRestore restore;
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},   {3, 5, 7},    {5, 13, 130}, {17, 9, 1000},
                                                      {64, 33, 64}, {2, 4, 65},  {0, 3, 4},    {3, 0, 4},
                                                      {2, 3, 0},   {6, 7, 1023}};
  for (Capability cap : int8_capabilities()) {
    set_cpu_capability(cap);
    const std::string on = std::string(" on ") + capability_name(cap);
    for (const auto& [M, N, K] : shapes) {
      const Tensor a = randint(0, 256, {M, K}).to(kUInt8), b = randint(-128, 128, {N, K}).to(kInt8);
      const Tensor want = matmul(a.to(kInt64), b.to(kInt64).t());
      const Tensor got = quant::matmul_u8s8(a, b);
      EXPECT_EQ(got.dtype(), kInt32);
      expect_close(got, values(want), 0, 0, shape_str({M, N, K}) + on);
    }
    // Extremes: 255 x -128 and 255 x 127 at K = 65536, the largest sums int32 holds.
    const Tensor a = full({2, 65536}, 255.0).to(kUInt8);
    const Tensor b = cat({full({1, 65536}, -128.0), full({1, 65536}, 127.0)}).to(kInt8);
    expect_close(quant::matmul_u8s8(a, b), {-2139095040.0, 2122383360.0, -2139095040.0, 2122383360.0}, 0, 0,
                 "extremes" + on);
    // A non-contiguous operand is read by value.
    const Tensor at = randint(0, 256, {9, 4}).to(kUInt8).t();
    const Tensor bt = randint(-128, 128, {9, 6}).to(kInt8).t();
    expect_close(quant::matmul_u8s8(at, bt), values(matmul(at.to(kInt64), bt.to(kInt64).t())), 0, 0, "transposed" + on);
  }
}

// The quantization linear_dynamic performs, replayed in float64 from its definition.
std::vector<double> linear_dynamic_reference(const Tensor& x, const quant::Int8Weight& w, const Tensor& b) {
  const std::vector<double> xv = values(x), wv = values(w.values), ws = values(w.scales), bv = b.defined() ? values(b) : std::vector<double>{};
  const int64_t K = w.values.size(1), N = w.values.size(0), M = x.numel() / K;
  double lo = 0, hi = 0;
  for (double v : xv) lo = std::min(lo, v), hi = std::max(hi, v);
  const double scale = hi > lo ? (hi - lo) / 255.0 : 1.0;
  const double zp = std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0);
  const float inverse = static_cast<float>(1.0 / scale);
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double q = std::clamp(static_cast<double>(std::nearbyint(static_cast<float>(xv[static_cast<size_t>(m * K + k)]) * inverse)) + zp, 0.0, 255.0);
        s += (q - zp) * wv[static_cast<size_t>(n * K + k)];
      }
      y[static_cast<size_t>(m * N + n)] = s * scale * ws[static_cast<size_t>(n)] + (bv.empty() ? 0 : bv[static_cast<size_t>(n)]);
    }
  return y;
}

TEST(Quantization, LinearDynamicMatchesItsDefinitionAndTheFloatLayer) {
  manual_seed(7104);
  const CapabilityRestore restore;
  for (Capability cap : int8_capabilities()) {
    set_cpu_capability(cap);
    for (const auto& [M, K, N] : std::vector<std::array<int64_t, 3>>{{1, 64, 10}, {5, 130, 7}, {16, 257, 33}}) {
      const Tensor x = randn({M, K}) * 2 + 0.3, weight = randn({N, K}) * 0.1, bias = randn({N});
      const quant::Int8Weight w = quant::quantize_weight(weight);
      // Weights: per-row symmetric, within half a step of the float weight.
      const std::vector<double> wf = values(weight), wq = values(w.values), ws = values(w.scales);
      for (size_t i = 0; i < wf.size(); ++i) ASSERT_LE(std::fabs(wq[i] * ws[i / K] - wf[i]), ws[i / K] / 2 + 1e-7);
      const Tensor y = quant::linear_dynamic(x, w, bias);
      const std::string what = shape_str({M, K, N}) + " on " + capability_name(cap);
      expect_close(y, linear_dynamic_reference(x, w, bias), 1e-5, 1e-5, what);
      // Against the float layer: the error of 8-bit steps, a few percent of the output's spread.
      const std::vector<double> yf = values(linear(x, weight, bias)), yq = values(y);
      double worst = 0, spread = 0;
      for (size_t i = 0; i < yf.size(); ++i) worst = std::max(worst, std::fabs(yq[i] - yf[i])), spread = std::max(spread, std::fabs(yf[i]));
      EXPECT_LT(worst, 0.03 * spread) << what;
    }
  }
  // Ties round half to even: the range [0, 255] makes the scale 1, so
  // k + 1/2 lies halfway (in the vector body and the tail of a row of 37),
  // and -0 quantizes as 0.
  std::vector<float> ties(37);
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = i % 3 == 2 ? -0.0f : static_cast<float>(i * 7 % 254) + 0.5f;
  ties[0] = 0.0f, ties[1] = 255.0f;
  const Tensor xt = tensor<float>(ties, {1, 37});
  const quant::Int8Weight wt = quant::quantize_weight(randn({4, 37}));
  for (Capability cap : int8_capabilities()) {
    set_cpu_capability(cap);
    expect_close(quant::linear_dynamic(xt, wt, {}), linear_dynamic_reference(xt, wt, {}), 1e-6, 1e-6,
                 std::string("ties on ") + capability_name(cap));
  }
  // Batch dims, zeros, and a zero-size batch.
  const quant::Int8Weight w = quant::quantize_weight(randn({3, 8}));
  EXPECT_EQ(quant::linear_dynamic(randn({2, 4, 8}), w, {}).sizes(), (Shape{2, 4, 3}));
  expect_close(quant::linear_dynamic(zeros({2, 8}), w, {}), std::vector<double>(6, 0.0), 0, 0, "zeros");
  EXPECT_EQ(quant::linear_dynamic(zeros({0, 8}), w, {}).sizes(), (Shape{0, 3}));
}

TEST(Quantization, QuantizeDynamicSwitchesEveryLinear) {
  manual_seed(7105);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(20, 32));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::Linear>(32, 5));
  const Tensor x = randn({6, 20});
  const std::vector<double> before = values(model(x));
  EXPECT_EQ(quant::quantize_dynamic(model), 2);
  const std::vector<double> after = values(model(x));
  double worst = 0, spread = 0;
  for (size_t i = 0; i < before.size(); ++i) worst = std::max(worst, std::fabs(after[i] - before[i])), spread = std::max(spread, std::fabs(before[i]));
  EXPECT_LT(worst, 0.05 * spread);
  EXPECT_GT(worst, 0);  // it is the int8 path that ran
  // A GPT: every projection, and its logits stay close.
  nn::GPTConfig c;
  c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  nn::GPT gpt(c);
  gpt.eval();
  const Tensor idx = randint(0, 256, {2, 16});
  const std::vector<double> logits = values(gpt.forward(idx));
  EXPECT_GE(quant::quantize_dynamic(gpt), 2 * c.n_layer * 2);
  const std::vector<double> qlogits = values(gpt.forward(idx));
  worst = 0, spread = 0;
  for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::fabs(qlogits[i] - logits[i])), spread = std::max(spread, std::fabs(logits[i]));
  EXPECT_LT(worst, 0.05 * spread);
}

// conv2d_int8 against the float64 convolution of what it computes with:
// the input quantized by its scale and zero point (clamped), the weight
// dequantized; strides, padding, dilation, odd sizes, every int8 path.
TEST(Quantization, Conv2dInt8MatchesTheConvolutionOfItsQuantizedOperands) {
  manual_seed(7107);
  const CapabilityRestore restore;
  struct Case {
    Shape input, weight, stride, padding, dilation;
  };
  const std::vector<Case> cases = {{{2, 3, 9, 8}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
                                   {{1, 4, 10, 7}, {6, 4, 3, 2}, {2, 1}, {0, 2}, {1, 2}},
                                   {{3, 1, 6, 6}, {2, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}},
                                   {{2, 7, 5, 5}, {3, 7, 5, 5}, {1, 1}, {2, 2}, {1, 1}}};
  for (Capability cap : int8_capabilities()) {
    set_cpu_capability(cap);
    for (const Case& k : cases) {
      const Tensor x = randn(k.input) * 1.5, weight = randn(k.weight) * 0.2, bias = randn({k.weight[0]});
      const double scale = 0.02;
      const int64_t zp = 120;  // the input's range: [-2.4, 2.7]; beyond it clamps
      const quant::Int8Weight w = quant::quantize_weight(weight);
      const Shape kernel = {k.weight[2], k.weight[3]};
      const Tensor y = quant::conv2d_int8(x, w, bias, kernel, k.stride, k.padding, k.dilation, scale, zp);
      const Tensor xq = quant::quantize_per_tensor(x, scale, zp, kUInt8).dequantize().to(kFloat64);
      const Tensor wq = (w.values.to(kFloat64) * w.scales.to(kFloat64).reshape({-1, 1})).reshape(k.weight);
      const Tensor want = nn::conv2d(xq, wq, bias.to(kFloat64), k.stride, k.padding, k.dilation);
      const std::string what = shape_str(k.input) + " * " + shape_str(k.weight) + " on " + capability_name(cap);
      ASSERT_EQ(y.sizes(), want.sizes()) << what;
      expect_close(y, values(want), 1e-5, 1e-5, what);
    }
  }
  const quant::Int8Weight w = quant::quantize_weight(randn({2, 3, 3, 3}));
  expect_error([&] { quant::conv2d_int8(randn({1, 4, 5, 5}), w, {}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 0.1, 0); },
               {"[conv2d_int8]", "4 x [3, 3]", "27"});
  expect_error([&] { quant::conv2d_int8(randn({1, 3, 2, 2}), w, {}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 0.1, 0); },
               {"[conv2d_int8]", "smaller than the (dilated) kernel"});
  expect_error([&] { quant::conv2d_int8(randn({1, 3, 5, 5}), w, {}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 0.1, 300); },
               {"[conv2d_int8]", "zero point in [0, 255]", "300"});
}

// Static post-training quantization of a small CNN: BN folding leaves the
// eval output unchanged; prepare / calibrate / convert give int8 layers
// whose output stays within a few percent of the float model's.
TEST(Quantization, StaticPostTrainingQuantizationOfACnn) {
  manual_seed(7108);
  // The first block in a Sequential of its own: the steps reach every Sequential of the model.
  auto block = std::make_shared<nn::Sequential>();
  block->push_back(std::make_shared<nn::Conv2d>(3, 8, Shape{3}, nn::ConvOptions{.padding = {1}}));
  block->push_back(std::make_shared<nn::BatchNorm2d>(8));
  block->push_back(std::make_shared<nn::ReLU>());
  nn::Sequential model{block,
                       std::make_shared<nn::MaxPool2d>(Shape{2}),
                       std::make_shared<nn::Conv2d>(8, 16, Shape{3}),
                       std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::Linear>(64, 32),
                       std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(32, 5)};
  {
    NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) model(randn({16, 3, 8, 8}) * 2 + 0.5);  // running statistics away from 0 and 1
  }
  model.eval();
  NoGradGuard no_grad;
  const Tensor x = randn({10, 3, 8, 8}) * 2 + 0.5;
  const std::vector<double> want = values(model(x));
  EXPECT_EQ(quant::fuse_conv_bn(model), 1);
  EXPECT_NE(dynamic_cast<nn::Identity*>(block->at(1).get()), nullptr);
  expect_close(model(x), want, 1e-4, 1e-4, "BatchNorm folded into the convolution");
  EXPECT_EQ(quant::prepare(model), 4);
  for (int i = 0; i < 4; ++i) model(randn({16, 3, 8, 8}) * 2 + 0.5);  // calibration
  EXPECT_EQ(quant::convert(model), 4);
  // Each ReLU fused into the int8 layer before it (conv-bn-relu, conv-relu,
  // linear-relu): an Identity in its place, the layer's relu set.
  const auto* first = dynamic_cast<quant::QuantizedConv2d*>(block->at(0).get());
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->relu);
  EXPECT_NE(dynamic_cast<nn::Identity*>(block->at(2).get()), nullptr);
  for (size_t i : {3, 6})
    EXPECT_TRUE(dynamic_cast<quant::QuantizedLayer&>(*model.at(i - 1)).relu && dynamic_cast<nn::Identity*>(model.at(i).get()))
        << "layer " << i - 1;
  const auto* last = dynamic_cast<quant::QuantizedLinear*>(model.at(7).get());
  ASSERT_NE(last, nullptr);
  EXPECT_FALSE(last->relu);
  const std::vector<double> got = values(model(x));
  double worst = 0, spread = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i])), spread = std::max(spread, std::fabs(want[i]));
  EXPECT_LT(worst, 0.05 * spread);
  EXPECT_GT(worst, 0);  // int8 arithmetic ran
  expect_error([&] { model(full({1, 3, 8, 8}, NAN)); }, {"[conv2d_int8]", "inf or NaN"});
  // The fused ReLU is exactly relu of the unfused output.
  const Tensor xc = randn({4, 3, 8, 8}), xl = randn({6, 20}), bc = randn({5}), bl = randn({7});
  const quant::Int8Weight wc = quant::quantize_weight(randn({5, 27})), wl = quant::quantize_weight(randn({7, 20}));
  const Shape k{3, 3}, one{1, 1};
  expect_close(quant::conv2d_int8(xc, wc, bc, k, one, one, one, 0.05, 128, true),
               values(relu(quant::conv2d_int8(xc, wc, bc, k, one, one, one, 0.05, 128))), 0, 0, "conv2d_int8 relu");
  expect_close(quant::linear_int8(xl, wl, bl, 0.03, 120, true), values(relu(quant::linear_int8(xl, wl, bl, 0.03, 120))),
               0, 0, "linear_int8 relu");
}

TEST(Quantization, MinMaxObserverQParamsByHand) {
  quant::MinMaxObserver affine;  // quint8, per tensor
  affine.observe(tensor({-1.0, 2.0}));
  affine.observe(tensor({3.0, -0.5}));
  EXPECT_EQ(affine.min_val().item<double>(), -1.0);
  EXPECT_EQ(affine.max_val().item<double>(), 3.0);
  quant::QParams q = affine.calculate_qparams();
  EXPECT_DOUBLE_EQ(q.scales.item<double>(), 4.0 / 255);
  EXPECT_EQ(q.zero_points.item<int64_t>(), 64);  // round(1 / (4 / 255)) = round(63.75)
  quant::MinMaxObserver symmetric(kInt8, true);
  symmetric.observe(tensor({-1.0, 2.0, 3.0}));
  q = symmetric.calculate_qparams();
  EXPECT_DOUBLE_EQ(q.scales.item<double>(), 3.0 / 127.5);
  EXPECT_EQ(q.zero_points.item<int64_t>(), 0);
  quant::MinMaxObserver positive;  // the range always holds 0
  positive.observe(tensor({1.0, 5.0}));
  q = positive.calculate_qparams();
  EXPECT_DOUBLE_EQ(q.scales.item<double>(), 5.0 / 255);
  EXPECT_EQ(q.zero_points.item<int64_t>(), 0);
  quant::MinMaxObserver channels(kInt8, true, quant::QScheme::PerChannelAffine, 1);
  channels.observe(tensor({1.0, -4.0, 0.5, -2.0, 2.0, 0.25}).reshape({2, 3}));
  q = channels.calculate_qparams();
  expect_close(q.scales, {2.0 / 127.5, 4.0 / 127.5, 0.5 / 127.5}, 1e-15, 0, "per-channel scales");
  expect_error([&] { quant::MinMaxObserver().calculate_qparams(); }, {"[MinMaxObserver]", "before any observed"});
  expect_error([&] { quant::MinMaxObserver().observe(tensor({1.0, std::nan("")})); }, {"[MinMaxObserver]", "finite"});
  expect_error([&] { quant::MinMaxObserver observer(kInt32); }, {"int8", "int32"});
  expect_error([&] { channels.observe(ones({2, 4})); }, {"[MinMaxObserver]", "3 channels", "4"});
}

// The histogram's search weighs clipping (the clipped values' squared
// distance) against rounding noise (step^2 / 12 for every value): with a
// million values one far outlier costs less clipped than the 10x coarser
// step covering it, so the range leaves it out and the mean squared error
// beats min/max's; with few values the full range stays.
TEST(Quantization, HistogramObserverClipsWhereItPays) {
  manual_seed(7106);
  const Tensor x = cat({randn({1000000}, kFloat64), full({1}, 100.0, kFloat64)});
  quant::HistogramObserver histogram;
  quant::MinMaxObserver minmax;
  histogram.observe(x.narrow(0, 0, 500000)), histogram.observe(x.narrow(0, 500000, 500001));  // the range grows
  minmax.observe(x);
  const auto [lo, hi] = histogram.chosen_range();
  EXPECT_LT(hi, 10.0);
  EXPECT_GT(hi, 3.0);
  EXPECT_LT(lo, -3.0);
  auto mse = [&](const quant::QParams& q) {
    const Tensor back = quant::quantize_per_tensor(x, q.scales.item<double>(), q.zero_points.item<int64_t>(), kUInt8).dequantize();
    return mean(square(back.to(kFloat64) - x)).item<double>();
  };
  EXPECT_LT(mse(histogram.calculate_qparams()), mse(minmax.calculate_qparams()));
  quant::HistogramObserver few;
  few.observe(x.narrow(0, 999000, 1001));
  EXPECT_GT(few.chosen_range().second, 99.0);  // at most a bin or two off the top
  expect_error([&] { quant::HistogramObserver().calculate_qparams(); }, {"[HistogramObserver]", "before any observed"});
}

}  // namespace
}  // namespace kiln::test
