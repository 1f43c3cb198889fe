// Quantized tensors (quantize/dequantize in ops) and the two int8 ops with
// kernels (src/kernels/cpu/quantized_kernels.cpp): matmul_u8s8 and
// linear_dynamic. See kiln/quantization.h.
#include <cmath>

#include "kiln/error.h"
#include "kiln/quantization.h"
#include "ops/op_util.h"
#include "ops/quantized_range.h"

namespace kiln::quant {
namespace {

const char* kOp = "quantize";


// clamp(round(x * (1 / scale)) + zero_point), the reciprocal in float32 as
// PyTorch's CPU kernels compute it; scale and zero_point broadcast against x.
Tensor quantized_values(const Tensor& x, const Tensor& scale, const Tensor& zero_point, DType t) {
  const auto [lo, hi] = quant_range(t, kOp);
  const Tensor inverse = (1.0 / scale.to(kFloat32)).to(kFloat32);
  const Tensor q = round(x.to(kFloat32) * inverse).to(kFloat64) + zero_point.to(kFloat64);
  return clamp(q, static_cast<double>(lo), static_cast<double>(hi)).to(t);
}

std::vector<TensorMeta> int_mm_shape(std::span<const Tensor> in, const Attrs&) {
  return ops::one_output({in[0].size(0), in[1].size(0)}, kInt32);
}
const OpDef& kMatmulU8S8 = register_op(ops::with_backward(
    OpDef{"matmul_u8s8", "matmul_u8s8(Tensor a, Tensor b) -> Tensor", OpKind::Compute, int_mm_shape},
    &autograd::kNotDifferentiable));

// The VNNI kernel's panels (kernels/cpu/int8_gemm.h): 16 rows by groups of 4 along K, 64 bytes each.
std::vector<TensorMeta> packed_shape(std::span<const Tensor> in, const Attrs&) {
  return ops::one_output({(in[0].size(0) + 15) / 16 * ((in[0].size(1) + 3) / 4) * 64}, kInt8);
}
const OpDef& kPackU8S8 = register_op(ops::with_backward(
    OpDef{"pack_u8s8_weight", "pack_u8s8_weight(Tensor weight) -> Tensor", OpKind::Compute, packed_shape},
    &autograd::kNotDifferentiable));

std::vector<TensorMeta> linear_shape(std::span<const Tensor> in, const Attrs&) {
  Shape s = in[0].sizes();
  s.back() = in[1].size(0);
  return ops::one_output(s, kFloat32);
}
const OpDef& kLinearDynamic = register_op(ops::with_backward(
    OpDef{"linear_dynamic",
          "linear_dynamic(Tensor input, Tensor weight_values, Tensor weight_scales, Tensor weight_row_sums, Tensor "
          "weight_packed, Tensor? bias, bool has_bias, float input_scale, int input_zero_point, bool relu=False) -> Tensor",
          OpKind::Compute, linear_shape},
    &autograd::kNotDifferentiable));

std::vector<TensorMeta> conv_shape(std::span<const Tensor> in, const Attrs& a) {
  const Shape& out = a.get_shape("out");
  return ops::one_output({in[0].size(0), in[1].size(0), out[0], out[1]}, kFloat32);
}
const OpDef& kConv2dInt8 = register_op(ops::with_backward(
    OpDef{"conv2d_int8",
          "conv2d_int8(Tensor input, Tensor weight_values, Tensor weight_scales, Tensor weight_row_sums, Tensor "
          "weight_packed, Tensor? bias, int[] kernel, int[] stride, int[] padding, int[] dilation, int[] out, float "
          "input_scale, int input_zero_point, bool has_bias, bool relu=False) -> Tensor",
          OpKind::Compute, conv_shape},
    &autograd::kNotDifferentiable));

}  // namespace

QuantRange quant_range(DType t, const char* op) {
  check(t == kInt8 || t == kUInt8, op, "expected dtype int8 (qint8) or uint8 (quint8) but got ", t);
  return t == kInt8 ? QuantRange{-128, 127} : QuantRange{0, 255};
}

QuantizedTensor::QuantizedTensor(Tensor values, Tensor scales, Tensor zero_points, QScheme scheme, int64_t axis)
    : values_(std::move(values)), scales_(std::move(scales)), zero_points_(std::move(zero_points)), scheme_(scheme),
      axis_(axis) {}

Tensor QuantizedTensor::dequantize() const {
  if (scheme_ == QScheme::PerTensorAffine)
    return ((values_.to(kFloat64) - q_zero_point()) * q_scale()).to(kFloat32);
  Shape along(static_cast<size_t>(values_.dim()), 1);
  along[static_cast<size_t>(axis_)] = scales_.numel();
  return ((values_.to(kFloat64) - zero_points_.to(kFloat64).reshape(along)) * scales_.reshape(along)).to(kFloat32);
}

double QuantizedTensor::q_scale() const {
  check(scheme_ == QScheme::PerTensorAffine, "q_scale", "expected a per-tensor quantized tensor (per channel: ",
        "q_per_channel_scales)");
  return scales_.item<double>();
}
int64_t QuantizedTensor::q_zero_point() const {
  check(scheme_ == QScheme::PerTensorAffine, "q_zero_point", "expected a per-tensor quantized tensor (per channel: ",
        "q_per_channel_zero_points)");
  return zero_points_.item<int64_t>();
}
const Tensor& QuantizedTensor::q_per_channel_scales() const {
  check(scheme_ == QScheme::PerChannelAffine, "q_per_channel_scales", "expected a per-channel quantized tensor");
  return scales_;
}
const Tensor& QuantizedTensor::q_per_channel_zero_points() const {
  check(scheme_ == QScheme::PerChannelAffine, "q_per_channel_zero_points", "expected a per-channel quantized tensor");
  return zero_points_;
}
int64_t QuantizedTensor::q_per_channel_axis() const {
  check(scheme_ == QScheme::PerChannelAffine, "q_per_channel_axis", "expected a per-channel quantized tensor");
  return axis_;
}

QuantizedTensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype) {
  const char* op = "quantize_per_tensor";
  check(is_floating(x.dtype()), op, "expected a floating point input but got ", x.dtype());
  check(std::isfinite(scale) && scale > 0, op, "expected a positive finite scale but got ", scale);
  const auto [lo, hi] = quant_range(dtype, op);
  check(zero_point >= lo && zero_point <= hi, op, "expected zero_point in [", lo, ", ", hi, "] for ", dtype, " but got ",
        zero_point);
  const Tensor s = scalar_tensor(scale, kFloat64), z = scalar_tensor(zero_point, kInt64);
  return QuantizedTensor(quantized_values(x, s, z, dtype), s, z, QScheme::PerTensorAffine, 0);
}

QuantizedTensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                                     DType dtype) {
  const char* op = "quantize_per_channel";
  check(is_floating(x.dtype()), op, "expected a floating point input but got ", x.dtype());
  const int64_t a = ops::wrap_dim(axis, x.dim(), op);
  const int64_t n = x.dim() ? x.size(a) : 1;
  check(scales.dim() == 1 && scales.numel() == n && zero_points.dim() == 1 && zero_points.numel() == n, op,
        "expected scales and zero_points of shape [", n, "] (the input's size along axis ", a, ") but got ",
        shape_text(scales.sizes()), " and ", shape_text(zero_points.sizes()));
  const auto [lo, hi] = quant_range(dtype, op);
  const Tensor s = scales.to(kFloat64), z = zero_points.to(kInt64);
  if (n > 0) {
    check(amin(s).item<double>() > 0 && std::isfinite(amax(s).item<double>()), op, "expected positive finite scales");
    check(amin(z).item<int64_t>() >= lo && amax(z).item<int64_t>() <= hi, op, "expected zero_points in [", lo, ", ",
          hi, "] for ", dtype);
  }
  Shape along(static_cast<size_t>(x.dim()), 1);
  along[static_cast<size_t>(a)] = n;
  return QuantizedTensor(quantized_values(x, s.reshape(along), z.reshape(along), dtype), s, z,
                         QScheme::PerChannelAffine, a);
}

Tensor matmul_u8s8(const Tensor& a, const Tensor& b) {
  const char* op = "matmul_u8s8";
  check(a.dtype() == kUInt8 && b.dtype() == kInt8 && a.dim() == 2 && b.dim() == 2, op,
        "expected a uint8 (M, K) and an int8 (N, K) matrix but got ", a.dtype(), " ", shape_text(a.sizes()), " and ",
        b.dtype(), " ", shape_text(b.sizes()));
  check(a.size(1) == b.size(1), op, "expected a (M, K) and b (N, K) with one K but got ", shape_text(a.sizes()),
        " and ", shape_text(b.sizes()));
  check(a.size(1) <= (int64_t{1} << 16), op, "K = ", a.size(1), " may overflow int32 (at most 65536)");
  return ops::call(kMatmulU8S8, {a.contiguous(), b.contiguous()});
}

Int8Weight quantize_weight(const Tensor& weight) {
  check(weight.dim() >= 2 && is_floating(weight.dtype()), "quantize_weight", "expected a floating point (out, ...) ",
        "weight of 2 or more dims but got ", weight.dtype(), " ", shape_text(weight.sizes()));
  const Tensor w = weight.detach().to(kFloat32).reshape({weight.size(0), -1});
  check(w.size(1) <= (int64_t{1} << 16), "quantize_weight", "the ", w.size(1), " inputs per output may overflow int32 ",
        "(at most 65536)");
  const Tensor largest = w.numel() ? amax(abs(w), {1}) : zeros({w.size(0)});
  const Tensor scales = where(gt(largest, scalar_tensor(0.0, kFloat32)), largest / 127.0, ones_like(largest));
  const QuantizedTensor q = quantize_per_channel(w, scales, zeros({w.size(0)}, kInt64), 0, kInt8);
  const Tensor values = q.int_repr().contiguous();
  return {values, scales.to(kFloat32).contiguous(), sum(values.to(kInt64), {1}).to(kInt32).contiguous(),
          ops::call(kPackU8S8, {values})};
}

namespace {
// linear_dynamic and linear_int8: input_scale 0 asks the kernel for the input's own range.
Tensor linear_quantized(const char* op, const Tensor& x, const Int8Weight& w, const Tensor& bias, double input_scale,
                        int64_t input_zero_point, bool relu) {
  check(x.dtype() == kFloat32 && x.dim() >= 1, op, "expected a float32 input (..., in_features) but got ", x.dtype(),
        " ", shape_text(x.sizes()));
  check(x.size(-1) == w.values.size(1), op, "expected ", w.values.size(1), " input features but got input ",
        shape_text(x.sizes()));
  if (bias.defined())
    check(bias.dim() == 1 && bias.size(0) == w.values.size(0), op, "expected a bias of shape [", w.values.size(0),
          "] but got ", shape_text(bias.sizes()));
  std::vector<Tensor> in = {x.contiguous(), w.values, w.scales, w.row_sums, w.packed};
  if (bias.defined()) in.push_back(bias.detach().to(kFloat32).contiguous());
  return dispatch1(kLinearDynamic, std::span<const Tensor>(in),
                   {{"has_bias", bias.defined()}, {"input_scale", input_scale}, {"input_zero_point", input_zero_point},
                    {"relu", relu}});
}
}  // namespace

Tensor linear_dynamic(const Tensor& x, const Int8Weight& w, const Tensor& bias) {
  return linear_quantized("linear_dynamic", x, w, bias, 0.0, 0, false);
}

Tensor linear_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias, double input_scale,
                   int64_t input_zero_point, bool relu) {
  check(std::isfinite(input_scale) && input_scale > 0 && input_zero_point >= 0 && input_zero_point <= 255,
        "linear_int8", "expected a positive input scale and a zero point in [0, 255] but got ", input_scale, " and ",
        input_zero_point);
  return linear_quantized("linear_int8", x, w, bias, input_scale, input_zero_point, relu);
}

Tensor conv2d_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias, const Shape& kernel, const Shape& stride,
                   const Shape& padding, const Shape& dilation, double input_scale, int64_t input_zero_point,
                   bool relu) {
  const char* op = "conv2d_int8";
  check(x.dtype() == kFloat32 && x.dim() == 4, op, "expected a float32 input (N, C, H, W) but got ", x.dtype(), " ",
        shape_text(x.sizes()));
  check(kernel.size() == 2 && stride.size() == 2 && padding.size() == 2 && dilation.size() == 2, op,
        "expected kernel, stride, padding and dilation of 2 values each");
  check(w.values.size(1) == x.size(1) * kernel[0] * kernel[1], op, "expected a weight of ", x.size(1), " x ",
        shape_text(kernel), " inputs per output (the input's channels) but it has ", w.values.size(1));
  check(std::isfinite(input_scale) && input_scale > 0 && input_zero_point >= 0 && input_zero_point <= 255, op,
        "expected a positive input scale and a zero point in [0, 255] but got ", input_scale, " and ",
        input_zero_point);
  if (bias.defined())
    check(bias.dim() == 1 && bias.size(0) == w.values.size(0), op, "expected a bias of shape [", w.values.size(0),
          "] but got ", shape_text(bias.sizes()));
  Shape out;
  for (size_t i = 0; i < 2; ++i) {
    check(stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0 && kernel[i] > 0, op,
          "expected positive kernel, stride and dilation and non-negative padding");
    const int64_t span = dilation[i] * (kernel[i] - 1) + 1, room = x.size(2 + static_cast<int64_t>(i)) + 2 * padding[i] - span;
    check(room >= 0, op, "the input ", shape_text(x.sizes()), " padded by ", shape_text(padding),
          " is smaller than the (dilated) kernel ", shape_text(kernel));
    out.push_back(room / stride[i] + 1);
  }
  std::vector<Tensor> in = {x.contiguous(), w.values, w.scales, w.row_sums, w.packed};
  if (bias.defined()) in.push_back(bias.detach().to(kFloat32).contiguous());
  return dispatch1(kConv2dInt8, std::span<const Tensor>(in),
                   {{"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"out", out},
                    {"input_scale", input_scale}, {"input_zero_point", input_zero_point},
                    {"has_bias", bias.defined()}, {"relu", relu}});
}

}  // namespace kiln::quant
