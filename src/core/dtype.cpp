// DType facts, PyTorch's promotion table, and IEEE half conversion.
#include "kiln/dtype.h"

#include <cstring>

#include "kiln/error.h"

namespace kiln {

size_t element_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  static constexpr const char* names[] = {"bool",    "uint8",    "int8",    "int16",   "int32",
                                          "int64",   "float16",  "bfloat16", "float32", "float64"};
  return names[static_cast<int>(t)];
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType default_dtype() { return kFloat32; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (is_floating(a)) {
    if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
    return element_size(a) >= element_size(b) ? a : b;
  }
  // Both integers. uint8 is the only unsigned type: with int8 it needs int16.
  if (a == kUInt8 || b == kUInt8) {
    DType s = a == kUInt8 ? b : a;
    return s == kInt8 ? kInt16 : s;
  }
  return element_size(a) >= element_size(b) ? a : b;
}

Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    bits = static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (absx < 0x38800000u) {  // subnormal half (or zero): align to 2^-24 units
    float af;
    std::memcpy(&af, &absx, 4);
    // Adding 0.5 makes the FPU round the mantissa at 2^-24 to nearest even.
    float r = af + 0.5f;
    uint32_t ru;
    std::memcpy(&ru, &r, 4);
    bits = static_cast<uint16_t>(sign | (ru - 0x3f000000u));
    return;
  }
  uint32_t mant_odd = (absx >> 13) & 1u;
  uint32_t v = absx + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  bits = static_cast<uint16_t>(sign | (v >> 13));
}

Half::operator float() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
      std::memcpy(&out, &f, 4);
      out |= sign;
    }
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace kiln
