// SIMD building blocks of the FlexAttention float32 forward kernel, compiled
// per CPU target inside libkiln (src/attention/attention_simd.cpp).
#pragma once
#include <cstdint>

namespace kiln::attention_simd {

// s[j] = scale * dot(q, column j of kt) for j < n; kt is E rows of stride ld.
void scores_row(const float* q, const float* kt, int64_t ld, int64_t E, int64_t n, float scale, float* s);
// s[j] = exp(s[j] - mx); returns the sum.
float exp_sub_sum(float* s, int64_t n, float mx);
// acc = acc * corr + p @ v (v is n rows of Ev).
void scale_accumulate(float* acc, float corr, const float* p, const float* v, int64_t n, int64_t Ev);

// scores_row for four query rows (qstride apart) into four score rows (sstride apart).
void scores_rows4(const float* q, int64_t qstride, const float* kt, int64_t ld, int64_t E, int64_t n, float scale,
                  float* s, int64_t sstride);
// scale_accumulate for four rows: acc[r] = acc[r] * corr[r] + p[r] @ v.
void scale_accumulate_rows4(float* acc, int64_t astride, const float* corr, const float* p, int64_t pstride,
                            const float* v, int64_t n, int64_t Ev);
// s[r * n + j] = scale * dot(q row r, k row j), rows of length E, k row-major:
// each key row is loaded once for all query rows (decoding, GQA groups).
void dots_rows(const float* q, int64_t rows, const float* k, int64_t n, int64_t E, float scale, float* s);
// acc[r] = acc[r] * corr[r] + sum_j p[r * n + j] * v[j], for r < rows.
void accumulate_rows(float* acc, const float* corr, const float* p, int64_t rows, const float* v, int64_t n, int64_t Ev);

}  // namespace kiln::attention_simd
