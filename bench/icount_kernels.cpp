// One kernel run REPS times, for bench/arm64_icount.sh, which counts the
// instructions qemu executes: the count for REPS = 9 less that for REPS = 1,
// over 8 N, is the kernel's instructions per element (per multiply-add for
// the GEMMs), without the program's start, the inputs' making or the first
// call (where qemu translates the code). One thread, so that the count is
// the kernel's alone. Random inputs (the kernels have no data-dependent
// paths, but zeros would hide one).
// Usage: kiln-icount-kernels KERNEL REPS  (KERNEL: add exp relu sum softmax int8_gemm bf16_gemm)
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "kiln/kiln.h"
#include "kiln/quantization.h"

using namespace kiln;

namespace {

constexpr int64_t kElements = 1 << 16;
// The GEMMs: M x K by K x N with M N K = kElements multiply-adds.
constexpr int64_t kM = 16, kK = 256, kN = kElements / (kM * kK);

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kiln-icount-kernels KERNEL REPS\n");
    return 2;
  }
  const std::string kernel = argv[1];
  const int reps = std::atoi(argv[2]);
  set_num_threads(1);
  manual_seed(1);
  const Tensor a = randn({kElements}), b = randn({kElements}), rows = randn({kElements / 1024, 1024});
  const Tensor a8 = randint(0, 256, {kM, kK}).to(kUInt8), b8 = randint(-128, 128, {kN, kK}).to(kInt8);
  const Tensor a16 = randn({kM, kK}).to(kBFloat16), b16 = randn({kK, kN}).to(kBFloat16);
  const std::map<std::string, std::function<Tensor()>> kernels = {
      {"add", [&] { return a + b; }},
      {"exp", [&] { return exp(a); }},
      {"relu", [&] { return relu(a); }},
      {"sum", [&] { return sum(a); }},
      {"softmax", [&] { return softmax(rows, 1); }},
      {"int8_gemm", [&] { return quant::matmul_u8s8(a8, b8); }},
      {"bf16_gemm", [&] { return matmul(a16, b16); }},
  };
  const auto found = kernels.find(kernel);
  if (found == kernels.end() || reps < 1) {
    std::fprintf(stderr, "kiln-icount-kernels: unknown kernel %s or REPS %d\n", kernel.c_str(), reps);
    return 2;
  }
  Tensor out;  // (each call is a library call: none is left out)
  for (int r = 0; r < reps; ++r) out = found->second();
  std::printf("%s x%d: %lld values\n", kernel.c_str(), reps, static_cast<long long>(out.numel()));
  return 0;
}
