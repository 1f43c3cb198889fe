// The int8 ops' kernels: matmul_u8s8 (the GEMM of int8_gemm.h) and
// linear_dynamic: the input quantized to uint8 by its own range (one scale
// and zero point per call, the range widened to hold 0 so that 0 is exact),
// the exact int32 product with the int8 weight, then one pass that scales
// back: y = sx sw[n] (C[m, n] - zx rowsum[n]) + bias[n].
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/int8_gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"
#include "kiln/error.h"

namespace kiln::cpu {

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
  const int8_t* w = c.inputs[1].data_ptr<int8_t>();
  const float* w_scale = c.inputs[2].data_ptr<float>();
  const int32_t* row_sum = c.inputs[3].data_ptr<int32_t>();
  const int8_t* packed = c.inputs[4].data_ptr<int8_t>();
  const float* bias = c.attrs.get_bool("has_bias") ? c.inputs[5].data_ptr<float>() : nullptr;
  const int64_t K = c.inputs[1].size(1), N = c.inputs[1].size(0), M = K ? x.numel() / K : 0;
  float* y = c.outputs[0].data_ptr<float>();
  if (M == 0) return;
  const float* xp = x.data_ptr<float>();
  float lo = 0, hi = 0;
  const bool finite = simd::min_max_f32(xp, static_cast<size_t>(M * K), &lo, &hi);
  check(finite, "linear_dynamic", "the input (", M, " x ", K, ") holds inf or NaN: no quantization range covers it");
  lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);  // the range holds 0, so 0 quantizes exactly
  const double scale = hi > lo ? (static_cast<double>(hi) - lo) / 255.0 : 1.0;
  const int32_t zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0));
  const float inverse = static_cast<float>(1.0 / scale);
  // Rows of the quantized input padded with zeros to a multiple of 4 (the packed kernel's groups).
  const bool vnni = int8_path() == Int8Path::VNNI;
  const int64_t lda = vnni ? (K + 3) / 4 * 4 : K;
  std::vector<uint8_t> q(static_cast<size_t>(M * lda), 0);
  // clamp(x / scale + zero_point) rounded half to even by the 1.5 * 2^23
  // trick (exact below 2^22; the clamp keeps it in [0, 255]): the same as
  // rounding x / scale and adding the integer zero point, and vectorizable.
  const float zp = static_cast<float>(zero_point), magic = 12582912.0f;
  parallel_for(0, M, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, K)), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const float* row = xp + m * K;
      uint8_t* out = q.data() + m * lda;
      for (int64_t k = 0; k < K; ++k) {
        const float v = std::min(std::max(row[k] * inverse + zp, 0.0f), 255.0f);
        out[k] = static_cast<uint8_t>((v + magic) - magic);
      }
    }
  });
  std::vector<int32_t> acc(static_cast<size_t>(M * N));
  if (vnni)
    gemm_u8s8_packed(q.data(), lda, packed, acc.data(), M, N, K);
  else
    gemm_u8s8(q.data(), w, acc.data(), M, N, K);
  parallel_for(0, M, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, N)), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const int32_t centred = acc[static_cast<size_t>(m * N + n)] - zero_point * row_sum[n];
        const float v = static_cast<float>(scale) * w_scale[n] * static_cast<float>(centred);
        y[m * N + n] = bias ? v + bias[n] : v;
      }
  });
}

}  // namespace kiln::cpu
