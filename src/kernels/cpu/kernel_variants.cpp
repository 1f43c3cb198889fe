// What `kiln info` lists as each kernel family's instruction path: the
// families whose kernels pick CPU-specific instructions beyond Highway's
// dispatch (runtime.h).
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/int8_gemm.h"
#include "kiln/detail/attention_simd.h"
#include "kiln/runtime.h"

namespace kiln {

std::vector<std::pair<std::string, std::string>> kernel_variants() {
  std::vector<std::pair<std::string, std::string>> variants = {
      {"int8 gemm", cpu::int8_path_name(cpu::int8_path())},
      {"bf16 gemm", cpu::bf16_gemm_path_name(cpu::bf16_gemm_path())}};
#if defined(__x86_64__) || defined(__aarch64__)
  variants.emplace_back("bf16 attention decode", attention_simd::bf16_decode_kernel());
#endif
  return variants;
}

}  // namespace kiln
