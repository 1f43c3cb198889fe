// Convolutions (conv1d/2d/3d, conv_transpose1d/2d/3d), by what measured
// fastest (BENCHMARKS.md, kiln-bench-vision): a 1x1 stride-1 convolution is
// one GEMM per image and group (oneDNN's reorders cost it 2.5x there);
// any other float32 one is the convolution op (oneDNN, src/ops/
// spatial_ops.h). The rest (float64, zero sizes) is the reference path, in
// ops: each spatial dim of the padded input becomes a window view
// (Tensor::unfold, every dilation-th element of the window), the patches
// are gathered into one (groups, N * outputs, C/groups * kernel) matrix
// and multiplied by the weight as a batched matmul. A transposed
// convolution is the convolution of the stride-dilated input, padded by
// dilation (k - 1) - padding (+ output_padding after), with the weight
// flipped and its in/out channels swapped.
#include <numeric>
#include <string>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "ops/boxing.h"
#include "ops/spatial_ops.h"
#include "nn/spatial.h"
#include "ops/op_util.h"

namespace kiln::nn {
namespace {

Tensor convolution(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias, Shape stride,
                   Shape padding, Shape dilation, int64_t groups, int64_t d) {
  const auto [x, unbatched] = spatial::batched(op, input, d);
  check(weight.dim() == d + 2, op, "expected a ", d + 2, "-D weight (out_channels, in_channels / groups, kernel...) ",
        "but got shape ", shape_text(weight.sizes()));
  check(weight.dtype() == x.dtype(), op, "expected input and weight of one dtype but got input ", x.dtype(),
        " and weight ", weight.dtype());
  if (bias.defined())
    check(bias.dtype() == x.dtype(), op, "expected a bias of the input's dtype ", x.dtype(), " but got ", bias.dtype());
  stride = spatial::per_dim(op, "stride", stride, d), padding = spatial::per_dim(op, "padding", padding, d),
  dilation = spatial::per_dim(op, "dilation", dilation, d);
  const int64_t N = x.size(0), C = x.size(1), O = weight.size(0);
  check(groups > 0 && C % groups == 0 && O % groups == 0, op, "expected in_channels (", C, ") and out_channels (", O,
        ") divisible by groups (", groups, ")");
  check(weight.size(1) * groups == C, op, "expected input with ", weight.size(1) * groups,
        " channels (weight ", shape_text(weight.sizes()), ", groups ", groups, ") but got ", C, " channels in shape ",
        shape_text(input.sizes()));
  if (bias.defined())
    check(bias.sizes() == Shape{O}, op, "expected a bias of shape [", O, "] but got ", shape_text(bias.sizes()));
  Shape kernel(weight.sizes().begin() + 2, weight.sizes().end()), pads;
  for (int64_t i = d - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    check(stride[k] > 0 && dilation[k] > 0 && padding[k] >= 0, op, "expected positive stride and dilation and ",
          "non-negative padding but got stride ", shape_text(stride), ", padding ", shape_text(padding),
          ", dilation ", shape_text(dilation));
    const int64_t span = dilation[k] * (kernel[k] - 1) + 1, padded = x.size(2 + i) + 2 * padding[k];
    check(padded >= span, op, "the input's spatial size ", shape_text(Shape(x.sizes().begin() + 2, x.sizes().end())),
          " padded by ", shape_text(padding), " is smaller than the (dilated) kernel ", shape_text(kernel));
    pads.push_back(padding[k]), pads.push_back(padding[k]);
  }
  const bool unpadded = std::all_of(padding.begin(), padding.end(), [](int64_t p) { return p == 0; });
  const bool pointwise = unpadded && std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k == 1; }) &&
                         std::all_of(stride.begin(), stride.end(), [](int64_t s) { return s == 1; });
  const MemoryFormat format = x.dim() >= 4 ? x.suggest_memory_format() : MemoryFormat::Contiguous;
  if (pointwise && groups == 1 && format != MemoryFormat::Contiguous) {
    // Channels-last: the (N * spatial, C) rows times the weight, already the
    // channels-last output: one GEMM, the bias added in it.
    Shape to_last = {0}, back = {0, x.dim() - 1};
    for (int64_t i = 2; i < x.dim(); ++i) to_last.push_back(i), back.push_back(i - 1);
    to_last.push_back(1);
    Shape last_sizes = x.permute(to_last).sizes();
    last_sizes.back() = O;
    const Tensor rows = x.permute(to_last).reshape({-1, C});
    const Tensor y = linear(rows, weight.reshape({O, C}), bias).view(last_sizes).permute(back);
    return unbatched ? y.squeeze(0) : y;
  }
  if (pointwise) {  // a 1x1 convolution is one GEMM per image and group, no im2col
    const int64_t Cg = C / groups, Og = O / groups;
    Shape final_sizes = {N, O};
    final_sizes.insert(final_sizes.end(), x.sizes().begin() + 2, x.sizes().end());
    Tensor y = matmul(weight.reshape({1, groups, Og, Cg}), x.reshape({N, groups, Cg, -1})).reshape(final_sizes);
    if (bias.defined()) y = y + spatial::per_channel(bias, y);
    return unbatched ? y.squeeze(0) : y;
  }
  if (ops::convolution_kernel_applies(x, weight)) {
    const Tensor y = ops::convolution(x, weight, bias, stride, padding, dilation, groups);
    return unbatched ? y.squeeze(0) : y;
  }
  const Tensor padded = unpadded ? x : pad(x, pads);
  const Tensor w = spatial::windows(padded, kernel, stride, dilation);  // (N, C, out..., k...)
  Shape out_sizes(w.sizes().begin() + 2, w.sizes().begin() + 2 + d);
  const int64_t outputs = shape_numel(out_sizes), K = shape_numel(kernel), Cg = C / groups, Og = O / groups;
  // (N, G, Cg, out..., k...) -> (G, N, out..., Cg, k...) -> (G, N * outputs, Cg * K)
  Shape split = {N, groups, Cg};
  split.insert(split.end(), w.sizes().begin() + 2, w.sizes().end());
  Shape order = {1, 0};
  for (int64_t i = 0; i < d; ++i) order.push_back(3 + i);
  order.push_back(2);
  for (int64_t i = 0; i < d; ++i) order.push_back(3 + d + i);
  const Tensor cols = w.reshape(split).permute(order).reshape({groups, N * outputs, Cg * K});
  const Tensor wmat = weight.reshape({groups, Og, Cg * K}).transpose(1, 2);  // (G, Cg K, Og)
  Tensor y = matmul(cols, wmat);                                              // (G, N outputs, Og)
  Shape grouped = {groups, N};
  grouped.insert(grouped.end(), out_sizes.begin(), out_sizes.end());
  grouped.push_back(Og);
  Shape back = {1, 0, d + 2};
  for (int64_t i = 0; i < d; ++i) back.push_back(2 + i);
  Shape final_sizes = {N, O};
  final_sizes.insert(final_sizes.end(), out_sizes.begin(), out_sizes.end());
  y = y.reshape(grouped).permute(back).reshape(final_sizes);  // (N, G, Og, out...) -> (N, O, out...)
  if (bias.defined()) y = y + spatial::per_channel(bias, y);
  return unbatched ? y.squeeze(0) : y;
}

// 'same' (output size = input size; stride 1; the odd pixel of padding
// after) or 'valid' (none) as explicit padding, via pad when asymmetric.
Tensor convolution_named_padding(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                                 Shape stride, Padding padding, Shape dilation, int64_t groups, int64_t d) {
  if (padding == Padding::Valid) return convolution(op, input, weight, bias, stride, {0}, dilation, groups, d);
  stride = spatial::per_dim(op, "stride", stride, d), dilation = spatial::per_dim(op, "dilation", dilation, d);
  check(std::all_of(stride.begin(), stride.end(), [](int64_t s) { return s == 1; }), op,
        "padding='same' is not supported for strided convolutions (stride ", shape_text(stride), ")");
  check(weight.dim() == d + 2, op, "expected a ", d + 2, "-D weight but got shape ", shape_text(weight.sizes()));
  Shape symmetric(static_cast<size_t>(d)), extra;
  bool asymmetric = false;
  for (int64_t i = d - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    const int64_t total = dilation[k] * (weight.size(2 + i) - 1);
    symmetric[k] = total / 2;
    extra.push_back(0), extra.push_back(total % 2);
    asymmetric = asymmetric || total % 2;
  }
  const Tensor x = asymmetric ? pad(input, extra) : input;
  return convolution(op, x, weight, bias, stride, symmetric, dilation, groups, d);
}

// x with (stride - 1) zeros between neighbours along each spatial dim.
Tensor dilate_by_stride(const Tensor& x, const Shape& stride) {
  Tensor y = x;
  for (size_t i = 0; i < stride.size(); ++i) {
    const int64_t dim = 2 + static_cast<int64_t>(i), s = stride[i], n = y.size(dim);
    if (s == 1 || n == 0) continue;
    Shape zeros_shape = y.unsqueeze(dim + 1).sizes();
    zeros_shape[static_cast<size_t>(dim + 1)] = s - 1;
    y = cat({y.unsqueeze(dim + 1), zeros(zeros_shape, y.options())}, dim + 1).flatten(dim, dim + 1).narrow(dim, 0, (n - 1) * s + 1);
  }
  return y;
}

Tensor transposed_convolution(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                              Shape stride, Shape padding, Shape output_padding, int64_t groups, Shape dilation,
                              int64_t d) {
  const auto [x, unbatched] = spatial::batched(op, input, d);
  check(weight.dim() == d + 2, op, "expected a ", d + 2, "-D weight (in_channels, out_channels / groups, kernel...) ",
        "but got shape ", shape_text(weight.sizes()));
  stride = spatial::per_dim(op, "stride", stride, d), padding = spatial::per_dim(op, "padding", padding, d),
  output_padding = spatial::per_dim(op, "output_padding", output_padding, d), dilation = spatial::per_dim(op, "dilation", dilation, d);
  const int64_t C = x.size(1);
  check(groups > 0 && weight.size(0) == C && C % groups == 0, op, "expected a weight of ", C,
        " input channels (the input's) divisible by groups (", groups, ") but got weight ",
        shape_text(weight.sizes()));
  Shape pads;
  for (int64_t i = d - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    check(stride[k] > 0 && dilation[k] > 0 && padding[k] >= 0 && output_padding[k] >= 0 &&
              (output_padding[k] < stride[k] || output_padding[k] < dilation[k]),
          op, "expected positive stride and dilation, non-negative padding, and output_padding below stride or ",
          "dilation, but got stride ", shape_text(stride), ", padding ", shape_text(padding), ", output_padding ",
          shape_text(output_padding), ", dilation ", shape_text(dilation));
    const int64_t edge = dilation[k] * (weight.size(2 + i) - 1) - padding[k];
    pads.push_back(edge), pads.push_back(edge + output_padding[k]);
  }
  const Tensor spread = pad(dilate_by_stride(x, stride), pads);
  // (C, Og, k...) -> (G, Cg, Og, k...) -> (G, Og, Cg, k...) flipped -> (G Og, Cg, k...)
  const int64_t Cg = C / groups, Og = weight.size(1);
  Shape split = {groups, Cg, Og}, flip_dims;
  split.insert(split.end(), weight.sizes().begin() + 2, weight.sizes().end());
  for (int64_t i = 0; i < d; ++i) flip_dims.push_back(3 + i);
  Shape conv_w = {groups * Og, Cg};
  conv_w.insert(conv_w.end(), weight.sizes().begin() + 2, weight.sizes().end());
  const Tensor w = flip(weight.reshape(split).transpose(1, 2), flip_dims).reshape(conv_w);
  const Tensor y = convolution(op, spread, w, bias, {1}, {0}, dilation, groups, d);
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Shape padding, Shape dilation, int64_t g) {
  return convolution("conv1d", x, w, b, stride, padding, dilation, g, 1);
}
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Shape padding, Shape dilation, int64_t g) {
  return convolution("conv2d", x, w, b, stride, padding, dilation, g, 2);
}
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Shape padding, Shape dilation, int64_t g) {
  return convolution("conv3d", x, w, b, stride, padding, dilation, g, 3);
}
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Padding padding, Shape dilation,
              int64_t g) {
  return convolution_named_padding("conv1d", x, w, b, stride, padding, dilation, g, 1);
}
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Padding padding, Shape dilation,
              int64_t g) {
  return convolution_named_padding("conv2d", x, w, b, stride, padding, dilation, g, 2);
}
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Padding padding, Shape dilation,
              int64_t g) {
  return convolution_named_padding("conv3d", x, w, b, stride, padding, dilation, g, 3);
}
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Shape padding,
                        Shape output_padding, int64_t g, Shape dilation) {
  return transposed_convolution("conv_transpose1d", x, w, b, stride, padding, output_padding, g, dilation, 1);
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Shape padding,
                        Shape output_padding, int64_t g, Shape dilation) {
  return transposed_convolution("conv_transpose2d", x, w, b, stride, padding, output_padding, g, dilation, 2);
}
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, Shape padding,
                        Shape output_padding, int64_t g, Shape dilation) {
  return transposed_convolution("conv_transpose3d", x, w, b, stride, padding, output_padding, g, dilation, 3);
}

namespace {
using ConvFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, Shape, Shape, Shape, int64_t);
using NamedConvFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, Shape, Padding, Shape, int64_t);
// call_op's padding='same' / 'valid'.
Padding padding_named(const std::string& name, const char* op) {
  check(name == "same" || name == "valid", op, "expected padding 'same' or 'valid' but got '", name, "'");
  return name == "same" ? Padding::Same : Padding::Valid;
}
template <NamedConvFn F, const char* kOp>
Tensor conv_padding_by_name(const Tensor& x, const Tensor& w, const Tensor& b, Shape stride, const std::string& padding,
                            Shape dilation, int64_t groups) {
  return F(x, w, b, std::move(stride), padding_named(padding, kOp), std::move(dilation), groups);
}
constexpr char kConv1d[] = "conv1d", kConv2d[] = "conv2d", kConv3d[] = "conv3d";
const bool registered = [] {
  ops::def<static_cast<ConvFn>(&conv1d)>(
      "conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, int[1] dilation=1, "
      "int groups=1) -> Tensor");
  ops::def<static_cast<ConvFn>(&conv2d)>(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, int[2] dilation=1, "
      "int groups=1) -> Tensor");
  ops::def<static_cast<ConvFn>(&conv3d)>(
      "conv3d(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=1, int[3] padding=0, int[3] dilation=1, "
      "int groups=1) -> Tensor");
  ops::def<&conv_padding_by_name<static_cast<NamedConvFn>(&conv1d), kConv1d>>(
      "conv1d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, str padding='valid', int[1] "
      "dilation=1, int groups=1) -> Tensor");
  ops::def<&conv_padding_by_name<static_cast<NamedConvFn>(&conv2d), kConv2d>>(
      "conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, str padding='valid', int[2] "
      "dilation=1, int groups=1) -> Tensor");
  ops::def<&conv_padding_by_name<static_cast<NamedConvFn>(&conv3d), kConv3d>>(
      "conv3d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=1, str padding='valid', int[3] "
      "dilation=1, int groups=1) -> Tensor");
  ops::def<&conv_transpose1d>(
      "conv_transpose1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, int[1] "
      "output_padding=0, int groups=1, int[1] dilation=1) -> Tensor");
  ops::def<&conv_transpose2d>(
      "conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] output_padding=0, int groups=1, int[2] dilation=1) -> Tensor");
  ops::def<&conv_transpose3d>(
      "conv_transpose3d.input(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=1, int[3] padding=0, "
      "int[3] output_padding=0, int groups=1, int[3] dilation=1) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
