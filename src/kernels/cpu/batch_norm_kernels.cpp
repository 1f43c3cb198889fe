// batch_norm in training: per channel, the mean and the biased variance of
// its N x spatial values (two passes; lane-wise partial sums per plane,
// added up in double),
// then y = x scale + shift; the backward from the two per-channel sums
// sum(dy) and sum(dy (x - mean)). Channels are split over the thread pool;
// each reads its N contiguous planes (the loops over them: batch_norm_simd.cpp,
// per Highway target). A channels-last output takes the
// rows path: rows of C channels, per-channel sums over blocks of rows.
#include <array>
#include <cmath>
#include <vector>

#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {
namespace {

struct Planes {
  int64_t N, C, HW;
  int64_t at(int64_t n, int64_t c) const { return (n * C + c) * HW; }  // the first element of plane (n, c)
  double count() const { return static_cast<double>(N * HW); }
  simd::BatchNormPlanes simd() const {
    return {static_cast<size_t>(N), static_cast<size_t>(HW), static_cast<size_t>(C * HW)};
  }
};

Planes planes(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, N * C > 0 ? x.numel() / (N * C) : 0};
}

int64_t channel_grain(const Planes& p) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, p.N * p.HW)); }

template <class T>
T value_or(const Tensor& t, bool has, int64_t c, T fallback) {
  return has ? t.data_ptr<T>()[c] : fallback;
}

// ---- channels-last: R = N x spatial rows of C channels

// Rows per block of partial sums: fixed, so that the sums (added up in
// block order) do not depend on the thread count.
constexpr int64_t kRowBlock = 128;

// K per-channel sums over all rows: add_row(r, acc) adds row r's terms to
// acc[k][0, C), in double.
template <int K, class AddRow>
std::array<std::vector<double>, K> channel_sums(int64_t R, int64_t C, const AddRow& add_row) {
  const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
  std::vector<double> partial(static_cast<size_t>(blocks * K * C), 0.0);
  parallel_for(0, blocks, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, kRowBlock * C)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::array<double*, K> acc;
      for (int k = 0; k < K; ++k) acc[k] = partial.data() + (b * K + k) * C;
      for (int64_t r = b * kRowBlock; r < std::min(R, (b + 1) * kRowBlock); ++r) add_row(r, acc);
    }
  });
  std::array<std::vector<double>, K> total;
  for (int k = 0; k < K; ++k) {
    total[k].assign(static_cast<size_t>(C), 0.0);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t ch = 0; ch < C; ++ch) total[k][ch] += partial[(b * K + k) * C + ch];
  }
  return total;
}

// out[r, c] = a[c] in0[r, c] + b[c] in1[r, c] + k[c] over all rows (in1 may be null when b is).
template <class T>
void rows_affine(int64_t R, int64_t C, T* out, const T* in0, const std::vector<T>& a, const T* in1,
                 const std::vector<T>& b, const std::vector<T>& k) {
  parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* o = out + r * C;
      const T* u = in0 + r * C;
      if (in1 == nullptr) {
        for (int64_t ch = 0; ch < C; ++ch) o[ch] = u[ch] * a[ch] + k[ch];
      } else {
        const T* v = in1 + r * C;
        for (int64_t ch = 0; ch < C; ++ch) o[ch] = a[ch] * u[ch] + b[ch] * v[ch] + k[ch];
      }
    }
  });
}

template <class T>
void batch_norm_rows(const OpCall& c, const Tensor& x, const Tensor& w, const Tensor& b, bool has_w, bool has_b,
                     double eps) {
  const int64_t C = x.size(1), R = C > 0 ? x.numel() / C : 0;
  const T* xp = x.data_ptr<T>();
  const auto [sum] = channel_sums<1>(R, C, [&](int64_t r, const std::array<double*, 1>& acc) {
    const T* v = xp + r * C;
    for (int64_t ch = 0; ch < C; ++ch) acc[0][ch] += static_cast<double>(v[ch]);
  });
  std::vector<T> m(static_cast<size_t>(C));
  for (int64_t ch = 0; ch < C; ++ch) m[ch] = static_cast<T>(sum[ch] / static_cast<double>(R));
  const auto [squares] = channel_sums<1>(R, C, [&](int64_t r, const std::array<double*, 1>& acc) {
    const T* v = xp + r * C;
    for (int64_t ch = 0; ch < C; ++ch) acc[0][ch] += static_cast<double>((v[ch] - m[ch]) * (v[ch] - m[ch]));
  });
  std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t ch = 0; ch < C; ++ch) {
    const double mean = sum[ch] / static_cast<double>(R), var = squares[ch] / static_cast<double>(R);
    const double sc = static_cast<double>(value_or<T>(w, has_w, ch, T(1))) / std::sqrt(var + eps);
    scale[ch] = static_cast<T>(sc);
    shift[ch] = static_cast<T>(static_cast<double>(value_or<T>(b, has_b, ch, T(0))) - mean * sc);
    c.outputs[1].data_ptr<T>()[ch] = static_cast<T>(mean), c.outputs[2].data_ptr<T>()[ch] = static_cast<T>(var);
  }
  rows_affine<T>(R, C, c.outputs[0].data_ptr<T>(), xp, scale, nullptr, {}, shift);
}

template <class T>
void batch_norm_backward_rows(const OpCall& c, const Tensor& gy, const Tensor& x, const Tensor& w, bool has_w,
                              const Tensor& mean, const Tensor& var, double eps, bool want_x, bool want_w, bool want_b) {
  const int64_t C = x.size(1), R = C > 0 ? x.numel() / C : 0;
  const T *gp = gy.data_ptr<T>(), *xp = x.data_ptr<T>();
  std::vector<T> m(static_cast<size_t>(C));
  for (int64_t ch = 0; ch < C; ++ch) m[ch] = mean.data_ptr<T>()[ch];
  const auto [sum_dy, sum_dy_xmu] = channel_sums<2>(R, C, [&](int64_t r, const std::array<double*, 2>& acc) {
    const T *g = gp + r * C, *v = xp + r * C;
    for (int64_t ch = 0; ch < C; ++ch) {
      acc[0][ch] += static_cast<double>(g[ch]);
      acc[1][ch] += static_cast<double>(g[ch] * (v[ch] - m[ch]));
    }
  });
  std::vector<T> a(static_cast<size_t>(C)), bx(static_cast<size_t>(C)), k(static_cast<size_t>(C));
  for (int64_t ch = 0; ch < C; ++ch) {
    const double mu = static_cast<double>(m[ch]);
    const double invstd = 1 / std::sqrt(static_cast<double>(var.data_ptr<T>()[ch]) + eps);
    if (want_w) c.outputs[1].data_ptr<T>()[ch] = static_cast<T>(sum_dy_xmu[ch] * invstd);
    if (want_b) c.outputs[2].data_ptr<T>()[ch] = static_cast<T>(sum_dy[ch]);
    const double scale = static_cast<double>(value_or<T>(w, has_w, ch, T(1))) * invstd;
    const double mean_dy = sum_dy[ch] / static_cast<double>(R),
                 proj = sum_dy_xmu[ch] / static_cast<double>(R) * invstd * invstd;
    a[ch] = static_cast<T>(scale), bx[ch] = static_cast<T>(-scale * proj), k[ch] = static_cast<T>(scale * (proj * mu - mean_dy));
  }
  if (want_x) rows_affine<T>(R, C, c.outputs[0].data_ptr<T>(), gp, a, xp, bx, k);
}

// The output's memory format: channels-last takes the rows path, with the
// inputs in that format too.
MemoryFormat output_format(const Tensor& out) { return channels_last(out) ? out.suggest_memory_format() : MemoryFormat::Contiguous; }

}  // namespace

void batch_norm_training_kernel(const OpCall& c) {
  const MemoryFormat f = output_format(c.outputs[0]);
  if (f != MemoryFormat::Contiguous) {
    const bool has_w = c.attrs.get_bool("has_weight"), has_b = c.attrs.get_bool("has_bias");
    const Tensor x = contiguous(c.inputs[0], f);
    const Tensor w = has_w ? contiguous(c.inputs[1]) : Tensor(), b = has_b ? contiguous(c.inputs[has_w ? 2 : 1]) : Tensor();
    return visit_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
      batch_norm_rows<decltype(tag)>(c, x, w, b, has_w, has_b, c.attrs.get_double("eps"));
    });
  }
  const Tensor x = contiguous(c.inputs[0]);
  const bool has_w = c.attrs.get_bool("has_weight"), has_b = c.attrs.get_bool("has_bias");
  const Tensor w = has_w ? contiguous(c.inputs[1]) : Tensor(), b = has_b ? contiguous(c.inputs[has_w ? 2 : 1]) : Tensor();
  const double eps = c.attrs.get_double("eps");
  const Planes p = planes(x);
  visit_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    T *yp = c.outputs[0].data_ptr<T>(), *mean_out = c.outputs[1].data_ptr<T>(), *var_out = c.outputs[2].data_ptr<T>();
    parallel_for(0, p.C, channel_grain(p), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        double mean, var;
        simd::batch_norm_stats(xp + p.at(0, ch), p.simd(), &mean, &var);
        const double scale = static_cast<double>(value_or<T>(w, has_w, ch, T(1))) / std::sqrt(var + eps);
        const T s = static_cast<T>(scale), shift = static_cast<T>(static_cast<double>(value_or<T>(b, has_b, ch, T(0))) - mean * scale);
        simd::batch_norm_affine(xp + p.at(0, ch), yp + p.at(0, ch), p.simd(), s, shift);
        mean_out[ch] = static_cast<T>(mean), var_out[ch] = static_cast<T>(var);
      }
    });
  });
}

// dx = w invstd (dy - mean(dy) - (x - mean) invstd^2 mean(dy (x - mean)));
// dw = invstd sum(dy (x - mean)); db = sum(dy).
void batch_norm_backward_kernel(const OpCall& c) {
  const bool has_w = c.attrs.get_bool("has_weight");
  const bool want_x = c.attrs.get_bool("input_grad"), want_w = c.attrs.get_bool("weight_grad"),
             want_b = c.attrs.get_bool("bias_grad");
  // The input gradient's format (with none wanted: the input's).
  const MemoryFormat f = output_format(want_x ? c.outputs[0] : c.inputs[1]);
  const Tensor gy = contiguous(c.inputs[0], f), x = contiguous(c.inputs[1], f);
  const Tensor w = has_w ? contiguous(c.inputs[2]) : Tensor();
  const Tensor mean = contiguous(c.inputs[has_w ? 3 : 2]), var = contiguous(c.inputs[has_w ? 4 : 3]);
  const double eps = c.attrs.get_double("eps");
  if (f != MemoryFormat::Contiguous)
    return visit_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
      batch_norm_backward_rows<decltype(tag)>(c, gy, x, w, has_w, mean, var, eps, want_x, want_w, want_b);
    });
  const Planes p = planes(x);
  visit_f32_f64(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T *gp = gy.data_ptr<T>(), *xp = x.data_ptr<T>();
    parallel_for(0, p.C, channel_grain(p), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const double mu = static_cast<double>(mean.data_ptr<T>()[ch]);
        const double invstd = 1 / std::sqrt(static_cast<double>(var.data_ptr<T>()[ch]) + eps);
        double sum_dy, sum_dy_xmu;
        simd::batch_norm_grad_sums(gp + p.at(0, ch), xp + p.at(0, ch), p.simd(), static_cast<T>(mu), &sum_dy, &sum_dy_xmu);
        if (want_w) c.outputs[1].data_ptr<T>()[ch] = static_cast<T>(sum_dy_xmu * invstd);
        if (want_b) c.outputs[2].data_ptr<T>()[ch] = static_cast<T>(sum_dy);
        if (!want_x) continue;
        const double scale = static_cast<double>(value_or<T>(w, has_w, ch, T(1))) * invstd;
        // dx = a dy + b x + k, per channel.
        const double mean_dy = sum_dy / p.count(), proj = sum_dy_xmu / p.count() * invstd * invstd;
        const T a = static_cast<T>(scale), bx = static_cast<T>(-scale * proj),
                k = static_cast<T>(scale * (proj * mu - mean_dy));
        simd::batch_norm_input_grad(gp + p.at(0, ch), xp + p.at(0, ch), c.outputs[0].data_ptr<T>() + p.at(0, ch), p.simd(),
                                    a, bx, k);
      }
    });
  });
}

}  // namespace kiln::cpu
