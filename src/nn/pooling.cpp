// Pooling as torch.nn.functional's: max_pool1d/2d/3d (with the flat input
// index of each maximum) through the max_pool op and its kernel; in ops
// over window views (the same views as the convolutions): avg_pool1d/2d/3d (count_include_pad, divisor_override),
// adaptive_avg_pool1d/2d (one averaging matrix per dim: the bins are
// products of per-dim ranges), adaptive_max_pool2d (one window per output
// cell). Autograd and kiln::compile come from those ops.
#include <cmath>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "nn/spatial.h"
#include "ops/boxing.h"
#include "ops/op_util.h"
#include "ops/spatial_ops.h"

namespace kiln::nn {
namespace {

struct PoolGeometry {
  Shape kernel, stride, padding, dilation, out, extra;  // extra: ceil_mode's padding after the regular
  Shape pads;  // pad()'s list: (before, after) from the last dim
};

PoolGeometry geometry(const char* op, const Tensor& x, int64_t d, Shape kernel, Shape stride, Shape padding,
                      Shape dilation, bool ceil_mode) {
  PoolGeometry g;
  g.kernel = spatial::per_dim(op, "kernel_size", kernel, d);
  g.stride = stride.empty() ? g.kernel : spatial::per_dim(op, "stride", stride, d);
  g.padding = spatial::per_dim(op, "padding", padding, d);
  g.dilation = spatial::per_dim(op, "dilation", dilation, d);
  g.out.resize(static_cast<size_t>(d)), g.extra.resize(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) {
    const size_t k = static_cast<size_t>(i);
    const int64_t L = x.size(2 + i), K = g.kernel[k], s = g.stride[k], p = g.padding[k], dil = g.dilation[k];
    check(K > 0 && s > 0 && dil > 0 && p >= 0, op, "expected positive kernel_size, stride and dilation and ",
          "non-negative padding but got kernel_size ", shape_text(g.kernel), ", stride ", shape_text(g.stride),
          ", padding ", shape_text(g.padding));
    const int64_t span = dil * (K - 1) + 1;
    check(p <= span / 2, op, "padding ", shape_text(g.padding), " should be at most half of the kernel (",
          shape_text(g.kernel), ", dilation ", shape_text(g.dilation), ")");
    const int64_t room = L + 2 * p - span;
    int64_t o = (room >= 0 ? (ceil_mode ? (room + s - 1) / s : room / s) : -1) + 1;
    if (ceil_mode && o > 0 && (o - 1) * s >= L + p) --o;  // the last window must start inside the input or left padding
    check(o > 0, op, "the input's spatial size ", shape_text(Shape(x.sizes().begin() + 2, x.sizes().end())),
          " is too small for kernel_size ", shape_text(g.kernel), " (padding ", shape_text(g.padding), ", dilation ",
          shape_text(g.dilation), ")");
    g.out[k] = o;
    g.extra[k] = std::max<int64_t>(0, (o - 1) * s + span - (L + 2 * p));
  }
  for (int64_t i = d - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    g.pads.push_back(g.padding[k]), g.pads.push_back(g.padding[k] + g.extra[k]);
  }
  return g;
}

// The windows of x padded with zeros, their kernel dims merged: (N, C, out..., K).
Tensor flat_windows(const Tensor& x, const PoolGeometry& g) {
  const Tensor padded = pad(x, g.pads);
  const Tensor w = spatial::windows(padded, g.kernel, g.stride, g.dilation);
  const int64_t d = static_cast<int64_t>(g.kernel.size());
  return w.flatten(2 + d, -1);
}

std::tuple<Tensor, Tensor> max_pool(const char* op, const Tensor& input, int64_t d, Shape kernel, Shape stride,
                                    Shape padding, Shape dilation, bool ceil_mode) {
  const auto [x, unbatched] = spatial::batched(op, input, d);
  const PoolGeometry g = geometry(op, x, d, kernel, stride, padding, dilation, ceil_mode);
  // The kernel runs float32 and float64; 16-bit floats go through float32.
  const bool widened = x.dtype() != kFloat32 && x.dtype() != kFloat64;
  auto [values, flat] = ops::max_pool(widened ? x.to(kFloat32) : x, g.kernel, g.stride, g.padding, g.dilation, g.out);
  if (widened) values = values.to(x.dtype());
  if (unbatched) return {values.squeeze(0), flat.squeeze(0)};
  return {values, flat};
}

Tensor avg_pool(const char* op, const Tensor& input, int64_t d, Shape kernel, Shape stride, Shape padding,
                bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  const auto [x, unbatched] = spatial::batched(op, input, d);
  const PoolGeometry g = geometry(op, x, d, kernel, stride, padding, {1}, ceil_mode);
  const Tensor sums = sum(flat_windows(x, g), {-1});
  Tensor y;
  if (divisor_override) {
    check(*divisor_override != 0, op, "divisor_override must not be zero");
    y = sums / static_cast<double>(*divisor_override);
  } else {
    // What each window counts: the input's pixels, the regular padding when
    // count_include_pad, never ceil_mode's extra.
    Shape one_image = {1, 1};
    one_image.insert(one_image.end(), x.sizes().begin() + 2, x.sizes().end());
    Tensor mask = ones(one_image, x.options());
    Shape regular, extra;
    for (int64_t i = d - 1; i >= 0; --i) {
      const size_t k = static_cast<size_t>(i);
      regular.push_back(g.padding[k]), regular.push_back(g.padding[k]);
      extra.push_back(0), extra.push_back(g.extra[k]);
    }
    mask = pad(pad(mask, regular, "constant", count_include_pad ? 1.0 : 0.0), extra);
    const Tensor counts = sum(spatial::windows(mask, g.kernel, g.stride, g.dilation).flatten(2 + d, -1), {-1});
    y = sums / counts;
  }
  return unbatched ? y.squeeze(0) : y;
}

// Output bin j of a dim of L covers [floor(j L / out), ceil((j + 1) L / out)).
std::pair<int64_t, int64_t> adaptive_bin(int64_t j, int64_t L, int64_t out) {
  return {(j * L) / out, ((j + 1) * L + out - 1) / out};
}

Tensor adaptive_avg_pool(const char* op, const Tensor& input, int64_t d, Shape output_size) {
  const auto [x, unbatched] = spatial::batched(op, input, d);
  output_size = spatial::per_dim(op, "output_size", output_size, d);
  Tensor y = x;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t L = x.size(2 + i), out = output_size[static_cast<size_t>(i)];
    check(out > 0 && L > 0, op, "expected positive output_size and input sizes but got output_size ",
          shape_text(output_size), " for input ", shape_text(input.sizes()));
    std::vector<double> avg(static_cast<size_t>(out * L), 0.0);
    for (int64_t j = 0; j < out; ++j) {
      const auto [lo, hi] = adaptive_bin(j, L, out);
      for (int64_t l = lo; l < hi; ++l) avg[static_cast<size_t>(j * L + l)] = 1.0 / static_cast<double>(hi - lo);
    }
    const Tensor A = tensor(avg).reshape({out, L}).to(x.dtype());
    y = movedim(matmul(movedim(y, {2 + i}, {-1}), A.t()), {-1}, {2 + i});
  }
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace

Tensor max_pool1d(const Tensor& x, Shape k, Shape s, Shape p, Shape dil, bool ceil) {
  return std::get<0>(max_pool("max_pool1d", x, 1, k, s, p, dil, ceil));
}
Tensor max_pool2d(const Tensor& x, Shape k, Shape s, Shape p, Shape dil, bool ceil) {
  return std::get<0>(max_pool("max_pool2d", x, 2, k, s, p, dil, ceil));
}
Tensor max_pool3d(const Tensor& x, Shape k, Shape s, Shape p, Shape dil, bool ceil) {
  return std::get<0>(max_pool("max_pool3d", x, 3, k, s, p, dil, ceil));
}
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, Shape k, Shape s, Shape p, Shape dil, bool ceil) {
  return max_pool("max_pool1d", x, 1, k, s, p, dil, ceil);
}
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Shape k, Shape s, Shape p, Shape dil, bool ceil) {
  return max_pool("max_pool2d", x, 2, k, s, p, dil, ceil);
}
Tensor avg_pool1d(const Tensor& x, Shape k, Shape s, Shape p, bool ceil, bool include_pad) {
  return avg_pool("avg_pool1d", x, 1, k, s, p, ceil, include_pad, std::nullopt);
}
Tensor avg_pool2d(const Tensor& x, Shape k, Shape s, Shape p, bool ceil, bool include_pad,
                  std::optional<int64_t> divisor_override) {
  return avg_pool("avg_pool2d", x, 2, k, s, p, ceil, include_pad, divisor_override);
}
Tensor avg_pool3d(const Tensor& x, Shape k, Shape s, Shape p, bool ceil, bool include_pad,
                  std::optional<int64_t> divisor_override) {
  return avg_pool("avg_pool3d", x, 3, k, s, p, ceil, include_pad, divisor_override);
}
Tensor adaptive_avg_pool1d(const Tensor& x, Shape output_size) {
  return adaptive_avg_pool("adaptive_avg_pool1d", x, 1, output_size);
}
Tensor adaptive_avg_pool2d(const Tensor& x, Shape output_size) {
  return adaptive_avg_pool("adaptive_avg_pool2d", x, 2, output_size);
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, Shape output_size) {
  const char* op = "adaptive_max_pool2d";
  const auto [x, unbatched] = spatial::batched(op, input, 2);
  output_size = spatial::per_dim(op, "output_size", output_size, 2);
  const int64_t H = x.size(2), W = x.size(3), OH = output_size[0], OW = output_size[1];
  check(OH > 0 && OW > 0 && H > 0 && W > 0, op, "expected positive output_size and input sizes but got output_size ",
        shape_text(output_size), " for input ", shape_text(input.sizes()));
  std::vector<Tensor> values, indices;
  for (int64_t i = 0; i < OH; ++i)
    for (int64_t j = 0; j < OW; ++j) {
      const auto [h0, h1] = adaptive_bin(i, H, OH);
      const auto [w0, w1] = adaptive_bin(j, W, OW);
      const auto [v, a] = max(x.narrow(2, h0, h1 - h0).narrow(3, w0, w1 - w0).flatten(2), -1);
      values.push_back(v);
      const Tensor width = scalar_tensor(w1 - w0, kInt64);
      indices.push_back((floor_divide(a, width) + h0) * W + remainder(a, width) + w0);
    }
  const Shape out = {x.size(0), x.size(1), OH, OW};
  Tensor v = stack(values, -1).reshape(out), idx = stack(indices, -1).reshape(out);
  if (unbatched) return {v.squeeze(0), idx.squeeze(0)};
  return {v, idx};
}

namespace {
const bool registered = [] {
  ops::def<&max_pool1d>("max_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, int[1] "
                        "dilation=1, bool ceil_mode=False) -> Tensor");
  ops::def<&max_pool2d>("max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] "
                        "dilation=1, bool ceil_mode=False) -> Tensor");
  ops::def<&max_pool3d>("max_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] "
                        "dilation=1, bool ceil_mode=False) -> Tensor");
  ops::def<&max_pool1d_with_indices>(
      "max_pool1d_with_indices(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, int[1] "
      "dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)");
  ops::def<&max_pool2d_with_indices>(
      "max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] "
      "dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)");
  ops::def<&avg_pool1d>("avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, bool "
                        "ceil_mode=False, bool count_include_pad=True) -> Tensor");
  ops::def<&avg_pool2d>("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool "
                        "ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor");
  ops::def<&avg_pool3d>("avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool "
                        "ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor");
  ops::def<&adaptive_avg_pool1d>("adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor");
  ops::def<&adaptive_avg_pool2d>("adaptive_avg_pool2d(Tensor self, int[2] output_size) -> Tensor");
  ops::def<&adaptive_max_pool2d>("adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
