// torch.nn.functional's unfold (im2col: every kernel-sized patch of an image
// batch as a column) and fold (its adjoint, col2im: columns summed back into
// an image). Composites: unfold stacks one strided slice of the padded input
// per kernel offset; fold index_adds each column entry into its pixel, so
// overlapping patches sum. Autograd and kiln::compile come from those ops.
#include <array>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln::nn {
namespace {

// One spatial dim's geometry: input size (padded), kernel, dilation, padding, stride.
struct Axis {
  int64_t size, kernel, dilation, padding, stride;
  int64_t span() const { return dilation * (kernel - 1) + 1; }
  int64_t blocks() const { return (size + 2 * padding - span()) / stride + 1; }
};

std::array<Axis, 2> axes(const char* op, int64_t h, int64_t w, const Shape& kernel, const Shape& dilation,
                         const Shape& padding, const Shape& stride) {
  for (const Shape* s : {&kernel, &dilation, &padding, &stride})
    check(s->size() == 2, op, "expected kernel_size, dilation, padding and stride of 2 values each but got ",
          shape_text(*s));
  std::array<Axis, 2> a{Axis{h, kernel[0], dilation[0], padding[0], stride[0]},
                        Axis{w, kernel[1], dilation[1], padding[1], stride[1]}};
  for (const Axis& x : a) {
    check(x.kernel > 0 && x.dilation > 0 && x.stride > 0 && x.padding >= 0, op,
          "expected positive kernel_size, dilation, stride and non-negative padding but got kernel ",
          shape_text(kernel), ", dilation ", shape_text(dilation), ", padding ", shape_text(padding), ", stride ",
          shape_text(stride));
    check(x.size + 2 * x.padding >= x.span(), op, "the kernel (", shape_text(kernel), ", dilation ",
          shape_text(dilation), ") is larger than the padded input (", h + 2 * padding[0], ", ", w + 2 * padding[1],
          ")");
  }
  return a;
}

}  // namespace

Tensor unfold(const Tensor& input, const Shape& kernel_size, const Shape& dilation, const Shape& padding,
              const Shape& stride) {
  const char* op = "unfold";
  check(input.dim() == 3 || input.dim() == 4, op, "expected a 3-D or 4-D input but got shape ",
        shape_text(input.sizes()));
  const Tensor x = input.dim() == 3 ? input.unsqueeze(0) : input;
  const auto [ah, aw] = axes(op, x.size(2), x.size(3), kernel_size, dilation, padding, stride);
  const Tensor xp = pad(x, {aw.padding, aw.padding, ah.padding, ah.padding});
  const int64_t oh = ah.blocks(), ow = aw.blocks();
  std::vector<Tensor> patches;
  for (int64_t i = 0; i < ah.kernel; ++i)
    for (int64_t j = 0; j < aw.kernel; ++j)
      patches.push_back(xp.slice(2, i * ah.dilation, i * ah.dilation + ah.stride * (oh - 1) + 1, ah.stride)
                            .slice(3, j * aw.dilation, j * aw.dilation + aw.stride * (ow - 1) + 1, aw.stride));
  // (N, C, kh kw, oh, ow): channel-major, then the kernel offsets, as PyTorch.
  const Tensor cols = stack(patches, 2).reshape({x.size(0), x.size(1) * ah.kernel * aw.kernel, oh * ow});
  return input.dim() == 3 ? cols.squeeze(0) : cols;
}

Tensor fold(const Tensor& input, const Shape& output_size, const Shape& kernel_size, const Shape& dilation,
            const Shape& padding, const Shape& stride) {
  const char* op = "fold";
  check(input.dim() == 2 || input.dim() == 3, op, "expected a 2-D or 3-D input but got shape ",
        shape_text(input.sizes()));
  check(output_size.size() == 2, op, "expected an output_size of 2 values but got ", shape_text(output_size));
  const Tensor cols = input.dim() == 2 ? input.unsqueeze(0) : input;
  const auto [ah, aw] = axes(op, output_size[0], output_size[1], kernel_size, dilation, padding, stride);
  const int64_t k = ah.kernel * aw.kernel, blocks = ah.blocks() * aw.blocks();
  check(cols.size(1) % k == 0, op, "expected the input's dim 1 (", cols.size(1), ") to be divisible by the kernel's ",
        k, " positions");
  check(cols.size(2) == blocks, op, "expected ", blocks, " blocks for output_size ", shape_text(output_size),
        " but the input has ", cols.size(2));
  const int64_t channels = cols.size(1) / k, hp = ah.size + 2 * ah.padding, wp = aw.size + 2 * aw.padding;
  // The padded pixel each (kernel offset, block) entry lands on.
  std::vector<int64_t> target;
  target.reserve(static_cast<size_t>(k * blocks));
  for (int64_t i = 0; i < ah.kernel; ++i)
    for (int64_t j = 0; j < aw.kernel; ++j)
      for (int64_t bh = 0; bh < ah.blocks(); ++bh)
        for (int64_t bw = 0; bw < aw.blocks(); ++bw)
          target.push_back((i * ah.dilation + bh * ah.stride) * wp + j * aw.dilation + bw * aw.stride);
  const Tensor values = cols.reshape({cols.size(0), channels, k * blocks});
  const Tensor image = index_add(zeros({cols.size(0), channels, hp * wp}, cols.options()), 2, tensor(target), values)
                           .reshape({cols.size(0), channels, hp, wp})
                           .slice(2, ah.padding, ah.padding + ah.size)
                           .slice(3, aw.padding, aw.padding + aw.size);
  return input.dim() == 2 ? image.squeeze(0) : image;
}

// By name under ATen's names (torch.nn.functional.unfold calls im2col):
// "unfold" is already Tensor.unfold, the view.
namespace {
const bool registered = [] {
  ops::def<&unfold>(
      "im2col(Tensor input, int[2] kernel_size, int[2] dilation=[1, 1], int[2] padding=[0, 0], int[2] stride=[1, 1]) "
      "-> Tensor");
  ops::def<&fold>(
      "col2im(Tensor input, int[2] output_size, int[2] kernel_size, int[2] dilation=[1, 1], int[2] padding=[0, 0], "
      "int[2] stride=[1, 1]) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
