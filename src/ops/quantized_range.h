// The integer range of a quantized dtype (qint8: kInt8, quint8: kUInt8),
// shared by the quantizers and the observers.
#pragma once
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::quant {

struct QuantRange {
  int64_t lo, hi;
};
// [-128, 127] or [0, 255]; any other dtype is op's error.
QuantRange quant_range(DType t, const char* op);

}  // namespace kiln::quant
