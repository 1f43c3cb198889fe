// Value conversion between element types (a dtype matter, so in core: kernels
// and op front ends both use it), with PyTorch's rules: to bool is
// "not zero", 16-bit floats go through float32.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln {

template <typename T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// A float that is NaN, infinite or beyond the integer type's range converts
// to whatever the CPU's conversion instruction gives (as in PyTorch, whose
// casts are the same C++ conversions): undefined in C++, so the check of
// clang's UBSan that reports it (float-cast-overflow) is off here. A defined
// conversion is an open question: NaN -> 0 and saturation would change
// x86's results (INT64_MIN today).
template <typename D, typename S>
__attribute__((no_sanitize("float-cast-overflow"))) inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_16bit_float<S>) return static_cast<float>(v) != 0.0f;
    else return v != S(0);
  } else if constexpr (is_16bit_float<D>) {
    return D(static_cast<float>(v));
  } else if constexpr (is_16bit_float<S>) {
    return convert<D>(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> && sizeof(D) < sizeof(int64_t)) {
    // Through int64, then wrapped to D's width (defined since C++20): a float
    // out of D's range gives the same bits on every CPU (x86 truncates its
    // int32 conversion, AArch64's conversion to a narrow unsigned saturates:
    // -2.0 to uint8 was 254 on one and 0 on the other).
    return static_cast<D>(static_cast<int64_t>(v));
  } else {
    return static_cast<D>(v);
  }
}

// A clamp bound (a double, possibly infinite) as a value of T: saturates to
// T's range so integer clamps with a one-sided bound work.
template <typename T>
inline T clamp_bound(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

}  // namespace kiln
