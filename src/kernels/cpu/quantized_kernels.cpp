// The int8 ops' kernels: matmul_u8s8 (the GEMM of int8_gemm.h) and
// linear_dynamic: the input quantized to uint8 by its own range (one scale
// and zero point per call, the range widened to hold 0 so that 0 is exact),
// the exact int32 product with the int8 weight, then one pass that scales
// back: y = sx sw[n] (C[m, n] - zx rowsum[n]) + bias[n].
#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/detail/aligned_buffer.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"
#include "kiln/error.h"

namespace kiln::cpu {
namespace {

// PyTorch's quantization of a value to uint8: clamp(round_half_even(x /
// scale) + zero_point, 0, 255), with x / scale rounded before the zero
// point is added (adding first would round the sum, which can move a half
// by one step). x / scale is first clamped to a range the result cannot
// leave, so the 1.5 * 2^23 rounding trick is exact; branch-free, the loops
// using it vectorize.
struct Uint8Quantizer {
  float inverse, zero_point;
  Uint8Quantizer(double scale, int32_t zp) : inverse(static_cast<float>(1.0 / scale)), zero_point(static_cast<float>(zp)) {}
  uint8_t operator()(float x) const {
    constexpr float magic = 12582912.0f;
    const float t = std::min(std::max(x * inverse, -zero_point - 1.0f), 256.0f - zero_point);
    const float r = (t + magic) - magic;
    return static_cast<uint8_t>(std::min(std::max(r + zero_point, 0.0f), 255.0f));
  }
};

// The int8 weight's inputs (values, scales, row sums, packed) at 1..4 and
// the optional bias at 5, and the two steps linear and conv share: the
// product of quantized input rows with the weight, and its scaling back.
struct WeightInputs {
  const int8_t* values;
  const float* scales;
  const int32_t* row_sums;
  const int8_t* packed;
  const float* bias;  // null without one
  int64_t rows, K;
  bool vnni;  // the packed kernel runs (int8_path() once per call)
  bool relu;  // max(y, 0) in the output pass (a fused ReLU)

  // The stride of the quantized input's rows: K, rounded up to a multiple
  // of 4 (zeros after K) for the packed kernel's groups.
  int64_t row_stride() const { return vnni ? (K + 3) / 4 * 4 : K; }
  // acc (M x rows) = q (M rows of stride row_stride()) times the weight transposed.
  void product(const uint8_t* q, int64_t M, int32_t* acc) const {
    if (vnni)
      gemm_u8s8_packed(q, row_stride(), packed, acc, M, rows, K);
    else
      gemm_u8s8(q, values, acc, M, rows, K);
  }
  // Output n of a row from its int32 sum: sx sw[n] (acc - zx rowsum[n]) + b[n]
  // (then max(., 0) for a fused ReLU).
  float output(int32_t acc, int64_t n, float input_scale, int32_t input_zero_point) const {
    float v = input_scale * scales[n] * static_cast<float>(acc - input_zero_point * row_sums[n]);
    if (bias) v += bias[n];
    return relu && v < 0 ? 0.0f : v;  // NaN stays NaN, as relu's
  }
};
WeightInputs weight_inputs(const OpCall& c) {
  return {c.inputs[1].data_ptr<int8_t>(), c.inputs[2].data_ptr<float>(), c.inputs[3].data_ptr<int32_t>(),
          c.inputs[4].data_ptr<int8_t>(), c.attrs.get_bool("has_bias") ? c.inputs[5].data_ptr<float>() : nullptr,
          c.inputs[1].size(0), c.inputs[1].size(1), int8_path() == Int8Path::VNNI,
          c.attrs.has("relu") && c.attrs.get_bool("relu")};
}

}  // namespace

void matmul_u8s8_kernel(const OpCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  gemm_u8s8(a.data_ptr<uint8_t>(), b.data_ptr<int8_t>(), c.outputs[0].data_ptr<int32_t>(), a.size(0), b.size(0),
            a.size(1));
}

void pack_u8s8_weight_kernel(const OpCall& c) {
  const Tensor& w = c.inputs[0];
  pack_b(w.data_ptr<int8_t>(), w.size(0), w.size(1), c.outputs[0].data_ptr<int8_t>());
}

void linear_dynamic_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const WeightInputs wi = weight_inputs(c);
  const int64_t K = wi.K, N = wi.rows, M = K ? x.numel() / K : 0;
  float* y = c.outputs[0].data_ptr<float>();
  if (M == 0) return;
  const float* xp = x.data_ptr<float>();
  float lo = 0, hi = 0;
  const bool finite = simd::min_max_f32(xp, static_cast<size_t>(M * K), &lo, &hi);
  check(finite, "linear_dynamic", "the input (", M, " x ", K, ") holds inf or NaN: no quantization range covers it");
  // Static (linear_int8): the calibrated scale and zero point; dynamic: the
  // input's range, widened to hold 0 so that 0 quantizes exactly.
  double scale = c.attrs.get_double("input_scale");
  int32_t zero_point = static_cast<int32_t>(c.attrs.get_int("input_zero_point"));
  if (scale == 0) {
    lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);
    scale = hi > lo ? (static_cast<double>(hi) - lo) / 255.0 : 1.0;
    zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0));
  }
  const Uint8Quantizer quantize(scale, zero_point);
  const int64_t lda = wi.row_stride();
  // Scratch left uninitialised (every byte is written before it is read):
  // zero-filling the megabyte of int32 sums at batch 256 took a tenth of
  // the call, while the other thread waited.
  const auto q = uninitialized_aligned<uint8_t>(static_cast<size_t>(M * lda));
  parallel_for(0, M, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, K)), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      uint8_t* row = q.get() + m * lda;
      simd::quantize_u8_f32(xp + m * K, static_cast<size_t>(K), quantize.inverse, quantize.zero_point, row);
      std::fill(row + K, row + lda, uint8_t{0});  // the packed kernel's groups of 4 read past K
    }
  });
  const auto acc = uninitialized_aligned<int32_t>(static_cast<size_t>(M * N));
  wi.product(q.get(), M, acc.get());
  parallel_for(0, M, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, N)), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m)
      for (int64_t n = 0; n < N; ++n)
        y[m * N + n] = wi.output(acc[m * N + n], n, static_cast<float>(scale), zero_point);
  });
}

// Per image: the uint8 input's im2col rows (one per output pixel, K =
// C kh kw columns in the weight's order, padded to a multiple of 4 for the
// VNNI kernel; taps in the padding hold the zero point), the int32 GEMM
// with the weight, then y[n, o, p] = sx sw[o] (acc[p, o] - zx rowsum[o]) + b[o].
// Images split over the thread pool (the GEMM inside runs on one thread);
// a single image gives the pool to the GEMM.
void conv2d_int8_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const WeightInputs wi = weight_inputs(c);
  const Shape &kernel = c.attrs.get_shape("kernel"), &stride = c.attrs.get_shape("stride"),
              &padding = c.attrs.get_shape("padding"), &dilation = c.attrs.get_shape("dilation"),
              &out = c.attrs.get_shape("out");
  const double scale = c.attrs.get_double("input_scale");
  const int32_t zero_point = static_cast<int32_t>(c.attrs.get_int("input_zero_point"));
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = wi.rows;
  const int64_t OH = out[0], OW = out[1], P = OH * OW, lda = wi.row_stride();
  const Uint8Quantizer quantize(scale, zero_point);
  const float* xp = x.data_ptr<float>();
  float* y = c.outputs[0].data_ptr<float>();
  float lo = 0, hi = 0;
  check(simd::min_max_f32(xp, static_cast<size_t>(x.numel()), &lo, &hi), "conv2d_int8", "the input ",
        shape_str(x.sizes()), " holds inf or NaN, which no uint8 value stands for");
  auto image = [&](int64_t n) {
    // The image quantized, then its im2col rows.
    std::vector<uint8_t> q(static_cast<size_t>(C * H * W));
    for (int64_t i = 0; i < C * H * W; ++i) q[static_cast<size_t>(i)] = quantize(xp[n * C * H * W + i]);
    std::vector<uint8_t> cols(static_cast<size_t>(P * lda), 0);
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        uint8_t* row = cols.data() + (oh * OW + ow) * lda;
        for (int64_t ch = 0; ch < C; ++ch)
          for (int64_t kh = 0; kh < kernel[0]; ++kh) {
            const int64_t ih = oh * stride[0] - padding[0] + kh * dilation[0];
            for (int64_t kw = 0; kw < kernel[1]; ++kw) {
              const int64_t iw = ow * stride[1] - padding[1] + kw * dilation[1];
              const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
              *row++ = inside ? q[static_cast<size_t>((ch * H + ih) * W + iw)] : static_cast<uint8_t>(zero_point);
            }
          }
      }
    std::vector<int32_t> acc(static_cast<size_t>(P * O));
    wi.product(cols.data(), P, acc.data());
    for (int64_t o = 0; o < O; ++o) {
      float* plane = y + (n * O + o) * P;
      for (int64_t p = 0; p < P; ++p)
        plane[p] = wi.output(acc[static_cast<size_t>(p * O + o)], o, static_cast<float>(scale), zero_point);
    }
  };
  if (N == 1) return image(0);
  parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) image(n);
  });
}

}  // namespace kiln::cpu
