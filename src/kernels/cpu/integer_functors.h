// The elementwise ops on integer dtypes (the front ends promote integers to
// float for the others), and the comparisons on every dtype. Floating-point
// math is in pointwise_math.h.
#pragma once
#include <type_traits>

#include "kernels/cpu/op_codes.h"
#include "kiln/error.h"

namespace kiln::cpu {

template <UnaryOp OP, typename T>
inline T unary_integer(T x, T lo, T hi) {
  static_assert(std::is_integral_v<T>);
  if constexpr (std::is_unsigned_v<T> && (OP == UnaryOp::Abs || OP == UnaryOp::Relu)) return x;
  else if constexpr (std::is_unsigned_v<T> && OP == UnaryOp::Sign) return static_cast<T>(x != 0);
  else if constexpr (OP == UnaryOp::Neg) return static_cast<T>(-x);
  else if constexpr (OP == UnaryOp::Abs) return static_cast<T>(x < 0 ? -x : x);
  else if constexpr (OP == UnaryOp::Sign) return static_cast<T>((T(0) < x) - (x < T(0)));
  else if constexpr (OP == UnaryOp::Relu) return x > T(0) ? x : T(0);
  else if constexpr (OP == UnaryOp::Square) return static_cast<T>(x * x);
  else if constexpr (OP == UnaryOp::Clamp) return x < lo ? (lo > hi ? hi : lo) : (x > hi ? hi : x);
  else return x;  // floor, ceil, round are the identity on integers; the rest never get integers
}

template <typename T>
inline T int_pow(T base, T exp) {
  if (exp < 0) fail("pow", "integers to negative integer powers are not allowed");
  T result = 1;
  while (exp) {
    if (exp & 1) result = static_cast<T>(result * base);
    exp = static_cast<T>(exp >> 1);
    base = static_cast<T>(base * base);
  }
  return result;
}

template <BinaryOp OP, typename T>
inline T binary_integer(T a, T b, T alpha) {
  static_assert(std::is_integral_v<T>);
  if constexpr (OP == BinaryOp::Add) return static_cast<T>(a + alpha * b);
  else if constexpr (OP == BinaryOp::Sub) return static_cast<T>(a - alpha * b);
  else if constexpr (OP == BinaryOp::Mul) return static_cast<T>(a * b);
  else if constexpr (OP == BinaryOp::Maximum) return a > b ? a : b;
  else if constexpr (OP == BinaryOp::Minimum) return a < b ? a : b;
  else if constexpr (OP == BinaryOp::Pow) return int_pow(a, b);
  else if constexpr (OP == BinaryOp::Fmod) {
    if (b == 0) fail("fmod", "integer division by zero");
    return static_cast<T>(a % b);
  } else if constexpr (OP == BinaryOp::Remainder || OP == BinaryOp::FloorDivide) {
    // Python's % and //: the quotient rounded down, the remainder in b's sign.
    if (b == 0) fail(OP == BinaryOp::Remainder ? "remainder" : "floor_divide", "ZeroDivisionError: integer division by zero");
    if constexpr (std::is_signed_v<T>) {
      // a / -1 overflows at the minimum: negate in unsigned arithmetic (it wraps, as PyTorch's result does).
      using U = std::make_unsigned_t<T>;
      if (b == T(-1)) return OP == BinaryOp::Remainder ? T(0) : static_cast<T>(static_cast<U>(U(0) - static_cast<U>(a)));
    }
    const T r = static_cast<T>(a % b);
    const bool adjust = r != 0 && ((r < 0) != (b < 0));
    if constexpr (OP == BinaryOp::Remainder) return adjust ? static_cast<T>(r + b) : r;
    else return static_cast<T>(a / b - (adjust ? 1 : 0));
  } else {
    fail("elementwise", "this op takes floating-point tensors only");  // the front ends promote first
  }
}

template <CompareOp OP, typename T>
inline bool compare_scalar(T a, T b) {
  if constexpr (OP == CompareOp::Eq) return a == b;
  else if constexpr (OP == CompareOp::Ne) return a != b;
  else if constexpr (OP == CompareOp::Lt) return a < b;
  else if constexpr (OP == CompareOp::Le) return a <= b;
  else if constexpr (OP == CompareOp::Gt) return a > b;
  else if constexpr (OP == CompareOp::Ge) return a >= b;
  else if constexpr (OP == CompareOp::And) return (a != T(0)) && (b != T(0));
  else if constexpr (OP == CompareOp::Or) return (a != T(0)) || (b != T(0));
  else if constexpr (OP == CompareOp::Xor) return (a != T(0)) != (b != T(0));
}

}  // namespace kiln::cpu
