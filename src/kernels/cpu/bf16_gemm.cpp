// bf16_gemm.h's BFMMLA kernel. Both operands are packed into BFMMLA's
// operand order: A by row pairs and B by column pairs, each pair's K in
// groups of four with the pair's two groups side by side (16 bytes: one
// operand), zeros past M, N and K. A tile of 4 x 4 pairs (8 x 8 of C) keeps
// 16 accumulators, each a 2x2 block of C, and loads 8 operands per group of
// four along K for 16 BFMMLA. Speed on Arm cannot be measured on this
// project's machines (qemu only): the tile shape follows the register
// count (32 NEON registers), as the int8 I8MM kernel's.
#include "kernels/cpu/bf16_gemm.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "core/arm_features.h"
#endif

namespace kiln::cpu {
namespace {

#if defined(__aarch64__)
#define KILN_BF16 __attribute__((target("arch=armv8.2-a+bf16")))

// rows x cols of a matrix (element (r, c) at p[r * sr + c * sc]) as pairs
// of rows, each pair's cols in groups of four: out[((r / 2) * G + c / 4) * 8
// + (r % 2) * 4 + c % 4], G = ceil(cols / 4). B is packed through its
// transpose (pairs of columns).
// Written in output order; whole groups of four along a contiguous row are
// 8-byte copies. (Element by element with the index computed from r and c,
// packing took more instructions than the BFMMLA loop itself at 16 x 256 x
// 16, bench/arm64_icount.sh.)
std::vector<uint16_t> pack_pairs(const uint16_t* p, int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  const int64_t G = (cols + 3) / 4, whole = cols / 4;
  std::vector<uint16_t> out(static_cast<size_t>((rows + 1) / 2 * G * 8), 0);
  uint16_t* o = out.data();
  for (int64_t r0 = 0; r0 < rows; r0 += 2) {
    const uint16_t* row[2] = {p + r0 * sr, r0 + 1 < rows ? p + (r0 + 1) * sr : nullptr};
    for (int64_t g = 0; g < G; ++g, o += 8)
      for (int h = 0; h < 2; ++h) {
        if (!row[h]) continue;  // the zeros of a last odd row
        const uint16_t* from = row[h] + 4 * g * sc;
        if (sc == 1 && g < whole) {
          std::memcpy(o + 4 * h, from, 4 * sizeof(uint16_t));
          continue;
        }
        for (int64_t j = 0; j < 4 && 4 * g + j < cols; ++j) o[4 * h + j] = from[j * sc];
      }
  }
  return out;
}

using TileFn = void (*)(const uint16_t*, const uint16_t*, int64_t, float*, int64_t, int64_t, int64_t, int64_t);

// R row pairs by Q column pairs of C from row pair m0 / 2 and column pair
// n0 / 2 (ap, bp: the packed operands, G groups per pair).
template <int R, int Q>
struct Tile {
  KILN_BF16 static void run(const uint16_t* ap, const uint16_t* bp, int64_t G, float* C, int64_t M, int64_t N,
                            int64_t m0, int64_t n0) {
    float32x4_t acc[R][Q];
    for (auto& row : acc)
      for (auto& a : row) a = vdupq_n_f32(0.0f);
    const uint16_t* a = ap + (m0 / 2) * G * 8;
    const uint16_t* b = bp + (n0 / 2) * G * 8;
    for (int64_t g = 0; g < G; ++g) {
      bfloat16x8_t av[R], bv[Q];
      for (int i = 0; i < R; ++i) av[i] = vreinterpretq_bf16_u16(vld1q_u16(a + (i * G + g) * 8));
      for (int j = 0; j < Q; ++j) bv[j] = vreinterpretq_bf16_u16(vld1q_u16(b + (j * G + g) * 8));
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < Q; ++j) acc[i][j] = vbfmmlaq_f32(acc[i][j], av[i], bv[j]);
    }
    // acc[i][j] = [c(r, n), c(r, n + 1), c(r + 1, n), c(r + 1, n + 1)].
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < Q; ++j) {
        const int64_t r = m0 + 2 * i, n = n0 + 2 * j;
        alignas(16) float block[4];
        vst1q_f32(block, acc[i][j]);
        for (int64_t dr = 0; dr < 2 && r + dr < M; ++dr)
          for (int64_t dn = 0; dn < 2 && n + dn < N; ++dn) C[(r + dr) * N + n + dn] = block[dr * 2 + dn];
      }
  }
};

// The kernels for every (R, Q) in [1, 4] x [1, 4], indexed [R - 1][Q - 1].
struct Tiles {
  static constexpr int kPairs = 4;
  TileFn fn[kPairs][kPairs];
  Tiles() { fill(std::make_integer_sequence<int, kPairs * kPairs>{}); }
  template <int... I>
  void fill(std::integer_sequence<int, I...>) {
    ((fn[I / kPairs][I % kPairs] = &Tile<I / kPairs + 1, I % kPairs + 1>::run), ...);
  }
};
#endif

}  // namespace

BF16GemmPath bf16_gemm_path() {
#if defined(__aarch64__)
  const Capability c = cpu_capability();
  if ((c == Capability::NEON || c == Capability::SVE) && arm::has(arm::Feature::BF16)) return BF16GemmPath::BFMMLA;
#endif
  return BF16GemmPath::Float32;
}

const char* bf16_gemm_path_name(BF16GemmPath p) { return p == BF16GemmPath::BFMMLA ? "neon-bfmmla" : "float32"; }

void gemm_bf16(const uint16_t* A, int64_t a_rs, int64_t a_cs, const uint16_t* B, int64_t b_rs, int64_t b_cs, float* C,
               int64_t M, int64_t N, int64_t K) {
#if defined(__aarch64__)
  check(bf16_gemm_path() == BF16GemmPath::BFMMLA, "gemm_bf16", "this CPU has no bf16 matrix instruction");
  if (M == 0 || N == 0) return;
  const int64_t G = (K + 3) / 4;
  const std::vector<uint16_t> ap = pack_pairs(A, M, K, a_rs, a_cs), bp = pack_pairs(B, N, K, b_cs, b_rs);
  static const Tiles tiles;
  constexpr int64_t kCols = 2 * Tiles::kPairs;  // columns per tile
  // Column blocks of whole tiles, enough work per task to pay for a thread.
  const int64_t blocks = (N + kCols - 1) / kCols;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, M * K * kCols));
  parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t n0 = blk * kCols, q = std::min<int64_t>(Tiles::kPairs, (N - n0 + 1) / 2);
      for (int64_t m0 = 0; m0 < M; m0 += 2 * Tiles::kPairs) {
        const int64_t r = std::min<int64_t>(Tiles::kPairs, (M - m0 + 1) / 2);
        tiles.fn[r - 1][q - 1](ap.data(), bp.data(), G, C, M, N, m0, n0);
      }
    }
  });
#else
  (void)A, (void)a_rs, (void)a_cs, (void)B, (void)b_rs, (void)b_cs, (void)C, (void)M, (void)N, (void)K;
  fail("gemm_bf16", "this CPU has no bf16 matrix instruction");
#endif
}

}  // namespace kiln::cpu
