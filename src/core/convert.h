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

template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_16bit_float<S>) return static_cast<float>(v) != 0.0f;
    else return v != S(0);
  } else if constexpr (is_16bit_float<D>) {
    return D(static_cast<float>(v));
  } else if constexpr (is_16bit_float<S>) {
    return static_cast<D>(static_cast<float>(v));
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
