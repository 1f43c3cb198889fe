// Pooling against float64 loops over every output window: max (with the
// flat index of the maximum), average (count_include_pad, ceil_mode,
// divisor_override), adaptive average and max; every layout; gradcheck;
// PyTorch's documented sizes; errors.
#include <cmath>
#include <limits>
#include <random>

#include "test_util.h"

namespace kiln::test {
namespace {

struct Pool {
  Shape kernel, stride, padding, dilation;
  bool ceil;
};

int64_t pooled_size(int64_t L, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil) {
  const int64_t span = dil * (k - 1) + 1, room = L + 2 * p - span;
  int64_t o = (ceil ? (room + s - 1) / s : room / s) + 1;
  if (ceil && (o - 1) * s >= L + p) --o;
  return o;
}

// 2-D reference over (N, C, H, W): max value and flat index, or average.
void reference_pool2d(const Tensor& x, const Pool& p, bool average, bool include_pad, std::vector<double>& vals,
                      std::vector<double>& idx, Shape& out) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = pooled_size(H, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0], p.ceil);
  const int64_t OW = pooled_size(W, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1], p.ceil);
  out = {N, C, OH, OW};
  const std::vector<double> v = values(x.contiguous());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t at = -1, count = 0;
          for (int64_t kh = 0; kh < p.kernel[0]; ++kh)
            for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
              const int64_t h = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
              const int64_t w = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
              const bool inside = h >= 0 && h < H && w >= 0 && w < W;
              // Average's divisor: inside pixels, plus regular padding when included (never past it).
              if (inside || (include_pad && h < H + p.padding[0] && w < W + p.padding[1])) ++count;
              if (!inside) continue;
              const double val = v[static_cast<size_t>(((n * C + c) * H + h) * W + w)];
              sum += val;
              if (val > best) best = val, at = h * W + w;
            }
          vals.push_back(average ? sum / static_cast<double>(count) : best);
          idx.push_back(static_cast<double>(at));
        }
}

TEST(Pooling, MaxAndAverageMatchFloat64Windows) {
  manual_seed(5901);
  const std::vector<Pool> pools = {{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
                                   {{3, 2}, {2, 1}, {1, 0}, {1, 1}, true},  {{2, 3}, {3, 2}, {0, 1}, {2, 1}, true},
                                   {{3, 3}, {1, 1}, {1, 1}, {1, 1}, false}};
  for (const Pool& p : pools)
    for (DType dt : {kFloat64, kFloat32})
      for (Layout layout : all_layouts()) {
        const Tensor x = make_input({2, 3, 9, 10}, layout, dt);
        std::vector<double> vals, idx, avg, unused;
        Shape out;
        reference_pool2d(x, p, false, false, vals, idx, out);
        const auto [y, i] = nn::max_pool2d_with_indices(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil);
        const std::string what = "kernel " + shape_str(p.kernel) + " stride " + shape_str(p.stride) + " padding " +
                                 shape_str(p.padding) + " dilation " + shape_str(p.dilation) + (p.ceil ? " ceil " : " ") +
                                 layout_name(layout);
        ASSERT_EQ(y.sizes(), out) << what;
        expect_close(y, vals, 0, 0, "max " + what);
        expect_close(i, idx, 0, 0, "indices " + what);
        if (p.dilation != Shape{1, 1}) continue;
        for (bool include_pad : {true, false}) {
          avg.clear(), unused.clear();
          reference_pool2d(x, p, true, include_pad, avg, unused, out);
          const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
          expect_close(nn::avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil, include_pad), avg, tol, tol,
                       std::string("avg ") + (include_pad ? "include_pad " : "") + what);
        }
      }
  // divisor_override, 1-D and 3-D, default stride = kernel, unbatched.
  const Tensor x = arange(0.0, 8.0).reshape({1, 1, 8});
  expect_close(nn::avg_pool1d(x, {2}), {0.5, 2.5, 4.5, 6.5}, 0, 0, "avg_pool1d");
  expect_close(nn::max_pool1d(x, {3}, {2}), {2, 4, 6}, 0, 0, "max_pool1d");
  expect_close(nn::avg_pool2d(ones({1, 4, 4}), {2}, {}, {0}, false, true, 3), std::vector<double>(4, 4.0 / 3), 1e-6, 1e-6,
               "divisor_override, unbatched");
  EXPECT_EQ(nn::max_pool3d(randn({1, 2, 4, 5, 6}), {2}).sizes(), (Shape{1, 2, 2, 2, 3}));
  // PyTorch's NaN rule: a NaN in a window is its maximum.
  Tensor nan_input = randn({1, 1, 4, 4});
  nan_input.select(2, 1).select(2, 1).fill_(NAN);
  EXPECT_TRUE(std::isnan(nn::max_pool2d(nan_input, {2}).select(2, 0).select(2, 0).item<double>()));
}

// float32 2x2 windows at stride 2 take a SIMD kernel (pool_simd.cpp); the
// float64 search is its reference: the same values and indices on rows of
// every length around the vector widths (4, 8, 16 and its 64-output
// blocks), odd sizes (a last row or column outside every window), both
// memory formats, and values full of ties, signed zeros, infinities and NaNs.
TEST(Pooling, MaxPool2x2MatchesTheGeneralSearch) {
  std::mt19937 rng(5904);
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.0f, INFINITY, -INFINITY, NAN, 3e38f, -3e38f};
  for (const auto& [H, W] : std::vector<std::array<int64_t, 2>>{
           {2, 2}, {3, 5}, {4, 8}, {5, 15}, {6, 16}, {7, 17}, {4, 28}, {28, 28}, {14, 14}, {3, 33}, {2, 64},
           {3, 129}, {2, 150}, {3, 2}}) {
    for (bool special : {false, true}) {
      std::vector<float> v(static_cast<size_t>(2 * 3 * H * W));
      std::normal_distribution<float> normal;
      std::uniform_int_distribution<size_t> pick(0, std::size(specials) - 1);
      for (float& e : v) e = special ? specials[pick(rng)] : normal(rng);
      const Tensor x = tensor(v, {2, 3, H, W});
      const std::string what = "2x2 max_pool of " + shape_str(x.sizes()) + (special ? " (special values)" : "");
      const auto [y, i] = nn::max_pool2d_with_indices(x, {2}, {2});
      const auto [want, want_i] = nn::max_pool2d_with_indices(x.to(kFloat64), {2}, {2});
      expect_close(y, values(want), 0, 0, what);
      expect_close(i, values(want_i), 0, 0, "indices of " + what);
      // A strided input (the kernel reads a contiguous copy).
      const Tensor xt = x.transpose(2, 3);
      const auto [yt, it] = nn::max_pool2d_with_indices(xt, {2}, {2});
      const auto [want_t, want_it] = nn::max_pool2d_with_indices(xt.to(kFloat64), {2}, {2});
      expect_close(yt, values(want_t), 0, 0, "transposed " + what);
      expect_close(it, values(want_it), 0, 0, "indices of transposed " + what);
    }
  }
  // Channels-last: vectors of channels (C around the vector widths and the 64-channel blocks).
  for (const int64_t C : {1, 3, 4, 8, 17, 40, 64, 70}) {
    std::vector<float> v(static_cast<size_t>(2 * C * 7 * 9));
    std::uniform_int_distribution<size_t> pick(0, std::size(specials) - 1);
    for (float& e : v) e = specials[pick(rng)];
    const Tensor x = tensor(v, {2, C, 7, 9}).contiguous(MemoryFormat::ChannelsLast);
    const std::string what = "channels-last 2x2 max_pool of " + shape_str(x.sizes());
    const auto [y, i] = nn::max_pool2d_with_indices(x, {2}, {2});
    const auto [want, want_i] = nn::max_pool2d_with_indices(x.to(kFloat64), {2}, {2});
    ASSERT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << what;
    expect_close(y, values(want), 0, 0, what);
    expect_close(i, values(want_i), 0, 0, "indices of " + what);
  }
}

TEST(Pooling, AdaptiveBinsMatchFloat64) {
  manual_seed(5902);
  for (const auto& [H, W, OH, OW] : std::vector<std::array<int64_t, 4>>{{7, 9, 3, 4}, {5, 5, 5, 5}, {6, 4, 1, 1}, {3, 8, 5, 3}}) {
    const Tensor x = randn({2, 3, H, W}, kFloat64);
    const std::vector<double> v = values(x);
    std::vector<double> avg, mx, idx;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < OH; ++i)
          for (int64_t j = 0; j < OW; ++j) {
            const int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH, w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
            double s = 0, best = -std::numeric_limits<double>::infinity();
            int64_t at = 0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) {
                const double val = v[static_cast<size_t>(((n * 3 + c) * H + h) * W + w)];
                s += val;
                if (val > best) best = val, at = h * W + w;
              }
            avg.push_back(s / static_cast<double>((h1 - h0) * (w1 - w0)));
            mx.push_back(best), idx.push_back(static_cast<double>(at));
          }
    const std::string what = std::to_string(H) + "x" + std::to_string(W) + " -> " + std::to_string(OH) + "x" + std::to_string(OW);
    expect_close(nn::adaptive_avg_pool2d(x, {OH, OW}), avg, 1e-12, 1e-12, "adaptive avg " + what);
    const auto [m, i] = nn::adaptive_max_pool2d(x, {OH, OW});
    expect_close(m, mx, 0, 0, "adaptive max " + what);
    expect_close(i, idx, 0, 0, "adaptive max indices " + what);
  }
  EXPECT_EQ(nn::adaptive_avg_pool1d(randn({2, 3, 10}), {4}).sizes(), (Shape{2, 3, 4}));
}

TEST(Pooling, Gradients) {
  manual_seed(5903);
  auto check = [](const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
    return autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {x});
  };
  const Tensor x = randn({1, 2, 5, 6}, kFloat64).requires_grad_();
  EXPECT_TRUE(check(x, [](const Tensor& t) { return nn::max_pool2d(t, {3, 2}, {2, 2}, {1, 1}, {1, 1}, true); }));
  EXPECT_TRUE(check(x, [](const Tensor& t) { return nn::avg_pool2d(t, {3}, {2}, {1}, true, false); }));
  EXPECT_TRUE(check(x, [](const Tensor& t) { return nn::adaptive_avg_pool2d(t, {2, 4}); }));
  EXPECT_TRUE(check(x, [](const Tensor& t) { return std::get<0>(nn::adaptive_max_pool2d(t, {3, 2})); }));
  // The max_pool kernel: 1-D and 3-D, and twice differentiable (its
  // backward's derivative gathers at the same indices).
  EXPECT_TRUE(check(randn({2, 3, 9}, kFloat64).requires_grad_(), [](const Tensor& t) { return nn::max_pool1d(t, {3}, {2}, {1}); }));
  EXPECT_TRUE(check(randn({1, 2, 4, 5, 3}, kFloat64).requires_grad_(),
                    [](const Tensor& t) { return nn::max_pool3d(t, {2, 3, 2}, {1, 2, 1}, {1, 1, 0}); }));
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{nn::max_pool2d(in[0], {2, 3}, {1, 2}, {1, 1}) * in[0].sum()}; },
      {randn({1, 2, 4, 5}, kFloat64).requires_grad_()}));
  // float32 gradients equal float64's (the indices pick the same elements).
  const Tensor x64 = randn({2, 3, 7, 8}, kFloat64), gy = randn({2, 3, 4, 4}, kFloat64);
  std::vector<Tensor> grads;
  for (DType dt : {kFloat64, kFloat32}) {
    const Tensor xi = x64.to(dt).detach().requires_grad_();
    (nn::max_pool2d(xi, {3}, {2}, {1}) * gy.to(dt)).sum().backward();
    grads.push_back(xi.grad());
  }
  expect_close(grads[1], values(grads[0]), 1e-6, 1e-6, "float32 max_pool gradient");
}

TEST(Pooling, Errors) {
  const Tensor x = randn({1, 2, 4, 4});
  expect_error([&] { nn::max_pool2d(x, {3}, {1}, {2}); }, {"[max_pool2d]", "at most half"});
  expect_error([&] { nn::max_pool2d(x, {5}); }, {"[max_pool2d]", "too small", "[4, 4]"});
  expect_error([&] { nn::avg_pool2d(x, {0}); }, {"[avg_pool2d]", "positive kernel_size"});
  expect_error([&] { nn::avg_pool2d(x, {2}, {}, {0}, false, true, 0); }, {"[avg_pool2d]", "divisor_override"});
  expect_error([&] { nn::max_pool2d(randn({4}), {2}); }, {"[max_pool2d]", "4-D (batched) or 3-D"});
  expect_error([&] { nn::adaptive_avg_pool2d(x, {0, 2}); }, {"[adaptive_avg_pool2d]", "positive output_size"});
  expect_error([&] { nn::max_pool2d(x, {2, 2, 2}); }, {"[max_pool2d]", "kernel_size of 1 or 2 values"});
}

}  // namespace
}  // namespace kiln::test
