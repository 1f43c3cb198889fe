// The codes of the elementwise op families. The unary and binary codes are
// the functor lists of pointwise_math.h (one enumerator per functor, the
// same name), shared by the kernels and the SIMD entry points.
#pragma once
#include <cstdint>

#include "kernels/cpu/pointwise_math.h"

namespace kiln::cpu {

#define KILN_ENUMERATOR(functor, name) functor,
enum class UnaryOp : uint8_t { KILN_POINTWISE_UNARY(KILN_ENUMERATOR) };
// GeluBackward / GeluTanhBackward: (grad, x) -> grad * gelu'(x);
// ThresholdBackward: (grad, x) -> x > threshold ? grad : 0.
enum class BinaryOp : uint8_t { KILN_POINTWISE_BINARY(KILN_ENUMERATOR) };
#undef KILN_ENUMERATOR

// The functor of each code.
template <UnaryOp OP> struct UnaryFunctor;
template <BinaryOp OP> struct BinaryFunctor;
#define KILN_UNARY_FUNCTOR(functor, name) \
  template <> struct UnaryFunctor<UnaryOp::functor> { using type = pointwise::functor; };
#define KILN_BINARY_FUNCTOR(functor, name) \
  template <> struct BinaryFunctor<BinaryOp::functor> { using type = pointwise::functor; };
KILN_POINTWISE_UNARY(KILN_UNARY_FUNCTOR)
KILN_POINTWISE_BINARY(KILN_BINARY_FUNCTOR)
#undef KILN_UNARY_FUNCTOR
#undef KILN_BINARY_FUNCTOR

enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor };

enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, All, Any };

}  // namespace kiln::cpu
