// int8 quantization, as torch.ao.quantization's: quantized tensors
// (per-tensor and per-channel affine, qint8 / quint8), the u8 x s8 -> s32
// GEMM the CPU's dot-product instructions run (AVX512-VNNI, an AVX2 path,
// a scalar one; picked at run time by cpu_capability()), and dynamic
// quantization of Linear layers: int8 weights, activations quantized per
// call. A quantized tensor is its integer values plus its quantizer, not a
// dtype of Tensor: qint8 is kInt8 values, quint8 kUInt8.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::quant {

enum class QScheme { PerTensorAffine, PerChannelAffine };

class QuantizedTensor {
 public:
  QuantizedTensor() = default;
  // values: int8 (qint8) or uint8 (quint8); scales float64 and zero points
  // int64, one each (per tensor) or one per index of `axis`.
  QuantizedTensor(Tensor values, Tensor scales, Tensor zero_points, QScheme scheme, int64_t axis);

  const Tensor& int_repr() const { return values_; }
  Tensor dequantize() const;  // float32: (values - zero_point) * scale
  QScheme qscheme() const { return scheme_; }
  DType dtype() const { return values_.dtype(); }  // kInt8 (qint8) or kUInt8 (quint8)
  const Shape& sizes() const { return values_.sizes(); }
  double q_scale() const;          // per tensor only
  int64_t q_zero_point() const;    // per tensor only
  const Tensor& q_per_channel_scales() const;       // per channel only (float64)
  const Tensor& q_per_channel_zero_points() const;  // per channel only (int64)
  int64_t q_per_channel_axis() const;               // per channel only

 private:
  Tensor values_, scales_, zero_points_;
  QScheme scheme_ = QScheme::PerTensorAffine;
  int64_t axis_ = 0;
};

// q = clamp(round(x / scale) + zero_point) into dtype's range (round half
// to even, as PyTorch); dtype kInt8 (qint8) or kUInt8 (quint8).
QuantizedTensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype);
QuantizedTensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                                     DType dtype);

// The exact int32 product a (M, K) uint8 times b (N, K) int8 transposed:
// out[m, n] = sum_k a[m, k] b[n, k]. The kernel CPUs' dot-product
// instructions run; K up to 2^16 (no int32 overflow).
Tensor matmul_u8s8(const Tensor& a, const Tensor& b);

// A weight in int8 for the int8 kernels (Linear's (out, in); a
// convolution's (out, in / groups, k...) as (out, in / groups * k...)):
// int8 values, one symmetric scale per output row (zero point 0), each
// row's sum (the activations' zero point correction), and the values in
// the VNNI kernel's packed layout.
struct Int8Weight {
  Tensor values;    // int8 (out, K)
  Tensor scales;    // float32 (out)
  Tensor row_sums;  // int32 (out)
  Tensor packed;    // int8: values in the VNNI kernel's layout (1-D)
};
// Per-row symmetric int8 weights: scale = max |w| / 127 (or 1 for a zero
// row); a weight of more than 2 dims is flattened after its first.
Int8Weight quantize_weight(const Tensor& weight);

// y = x W^T + bias with x (..., in) float32 quantized per call to uint8
// (its min and max, with 0, give the scale and zero point) and the int8
// weight; the product is exact in int32, then scaled back to float32. Not
// differentiable (inference), as PyTorch's dynamic quantized Linear.
Tensor linear_dynamic(const Tensor& x, const Int8Weight& w, const Tensor& bias);

// Observers (torch.ao.quantization's) for static quantization: each sees
// calibration batches (observe) and gives the scale and zero point that
// cover them (calculate_qparams), by PyTorch's formulas: the range always
// holds 0; affine: scale = (max - min) / (qmax - qmin), zero_point = qmin -
// round(min / scale); symmetric: scale = max |x| / ((qmax - qmin) / 2),
// zero_point 0 (qint8) or 128 (quint8); scale at least float32's epsilon.
struct QParams {
  Tensor scales;       // float64: one (per tensor) or one per channel
  Tensor zero_points;  // int64, alike
};

class MinMaxObserver {
 public:
  // dtype kInt8 (qint8) or kUInt8 (quint8); scheme PerTensorAffine (with
  // symmetric) or PerChannelAffine along ch_axis.
  explicit MinMaxObserver(DType dtype = kUInt8, bool symmetric = false, QScheme scheme = QScheme::PerTensorAffine,
                          int64_t ch_axis = 0);
  void observe(const Tensor& x);
  QParams calculate_qparams() const;
  const Tensor& min_val() const { return min_; }  // undefined before the first batch
  const Tensor& max_val() const { return max_; }

 private:
  DType dtype_;
  bool symmetric_;
  QScheme scheme_;
  int64_t axis_;
  Tensor min_, max_;
};

// The range that minimises the quantization error of what it has seen: a
// histogram of `bins` bins over the running min/max (re-binned when the range
// grows), then, as PyTorch's HistogramObserver, a greedy search shrinking
// the range one bin at a time from whichever end lowers the estimated L2
// error (values clipped beyond the range, plus step^2 / 12 for each value
// inside); the best range gives the affine qparams. Per tensor only.
class HistogramObserver {
 public:
  explicit HistogramObserver(DType dtype = kUInt8, int64_t bins = 2048);
  void observe(const Tensor& x);
  QParams calculate_qparams() const;
  // The chosen range [lo, hi] (before the range is widened to hold 0).
  std::pair<double, double> chosen_range() const;

 private:
  DType dtype_;
  std::vector<double> histogram_;
  double lo_ = 0, hi_ = 0;
  bool seen_ = false;
};

// conv2d with int8 arithmetic: x (N, C, H, W) float32 quantized to uint8
// with the given (calibrated) scale and zero point, the int8 weight of
// quantize_weight(weight (O, C, kh, kw)); im2col (padding holds the zero
// point, i.e. 0.0), the exact int32 GEMM, then scaled back to float32 with
// the bias. groups = 1. Not differentiable (inference). relu: max(y, 0)
// in the same pass (a fused conv-relu; NaN stays NaN).
Tensor conv2d_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias, const Shape& kernel, const Shape& stride,
                   const Shape& padding, const Shape& dilation, double input_scale, int64_t input_zero_point,
                   bool relu = false);

// y = x W^T + bias with x quantized by a given (calibrated) scale and zero
// point: the static counterpart of linear_dynamic. relu as conv2d_int8's.
Tensor linear_int8(const Tensor& x, const Int8Weight& w, const Tensor& bias, double input_scale,
                   int64_t input_zero_point, bool relu = false);

// Eager-mode static post-training quantization, as torch.ao.quantization's
// fuse_modules / prepare / convert, of the layers held by the model's
// Sequentials (the model itself if it is one, and every Sequential inside
// it: what C++ lets a function replace): fuse_conv_bn folds each
// BatchNorm2d (its running statistics) into the Conv2d before it (the
// model must then run in eval mode); prepare puts a HistogramObserver on
// the input of every Conv2d (groups 1, zero padding) and Linear; the
// caller then runs calibration batches through the model; convert
// replaces each observed layer by its int8 module (QuantizedConv2d,
// QuantizedLinear) with the calibrated input scale and zero point, and
// fuses a ReLU right after it into its output pass (conv-relu,
// linear-relu, conv-bn-relu; the ReLU becomes an Identity). Each returns
// how many layers it changed.
int64_t fuse_conv_bn(nn::Module& model);
int64_t prepare(nn::Module& model);
int64_t convert(nn::Module& model);

// The int8 layers convert makes: float32 in and out, int8 inside; the
// weight quantized per output channel, the input by its calibrated qparams.
class QuantizedLayer : public nn::UnaryModule {
 public:
  Int8Weight weight;
  Tensor bias;
  double input_scale;
  int64_t input_zero_point;
  bool relu = false;  // a ReLU fused after it (convert)

 protected:
  QuantizedLayer(const Tensor& float_weight, const Tensor& float_bias, const QParams& input);
};
class QuantizedConv2d : public QuantizedLayer {
 public:
  QuantizedConv2d(const nn::ConvNd& conv, const QParams& input);
  Tensor forward(const Tensor& x) override;
  Shape kernel_size, stride, padding, dilation;
};
class QuantizedLinear : public QuantizedLayer {
 public:
  QuantizedLinear(const nn::Linear& linear, const QParams& input);
  Tensor forward(const Tensor& x) override;
};

// torch.ao.quantization.quantize_dynamic for Linear, in place: every
// nn::Linear in the model runs linear_dynamic from now on (its float
// weight stays for state_dict). Returns how many were quantized.
int64_t quantize_dynamic(nn::Module& model);

}  // namespace kiln::quant

KILN_API_END
