// Note [One definition of the math] (src/kernels/cpu/pointwise_math.h):
// every op with a pointwise functor gives, compiled into a generated loop,
// the eager kernel's float32 result bit for bit, on random values of every
// magnitude and on the special values (+-0, subnormals, +-inf, NaN, huge,
// sin / cos arguments past the fast reduction).
#include <cfloat>
#include <cstring>

#include "compile/compile_util.h"
#include "kiln/dispatch.h"
#include "kiln/kiln.h"

namespace kiln::test {
namespace {

// 4099 values (an odd count: the loops' tails), each kind spread through it.
std::vector<float> mixed_values(uint64_t seed) {
  const std::vector<float> special = {0.0f,       -0.0f,         FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MIN,  -FLT_MIN,
                                      1e-30f,     -1e-30f,       0.5f,         -1.0f,         1.0f,     88.7f,
                                      -88.7f,     89.5f,         -104.5f,      3e5f,          -2.7e8f,  3e8f,
                                      1e20f,      -1e30f,        FLT_MAX,      -FLT_MAX,      1e-40f,   -5.0f,
                                      std::numeric_limits<float>::infinity(),  -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::quiet_NaN()};
  manual_seed(seed);
  std::vector<float> v;
  const double scales[] = {1.0, 4.0, 30.0, 1e3, 1e6, 1e12, 1e30};
  for (double s : scales) {
    const std::vector<double> r = values(randn({580}, kFloat64) * s);
    for (double x : r) v.push_back(static_cast<float>(x));
  }
  for (size_t i = 0; v.size() < 4099; ++i) v.push_back(special[i % special.size()]);
  // Spread the special values through the array, so they land in every lane and block.
  manual_seed(seed + 1);
  const std::vector<double> order = values(randperm(static_cast<int64_t>(v.size()), kInt64).to(kFloat64));
  std::vector<float> shuffled(v.size());
  for (size_t i = 0; i < v.size(); ++i) shuffled[i] = v[static_cast<size_t>(order[i])];
  return shuffled;
}

Tensor float_tensor(const std::vector<float>& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, kFloat32);
  std::memcpy(t.data_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

// The same bits, or both NaN (which NaN a + b propagates depends on the
// operand order the compiler chose).
void expect_same_bits(const Tensor& got, const Tensor& want, const Tensor& a, const std::string& op) {
  ASSERT_EQ(got.sizes(), want.sizes()) << op;
  const float* g = got.contiguous().data_ptr<float>();
  const float* w = want.contiguous().data_ptr<float>();
  const float* x = a.data_ptr<float>();
  int reported = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    uint32_t gb, wb;
    std::memcpy(&gb, &g[i], 4);
    std::memcpy(&wb, &w[i], 4);
    if (gb != wb && reported++ < 5)
      ADD_FAILURE() << op << " at element " << i << " (first input " << x[i] << "): compiled " << g[i] << " ("
                    << std::hex << gb << "), eager " << w[i] << " (" << wb << std::dec << ")";
  }
}

TEST_F(Compile, EveryPointwiseOpIsBitIdenticalCompiledAndEager) {
  int ops_checked = 0;
  for (const OpDef* op : all_ops()) {
    if (!op->pointwise) continue;
    int tensors = 0;
    Attrs attrs;
    for (const SchemaArg& arg : op->parsed.arguments) {
      if (arg.is_tensor()) tensors++;
      // Bounds and alpha (add, sub) with every digit of a float.
      else if (arg.name == "min") attrs.set("min", -0.7853981633974483);
      else if (arg.name == "max") attrs.set("max", 2.718281828459045);
      else attrs.set(arg.name, -0.3183098861837907);
    }
    ASSERT_TRUE(tensors == 1 || tensors == 2) << op->name;
    const Tensor a = float_tensor(mixed_values(100 + ops_checked));
    const Tensor b = float_tensor(mixed_values(900 + ops_checked));
    // Negated, so that the loop has the two ops that make a loop worth it
    // (negation is exact: it flips the sign bit only).
    const int64_t loops = compiler::detail::fused_loop_runs();
    Tensor eager, compiled;
    if (tensors == 1) {
      auto fn = [&](const Tensor& x) { return -dispatch(*op, std::vector<Tensor>{x}, attrs)[0]; };
      eager = fn(a);
      compiled = compile(fn, backend("cpp"))(a);
    } else {
      auto fn = [&](const Tensor& x, const Tensor& y) { return -dispatch(*op, std::vector<Tensor>{x, y}, attrs)[0]; };
      eager = fn(a, b);
      compiled = compile(fn, backend("cpp"))(a, b);
      // A broadcast 0-dim operand on either side.
      const Tensor s = scalar_tensor(-2.5, kFloat32);
      expect_same_bits(compile(fn, backend("cpp"))(a, s), fn(a, s), a, op->name + " (a, scalar)");
      expect_same_bits(compile(fn, backend("cpp"))(s, b), fn(s, b), b, op->name + " (scalar, b)");
    }
    EXPECT_GT(compiler::detail::fused_loop_runs(), loops) << op->name << " did not run in a generated loop";
    expect_same_bits(compiled, eager, a, op->name);
    ops_checked++;
  }
  EXPECT_GE(ops_checked, 34);  // the unary and binary functor lists
}

}  // namespace
}  // namespace kiln::test
