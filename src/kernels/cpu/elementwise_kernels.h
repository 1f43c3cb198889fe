// The unary and binary elementwise kernels: templates over the op code,
// one function per op of pointwise_math.h's lists. Note [Elementwise kernels
// in parts]: each op's kernel instantiates its loops for every dtype, about
// two seconds of compiling an op, so the ops are compiled in
// kElementwiseParts translation units (elementwise_part_*.cpp), each
// registering its share of the lists (register_elementwise_kernels), rather
// than in one file that would be the whole build's critical path.
#pragma once
#include <limits>

#include "core/convert.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/integer_functors.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {
namespace elementwise_detail {

inline constexpr int64_t kChunk = 256;

inline double attr_or(const Attrs& a, const char* name, double dflt) { return a.has(name) ? a.get_double(name) : dflt; }

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

}  // namespace elementwise_detail

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
      elementwise_detail::unary_f32_path<T>(out, x, [&](const float* in, float* o, int64_t n) {
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
  double alpha = elementwise_detail::attr_or(c.attrs, "alpha", 1.0);
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
        constexpr int64_t chunk = elementwise_detail::kChunk;
        float ba[chunk], bb[chunk];
        for (int64_t off = 0; off < n; off += chunk) {
          const int64_t m = std::min(chunk, n - off);
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

inline constexpr int kElementwiseParts = 6;

#define KILN_COUNT_OP(functor, name) +1
inline constexpr int kUnaryOpCount = 0 KILN_POINTWISE_UNARY(KILN_COUNT_OP);
#undef KILN_COUNT_OP

// Registers an op's kernel (and its functor, for the compilers that fuse
// loops) when its place in the lists (unary ops first, then binary) falls
// in Part modulo kElementwiseParts; the kernels of the others are not
// instantiated in this part's unit.
template <int Part, auto OP>
void register_elementwise_kernel(const char* name, const char* functor) {
  constexpr bool unary = std::is_same_v<decltype(OP), UnaryOp>;
  constexpr int place = static_cast<int>(OP) + (unary ? 0 : kUnaryOpCount);
  if constexpr (place % kElementwiseParts == Part) {
    if constexpr (unary) register_kernel(name, kCPU, unary_kernel<OP>);
    else register_kernel(name, kCPU, binary_kernel<OP>);
    set_pointwise(name, functor);
  }
}

template <int Part>
void register_elementwise_kernels() {
#define KILN_REGISTER_UNARY(functor, name) \
  register_elementwise_kernel<Part, UnaryOp::functor>(name, "kiln::pointwise::" #functor);
#define KILN_REGISTER_BINARY(functor, name) \
  register_elementwise_kernel<Part, BinaryOp::functor>(name, "kiln::pointwise::" #functor);
  KILN_POINTWISE_UNARY(KILN_REGISTER_UNARY)
  KILN_POINTWISE_BINARY(KILN_REGISTER_BINARY)
#undef KILN_REGISTER_UNARY
#undef KILN_REGISTER_BINARY
}

}  // namespace kiln::cpu
