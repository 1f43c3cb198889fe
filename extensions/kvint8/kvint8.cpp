// Attention decoding over an int8 KV cache, as a kiln extension written
// against the stable headers only: the cache holds K and V rows as int8
// with one float scale per row (symmetric, absmax / 127), a quarter of the
// float32 cache's memory, which decoding reads once per token.
//   quantize(x (..., D)) -> (int8 rows, float32 scales (...))
//   decode(q (B, H, D), k, k_scale, v, v_scale (B, H, S, D) / (B, H, S), scale)
//     -> (B, H, D) = softmax(scale q . k_j) v_j, k_j and v_j dequantized
// in one pass over the keys (online softmax), on kiln's threads per (b, h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kiln/stable/library.h"

using kiln::stable::Tensor;

namespace {

void expect(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

std::tuple<Tensor, Tensor> quantize(Tensor x) {
  expect(x.scalar_type() == kiln::stable::dtype_code<float>() && x.dim() >= 1, "kvint8::quantize: expected float32 (..., D)");
  const Tensor xc = kiln::stable::call("contiguous", x);
  const int64_t D = xc.size(-1), rows = D ? xc.numel() / D : 0;
  std::vector<int64_t> row_shape = xc.sizes();
  row_shape.pop_back();
  Tensor q = kiln::stable::call("empty", xc.sizes(), kiln::stable::kw("dtype", kiln::stable::scalar_type<int8_t>()));
  Tensor s = kiln::stable::call("empty", row_shape, kiln::stable::kw("dtype", kiln::stable::scalar_type<float>()));
  const float* px = xc.data_ptr<float>();
  int8_t* pq = q.data_ptr<int8_t>();
  float* ps = s.data_ptr<float>();
  kiln::stable::parallel_for(0, rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* row = px + r * D;
      float amax = 0.0f;
      for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(row[d]));
      const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
      ps[r] = scale;
      for (int64_t d = 0; d < D; ++d)
        pq[r * D + d] = static_cast<int8_t>(std::clamp(std::nearbyint(row[d] / scale), -127.0f, 127.0f));
    }
  });
  return {q, s};
}

Tensor decode(Tensor q, Tensor k, Tensor k_scale, Tensor v, Tensor v_scale, double scale) {
  expect(q.dim() == 3 && k.dim() == 4 && v.dim() == 4, "kvint8::decode: expected q (B, H, D), k and v (B, H, S, D)");
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = k.size(2);
  expect(k.sizes() == std::vector<int64_t>{B, H, S, D} && v.sizes() == k.sizes(), "kvint8::decode: k and v must be (B, H, S, D)");
  expect(k_scale.sizes() == std::vector<int64_t>{B, H, S} && v_scale.sizes() == k_scale.sizes(),
         "kvint8::decode: the scales must be (B, H, S)");
  expect(q.scalar_type() == kiln::stable::dtype_code<float>(), "kvint8::decode: q must be float32");
  expect(k.scalar_type() == kiln::stable::dtype_code<int8_t>() && v.scalar_type() == k.scalar_type(),
         "kvint8::decode: k and v must be int8 (from kvint8::quantize)");
  expect(k_scale.scalar_type() == kiln::stable::dtype_code<float>() && v_scale.scalar_type() == k_scale.scalar_type(),
         "kvint8::decode: the scales must be float32");
  const Tensor qc = kiln::stable::call("contiguous", q), kc = kiln::stable::call("contiguous", k),
               vc = kiln::stable::call("contiguous", v), ksc = kiln::stable::call("contiguous", k_scale),
               vsc = kiln::stable::call("contiguous", v_scale);
  const float* pq = qc.data_ptr<float>();
  const int8_t* pk = kc.data_ptr<int8_t>();
  const int8_t* pv = vc.data_ptr<int8_t>();
  const float* pks = ksc.data_ptr<float>();
  const float* pvs = vsc.data_ptr<float>();
  Tensor out = kiln::stable::empty_like(qc);
  float* po = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  kiln::stable::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(D));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const float* qr = pq + bh * D;
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < S; ++j) {
        const int8_t* kr = pk + (bh * S + j) * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += qr[d] * static_cast<float>(kr[d]);
        const float s = sc * pks[bh * S + j] * dot;
        // Online softmax: rescale what was summed when the maximum grows.
        const float m_new = std::max(m, s);
        const float correction = std::exp(m - m_new), p = std::exp(s - m_new);
        l = l * correction + p;
        const int8_t* vr = pv + (bh * S + j) * D;
        const float pw = p * pvs[bh * S + j];
        for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * correction + pw * static_cast<float>(vr[d]);
        m = m_new;
      }
      for (int64_t d = 0; d < D; ++d) po[bh * D + d] = S ? acc[d] / l : 0.0f;
    }
  });
  return out;
}

}  // namespace

KILN_STABLE_LIBRARY(kvint8, m) {
  m.def("quantize(Tensor x) -> (Tensor values, Tensor scales)");
  m.def("decode(Tensor q, Tensor k, Tensor k_scale, Tensor v, Tensor v_scale, float scale) -> Tensor");
}

KILN_STABLE_LIBRARY_IMPL(kvint8, CPU, m) {
  m.impl<&quantize>("quantize");
  m.impl<&decode>("decode");
}
