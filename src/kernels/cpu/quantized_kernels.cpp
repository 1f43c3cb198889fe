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
#include "kiln/error.h"

namespace kiln::cpu {

void matmul_u8s8_kernel(const OpCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  gemm_u8s8(a.data_ptr<uint8_t>(), b.data_ptr<int8_t>(), c.outputs[0].data_ptr<int32_t>(), a.size(0), b.size(0),
            a.size(1));
}

void linear_dynamic_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const int8_t* w = c.inputs[1].data_ptr<int8_t>();
  const float* w_scale = c.inputs[2].data_ptr<float>();
  const int32_t* row_sum = c.inputs[3].data_ptr<int32_t>();
  const float* bias = c.attrs.get_bool("has_bias") ? c.inputs[4].data_ptr<float>() : nullptr;
  const int64_t K = c.inputs[1].size(1), N = c.inputs[1].size(0), M = K ? x.numel() / K : 0;
  float* y = c.outputs[0].data_ptr<float>();
  if (M == 0) return;
  const float* xp = x.data_ptr<float>();
  float lo = 0, hi = 0;
  bool finite = true;
  for (int64_t i = 0; i < M * K; ++i) {
    lo = std::min(lo, xp[i]), hi = std::max(hi, xp[i]);
    finite = finite && std::isfinite(xp[i]);
  }
  check(finite, "linear_dynamic", "the input (", M, " x ", K, ") holds inf or NaN: no quantization range covers it");
  const double scale = hi > lo ? (static_cast<double>(hi) - lo) / 255.0 : 1.0;
  const int32_t zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0));
  const float inverse = static_cast<float>(1.0 / scale);
  std::vector<uint8_t> q(static_cast<size_t>(M * K));
  parallel_for(0, M * K, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      q[static_cast<size_t>(i)] =
          static_cast<uint8_t>(std::clamp(std::nearbyint(xp[i] * inverse) + static_cast<float>(zero_point), 0.0f, 255.0f));
  });
  std::vector<int32_t> acc(static_cast<size_t>(M * N));
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
