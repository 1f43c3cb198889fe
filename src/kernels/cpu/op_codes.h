// The codes of the elementwise op families. One enum per family is shared by
// the op front ends, the scalar functors and the SIMD kernels, so a new op
// is one enumerator, one functor and one line in each switch.
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class UnaryOp : uint8_t {
  Neg, Abs, Sign, Exp, Expm1, Log, Log1p, Sqrt, Rsqrt, Reciprocal, Sin, Cos, Tanh, Sigmoid,
  Relu, GeluErf, GeluTanh, Silu, Erf, Floor, Ceil, Round, Square, Clamp
};

// GeluBackward / GeluTanhBackward: (grad, x) -> grad * gelu'(x).
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum, Fmod, GeluBackward, GeluTanhBackward };

enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor };

enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, All, Any };

}  // namespace kiln::cpu
