// See int8_gemm.h. VNNI: the packed layout, accumulators whose lanes are
// output columns. AVX2 and scalar: tiles of MR rows of A by NR rows of B
// (dot products along K) with MR x NR accumulators held in registers
// across K, then each accumulator's lanes summed. Arm: the same tiles with
// SDOT (dotprod) or USMMLA (i8mm). The x86 and Arm variants are compiled
// with their own target attributes, so one build carries all of them.
#include "kernels/cpu/int8_gemm.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>
#include <utility>

#include "kernels/cpu/loops.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>

#include "core/arm_features.h"
#endif

namespace kiln::cpu {
namespace {

void tile_scalar(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                 int64_t N, int64_t K) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      const uint8_t* a = A + (m0 + i) * K;
      const int8_t* b = B + (n0 + j) * K;
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
      C[(m0 + i) * N + n0 + j] = s;
    }
}

#if defined(__x86_64__)
// 16 bytes per step widened to int16 (no saturation: vpmaddwd sums pairs of
// exact int16 products into int32); the K tail in scalar.
template <int MR, int NR>
__attribute__((target("avx2"))) void tile_avx2(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0,
                                               int64_t N, int64_t K) {
  __m256i acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_si256();
  const int64_t body = K / 16 * 16;
  for (int64_t k = 0; k < body; k += 16) {
    __m256i a[MR], b[NR];
    for (int i = 0; i < MR; ++i)
      a[i] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(A + (m0 + i) * K + k)));
    for (int j = 0; j < NR; ++j)
      b[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(B + (n0 + j) * K + k)));
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(a[i], b[j]));
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[i][j]);
      int32_t s = 0;
      for (int32_t v : lanes) s += v;
      for (int64_t k = body; k < K; ++k)
        s += static_cast<int32_t>(A[(m0 + i) * K + k]) * static_cast<int32_t>(B[(n0 + j) * K + k]);
      C[(m0 + i) * N + n0 + j] = s;
    }
}

// Packed B (see pack_b): MR rows of A by two panels (32 columns), 2 MR
// accumulators; per group of 4 along K two 64-byte loads of B, MR
// broadcasts of A's 4 bytes, 2 MR vpdpbusd.
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void panel_pair_vnni(const uint8_t* A, int64_t lda,
                                                                              const int8_t* p0, const int8_t* p1,
                                                                              int32_t* C, int64_t m0, int64_t n0,
                                                                              int64_t N, int64_t groups, bool two) {
  __m512i acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i b0 = _mm512_loadu_si512(p0 + g * 64);
    const __m512i b1 = two ? _mm512_loadu_si512(p1 + g * 64) : _mm512_setzero_si512();
    for (int i = 0; i < MR; ++i) {
      int32_t four;
      std::memcpy(&four, A + (m0 + i) * lda + g * 4, 4);
      const __m512i a = _mm512_set1_epi32(four);
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], a, b0);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], a, b1);
    }
  }
  const int64_t cols = std::min<int64_t>(32, N - n0);
  const __mmask16 m_lo = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m_hi = cols <= 16 ? __mmask16(0) : cols >= 32 ? __mmask16(0xFFFF) : __mmask16((1u << (cols - 16)) - 1);
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_epi32(C + (m0 + i) * N + n0, m_lo, acc[i][0]);
    if (m_hi) _mm512_mask_storeu_epi32(C + (m0 + i) * N + n0 + 16, m_hi, acc[i][1]);
  }
}

using PanelFn = void (*)(const uint8_t*, int64_t, const int8_t*, const int8_t*, int32_t*, int64_t, int64_t, int64_t,
                         int64_t, bool);
constexpr int kPackedMR = 8;
template <int... I>
constexpr std::array<PanelFn, sizeof...(I)> panel_kernels(std::integer_sequence<int, I...>) {
  return {&panel_pair_vnni<I + 1>...};
}
#endif

using TileFn = void (*)(const uint8_t*, const int8_t*, int32_t*, int64_t, int64_t, int64_t, int64_t);

#if defined(__aarch64__)
// Arm's dot products are s8 x s8 (SDOT): A's bytes are taken as a - 128
// (a ^ 0x80 read as int8) and 128 sum_k B[n, k] is added back, the sum from
// SDOT against ones in the same loop. 16 bytes per step; the K tail in scalar.
template <int MR, int NR>
__attribute__((target("arch=armv8.2-a+dotprod"))) void tile_dotprod(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0,
                                                      int64_t n0, int64_t N, int64_t K) {
  int32x4_t acc[MR][NR], bsum[NR];
  for (int j = 0; j < NR; ++j) {
    bsum[j] = vdupq_n_s32(0);
    for (int i = 0; i < MR; ++i) acc[i][j] = vdupq_n_s32(0);
  }
  const int8x16_t ones = vdupq_n_s8(1);
  const uint8x16_t flip = vdupq_n_u8(0x80);
  const int64_t body = K / 16 * 16;
  for (int64_t k = 0; k < body; k += 16) {
    int8x16_t a[MR], b[NR];
    for (int i = 0; i < MR; ++i) a[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(A + (m0 + i) * K + k), flip));
    for (int j = 0; j < NR; ++j) {
      b[j] = vld1q_s8(B + (n0 + j) * K + k);
      bsum[j] = vdotq_s32(bsum[j], ones, b[j]);
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = vdotq_s32(acc[i][j], a[i], b[j]);
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      int32_t s = vaddvq_s32(acc[i][j]) + 128 * vaddvq_s32(bsum[j]);
      for (int64_t k = body; k < K; ++k)
        s += static_cast<int32_t>(A[(m0 + i) * K + k]) * static_cast<int32_t>(B[(n0 + j) * K + k]);
      C[(m0 + i) * N + n0 + j] = s;
    }
}

// I8MM's USMMLA multiplies u8 by s8 directly: a 2 x 8 block of A by an
// 8 x 2 block of B into a 2 x 2 block of C per instruction. MR and NR
// count pairs of rows; the K tail (K mod 8) in scalar.
template <int MR, int NR>
__attribute__((target("arch=armv8.2-a+i8mm"))) void tile_i8mm(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0,
                                                int64_t N, int64_t K) {
  int32x4_t acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = vdupq_n_s32(0);
  const int64_t body = K / 8 * 8;
  for (int64_t k = 0; k < body; k += 8) {
    uint8x16_t a[MR];
    int8x16_t b[NR];
    for (int i = 0; i < MR; ++i)
      a[i] = vcombine_u8(vld1_u8(A + (m0 + 2 * i) * K + k), vld1_u8(A + (m0 + 2 * i + 1) * K + k));
    for (int j = 0; j < NR; ++j)
      b[j] = vcombine_s8(vld1_s8(B + (n0 + 2 * j) * K + k), vld1_s8(B + (n0 + 2 * j + 1) * K + k));
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = vusmmlaq_s32(acc[i][j], a[i], b[j]);
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      int32_t lanes[4];  // rows 2i, 2i+1 by columns 2j, 2j+1
      vst1q_s32(lanes, acc[i][j]);
      for (int r = 0; r < 2; ++r)
        for (int q = 0; q < 2; ++q) {
          const int64_t m = m0 + 2 * i + r, n = n0 + 2 * j + q;
          int32_t s = lanes[r * 2 + q];
          for (int64_t k = body; k < K; ++k) s += static_cast<int32_t>(A[m * K + k]) * static_cast<int32_t>(B[n * K + k]);
          C[m * N + n] = s;
        }
    }
}
#endif

#if defined(__x86_64__)
template <int MR, int NR>
struct Avx2Tile {
  static void run(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0, int64_t N, int64_t K) {
    tile_avx2<MR, NR>(A, B, C, m0, n0, N, K);
  }
};
#elif defined(__aarch64__)
template <int MR, int NR>
struct DotProdTile {
  static void run(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0, int64_t N, int64_t K) {
    tile_dotprod<MR, NR>(A, B, C, m0, n0, N, K);
  }
};
template <int MR, int NR>
struct I8mmTile {
  static void run(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0, int64_t N, int64_t K) {
    tile_i8mm<MR, NR>(A, B, C, m0, n0, N, K);
  }
};
#endif
#if defined(__x86_64__) || defined(__aarch64__)

// The kernels for every (mr, nr) in [1, MR] x [1, NR], indexed [mr - 1][nr - 1].
template <template <int, int> class Tile, int MR, int NR>
struct Kernels {
  TileFn fn[MR][NR];
  Kernels() { fill(std::make_integer_sequence<int, MR * NR>{}); }
  template <int... I>
  void fill(std::integer_sequence<int, I...>) {
    ((fn[I / NR][I % NR] = &Tile<I / NR + 1, I % NR + 1>::run), ...);
  }
  // Rows [0, M) by columns [begin, end) of C in tiles, the edge ones smaller.
  void cover(const uint8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t begin, int64_t end, int64_t N,
             int64_t K) const {
    for (int64_t n0 = begin; n0 < end; n0 += NR)
      for (int64_t m0 = 0; m0 < M; m0 += MR)
        fn[std::min<int64_t>(MR, M - m0) - 1][std::min<int64_t>(NR, end - n0) - 1](A, B, C, m0, n0, N, K);
  }
};
#endif

}  // namespace

Int8Path int8_path() {
  const Capability c = cpu_capability();
#if defined(__x86_64__)
  if (c == Capability::AVX512 && __builtin_cpu_supports("avx512vnni")) return Int8Path::VNNI;
  if (c == Capability::AVX512 || c == Capability::AVX2) return Int8Path::AVX2;
#elif defined(__aarch64__)
  if (c == Capability::NEON || c == Capability::SVE) {
    if (arm::has(arm::Feature::I8MM)) return Int8Path::I8MM;
    if (arm::has(arm::Feature::DotProd)) return Int8Path::DotProd;
  }
#else
  (void)c;
#endif
  return Int8Path::Scalar;
}

const char* int8_path_name(Int8Path p) {
  switch (p) {
    case Int8Path::VNNI: return "avx512-vnni";
    case Int8Path::AVX2: return "avx2";
    case Int8Path::DotProd: return "neon-dotprod";
    case Int8Path::I8MM: return "neon-i8mm";
    default: return "scalar";
  }
}

int64_t packed_b_bytes(int64_t N, int64_t K) { return (N + 15) / 16 * ((K + 3) / 4) * 64; }

void pack_b(const int8_t* B, int64_t N, int64_t K, int8_t* packed) {
  if (N == 0 || K == 0) return;  // nothing to pack (and no buffer: memset of a null pointer is undefined)
  const int64_t groups = (K + 3) / 4;
  std::memset(packed, 0, static_cast<size_t>(packed_b_bytes(N, K)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) packed[((n / 16) * groups + k / 4) * 64 + (n % 16) * 4 + k % 4] = B[n * K + k];
}

void gemm_u8s8_packed(const uint8_t* A, int64_t lda, const int8_t* packed, int32_t* C, int64_t M, int64_t N,
                      int64_t K) {
#if defined(__x86_64__)
  static constexpr auto kernels = panel_kernels(std::make_integer_sequence<int, kPackedMR>{});
  const int64_t groups = (K + 3) / 4, panel = groups * 64, pairs = (N + 31) / 32;
  // Pairs of panels per task: about kGrain multiply-adds each.
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, M * K * 32));
  parallel_for(0, pairs, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n0 = p * 32;
      const int8_t* p0 = packed + (2 * p) * panel;
      const bool two = n0 + 16 < N;
      for (int64_t m0 = 0; m0 < M; m0 += kPackedMR) {
        const int64_t mr = std::min<int64_t>(kPackedMR, M - m0);
        kernels[static_cast<size_t>(mr - 1)](A, lda, p0, p0 + panel, C, m0, n0, N, groups, two);
      }
    }
  });
#else
  (void)A, (void)lda, (void)packed, (void)C, (void)M, (void)N, (void)K;
  fail("matmul_u8s8", "the packed int8 kernel needs AVX512-VNNI");
#endif
}

void gemm_u8s8(const uint8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  if (K == 0) return std::fill(C, C + M * N, 0);  // empty sums (and no operands to read)
  const Int8Path path = int8_path();
  if (path == Int8Path::VNNI) {  // packed (rows of A padded to a multiple of 4)
    std::vector<int8_t> packed(static_cast<size_t>(packed_b_bytes(N, K)));
    pack_b(B, N, K, packed.data());
    const int64_t lda = (K + 3) / 4 * 4;
    std::vector<uint8_t> padded(static_cast<size_t>(M * lda), 0);
    for (int64_t m = 0; m < M; ++m) std::memcpy(padded.data() + m * lda, A + m * K, static_cast<size_t>(K));
    return gemm_u8s8_packed(padded.data(), lda, packed.data(), C, M, N, K);
  }
  // Columns of C per task: about kGrain multiply-adds each, whole tiles of 4.
  const int64_t grain = std::max<int64_t>(4, kGrain / std::max<int64_t>(1, M * K) / 4 * 4);
  parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    if (path == Int8Path::AVX2) {
      static const Kernels<Avx2Tile, 2, 4> avx2;
      return avx2.cover(A, B, C, M, begin, end, N, K);
    }
#elif defined(__aarch64__)
    if (path == Int8Path::DotProd) {
      static const Kernels<DotProdTile, 2, 4> dot;
      return dot.cover(A, B, C, M, begin, end, N, K);
    }
    if (path == Int8Path::I8MM) {
      // Pairs of rows by pairs of columns; an odd last row or column in scalar.
      static const Kernels<I8mmTile, 2, 2> mm;
      constexpr int64_t MR = 2, NR = 2;
      const int64_t even_m = M / 2 * 2, even_end = begin + (end - begin) / 2 * 2;
      for (int64_t n0 = begin; n0 < even_end; n0 += 2 * NR)
        for (int64_t m0 = 0; m0 < even_m; m0 += 2 * MR)
          mm.fn[std::min(MR, (even_m - m0) / 2) - 1][std::min(NR, (even_end - n0) / 2) - 1](A, B, C, m0, n0, N, K);
      if (even_m < M) tile_scalar(A, B, C, even_m, M - even_m, begin, end - begin, N, K);
      if (even_end < end) tile_scalar(A, B, C, 0, even_m, even_end, end - even_end, N, K);
      return;
    }
#endif
    tile_scalar(A, B, C, 0, M, begin, end - begin, N, K);
  });
}

}  // namespace kiln::cpu
