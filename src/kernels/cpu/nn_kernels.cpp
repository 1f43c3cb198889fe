// Fused row kernels: softmax / log_softmax along a dim, layer_norm and
// rms_norm over the trailing dims. float32 rows go to SIMD; other float
// dtypes are converted through a float32 (or float64) row buffer.
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {
namespace {

void softmax_row_f64(const double* x, double* y, int64_t n, bool log) {
  double mx = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) mx = std::isnan(x[i]) ? (nan = true, mx) : std::max(mx, x[i]);
  if (nan) mx = std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  for (int64_t i = 0; i < n; ++i) y[i] = log ? x[i] - mx - std::log(s) : std::exp(x[i] - mx) / s;
}

// Rows of a float tensor of dtype T as float32 or float64 arrays: calls
// row(in, out, n) with contiguous buffers, converting when needed.
template <typename T, class Row>
void for_each_row(const Tensor& x, const Tensor& out, int64_t dim, Row row) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t n = x.size(dim);
  const int64_t xs = x.stride(dim) * static_cast<int64_t>(sizeof(T));
  const int64_t os = out.stride(dim) * static_cast<int64_t>(sizeof(T));
  for_each_line<2>({&x, &out}, dim, n, [&](const std::array<char*, 2>& b, int64_t line) {
    if constexpr (std::is_same_v<T, C>) {
      if (xs == sizeof(T) && os == sizeof(T)) {
        row(reinterpret_cast<const C*>(b[0]), reinterpret_cast<C*>(b[1]), n, line);
        return;
      }
    }
    thread_local std::vector<C> in, res;
    in.resize(static_cast<size_t>(n));
    res.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) in[i] = convert<C>(*reinterpret_cast<const T*>(b[0] + i * xs));
    row(in.data(), res.data(), n, line);
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(b[1] + i * os) = convert<T>(res[i]);
  });
}

template <class F>
void visit_float(DType t, const char* op, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_16bit_float<T>) f(tag);
    else fail(op, "expected a floating point tensor but got ", t);
  });
}

}  // namespace

void softmax_kernel(const OpCall& c) {
  const bool log = c.attrs.get_bool("log");
  visit_float(c.inputs[0].dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    for_each_row<T>(c.inputs[0], c.outputs[0], c.attrs.get_int("dim"), [&](const auto* x, auto* y, int64_t n, int64_t) {
      if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(x)>>, double>)
        softmax_row_f64(x, y, n, log);
      else
        simd::softmax_row_f32(x, y, static_cast<size_t>(n), log);
    });
  });
}

// Normalises over the trailing `n` elements of each row (the dims of
// normalized_shape, flattened). Weight and bias, if given, are contiguous of
// size n in the input's dtype. Outputs: y, and per row mean and rstd (f32,
// kept for the backward pass).
void layer_norm_kernel(const OpCall& c) {
  const Tensor x = contiguous(c.inputs[0]);
  const bool has_w = c.attrs.get_bool("has_weight"), has_b = c.attrs.get_bool("has_bias");
  const bool rms = c.attrs.get_bool("rms");
  const double eps = c.attrs.get_double("eps");
  const int64_t n = c.attrs.get_int("n");
  const Tensor& y = c.outputs[0];
  const int64_t rows = n ? x.numel() / n : 0;
  float* mean = c.outputs.size() > 1 ? c.outputs[1].data_ptr<float>() : nullptr;
  float* rstd = c.outputs.size() > 2 ? c.outputs[2].data_ptr<float>() : nullptr;
  visit_float(x.dtype(), rms ? "rms_norm" : "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    // Weight and bias as C arrays (converted once, not per row).
    std::vector<C> wc, bc;
    auto to_c = [&](const Tensor& t, std::vector<C>& out) {
      Tensor tc = contiguous(t);
      out.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out[i] = convert<C>(tc.data_ptr<T>()[i]);
    };
    if (has_w) to_c(c.inputs[1], wc);
    if (has_b) to_c(c.inputs[has_w ? 2 : 1], bc);
    const C* wp = has_w ? wc.data() : nullptr;
    const C* bp = has_b ? bc.data() : nullptr;
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
      std::vector<C> in, out;
      for (int64_t r = lo; r < hi; ++r) {
        const C* xr;
        C* yr;
        if constexpr (std::is_same_v<T, C>) {
          xr = xp + r * n;
          yr = yp + r * n;
        } else {
          in.resize(static_cast<size_t>(n));
          out.resize(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) in[i] = convert<C>(xp[r * n + i]);
          xr = in.data();
          yr = out.data();
        }
        if constexpr (std::is_same_v<C, float>) {
          if (rms) simd::rms_norm_row_f32(xr, yr, static_cast<size_t>(n), wp, static_cast<float>(eps));
          else simd::layer_norm_row_f32(xr, yr, static_cast<size_t>(n), wp, bp, static_cast<float>(eps),
                                        mean ? mean + r : nullptr, rstd ? rstd + r : nullptr);
        } else {
          double mu = 0, var = 0;
          for (int64_t i = 0; i < n; ++i) mu += xr[i];
          mu = rms ? 0.0 : mu / static_cast<double>(n);
          for (int64_t i = 0; i < n; ++i) var += (xr[i] - mu) * (xr[i] - mu);
          const double rs = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
          for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs * (wp ? wp[i] : 1.0) + (bp ? bp[i] : 0.0);
          if (mean) mean[r] = static_cast<float>(mu);
          if (rstd) rstd[r] = static_cast<float>(rs);
        }
        if constexpr (!std::is_same_v<T, C>)
          for (int64_t i = 0; i < n; ++i) yp[r * n + i] = convert<T>(out[i]);
      }
    });
  });
}

}  // namespace kiln::cpu
