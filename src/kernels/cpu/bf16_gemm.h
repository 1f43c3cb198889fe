// The bfloat16 GEMM with the CPU's bf16 matrix instruction: on Arm,
// FEAT_BF16's BFMMLA (a 2x4 by 4x2 block of bf16 products into 2x2 float32
// sums). Products are exact and summed in float32, as the float32 path
// that widens bf16 operands for OpenBLAS. Other CPUs (and x86 for now)
// take that path: matmul_kernel asks bf16_gemm_path() first.
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class BF16GemmPath { Float32, BFMMLA };
// BFMMLA when the CPU has bf16 and cpu_capability() is a NEON or SVE one.
BF16GemmPath bf16_gemm_path();
const char* bf16_gemm_path_name(BF16GemmPath p);

// C (M x N float32, row-major) = A B, A's element (m, k) at
// A[m * a_rs + k * a_cs], B's (k, n) at B[k * b_rs + n * b_cs] (bf16 bits:
// any strides, the operands are packed first). Splits N over the thread
// pool. Only when bf16_gemm_path() is BFMMLA.
void gemm_bf16(const uint16_t* A, int64_t a_rs, int64_t a_cs, const uint16_t* B, int64_t b_rs, int64_t b_cs, float* C,
               int64_t M, int64_t N, int64_t K);

}  // namespace kiln::cpu
