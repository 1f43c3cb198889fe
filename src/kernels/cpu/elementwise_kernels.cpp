// Elementwise kernels: float32 (and float16/bfloat16 converted through
// float32 buffers) go to the SIMD kernels, float64 to the functors' float64
// forms (both pointwise_math.h), integers to integer_functors.h; strided
// loops for all but contiguous float32.
#include <limits>

#include "core/convert.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/integer_functors.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kChunk = 256;

double attr_or(const Attrs& a, const char* name, double dflt) {
  return a.has(name) ? a.get_double(name) : dflt;
}

// Runs a float32 SIMD row function over a strided T operand pair, through
// small float buffers when the data is not contiguous float32.
template <typename T, class Contig>
void unary_f32_path(const Tensor& out, const Tensor& x, Contig contig) {
  auto plan = make_plan<2>({&out, &x}, out.sizes());
  for_each_segment<2>(plan, [&](char* const* p, const int64_t* s, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (s[0] == 4 && s[1] == 4) {
        contig(reinterpret_cast<const float*>(p[1]), reinterpret_cast<float*>(p[0]), n);
        return;
      }
    }
    float buf[kChunk];
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t m = std::min(kChunk, n - off);
      load_f32<T>(p[1] + off * s[1], s[1], buf, m);
      contig(buf, buf, m);
      store_f32<T>(buf, p[0] + off * s[0], s[0], m);
    }
  });
}

}  // namespace

template <UnaryOp OP>
void unary_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  using F = typename UnaryFunctor<OP>::type;
  // The functor's float attributes (clamp's min and max, leaky_relu's slope).
  double p[2] = {0.0, 0.0};
  if constexpr (requires { F::kAttrs; })
    for (size_t i = 0; i < std::size(F::kAttrs); ++i) p[i] = c.attrs.get_double(F::kAttrs[i]);
  const double lo = p[0], hi = p[1];
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || is_16bit_float<T>) {
      unary_f32_path<T>(out, x, [&](const float* in, float* o, int64_t n) {
        simd::unary_f32(static_cast<int>(OP), in, o, static_cast<size_t>(n), static_cast<float>(lo),
                        static_cast<float>(hi));
      });
    } else if constexpr (std::is_same_v<T, bool>) {
      fail("unary", "bool tensors are not supported by this op");
    } else if constexpr (std::is_same_v<T, double>) {
      map_elementwise<T, T>(out, {&x}, [=](T v) {
        if constexpr (requires { F::f(v, lo, hi); }) return F::f(v, lo, hi);
        else if constexpr (requires { F::f(v, lo); }) return F::f(v, lo);
        else return F::f(v);
      });
    } else {
      const T tlo = clamp_bound<T>(lo), thi = clamp_bound<T>(hi);
      map_elementwise<T, T>(out, {&x}, [=](T v) { return unary_integer<OP, T>(v, tlo, thi); });
    }
  });
}

template <BinaryOp OP>
void binary_kernel(const OpCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor& out = c.outputs[0];
  // The functor's float attribute: add's and sub's alpha unless it names its own.
  double alpha = attr_or(c.attrs, "alpha", 1.0);
  if constexpr (requires { BinaryFunctor<OP>::type::kAttrs; })
    alpha = c.attrs.get_double(BinaryFunctor<OP>::type::kAttrs[0]);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || is_16bit_float<T>) {
      const float fa = static_cast<float>(alpha);
      auto plan = make_plan<3>({&out, &a, &b}, out.sizes());
      for_each_segment<3>(plan, [&](char* const* p, const int64_t* s, int64_t n) {
        if constexpr (std::is_same_v<T, float>) {
          if (s[0] == 4 && (s[1] == 4 || s[1] == 0) && (s[2] == 4 || s[2] == 0)) {
            simd::binary_f32(static_cast<int>(OP), reinterpret_cast<const float*>(p[1]), s[1] ? 1 : 0,
                             reinterpret_cast<const float*>(p[2]), s[2] ? 1 : 0, reinterpret_cast<float*>(p[0]),
                             static_cast<size_t>(n), fa);
            return;
          }
        }
        float ba[kChunk], bb[kChunk];
        for (int64_t off = 0; off < n; off += kChunk) {
          const int64_t m = std::min(kChunk, n - off);
          load_f32<T>(p[1] + off * s[1], s[1], ba, m);
          load_f32<T>(p[2] + off * s[2], s[2], bb, m);
          simd::binary_f32(static_cast<int>(OP), ba, 1, bb, 1, ba, static_cast<size_t>(m), fa);
          store_f32<T>(ba, p[0] + off * s[0], s[0], m);
        }
      });
    } else if constexpr (std::is_same_v<T, bool>) {
      fail("binary", "bool tensors are not supported by this op");
    } else if constexpr (std::is_same_v<T, double>) {
      using F = typename BinaryFunctor<OP>::type;
      map_elementwise<T, T, T>(out, {&a, &b}, [=](T x, T y) {
        if constexpr (requires { F::f(x, y, alpha); }) return F::f(x, y, alpha);
        else return F::f(x, y);
      });
    } else {
      const T talpha = static_cast<T>(alpha);
      map_elementwise<T, T, T>(out, {&a, &b}, [=](T x, T y) { return binary_integer<OP, T>(x, y, talpha); });
    }
  });
}

template <CompareOp OP>
void compare_kernel(const OpCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<is_16bit_float<T>, float, T>;
    map_elementwise<bool, T, T>(c.outputs[0], {&a, &b}, [](T x, T y) {
      return compare_scalar<OP, C>(static_cast<C>(x), static_cast<C>(y));
    });
  });
}

void logical_not_kernel(const OpCall& c) {
  visit_dtype(c.inputs[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    map_elementwise<bool, T>(c.outputs[0], {&c.inputs[0]}, [](T x) { return !convert<bool>(x); });
  });
}

void where_kernel(const OpCall& c) {
  visit_dtype(c.outputs[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    map_elementwise<T, bool, T, T>(c.outputs[0], {&c.inputs[0], &c.inputs[1], &c.inputs[2]},
                                   [](bool m, T x, T y) { return m ? x : y; });
  });
}

// Explicit instantiations: the op table takes their addresses.
#define KILN_UNARY(functor, name) template void unary_kernel<UnaryOp::functor>(const OpCall&);
KILN_POINTWISE_UNARY(KILN_UNARY)
#undef KILN_UNARY
#define KILN_BINARY(functor, name) template void binary_kernel<BinaryOp::functor>(const OpCall&);
KILN_POINTWISE_BINARY(KILN_BINARY)
#undef KILN_BINARY
template void compare_kernel<CompareOp::Eq>(const OpCall&);
template void compare_kernel<CompareOp::Ne>(const OpCall&);
template void compare_kernel<CompareOp::Lt>(const OpCall&);
template void compare_kernel<CompareOp::Le>(const OpCall&);
template void compare_kernel<CompareOp::Gt>(const OpCall&);
template void compare_kernel<CompareOp::Ge>(const OpCall&);
template void compare_kernel<CompareOp::And>(const OpCall&);
template void compare_kernel<CompareOp::Or>(const OpCall&);
template void compare_kernel<CompareOp::Xor>(const OpCall&);

}  // namespace kiln::cpu
