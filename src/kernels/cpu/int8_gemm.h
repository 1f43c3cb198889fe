// The u8 x s8 -> s32 GEMM of the int8 kernels: C[m, n] = sum_k A[m, k] B[n, k]
// (both row-major with K contiguous: B is the weight as Linear stores it),
// exact. Variants: AVX512-VNNI (vpdpbusd, 64 products per instruction), AVX2
// (widened to int16, vpmaddwd); on Arm I8MM (usmmla) and dotprod (sdot);
// scalar; the best the CPU has within cpu_capability() runs
// (KILN_CPU_CAPABILITY=avx2, neon... or scalar forces a lower one).
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class Int8Path { Scalar, AVX2, VNNI, DotProd, I8MM };
Int8Path int8_path();
const char* int8_path_name(Int8Path p);

// C has leading dimension N. Splits N over the thread pool.
void gemm_u8s8(const uint8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K);

// The VNNI kernel's weight layout: panels of 16 rows of B; within a panel,
// for each group of 4 along K, the 16 rows' 4 bytes side by side (64
// bytes: one vpdpbusd operand), zeros past N and K. Each lane of an
// accumulator is then one output column: no horizontal sums.
int64_t packed_b_bytes(int64_t N, int64_t K);
void pack_b(const int8_t* B, int64_t N, int64_t K, int8_t* packed);
// The same product from packed B; A's rows have stride lda >= K rounded up
// to 4, zero past K. VNNI only (int8_path() == VNNI).
void gemm_u8s8_packed(const uint8_t* A, int64_t lda, const int8_t* packed, int32_t* C, int64_t M, int64_t N,
                      int64_t K);

}  // namespace kiln::cpu
