// Channels-last memory format: the tensor API (is_contiguous, contiguous,
// suggest_memory_format, empty), which outputs follow their input's format
// (pointwise ops, convolution, max pooling, batch norm, and their
// gradients), and that every result equals the row-major computation's
// (itself checked against float64 loops in the op's own tests), on random
// inputs of odd sizes, in float32 and float64; gradcheck in channels-last;
// errors.
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

constexpr MemoryFormat kLast = MemoryFormat::ChannelsLast, kLast3d = MemoryFormat::ChannelsLast3d,
                       kRowMajor = MemoryFormat::Contiguous;

// A random tensor of `shape` stored in format f (its values drawn row-major, so equal across formats).
Tensor random_in(const Shape& shape, MemoryFormat f, DType dt = kFloat32) {
  return randn(shape, kFloat64).to(dt).contiguous(f);
}

TEST(MemoryFormat, StridesAndPredicates) {
  const Tensor x = empty({2, 3, 4, 5}, {}, kLast);
  EXPECT_EQ(x.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(x.is_contiguous(kLast));
  EXPECT_FALSE(x.is_contiguous());
  EXPECT_EQ(x.suggest_memory_format(), kLast);
  EXPECT_EQ(empty({2, 3, 4, 5, 6}, {}, kLast3d).strides(), (Shape{360, 1, 90, 18, 3}));
  EXPECT_EQ(memory_format_strides({2, 3, 4, 5}, kRowMajor), (Shape{60, 20, 5, 1}));
  // One channel, or one pixel: dense in both formats at once; the strides
  // tell which one made it (as PyTorch's suggest_memory_format).
  for (const Shape& s : std::vector<Shape>{{2, 1, 4, 5}, {2, 3, 1, 1}}) {
    const Tensor t = empty(s, {}, kLast);
    EXPECT_TRUE(t.is_contiguous() && t.is_contiguous(kLast)) << shape_str(s);
    EXPECT_EQ(t.suggest_memory_format(), kLast) << shape_str(s);
    EXPECT_EQ(empty(s).suggest_memory_format(), kRowMajor) << shape_str(s);
  }
  const Tensor y = randn({2, 3, 4, 5});
  EXPECT_FALSE(y.is_contiguous(kLast));
  EXPECT_FALSE(randn({3, 4}).is_contiguous(kLast));  // another rank: never channels-last
  EXPECT_EQ(y.transpose(2, 3).suggest_memory_format(), kRowMajor);  // a permutation that is neither
  // Zero sizes are dense in every format.
  EXPECT_TRUE(empty({0, 3, 4, 5}, {}, kLast).is_contiguous(kLast));
  EXPECT_EQ(empty({2, 3, 0, 5}, {}, kLast).numel(), 0);
}

TEST(MemoryFormat, ContiguousConvertsAndKeepsValues) {
  manual_seed(6301);
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = randn({3, 5, 4, 7}, dt);
    const Tensor cl = x.contiguous(kLast);
    EXPECT_TRUE(cl.is_contiguous(kLast));
    expect_close(cl, values(x), 0, 0, "channels_last copy");
    EXPECT_TRUE(cl.contiguous(kLast).is_same(cl));  // already in the format: itself
    const Tensor back = cl.contiguous();
    EXPECT_TRUE(back.is_contiguous());
    expect_close(back, values(x), 0, 0, "back to row-major");
    const Tensor x5 = randn({2, 3, 3, 4, 5}, dt);
    expect_close(x5.contiguous(kLast3d), values(x5), 0, 0, "channels_last_3d copy");
    // From a strided view.
    const Tensor view = randn({3, 5, 8, 7}, dt).slice(2, 0, std::nullopt, 2);
    expect_close(view.contiguous(kLast), values(view), 0, 0, "from a strided view");
  }
  // Differentiable as a copy.
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].contiguous(kLast) * in[0]}; },
      {randn({2, 3, 2, 2}, kFloat64).requires_grad_()}));
}

// PyTorch's preserve_format: clone, to(dtype) and the *_like factories
// keep a channels-last tensor's format (values equal, gradients through
// clone and to as well), while contiguous() makes it row-major; a
// row-major or 3-D tensor's copies stay row-major.
TEST(MemoryFormat, CopiesAndLikeFactoriesPreserveTheFormat) {
  manual_seed(5107);
  for (const auto& [shape, f] : {std::pair{Shape{2, 3, 4, 5}, kLast}, std::pair{Shape{2, 3, 2, 4, 3}, kLast3d}}) {
    const Tensor x = random_in(shape, f);
    const std::string what = shape_str(shape) + " " + memory_format_name(f);
    for (const Tensor& copy : {x.clone(), x.to(kFloat64), empty_like(x), zeros_like(x), ones_like(x), full_like(x, 2.5)})
      EXPECT_TRUE(copy.is_contiguous(f) && copy.strides() == x.strides()) << what;
    expect_close(x.clone(), values(x), 0, 0, what + " clone");
    expect_close(x.to(kFloat64), values(x), 0, 0, what + " to float64");
    expect_close(full_like(x, 2.5), std::vector<double>(static_cast<size_t>(x.numel()), 2.5), 0, 0, what + " full_like");
    expect_close(zeros_like(x), std::vector<double>(static_cast<size_t>(x.numel()), 0.0), 0, 0, what + " zeros_like");
    const Tensor rows = x.contiguous();
    EXPECT_TRUE(rows.is_contiguous() && !rows.is_contiguous(f)) << what;
    expect_close(rows, values(x), 0, 0, what + " contiguous");
    EXPECT_TRUE(x.contiguous(kRowMajor).is_contiguous()) << what;
    // Gradients flow through the preserving copies.
    const Tensor leaf = x.detach().requires_grad_();
    (leaf.clone().to(kFloat64) * 3).sum().backward();
    expect_close(leaf.grad(), std::vector<double>(static_cast<size_t>(x.numel()), 3.0), 0, 0, what + " gradient");
  }
  const Tensor plain = randn({2, 3, 4, 5}), small = randn({3, 4, 5});
  for (const Tensor& copy : {plain.clone(), plain.to(kFloat64), empty_like(plain), zeros_like(plain), small.clone()})
    EXPECT_TRUE(copy.is_contiguous());
}

TEST(MemoryFormat, PointwiseOpsFollowTheirFirstFullSizeInput) {
  manual_seed(6302);
  const Tensor x = random_in({2, 5, 3, 7}, kLast), r = x.contiguous();
  const Tensor bias = randn({5, 1, 1}), other = randn({2, 5, 3, 7});
  struct Case {
    const char* name;
    Tensor got, want;
  };
  const Case cases[] = {
      {"relu", relu(x), relu(r)},
      {"exp", exp(x), exp(r)},
      {"add bias", x + bias, r + bias},
      {"bias + x", bias + x, bias + r},
      {"mul row-major other", x * other, r * other},
      {"where", where(x > 0, x, other), where(r > 0, r, other)},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(c.got.is_contiguous(kLast)) << c.name << " strides " << shape_str(c.got.strides());
    expect_close(c.got, values(c.want), 0, 0, c.name);
  }
  // A row-major first operand keeps row-major.
  EXPECT_TRUE((other * x).is_contiguous()) << shape_str((other * x).strides());
  expect_close(other * x, values(other * r), 0, 0, "row-major first");
  // Special values pass through the channels-last loops unchanged.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor s = tensor<float>({0.0f, -0.0f, float(inf), float(-inf), float(nan), 1e38f, -1e38f, 3.0f}, {1, 2, 2, 2}).contiguous(kLast);
  expect_close(s * 2, values(s.contiguous() * 2), 0, 0, "special values");
}

TEST(MemoryFormat, ConvolutionOutputsAndGradientsFollowTheInput) {
  manual_seed(6303);
  struct Case {
    Shape x, w;
    Shape stride, padding;
    int64_t groups;
  };
  const Case cases[] = {{{2, 3, 9, 7}, {4, 3, 3, 3}, {1}, {1}, 1},
                        {{3, 4, 8, 5}, {6, 2, 3, 2}, {2, 1}, {1, 0}, 2},
                        {{2, 6, 7, 7}, {6, 1, 3, 3}, {1}, {1}, 6},  // depthwise
                        {{2, 5, 6, 3}, {7, 5, 1, 1}, {1}, {0}, 1}};  // 1x1: one GEMM over rows
  for (const Case& c : cases)
    for (DType dt : {kFloat32, kFloat64}) {
      const std::string what = shape_str(c.x) + " * " + shape_str(c.w) + " " + dtype_name(dt);
      const Tensor x = random_in(c.x, kLast, dt).requires_grad_(), r = x.detach().contiguous().requires_grad_();
      const Tensor w = randn(c.w, dt).requires_grad_(), b = randn({c.w[0]}, dt).requires_grad_();
      const Tensor y = nn::conv2d(x, w, b, c.stride, c.padding, {1}, c.groups);
      const Tensor want = nn::conv2d(r, w, b, c.stride, c.padding, {1}, c.groups);
      if (dt == kFloat32) {
        EXPECT_TRUE(y.is_contiguous(kLast)) << what << " strides " << shape_str(y.strides());
      }
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      expect_close(y, values(want), tol, tol, what);
      const Tensor gy = randn(y.sizes(), dt);
      const std::vector<Tensor> g = autograd::grad({(y * gy).sum()}, {x, w, b});
      const std::vector<Tensor> g_want = autograd::grad({(want * gy).sum()}, {r, w, b});
      if (dt == kFloat32) {
        EXPECT_TRUE(g[0].is_contiguous(kLast)) << what << " input gradient";
      }
      for (size_t i = 0; i < 3; ++i) expect_close(g[i], values(g_want[i]), 1e-4, 1e-4, what + " gradient " + std::to_string(i));
    }
  // 3-D convolution in channels_last_3d.
  const Tensor x5 = random_in({2, 3, 5, 4, 6}, kLast3d), w5 = randn({4, 3, 3, 2, 3});
  const Tensor y5 = nn::conv3d(x5, w5, {}, {1}, {1});
  EXPECT_TRUE(y5.is_contiguous(kLast3d));
  expect_close(y5, values(nn::conv3d(x5.contiguous(), w5, {}, {1}, {1})), 1e-5, 1e-5, "conv3d");
  // Gradcheck of the (float64) channels-last path.
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{nn::conv2d(in[0].contiguous(kLast), in[1], {}, {1}, {1})}; },
      {randn({2, 3, 4, 3}, kFloat64).requires_grad_(), randn({2, 3, 3, 3}, kFloat64).requires_grad_()}));
}

TEST(MemoryFormat, MaxPoolKeepsChannelsLastAndPyTorchsIndices) {
  manual_seed(6304);
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = random_in({3, 5, 9, 8}, kLast, dt).requires_grad_(), r = x.detach().contiguous().requires_grad_();
    for (const auto& [kernel, stride, padding, dilation] :
         std::vector<std::tuple<Shape, Shape, Shape, Shape>>{{{2}, {2}, {0}, {1}}, {{3, 2}, {2, 1}, {1, 0}, {1, 2}}}) {
      const std::string what = "max_pool2d " + shape_str(kernel) + " " + dtype_name(dt);
      const auto [y, idx] = nn::max_pool2d_with_indices(x, kernel, stride, padding, dilation);
      const auto [want, want_idx] = nn::max_pool2d_with_indices(r, kernel, stride, padding, dilation);
      EXPECT_TRUE(y.is_contiguous(kLast) && idx.is_contiguous(kLast)) << what;
      expect_close(y, values(want), 0, 0, what);
      expect_close(idx, values(want_idx), 0, 0, what + " indices");
      const Tensor gy = randn(y.sizes(), dt);
      const Tensor gx = autograd::grad({(y * gy).sum()}, {x})[0], gx_want = autograd::grad({(want * gy).sum()}, {r})[0];
      EXPECT_TRUE(gx.is_contiguous(kLast)) << what << " gradient";
      expect_close(gx, values(gx_want), 1e-6, 1e-6, what + " gradient");
    }
  }
  // NaN wins, as in the row-major kernel.
  Tensor x = randn({1, 3, 4, 4});
  x.narrow(1, 1, 1).narrow(2, 1, 1).narrow(3, 2, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  expect_close(nn::max_pool2d(x.contiguous(kLast), {2}), values(nn::max_pool2d(x, {2})), 0, 0, "NaN");
  const Tensor x5 = random_in({2, 3, 4, 5, 6}, kLast3d);
  expect_close(nn::max_pool3d(x5, {2}), values(nn::max_pool3d(x5.contiguous(), {2})), 0, 0, "max_pool3d");
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{nn::max_pool2d(in[0].contiguous(kLast), {2})}; },
      {randn({2, 3, 4, 4}, kFloat64).requires_grad_()}));
}

TEST(MemoryFormat, BatchNormRowsPathMatchesThePlanes) {
  manual_seed(6305);
  for (DType dt : {kFloat32, kFloat64})
    for (const Shape& shape : std::vector<Shape>{{4, 5, 3, 7}, {2, 3, 2, 3, 4}, {1, 17, 5, 5}})
      for (bool affine : {true, false}) {
        const MemoryFormat f = shape.size() == 4 ? kLast : kLast3d;
        const std::string what = shape_str(shape) + " " + dtype_name(dt) + (affine ? " affine" : "");
        const Tensor x = (random_in(shape, f, dt) * 3 + 1).detach().requires_grad_(),
                     r = x.detach().contiguous().requires_grad_();
        const Tensor w = affine ? randn({shape[1]}, dt).requires_grad_() : Tensor(),
                     b = affine ? randn({shape[1]}, dt).requires_grad_() : Tensor();
        Tensor mean = zeros({shape[1]}, dt), var = ones({shape[1]}, dt), mean_r = mean.clone(), var_r = var.clone();
        const Tensor y = nn::batch_norm(x, mean, var, w, b, true), want = nn::batch_norm(r, mean_r, var_r, w, b, true);
        EXPECT_TRUE(y.is_contiguous(f)) << what;
        const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
        expect_close(y, values(want), tol, tol, what);
        expect_close(mean, values(mean_r), tol, tol, what + " running mean");
        expect_close(var, values(var_r), tol, tol, what + " running var");
        const Tensor gy = randn(shape, dt);
        std::vector<Tensor> in = {x}, in_r = {r};
        if (affine) in.push_back(w), in.push_back(b), in_r.push_back(w), in_r.push_back(b);
        const std::vector<Tensor> g = autograd::grad({(y * gy).sum()}, in), g_want = autograd::grad({(want * gy).sum()}, in_r);
        EXPECT_TRUE(g[0].is_contiguous(f)) << what << " input gradient";
        for (size_t i = 0; i < g.size(); ++i)
          expect_close(g[i], values(g_want[i]), 10 * tol, 10 * tol, what + " gradient " + std::to_string(i));
      }
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{nn::batch_norm(in[0].contiguous(kLast), {}, {}, in[1], in[2], true)};
      },
      {randn({3, 2, 2, 3}, kFloat64).requires_grad_(), randn({2}, kFloat64).requires_grad_(),
       randn({2}, kFloat64).requires_grad_()}));
}

// A CNN's loss and gradients on a channels-last batch, with the model's
// weights in channels_last, equal the row-major run's.
TEST(MemoryFormat, SmallCnnTrainsTheSameInChannelsLast) {
  manual_seed(6306);
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Conv2d>(3, 8, Shape{3}, nn::ConvOptions{.padding = {1}}));
  net.push_back(std::make_shared<nn::BatchNorm2d>(8));
  net.push_back(std::make_shared<nn::ReLU>());
  net.push_back(std::make_shared<nn::MaxPool2d>(Shape{2}));
  net.push_back(std::make_shared<nn::Conv2d>(8, 4, Shape{1}));
  net.push_back(std::make_shared<nn::Flatten>());
  net.push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 5));
  const Tensor x = randn({6, 3, 8, 8});
  const Tensor target = randint(0, 5, {6});
  std::vector<std::vector<double>> grads[2];
  double losses[2];
  for (int run = 0; run < 2; ++run) {
    net.zero_grad();
    if (run == 1) {  // model.to(memory_format=channels_last): 4-D parameters only, values kept
      net.to(kLast);
      for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.dim() != 4 || p.is_contiguous(kLast));
    }
    const Tensor loss = nn::cross_entropy(net.forward(run ? x.contiguous(kLast) : x), target);
    loss.backward();
    losses[run] = loss.item<double>();
    for (const Tensor& p : net.parameters()) grads[run].push_back(values(p.grad()));
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5);
  for (size_t i = 0; i < grads[0].size(); ++i)
    for (size_t j = 0; j < grads[0][i].size(); ++j)
      ASSERT_NEAR(grads[1][i][j], grads[0][i][j], 1e-4 + 1e-4 * std::fabs(grads[0][i][j])) << "parameter " << i;
}

// A channels-last weight makes the convolution channels-last even on a
// one-channel input (both formats at once), as PyTorch's.
TEST(MemoryFormat, ChannelsLastWeightSetsTheConvolutionsFormat) {
  manual_seed(6307);
  const Tensor x = randn({4, 1, 9, 9}), w = randn({6, 1, 3, 3}), b = randn({6});
  Tensor w_last = empty(w.sizes(), {}, kLast);  // as Module::to(channels_last) stores it
  w_last.copy_(w);
  EXPECT_EQ(w_last.suggest_memory_format(), kLast);
  EXPECT_EQ(w.contiguous(kLast).suggest_memory_format(), kRowMajor);  // dense in both already: itself
  const Tensor y = nn::conv2d(x, w_last, b, {1}, {1});
  EXPECT_TRUE(y.is_contiguous(kLast)) << shape_str(y.strides());
  expect_close(y, values(nn::conv2d(x, w, b, {1}, {1})), 1e-5, 1e-5, "channels-last weight");
  const Tensor xg = x.clone().requires_grad_(), wg = w_last.detach().requires_grad_();
  const Tensor gy = randn(y.sizes());
  const std::vector<Tensor> g = autograd::grad({(nn::conv2d(xg, wg, b, {1}, {1}) * gy).sum()}, {xg, wg});
  const Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
  const std::vector<Tensor> g_want = autograd::grad({(nn::conv2d(xr, wr, b, {1}, {1}) * gy).sum()}, {xr, wr});
  for (size_t i = 0; i < 2; ++i) expect_close(g[i], values(g_want[i]), 1e-4, 1e-4, "gradient " + std::to_string(i));
}

TEST(MemoryFormat, Errors) {
  expect_error([] { randn({2, 3, 4}).contiguous(kLast); }, {"contiguous", "rank 4", "channels_last", "rank 3"});
  expect_error([] { randn({2, 3, 4, 5}).contiguous(kLast3d); }, {"contiguous", "rank 5", "channels_last_3d"});
  expect_error([] { randn({2, 3, 4, 5}).contiguous(MemoryFormat::Preserve); }, {"contiguous", "preserve_format"});
  expect_error([] { empty({2, 3}, {}, kLast); }, {"empty", "rank 4", "rank 2"});
}

}  // namespace
}  // namespace kiln::test
