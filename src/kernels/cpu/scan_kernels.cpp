// Scans along one dim, one line per task: cumsum (and its reversed form,
// cumsum's gradient), cumprod and its gradient, cummax / cummin with the
// index of each running extreme, logcumsumexp. Sums and products accumulate
// in acc_t (double for floats, int64 for integers), as PyTorch's CPU scans.
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/pointwise_math.h"

namespace kiln::cpu {
namespace {

// The element type computations read: float for the 16-bit floats.
template <typename T>
using compute_t = std::conditional_t<is_16bit_float<T>, float, T>;

// Integer products wrap modulo 2^64 as PyTorch's do (signed overflow is
// undefined in C++, unsigned is not).
template <typename A>
A times(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}

// A running sum (kProd false) or product of x along dim into out, whose
// dtype is x's or int64.
template <bool kProd>
void accumulate_scan(const OpCall& c, const char* op, bool reverse) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t R = x.size(dim), xs = x.stride(dim), os = out.stride(dim);
  visit_dtype(out.dtype(), [&](auto otag) {
    using O = decltype(otag);
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, O> || std::is_same_v<O, int64_t>) {
        using Acc = acc_t<T>;
        for_each_line<2>({&x, &out}, dim, R, [&](const std::array<char*, 2>& b, int64_t) {
          Acc acc = kProd ? 1 : 0;
          for (int64_t i = 0; i < R; ++i) {
            const int64_t r = reverse ? R - 1 - i : i;
            const Acc v = convert<Acc>(reinterpret_cast<const T*>(b[0])[r * xs]);
            acc = kProd ? times(acc, v) : acc + v;
            reinterpret_cast<O*>(b[1])[r * os] = convert<O>(acc);
          }
        });
      } else {
        fail(op, "unsupported dtype pair ", x.dtype(), " -> ", out.dtype());
      }
    });
  });
}

// PyTorch's CPU rule: a NaN takes over (a later NaN moves the index to
// itself); otherwise ties move it to the later position (>=, <=).
template <bool kMax>
void extreme_scan(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& vals = c.outputs[0];
  const Tensor& idx = c.outputs[1];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t R = x.size(dim), xs = x.stride(dim), vs = vals.stride(dim), is = idx.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    for_each_line<3>({&x, &vals, &idx}, dim, R, [&](const std::array<char*, 3>& b, int64_t) {
      C best{};
      int64_t at = 0;
      for (int64_t r = 0; r < R; ++r) {
        const C v = convert<C>(reinterpret_cast<const T*>(b[0])[r * xs]);
        if (r == 0 || v != v || (best == best && (kMax ? v >= best : v <= best))) best = v, at = r;
        reinterpret_cast<T*>(b[1])[r * vs] = convert<T>(best);
        reinterpret_cast<int64_t*>(b[2])[r * is] = at;
      }
    });
  });
}

}  // namespace

void cumsum_kernel(const OpCall& c) { accumulate_scan<false>(c, "cumsum", c.attrs.get_bool("reverse")); }
void cumprod_kernel(const OpCall& c) { accumulate_scan<true>(c, "cumprod", false); }

// d out_j / d x_i = prod_{k <= j, k != i} x_k for j >= i, so
// grad_i = P_i S_i with P_i = prod_{k < i} x_k and S_i = g_i + x_{i+1} S_{i+1}:
// exact where x holds zeros (no division by x), O(R) per line.
void cumprod_backward_kernel(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& x = c.inputs[1];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t R = x.size(dim), gs = g.stride(dim), xs = x.stride(dim), os = out.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_16bit_float<T>) {
      for_each_line<3>({&g, &x, &out}, dim, R, [&](const std::array<char*, 3>& b, int64_t) {
        auto at = [&](int k, int64_t stride, int64_t r) {
          return convert<double>(reinterpret_cast<const T*>(b[k])[r * stride]);
        };
        std::vector<double> s(static_cast<size_t>(R));
        for (int64_t r = R - 1; r >= 0; --r)
          s[static_cast<size_t>(r)] = at(0, gs, r) + (r + 1 < R ? at(1, xs, r + 1) * s[static_cast<size_t>(r + 1)] : 0.0);
        double prefix = 1.0;
        for (int64_t r = 0; r < R; ++r) {
          reinterpret_cast<T*>(b[2])[r * os] = convert<T>(prefix * s[static_cast<size_t>(r)]);
          prefix *= at(1, xs, r);
        }
      });
    } else {
      fail("cumprod_backward", "expected a floating dtype, got ", x.dtype());
    }
  });
}

void cummax_kernel(const OpCall& c) { extreme_scan<true>(c); }
void cummin_kernel(const OpCall& c) { extreme_scan<false>(c); }

void logcumsumexp_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t R = x.size(dim), xs = x.stride(dim), os = out.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_16bit_float<T>) {
      for_each_line<2>({&x, &out}, dim, R, [&](const std::array<char*, 2>& b, int64_t) {
        double acc = -std::numeric_limits<double>::infinity();
        for (int64_t r = 0; r < R; ++r) {
          acc = pointwise::LogAddExp::f(acc, convert<double>(reinterpret_cast<const T*>(b[0])[r * xs]));
          reinterpret_cast<T*>(b[1])[r * os] = convert<T>(acc);
        }
      });
    } else {
      fail("logcumsumexp", "expected a floating dtype, got ", x.dtype());
    }
  });
}

}  // namespace kiln::cpu
