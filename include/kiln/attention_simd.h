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

}  // namespace kiln::attention_simd
