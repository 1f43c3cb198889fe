// Scalar definitions of the elementwise ops: the reference the SIMD kernels
// are tested against, and the kernels for float64 and integer dtypes.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/op_codes.h"
#include "kiln/error.h"

namespace kiln::cpu {

// factor * sigmoid(x), as 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x)
// below, so neither overflows nor cancels.
template <typename T>
inline T sigmoid_times(T x, T factor) {
  if (x >= T(0)) return factor / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return factor * e / (T(1) + e);
}

template <UnaryOp OP, typename T>
inline T unary_scalar(T x, T lo, T hi) {
  constexpr bool fp = std::is_floating_point_v<T>;
  if constexpr (std::is_unsigned_v<T> && (OP == UnaryOp::Abs || OP == UnaryOp::Relu)) return x;
  else if constexpr (std::is_unsigned_v<T> && OP == UnaryOp::Sign) return static_cast<T>(x != 0);
  else if constexpr (OP == UnaryOp::Neg) return static_cast<T>(-x);
  else if constexpr (OP == UnaryOp::Abs) return static_cast<T>(x < 0 ? -x : x);
  else if constexpr (OP == UnaryOp::Sign) return static_cast<T>((T(0) < x) - (x < T(0)));
  else if constexpr (OP == UnaryOp::Relu) return x > T(0) || (fp && x != x) ? x : T(0);
  else if constexpr (OP == UnaryOp::Square) return static_cast<T>(x * x);
  else if constexpr (OP == UnaryOp::Clamp) return x != x ? x : (x < lo ? lo : (x > hi ? hi : x));
  else if constexpr (!fp) return x;  // floor, ceil, round are the identity on integers
  else if constexpr (OP == UnaryOp::Exp) return std::exp(x);
  else if constexpr (OP == UnaryOp::Expm1) return std::expm1(x);
  else if constexpr (OP == UnaryOp::Log) return std::log(x);
  else if constexpr (OP == UnaryOp::Log1p) return std::log1p(x);
  else if constexpr (OP == UnaryOp::Sqrt) return std::sqrt(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return T(1) / std::sqrt(x);
  else if constexpr (OP == UnaryOp::Reciprocal) return T(1) / x;
  else if constexpr (OP == UnaryOp::Sin) return std::sin(x);
  else if constexpr (OP == UnaryOp::Cos) return std::cos(x);
  else if constexpr (OP == UnaryOp::Tanh) return std::tanh(x);
  else if constexpr (OP == UnaryOp::Sigmoid) return sigmoid_times(x, T(1));
  // x Phi(x) and x sigmoid(2u), the forms without cancellation for negative
  // x (Note [Float32 at the edges]); the same as the vector kernels'.
  else if constexpr (OP == UnaryOp::GeluErf) return T(0.5) * x * std::erfc(-x * T(M_SQRT1_2));
  else if constexpr (OP == UnaryOp::GeluTanh) {
    const T k = std::sqrt(T(2) / T(M_PI));
    return sigmoid_times(T(2) * k * (x + T(0.044715) * x * x * x), x);
  } else if constexpr (OP == UnaryOp::Silu) return sigmoid_times(x, x);
  else if constexpr (OP == UnaryOp::Erf) return std::erf(x);
  else if constexpr (OP == UnaryOp::Floor) return std::floor(x);
  else if constexpr (OP == UnaryOp::Ceil) return std::ceil(x);
  else if constexpr (OP == UnaryOp::Round) return std::nearbyint(x);  // half to even
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
inline T binary_scalar(T a, T b, T alpha) {
  constexpr bool fp = std::is_floating_point_v<T>;
  if constexpr (OP == BinaryOp::Add) return static_cast<T>(a + alpha * b);
  else if constexpr (OP == BinaryOp::Sub) return static_cast<T>(a - alpha * b);
  else if constexpr (OP == BinaryOp::Mul) return static_cast<T>(a * b);
  else if constexpr (OP == BinaryOp::Div) return static_cast<T>(a / b);  // only reached for floats
  else if constexpr (OP == BinaryOp::Maximum) return (fp && (a != a || b != b)) ? a + b : (a > b ? a : b);
  else if constexpr (OP == BinaryOp::Minimum) return (fp && (a != a || b != b)) ? a + b : (a < b ? a : b);
  else if constexpr (OP == BinaryOp::Pow) {
    if constexpr (fp) return std::pow(a, b);
    else return int_pow(a, b);
  } else if constexpr (OP == BinaryOp::GeluBackward) {
    const T cdf = T(0.5) * std::erfc(-b * T(M_SQRT1_2));
    const T pdf = std::exp(T(-0.5) * b * b) * T(0.3989422804014327);  // 1 / sqrt(2 pi)
    return a * (cdf + b * pdf);
  } else if constexpr (OP == BinaryOp::GeluTanhBackward) {
    const T k = std::sqrt(T(2) / T(M_PI)), c = T(0.044715);
    const T t = std::tanh(k * (b + c * b * b * b));
    return a * (T(0.5) * (T(1) + t) + T(0.5) * b * (T(1) - t * t) * k * (T(1) + T(3) * c * b * b));
  } else if constexpr (OP == BinaryOp::Fmod) {
    if constexpr (fp) return std::fmod(a, b);
    else {
      if (b == 0) fail("fmod", "integer division by zero");
      return static_cast<T>(a % b);
    }
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
