// The op-math strings of the cpp backend (cpp_expressions.h).
#include "cpp_expressions.h"

#include <cstdio>

namespace kiln::compiler::detail {

std::string expression(const TracedNode& n, const std::string& a, const std::string& b) {
  const std::string& op = n.op->name;
  auto num = [](double x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9ef", x);
    return std::string(buf);
  };
  if (op == "add") return a + " + " + num(n.attrs.get_double("alpha")) + " * " + b;
  if (op == "sub") return a + " - " + num(n.attrs.get_double("alpha")) + " * " + b;
  if (op == "mul") return a + " * " + b;
  if (op == "div") return a + " / " + b;
  if (op == "neg") return "-" + a;
  if (op == "abs") return "__builtin_fabsf(" + a + ")";
  if (op == "exp") return "expf(" + a + ")";
  if (op == "log") return "logf(" + a + ")";
  if (op == "sqrt") return "__builtin_sqrtf(" + a + ")";
  if (op == "rsqrt") return "1.0f / __builtin_sqrtf(" + a + ")";
  if (op == "reciprocal") return "1.0f / " + a;
  if (op == "sin") return "sinf(" + a + ")";
  if (op == "cos") return "cosf(" + a + ")";
  if (op == "tanh") return "tanhf(" + a + ")";
  if (op == "erf") return "erff(" + a + ")";
  if (op == "square") return a + " * " + a;
  // The sigmoids and GELUs in the forms eager's kernels use (Note [Float32
  // at the edges]): no overflow of e^-x, no cancellation in 1 + erf(x).
  if (op == "sigmoid") return "kiln_sigmoid_times(" + a + ", 1.0f)";
  if (op == "silu") return "kiln_sigmoid_times(" + a + ", " + a + ")";
  if (op == "relu") return a + " > 0.0f ? " + a + " : (" + a + " != " + a + " ? " + a + " : 0.0f)";
  if (op == "gelu") return "0.5f * " + a + " * erfcf(" + a + " * -0.70710678f)";
  if (op == "gelu_backward")  // a * gelu'(b)
    return "(" + a + ") * (0.5f * erfcf(" + b + " * -0.70710678f) + " + b + " * expf(-0.5f * " + b + " * " + b +
           ") * 0.3989422804f)";
  // The tanh GELU through one exponential: 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))
  // and 1 - tanh(u)^2 = 4 s (1 - s) for that s; libmvec's tanhf made these
  // loops several times slower than the eager kernels (Highway's Tanh). The
  // exponential is kiln_exp2 (see the prelude) of -2u log2(e), the constant
  // folded: faster than libmvec's expf in norm_gelu_block's loop, and as
  // accurate, the float rounding of u being already in the argument
  // (measurements: git log of BENCHMARKS.md).
  const std::string exp_m2u = "kiln_exp2(-2.302208198f * (x_ + 0.044715f * x_ * x_ * x_))";
  if (op == "gelu_tanh_backward")
    return "({ const float x_ = (" + b + "); const float s_ = 1.0f / (1.0f + " + exp_m2u + "); (" + a +
           ") * (s_ + 2.0f * x_ * s_ * (1.0f - s_) * 0.7978845608f * (1.0f + 0.134145f * x_ * x_)); })";
  // Forward, x / (1 + 2^z) with z = -2u log2(e). Where eager's x s(2u) is a
  // negative subnormal (x in about [-10.7, -10]) 2^z overflows, so above
  // z = 64 both sides are scaled by 2^-64 (exactly: x is then below -5):
  // x 2^-64 / (2^-64 + 2^(z - 64)), one division still. Eager's own form
  // (2^-|z|, a select of two quotients) made norm_gelu_block much slower.
  if (op == "gelu_tanh")
    return "({ const float x_ = (" + a + "); const float z_ = -2.302208198f * (x_ + 0.044715f * x_ * x_ * x_); "
           "const bool big_ = z_ > 64.0f; const float k_ = big_ ? 5.421010862427522e-20f : 1.0f; "
           "(x_ * k_) / (k_ + kiln_exp2(big_ ? z_ - 64.0f : z_)); })";
  return "";
}

// 2^z inlined into the loops (a call into libmvec costs more than this
// polynomial): z is clamped to [-126, 128], so 2^z saturates at 2^-126 below
// and is +inf from z = 127.5 up (NaN stays NaN); below that it is within
// 1 ulp (0.83 at worst over 2^24 points of [-126, 127.5]). z = k + f with k = round(z) (the 1.5 * 2^23 shift leaves k
// in the low mantissa bits of t), |f| <= 1/2; 2^f by its Taylor series to
// degree 7 (terms ln(2)^i / i!, truncation below 6e-9), 2^k by building the
// float's exponent field.
const char* const kLoopPrelude = R"(static inline float kiln_sigmoid_times(float x, float factor) {
  // e^-|x|: 1 / (1 + e^-x) above 0, e^x / (1 + e^x) below. Below e^-87 the
  // result is subnormal, which the vector expf flushes to 0 where the eager
  // kernel keeps it (log(sigmoid(-95)) is -95, not -inf): there e^(-|x| + 64 ln 2),
  // the result scaled by 2^-64 last, rounding into the subnormals.
  const float m = x < 0.0f ? x : -x;
  const bool tiny = m < -87.0f;
  const float e0 = expf(tiny ? m + 44.36141955583649f : m), s = tiny ? 5.421010862427522e-20f : 1.0f;
  // The factor goes in before the 2^-64, as in the eager kernel; one division for both sides.
  const float q = (x >= 0.0f ? factor : factor * e0) / (1.0f + e0 * s);
  return x >= 0.0f ? q : q * s;
}

static inline float kiln_exp2(float z) {
  z = z < -126.0f ? -126.0f : z;
  z = z > 128.0f ? 128.0f : z;
  const float t = z + 12582912.0f;
  const float f = z - (t - 12582912.0f);
  float p = 1.525273380e-05f;
  p = p * f + 1.540353039e-04f;
  p = p * f + 1.333355815e-03f;
  p = p * f + 9.618129108e-03f;
  p = p * f + 5.550410866e-02f;
  p = p * f + 2.402265070e-01f;
  p = p * f + 6.931471806e-01f;
  p = p * f + 1.0f;
  return p * __builtin_bit_cast(float, (__builtin_bit_cast(int32_t, t) - 0x4B400000 + 127) << 23);
}

)";

int arity(const std::string& op) {
  return op == "add" || op == "sub" || op == "mul" || op == "div" || op == "gelu_backward" || op == "gelu_tanh_backward"
             ? 2
             : 1;
}

}  // namespace kiln::compiler::detail
