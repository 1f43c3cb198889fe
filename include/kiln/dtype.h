// Element types, the 16-bit float storage types, type promotion (PyTorch's
// rules) and Scalar, the boxed C++ number that ops accept beside tensors.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

namespace kiln {

enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64
};
inline constexpr int kNumDTypes = 10;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

size_t element_size(DType t);
const char* dtype_name(DType t);  // "float32", "int64", ...
inline bool is_floating(DType t) { return t >= DType::Float16; }
inline bool is_integral(DType t, bool include_bool = false) {
  return (t >= DType::UInt8 && t <= DType::Int64) || (include_bool && t == DType::Bool);
}
std::ostream& operator<<(std::ostream& os, DType t);

// The default floating dtype (float32), used when an integer tensor meets a
// float op or a float Scalar.
DType default_dtype();

// PyTorch's promote_types: bool < integers < floats; u8 with a signed type
// widens; float16 with bfloat16 gives float32.
DType promote_types(DType a, DType b);

// IEEE binary16, stored as bits. Conversion rounds to nearest even.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT: implicit like a built-in float type
  operator float() const;
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// A number passed where an op takes a scalar. Remembers whether it was a
// bool, an integer or a float, because that decides type promotion.
class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  // Its integer value truncates; NaN, infinities and doubles beyond int64's
  // range (whose conversion is undefined behaviour) keep 0 there.
  Scalar(double v)
      : kind_(Kind::Float), d_(v), i_(v >= -0x1p63 && v < 0x1p63 ? static_cast<int64_t>(v) : 0) {}  // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}                          // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), d_(v), i_(v) {}                           // NOLINT
  template <typename I, typename = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>>>
  Scalar(I v) : kind_(Kind::Int), d_(static_cast<double>(v)), i_(static_cast<int64_t>(v)) {}  // NOLINT
  Kind kind() const { return kind_; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  // The dtype a tensor made from this scalar gets: bool, int64 or the default float.
  DType dtype() const {
    return kind_ == Kind::Bool ? kBool : kind_ == Kind::Int ? kInt64 : default_dtype();
  }

 private:
  Kind kind_;
  double d_;
  int64_t i_;
};

// Maps a C++ element type to its DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = kBool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = kUInt8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = kInt8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = kInt16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = kInt32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = kInt64; };
template <> struct dtype_of<Half> { static constexpr DType value = kFloat16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = kBFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = kFloat64; };

// Calls f(T{}) with the C++ type of dtype t; the one place that switches on dtypes.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(bool{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Int8: return f(int8_t{});
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Float32: return f(float{});
    case DType::Float64: break;
  }
  return f(double{});
}

}  // namespace kiln

KILN_API_END
