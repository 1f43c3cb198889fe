// The Arm CPU features Linux (or qemu-user) reports for this CPU in
// AT_HWCAP and AT_HWCAP2 (the bits of asm/hwcap.h), read in one place for
// `kiln info` and the kernels that choose a path by them (int8 and bf16
// GEMMs, bf16 flash decoding).
#pragma once
#if defined(__aarch64__)
#include <sys/auxv.h>

namespace kiln::arm {

enum class Feature { ASIMD, DotProd, SVE, SVE2, I8MM, BF16 };

inline bool has(Feature f) {
  switch (f) {
    case Feature::ASIMD: return (getauxval(AT_HWCAP) >> 1) & 1;
    case Feature::DotProd: return (getauxval(AT_HWCAP) >> 20) & 1;
    case Feature::SVE: return (getauxval(AT_HWCAP) >> 22) & 1;
    case Feature::SVE2: return (getauxval(AT_HWCAP2) >> 1) & 1;
    case Feature::I8MM: return (getauxval(AT_HWCAP2) >> 13) & 1;
    case Feature::BF16: return (getauxval(AT_HWCAP2) >> 14) & 1;
  }
  return false;
}

}  // namespace kiln::arm
#endif
