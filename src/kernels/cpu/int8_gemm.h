// The u8 x s8 -> s32 GEMM of the int8 kernels: C[m, n] = sum_k A[m, k] B[n, k]
// (both row-major with K contiguous: B is the weight as Linear stores it),
// exact. Variants: AVX512-VNNI (vpdpbusd, 64 products per instruction), AVX2
// (widened to int16, vpmaddwd), scalar; the best the CPU has within
// cpu_capability() runs (KILN_CPU_CAPABILITY=avx2 or scalar forces a lower one).
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class Int8Path { Scalar, AVX2, VNNI };
Int8Path int8_path();
const char* int8_path_name(Int8Path p);

// C has leading dimension N. Splits N over the thread pool.
void gemm_u8s8(const uint8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K);

}  // namespace kiln::cpu
