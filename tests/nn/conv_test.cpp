// Convolutions against a float64 reference written here as plain loops
// over every output, channel and kernel tap (any number of spatial dims):
// strides, paddings (numbers, 'same', 'valid'), dilations, groups
// (depthwise included), odd sizes, every input layout, unbatched; the
// transposed convolutions against their definition (each input pixel
// scatters the kernel into the output); gradcheck; errors.
#include <functional>
#include <limits>

#include "kiln/call_op.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Flat index of a multi-index in a contiguous shape.
int64_t flat_index(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + idx[i];
  return f;
}

// Calls fn(index) for every index of shape.
void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& fn) {
  const int64_t n = shape_numel(shape);
  for (int64_t f = 0; f < n; ++f) fn(unravel(f, shape));
}

struct ConvCase {
  Shape input, weight, stride, padding, dilation;
  int64_t groups;
};

// out[n, o, p...] = b[o] + sum over c in o's group, k...: x[n, c, p s - pad + k dil] w[o, c', k...]
std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c, Shape& out) {
  const int64_t d = x.dim() - 2, N = x.size(0), C = x.size(1), O = w.size(0), G = c.groups, Cg = C / G, Og = O / G;
  const std::vector<double> xv = values(x.contiguous()), wv = values(w.contiguous()), bv = b.defined() ? values(b) : std::vector<double>{};
  out = {N, O};
  Shape kernel(w.sizes().begin() + 2, w.sizes().end());
  for (int64_t i = 0; i < d; ++i) {
    const size_t k = static_cast<size_t>(i);
    out.push_back((x.size(2 + i) + 2 * c.padding[k] - c.dilation[k] * (kernel[k] - 1) - 1) / c.stride[k] + 1);
  }
  std::vector<double> r(static_cast<size_t>(shape_numel(out)));
  for_each_index(out, [&](const std::vector<int64_t>& o) {
    const int64_t g = o[1] / Og;
    double s = bv.empty() ? 0 : bv[static_cast<size_t>(o[1])];
    for (int64_t ci = 0; ci < Cg; ++ci)
      for_each_index(kernel, [&](const std::vector<int64_t>& k) {
        std::vector<int64_t> xi = {o[0], g * Cg + ci};
        for (int64_t i = 0; i < d; ++i) {
          const size_t u = static_cast<size_t>(i);
          const int64_t p = o[u + 2] * c.stride[u] - c.padding[u] + k[u] * c.dilation[u];
          if (p < 0 || p >= x.size(2 + i)) return;
          xi.push_back(p);
        }
        std::vector<int64_t> wi = {o[1], ci};
        wi.insert(wi.end(), k.begin(), k.end());
        s += xv[static_cast<size_t>(flat_index(x.sizes(), xi))] * wv[static_cast<size_t>(flat_index(w.sizes(), wi))];
      });
    r[static_cast<size_t>(flat_index(out, o))] = s;
  });
  return r;
}

Tensor conv_nd(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c) {
  switch (x.dim()) {
    case 3: return nn::conv1d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    case 4: return nn::conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    default: return nn::conv3d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
  }
}

const std::vector<ConvCase> kCases = {
    {{2, 3, 11}, {4, 3, 3}, {1}, {0}, {1}, 1},
    {{2, 4, 13}, {6, 2, 4}, {3}, {2}, {2}, 2},
    {{2, 3, 9, 8}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {{1, 4, 10, 7}, {4, 1, 3, 3}, {2, 1}, {1, 2}, {1, 2}, 4},  // depthwise
    {{2, 6, 7, 9}, {4, 3, 2, 3}, {2, 3}, {0, 1}, {2, 1}, 2},
    {{3, 8, 5, 5}, {16, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},  // 1x1 projection (one GEMM per image)
    {{2, 6, 4, 3}, {9, 2, 1, 1}, {1, 1}, {0, 0}, {3, 2}, 3},   // 1x1, grouped, dilation irrelevant
    {{2, 4, 7}, {4, 4, 1}, {2}, {0}, {1}, 1},                   // 1x1 strided: the im2col path
    {{1, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, 1},
};

TEST(Conv, EveryCaseAndLayoutMatchesFloat64Loops) {
  manual_seed(5801);
  for (const ConvCase& c : kCases)
    for (DType dt : {kFloat64, kFloat32})
      for (Layout layout : all_layouts()) {
        const Tensor x = make_input(c.input, layout, dt), w = make_input(c.weight, Layout::Contiguous, dt);
        const Tensor b = randn({c.weight[0]}, kFloat64).to(dt);
        Shape out;
        const std::vector<double> want = reference_conv(x, w, b, c, out);
        const Tensor y = conv_nd(x, w, b, c);
        const std::string what = shape_str(c.input) + " * " + shape_str(c.weight) + " " + layout_name(layout);
        ASSERT_EQ(y.sizes(), out) << what;
        const double tol = dt == kFloat64 ? 1e-12 : 1e-4;
        expect_close(y, want, tol, tol, what);
        expect_close(conv_nd(x, w.transpose(0, 1).contiguous().transpose(0, 1), {}, c),
                     reference_conv(x, w, {}, c, out), tol, tol, what + " strided weight, no bias");
      }
  // Unbatched input: the batch of one without its dim.
  const Tensor x = randn({3, 6, 6}), w = randn({2, 3, 3, 3});
  expect_close(nn::conv2d(x, w), values(nn::conv2d(x.unsqueeze(0), w).squeeze(0)), 0, 0, "unbatched");
  // Empty batch.
  EXPECT_EQ(nn::conv2d(randn({0, 3, 6, 6}), w).sizes(), (Shape{0, 2, 4, 4}));
}

TEST(Conv, SameAndValidPadding) {
  manual_seed(5802);
  for (int64_t k : {3, 4}) {
    const Tensor x = randn({2, 2, 9, 8}, kFloat64), w = randn({3, 2, k, k}, kFloat64);
    const Tensor same = nn::conv2d(x, w, {}, {1}, nn::Padding::Same, {2});
    EXPECT_EQ(same.sizes(), (Shape{2, 3, 9, 8}));
    // 'same' pads dilation (k - 1) in total, the odd one after: as explicit padding on a padded input.
    const int64_t total = 2 * (k - 1), before = total / 2, after = total - before;
    const Tensor explicit_pad = nn::conv2d(pad(x, {before, after, before, after}), w, {}, {1}, {0}, {2});
    expect_close(same, values(explicit_pad), 1e-12, 1e-12, "same, k=" + std::to_string(k));
    expect_close(nn::conv2d(x, w, {}, {1}, nn::Padding::Valid), values(nn::conv2d(x, w)), 0, 0, "valid");
  }
  // A 1-D moving sum with 'same': the edges see one zero of padding.
  expect_close(nn::conv1d(arange(1.0, 6.0).reshape({1, 1, 5}), ones({1, 1, 3}), {}, {1}, nn::Padding::Same),
               {3, 6, 9, 12, 9}, 0, 0, "moving sum");
}

// The transposed convolution's definition: every input pixel adds
// x * w[c, o', k...] to output position p s - pad + k dil.
std::vector<double> reference_conv_transpose(const Tensor& x, const Tensor& w, const Shape& stride, const Shape& padding,
                                             const Shape& output_padding, const Shape& dilation, int64_t G, Shape& out) {
  const int64_t d = x.dim() - 2, N = x.size(0), C = x.size(1), Og = w.size(1), Cg = C / G;
  const std::vector<double> xv = values(x.contiguous()), wv = values(w.contiguous());
  out = {N, Og * G};
  Shape kernel(w.sizes().begin() + 2, w.sizes().end());
  for (int64_t i = 0; i < d; ++i) {
    const size_t u = static_cast<size_t>(i);
    out.push_back((x.size(2 + i) - 1) * stride[u] - 2 * padding[u] + dilation[u] * (kernel[u] - 1) + output_padding[u] + 1);
  }
  std::vector<double> r(static_cast<size_t>(shape_numel(out)));
  for_each_index(x.sizes(), [&](const std::vector<int64_t>& xi) {
    const int64_t g = xi[1] / Cg;
    for (int64_t oc = 0; oc < Og; ++oc)
      for_each_index(kernel, [&](const std::vector<int64_t>& k) {
        std::vector<int64_t> oi = {xi[0], g * Og + oc};
        for (int64_t i = 0; i < d; ++i) {
          const size_t u = static_cast<size_t>(i);
          const int64_t p = xi[u + 2] * stride[u] - padding[u] + k[u] * dilation[u];
          if (p < 0 || p >= out[u + 2]) return;
          oi.push_back(p);
        }
        std::vector<int64_t> wi = {xi[1], oc};
        wi.insert(wi.end(), k.begin(), k.end());
        r[static_cast<size_t>(flat_index(out, oi))] +=
            xv[static_cast<size_t>(flat_index(x.sizes(), xi))] * wv[static_cast<size_t>(flat_index(w.sizes(), wi))];
      });
  });
  return r;
}

TEST(Conv, TransposedMatchesItsDefinition) {
  manual_seed(5803);
  struct Case {
    Shape input, weight, stride, padding, output_padding, dilation;
    int64_t groups;
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 7}, {3, 2, 3}, {2}, {1}, {1}, {1}, 1},
                                         {{2, 4, 5, 6}, {4, 3, 3, 2}, {2, 3}, {1, 0}, {1, 2}, {1, 1}, 2},
                                         {{1, 2, 4, 4}, {2, 3, 3, 3}, {1, 1}, {0, 2}, {0, 0}, {2, 1}, 1},
                                         {{1, 2, 3, 4, 3}, {2, 2, 2, 2, 3}, {2, 1, 2}, {0, 1, 1}, {1, 0, 0}, {1, 1, 1}, 1}}) {
    const Tensor x = randn(c.input, kFloat64), w = randn(c.weight, kFloat64), b = randn({c.weight[1] * c.groups}, kFloat64);
    Shape out;
    std::vector<double> want =
        reference_conv_transpose(x, w, c.stride, c.padding, c.output_padding, c.dilation, c.groups, out);
    const int64_t per_channel = shape_numel(Shape(out.begin() + 2, out.end()));
    for (size_t i = 0; i < want.size(); ++i)
      want[i] += values(b)[static_cast<size_t>((static_cast<int64_t>(i) / per_channel) % out[1])];
    const Tensor y = c.input.size() == 3   ? nn::conv_transpose1d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
                     : c.input.size() == 4 ? nn::conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
                                           : nn::conv_transpose3d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    ASSERT_EQ(y.sizes(), out) << shape_str(c.input);
    expect_close(y, want, 1e-12, 1e-12, "conv_transpose " + shape_str(c.input) + " * " + shape_str(c.weight));
  }
}

TEST(Conv, Gradients) {
  manual_seed(5804);
  auto check3 = [](const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f, const Tensor& x,
                   const Tensor& w, const Tensor& b) {
    return autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0], in[1], in[2])}; }, {x, w, b});
  };
  const Tensor x = randn({2, 4, 5, 6}, kFloat64).requires_grad_(), w = randn({6, 2, 3, 2}, kFloat64).requires_grad_();
  const Tensor b = randn({6}, kFloat64).requires_grad_();
  EXPECT_TRUE(check3([](const Tensor& a, const Tensor& k, const Tensor& c) { return nn::conv2d(a, k, c, {2, 1}, {1, 0}, {1, 2}, 2); }, x, w, b));
  EXPECT_TRUE(check3([](const Tensor& a, const Tensor& k, const Tensor& c) { return nn::conv1d(a, k, c, {2}, {1}, {1}, 1); },
                     randn({2, 3, 7}, kFloat64).requires_grad_(), randn({2, 3, 3}, kFloat64).requires_grad_(),
                     randn({2}, kFloat64).requires_grad_()));
  EXPECT_TRUE(check3([](const Tensor& a, const Tensor& k, const Tensor& c) {
    return nn::conv_transpose2d(a, k, c, {2, 2}, {1, 0}, {1, 0}, 2);
  }, randn({1, 4, 3, 3}, kFloat64).requires_grad_(), randn({4, 1, 3, 2}, kFloat64).requires_grad_(), randn({2}, kFloat64).requires_grad_()));
  // 1x1 (its own GEMM path) with groups, and depthwise.
  EXPECT_TRUE(check3([](const Tensor& a, const Tensor& k, const Tensor& c) { return nn::conv2d(a, k, c, {1}, {0}, {1}, 2); },
                     randn({2, 4, 3, 2}, kFloat64).requires_grad_(), randn({6, 2, 1, 1}, kFloat64).requires_grad_(),
                     randn({6}, kFloat64).requires_grad_()));
  EXPECT_TRUE(check3([](const Tensor& a, const Tensor& k, const Tensor& c) { return nn::conv2d(a, k, c, {2}, {1}, {1}, 3); },
                     randn({1, 3, 5, 4}, kFloat64).requires_grad_(), randn({3, 1, 3, 3}, kFloat64).requires_grad_(),
                     randn({3}, kFloat64).requires_grad_()));
  EXPECT_TRUE(check3([](const Tensor& a, const Tensor& k, const Tensor& c) { return nn::conv3d(a, k, c, {1}, {1}); },
                     randn({1, 2, 3, 3, 3}, kFloat64).requires_grad_(), randn({2, 2, 2, 2, 2}, kFloat64).requires_grad_(),
                     randn({2}, kFloat64).requires_grad_()));
}

// The float32 kernel (oneDNN) against the float64 reference path (the
// im2col composite, itself checked above): forward and the three
// gradients on every case and input layout, including an input gradient
// that is not asked for.
TEST(Conv, Float32KernelGradientsMatchTheFloat64Path) {
  manual_seed(5805);
  for (const ConvCase& c : kCases)
    for (Layout layout : all_layouts()) {
      const Tensor x64 = make_input(c.input, layout, kFloat64), w64 = randn(c.weight, kFloat64);
      const Tensor b64 = randn({c.weight[0]}, kFloat64);
      const std::string what = shape_str(c.input) + " * " + shape_str(c.weight) + " " + layout_name(layout);
      Shape out = conv_nd(x64, w64, b64, c).sizes();
      const Tensor gy = randn(out, kFloat64);
      for (bool input_grad : {true, false}) {
        std::vector<Tensor> grads[2];
        for (DType dt : {kFloat64, kFloat32}) {
          const Tensor x = x64.to(dt).detach().requires_grad_(input_grad), w = w64.to(dt).detach().requires_grad_();
          const Tensor b = b64.to(dt).detach().requires_grad_();
          (conv_nd(x, w, b, c) * gy.to(dt)).sum().backward();
          grads[dt == kFloat32] = {input_grad ? x.grad() : Tensor(), w.grad(), b.grad()};
        }
        for (size_t i = input_grad ? 0 : 1; i < 3; ++i)
          expect_close(grads[1][i], values(grads[0][i]), 2e-4, 2e-4, what + " gradient " + std::to_string(i));
      }
    }
}

// A thread's images run in slices small enough for its cache (the kernel's
// KILN_CONV_SLICE_KB budget, here down to one image and to uneven slices):
// the same outputs, and the weight and bias gradients summed over slices.
TEST(Conv, Float32KernelSlicesOfTheBatch) {
  manual_seed(5807);
  const Tensor x64 = randn({7, 3, 9, 8}, kFloat64), w64 = randn({5, 3, 3, 3}, kFloat64), b64 = randn({5}, kFloat64);
  const Tensor gy = randn({7, 5, 9, 8}, kFloat64);
  std::vector<Tensor> want;
  {
    const Tensor x = x64.detach().requires_grad_(), w = w64.detach().requires_grad_(), b = b64.detach().requires_grad_();
    const Tensor y = nn::conv2d(x, w, b, {1}, {1});
    (y * gy).sum().backward();
    want = {y.detach(), x.grad(), w.grad(), b.grad()};
  }
  for (const char* budget : {"1", "5"}) {  // one image (2.25 KB: 3 * 72 + 5 * 72 floats), and two
    const ScopedEnv slices("KILN_CONV_SLICE_KB", budget);
    const Tensor x = x64.to(kFloat32).detach().requires_grad_(), w = w64.to(kFloat32).detach().requires_grad_();
    const Tensor b = b64.to(kFloat32).detach().requires_grad_();
    const Tensor y = nn::conv2d(x, w, b, {1}, {1});
    (y * gy.to(kFloat32)).sum().backward();
    const Tensor got[] = {y, x.grad(), w.grad(), b.grad()};
    for (size_t i = 0; i < 4; ++i)
      expect_close(got[i], values(want[i]), 2e-4, 2e-4, std::string("slice budget ") + budget + " KB, output " + std::to_string(i));
  }
}

// Special values through the kernel: +-0, inf and NaN in the input give
// the reference path's infinities and NaNs where it has them.
TEST(Conv, Float32KernelSpecialValues) {
  manual_seed(5806);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const ConvCase& c : kCases) {
    Tensor x = randn(c.input, kFloat64);
    const Tensor flat = x.view({-1});
    const double special[] = {0.0, -0.0, inf, -inf, nan};
    for (int64_t i = 0; i < flat.numel(); i += 11) flat.narrow(0, i, 1).fill_(special[(i / 11) % 5]);
    const Tensor w = randn(c.weight, kFloat64), b = randn({c.weight[0]}, kFloat64);
    expect_close(conv_nd(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), c), values(conv_nd(x, w, b, c)), 1e-4, 1e-4,
                 shape_str(c.input) + " with special values");
  }
}

TEST(Conv, Errors) {
  const Tensor x = randn({2, 3, 8, 8});
  expect_error([&] { nn::conv2d(x, randn({4, 2, 3, 3})); }, {"[conv2d]", "expected input with 2 channels", "3 channels"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 3})); }, {"[conv2d]", "4-D weight", "[4, 3, 3]"});
  expect_error([&] { nn::conv2d(randn({8, 8}), randn({4, 3, 3, 3})); }, {"[conv2d]", "4-D (batched) or 3-D", "[8, 8]"});
  expect_error([&] { nn::conv2d(x, randn({4, 1, 3, 3}), {}, {1}, {0}, {1}, 2); }, {"[conv2d]", "divisible by groups (2)"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 9, 9})); }, {"[conv2d]", "smaller than the (dilated) kernel", "[9, 9]"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 3, 3}), randn({3})); }, {"[conv2d]", "bias of shape [4]", "[3]"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 3, 3}), {}, {0}); }, {"[conv2d]", "positive stride"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 3, 3}), {}, {1, 2, 3}); }, {"[conv2d]", "stride of 1 or 2 values"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 3, 3}), {}, {2}, nn::Padding::Same); }, {"[conv2d]", "'same'", "strided"});
  expect_error([&] { call_op("conv2d", {x, randn({4, 3, 3, 3})}, {{"padding", std::string("full")}}); },
               {"[conv2d]", "'full'"});
  expect_error([&] { nn::conv2d(x, randn({4, 3, 3, 3}, kFloat64)); }, {"[conv2d]", "one dtype", "float64"});
  expect_error([&] { nn::conv_transpose2d(x, randn({4, 3, 3, 3})); }, {"[conv_transpose2d]", "3 input channels"});
  expect_error([&] { nn::conv_transpose2d(x, randn({3, 3, 3, 3}), {}, {2}, {0}, {2}); }, {"[conv_transpose2d]", "output_padding"});
  expect_error([&] { nn::conv2d(ones({1, 1, 4, 4}, kInt64), ones({1, 1, 3, 3}, kInt64)); }, {"[conv2d]", "floating point"});
}

}  // namespace
}  // namespace kiln::test
