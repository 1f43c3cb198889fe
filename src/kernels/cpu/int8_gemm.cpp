// See int8_gemm.h. Each variant computes tiles of MR rows of A by NR rows
// of B with MR x NR accumulators held in registers across K, then sums
// each accumulator's lanes. The x86 variants are compiled with their own
// target attributes, so one build carries all of them.
#include "kernels/cpu/int8_gemm.h"

#include <algorithm>
#include <utility>

#include "kernels/cpu/loops.h"
#include "kiln/runtime.h"

#if defined(__x86_64__)
#include <immintrin.h>
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
// 64 bytes per step; the K tail through a masked load (zeros beyond K).
template <int MR, int NR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_vnni(const uint8_t* A, const int8_t* B, int32_t* C,
                                                                        int64_t m0, int64_t n0, int64_t N, int64_t K) {
  __m512i acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_si512();
  for (int64_t k = 0; k < K; k += 64) {
    const __mmask64 mask = K - k >= 64 ? ~__mmask64{0} : (__mmask64{1} << (K - k)) - 1;
    __m512i a[MR], b[NR];
    for (int i = 0; i < MR; ++i) a[i] = _mm512_maskz_loadu_epi8(mask, A + (m0 + i) * K + k);
    for (int j = 0; j < NR; ++j) b[j] = _mm512_maskz_loadu_epi8(mask, B + (n0 + j) * K + k);
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a[i], b[j]);
  }
  // The lanes summed through memory: GCC 12's _mm512_reduce_add_epi32 warns (uninitialised) and costs the same here.
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      alignas(64) int32_t lanes[16];
      _mm512_store_si512(lanes, acc[i][j]);
      int32_t s = 0;
      for (int32_t v : lanes) s += v;
      C[(m0 + i) * N + n0 + j] = s;
    }
}

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

#endif

using TileFn = void (*)(const uint8_t*, const int8_t*, int32_t*, int64_t, int64_t, int64_t, int64_t);

#if defined(__x86_64__)
template <int MR, int NR>
struct VnniTile {
  static void run(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0, int64_t N, int64_t K) {
    tile_vnni<MR, NR>(A, B, C, m0, n0, N, K);
  }
};
template <int MR, int NR>
struct Avx2Tile {
  static void run(const uint8_t* A, const int8_t* B, int32_t* C, int64_t m0, int64_t n0, int64_t N, int64_t K) {
    tile_avx2<MR, NR>(A, B, C, m0, n0, N, K);
  }
};

// The kernels for every (mr, nr) in [1, MR] x [1, NR], indexed [mr - 1][nr - 1].
template <template <int, int> class Tile, int MR, int NR>
struct Kernels {
  TileFn fn[MR][NR];
  Kernels() { fill(std::make_integer_sequence<int, MR * NR>{}); }
  template <int... I>
  void fill(std::integer_sequence<int, I...>) {
    ((fn[I / NR][I % NR] = &Tile<I / NR + 1, I % NR + 1>::run), ...);
  }
};
#endif

}  // namespace

Int8Path int8_path() {
#if defined(__x86_64__)
  const Capability c = cpu_capability();
  if (c == Capability::AVX512 && __builtin_cpu_supports("avx512vnni")) return Int8Path::VNNI;
  if (c == Capability::AVX512 || c == Capability::AVX2) return Int8Path::AVX2;
#endif
  return Int8Path::Scalar;
}

const char* int8_path_name(Int8Path p) {
  switch (p) {
    case Int8Path::VNNI: return "avx512-vnni";
    case Int8Path::AVX2: return "avx2";
    default: return "scalar";
  }
}

void gemm_u8s8(const uint8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K) {
  const Int8Path path = int8_path();
  // Columns of C per task: about kGrain multiply-adds each, whole tiles of 4.
  const int64_t grain = std::max<int64_t>(4, kGrain / std::max<int64_t>(1, M * K) / 4 * 4);
  parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    if (path != Int8Path::Scalar) {
      static const Kernels<VnniTile, 4, 4> vnni;
      static const Kernels<Avx2Tile, 2, 4> avx2;
      const int64_t MR = path == Int8Path::VNNI ? 4 : 2, NR = 4;
      for (int64_t n0 = begin; n0 < end; n0 += NR)
        for (int64_t m0 = 0; m0 < M; m0 += MR) {
          const int64_t mr = std::min(MR, M - m0), nr = std::min(NR, end - n0);
          const TileFn fn = path == Int8Path::VNNI ? vnni.fn[mr - 1][nr - 1] : avx2.fn[mr - 1][nr - 1];
          fn(A, B, C, m0, n0, N, K);
        }
      return;
    }
#endif
    tile_scalar(A, B, C, 0, M, begin, end - begin, N, K);
  });
}

}  // namespace kiln::cpu
