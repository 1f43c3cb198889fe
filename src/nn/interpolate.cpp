// torch.nn.functional.interpolate: nearest, nearest-exact and (bi/tri)linear
// resampling of (N, C, spatial...) inputs. Separable: each spatial dim is
// resampled in turn with index_select (nearest) or two index_selects and
// their weights (linear), so bilinear and trilinear are the tensor products
// of linear along each dim, as PyTorch computes them. Autograd and
// kiln::compile come from those ops (the gradient of a gather is an
// index_add). Source positions are computed as PyTorch's CPU kernels do, in
// float for float32 and double for float64 inputs, so the same pixels are
// picked.
#include <cmath>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln::nn {
namespace {

// The source-to-output scale of one dim: (in - 1) / (out - 1) with
// align_corners, else 1 / scale_factor when one is used, else in / out.
template <class T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (scale && *scale > 0) return static_cast<T>(1.0 / *scale);
  return static_cast<T>(in) / static_cast<T>(out);
}


// Nearest: output pixel o reads floor(o * scale) (nearest-exact:
// floor((o + 0.5) * scale)), clamped to the last pixel.
template <class T>
Tensor resample_nearest(const Tensor& x, int64_t dim, int64_t out, std::optional<double> scale, bool exact) {
  const int64_t in = x.size(dim);
  const T s = pixel_scale<T>(in, out, false, scale);
  std::vector<int64_t> src(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const T pos = exact ? (static_cast<T>(o) + T(0.5)) * s : static_cast<T>(o) * s;
    src[static_cast<size_t>(o)] = std::min(static_cast<int64_t>(std::floor(pos)), in - 1);
  }
  return index_select(x, dim, tensor(src));
}

// Linear: output pixel o sits at (o + 0.5) scale - 0.5 (o scale with
// align_corners), clamped at 0, between pixels i0 and i0 + 1 (i0 itself at
// the last pixel) with weights 1 - t and t.
template <class T>
Tensor resample_linear(const Tensor& x, int64_t dim, int64_t out, bool align_corners, std::optional<double> scale) {
  const int64_t in = x.size(dim);
  const T s = pixel_scale<T>(in, out, align_corners, scale);
  std::vector<int64_t> lo(static_cast<size_t>(out)), hi(static_cast<size_t>(out));
  std::vector<double> w_lo(static_cast<size_t>(out)), w_hi(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    T pos = align_corners ? static_cast<T>(o) * s : (static_cast<T>(o) + T(0.5)) * s - T(0.5);
    if (pos < 0) pos = 0;
    const int64_t i0 = std::min(static_cast<int64_t>(pos), in - 1);
    const T t = std::min(pos - static_cast<T>(i0), T(1));
    const size_t k = static_cast<size_t>(o);
    lo[k] = i0, hi[k] = i0 + (i0 < in - 1 ? 1 : 0);
    w_lo[k] = static_cast<double>(T(1) - t), w_hi[k] = static_cast<double>(t);
  }
  Shape along(static_cast<size_t>(x.dim()), 1);
  along[static_cast<size_t>(dim)] = out;
  const Tensor a = tensor(w_lo).to(x.dtype()).reshape(along), b = tensor(w_hi).to(x.dtype()).reshape(along);
  return index_select(x, dim, tensor(lo)) * a + index_select(x, dim, tensor(hi)) * b;
}

const char* linear_mode_for(int64_t spatial) {
  return spatial == 1 ? "linear" : spatial == 2 ? "bilinear" : "trilinear";
}

}  // namespace

Tensor interpolate(const Tensor& input, std::optional<Shape> size, std::optional<std::vector<double>> scale_factor,
                   const std::string& mode, std::optional<bool> align_corners,
                   std::optional<bool> recompute_scale_factor) {
  const char* op = "interpolate";
  check(input.dim() >= 3 && input.dim() <= 5, op, "expected a 3-D, 4-D or 5-D input (N, C, spatial...) but got shape ",
        shape_text(input.sizes()));
  check(is_floating(input.dtype()), op, "expected a floating point input but got ", input.dtype());
  const int64_t spatial = input.dim() - 2;
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  const bool linear = mode == "linear" || mode == "bilinear" || mode == "trilinear";
  check(nearest || linear, op, "expected mode 'nearest', 'nearest-exact', 'linear', 'bilinear' or 'trilinear' but got '",
        mode, "' (bicubic and area are not implemented)");
  check(!linear || mode == linear_mode_for(spatial), op, "got a ", input.dim(), "-D input, but ", mode, " mode needs a ",
        mode == "linear" ? 3 : mode == "bilinear" ? 4 : 5, "-D input");
  check(!(nearest && align_corners.has_value()), op,
        "align_corners can only be set with the interpolating modes linear, bilinear and trilinear, not '", mode, "'");
  check(size.has_value() != scale_factor.has_value(), op, "expected exactly one of size and scale_factor");
  auto per_dim = [&](auto values, const char* what) {
    check(values.size() == 1 || static_cast<int64_t>(values.size()) == spatial, op, "expected ", what, " of 1 or ",
          spatial, " values for an input of shape ", shape_text(input.sizes()), " but got ", values.size());
    if (values.size() == 1) values.assign(static_cast<size_t>(spatial), values[0]);
    return values;
  };
  Shape out(static_cast<size_t>(spatial));
  std::vector<std::optional<double>> scales(static_cast<size_t>(spatial));
  if (size) {
    out = per_dim(*size, "size");
  } else {
    const std::vector<double> f = per_dim(*scale_factor, "scale_factor");
    for (int64_t d = 0; d < spatial; ++d) {
      const size_t k = static_cast<size_t>(d);
      check(f[k] > 0 && std::isfinite(f[k]), op, "expected positive finite scale factors but got ", f[k]);
      out[k] = static_cast<int64_t>(std::floor(static_cast<double>(input.size(d + 2)) * f[k]));
      if (!recompute_scale_factor.value_or(false)) scales[k] = f[k];
    }
  }
  for (int64_t d = 0; d < spatial; ++d)
    check(input.size(d + 2) > 0 && out[static_cast<size_t>(d)] > 0, op,
          "input and output sizes should be greater than 0, but got input ", shape_text(input.sizes()),
          " and output spatial size ", shape_text(out));
  Tensor y = input;
  for (int64_t d = 0; d < spatial; ++d) {
    const size_t k = static_cast<size_t>(d);
    const auto resample = [&]<class T>(T) {
      return nearest ? resample_nearest<T>(y, d + 2, out[k], scales[k], mode == "nearest-exact")
                     : resample_linear<T>(y, d + 2, out[k], align_corners.value_or(false), scales[k]);
    };
    y = input.dtype() == kFloat64 ? resample(double{}) : resample(float{});
  }
  return y;
}

namespace {
const bool registered = [] {
  ops::def<[](const Tensor& input, std::optional<Shape> size, std::optional<double> scale_factor,
              const std::string& mode, std::optional<bool> align_corners, std::optional<bool> recompute) {
    std::optional<std::vector<double>> scales;
    if (scale_factor) scales = std::vector<double>{*scale_factor};
    return interpolate(input, std::move(size), scales, mode, align_corners, recompute);
  }>("interpolate(Tensor input, int[]? size=None, float? scale_factor=None, str mode='nearest', "
     "bool? align_corners=None, bool? recompute_scale_factor=None) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln::nn
