// FlexAttention with stateful score and mask mods, mixed dtypes and
// learned tensors is one dispatcher op (Note [flex_attention as an op]):
// the profiler counts it, kiln::compile traces it as one node without a
// graph break, and compiled results and gradients equal eager ones.
#include <algorithm>

#include "kiln/attention.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"

#include "compile/compile_util.h"

namespace kiln::test {
namespace {

// A relative-position bias read from a learned table through a
// CapturedTensor, scaled by a number the lambda captures by value.
auto biased(const Tensor& table, double gain, int64_t maxd) {
  return [bias = CapturedTensor(table), gain, maxd](auto s, int64_t, int64_t h, int64_t q, int64_t kv) {
    return s * gain + bias(h, std::clamp<int64_t>(kv - q, -maxd, maxd) + maxd);
  };
}

TEST_F(Compile, FlexAttentionWithCapturedTensorsIsOneGraphNodeAndMatchesEager) {
  manual_seed(91);
  const int64_t B = 2, H = 2, L = 11, E = 5, maxd = 3;
  const Tensor q = randn({B, H, L, E}).requires_grad_(), k = randn({B, H, L, E}).requires_grad_(),
               v = randn({B, H, L, E}).requires_grad_();
  const Tensor table = randn({H, 2 * maxd + 1}).requires_grad_();
  // A document mask reads its ids through the mask mod's own state.
  const Tensor ids = tensor(std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  const auto bm = create_block_mask(and_masks(CausalMask{}, DocumentMask(ids)), 1, 1, L, L, 4);
  auto fn = [&](const Tensor& x, const Tensor& kk, const Tensor& vv, double gain) {
    return sin(flex_attention(x * 2.0, kk, vv, biased(table, gain, maxd), bm).out);
  };
  const compiler::ExplainOutput e = compiler::explain(fn, q, k, v, 0.5);
  EXPECT_EQ(e.graph_count, 1) << e.to_string();
  EXPECT_EQ(e.graph_break_count, 0) << e.to_string();
  const std::vector<Tensor> leaves = {q, k, v, table};
  for (const char* b : {"cpp", "interpreter"}) {
    auto f = compile(fn, backend(b));
    for (double gain : {0.5, 0.5, 1.5}) {
      const std::string what = std::string(b) + " gain " + std::to_string(gain);
      const Tensor yc = f(q, k, v, gain), ye = fn(q, k, v, gain);
      expect_same(yc, ye, what);
      const Tensor g = randn(ye.sizes());
      const auto gc = autograd::grad({yc}, leaves, {g}), ge = autograd::grad({ye}, leaves, {g});
      for (size_t i = 0; i < leaves.size(); ++i) expect_same(gc[i], ge[i], what + " grad " + std::to_string(i), 1e-4);
    }
    // The same mods (same bytes) reuse the graph; another captured number
    // is another graph, never the first call's mods.
    EXPECT_EQ(f.cache_entries(), 2) << b;
  }
}

// Every call is the op: stateful mods, learned tensors, low-precision
// dtypes, bfloat16 decoding.
TEST_F(Compile, EveryFlexAttentionCallIsADispatcherOp) {
  manual_seed(92);
  profiler::enable(true);
  profiler::reset();
  const Tensor q = randn({1, 2, 6, 4}), k = randn({1, 2, 6, 4}), v = randn({1, 2, 6, 4});
  const Tensor slopes = rand({2}, kFloat64).requires_grad_();
  flex_attention(q, k, v, AlibiScore{slopes});
  flex_attention(q, k, v, SoftcapScore{3.0});
  flex_attention(q, k, v, biased(randn({2, 7}).requires_grad_(), 1.0, 3));
  const FlexOutput low = flex_attention(q.to(kBFloat16), k.to(kBFloat16), v.to(kBFloat16));
  EXPECT_EQ(low.out.dtype(), kBFloat16);
  const Tensor one = randn({1, 2, 1, 4}).to(kBFloat16);
  const FlexOutput decoded = flex_attention(one, k.to(kBFloat16), v.to(kBFloat16));
  EXPECT_EQ(profiled_calls("flex_attention"), 5);
  profiler::enable(false);
  // bfloat16 K/V decoding reads the cache as stored: it matches attention over the same values in float32.
  const Tensor ref = flex_attention(one.to(kFloat32), k.to(kBFloat16).to(kFloat32), v.to(kBFloat16).to(kFloat32)).out;
  expect_same(decoded.out.to(kFloat32), ref.to(kBFloat16).to(kFloat32), "bfloat16 decode", 1e-2);
  // The learned slopes' gradient arrives through the backward op.
  flex_attention(q, k, v, AlibiScore{slopes}).out.sum().backward();
  ASSERT_TRUE(slopes.grad().defined());
  EXPECT_GT(slopes.grad().abs().sum().item<double>(), 0);
}

}  // namespace
}  // namespace kiln::test
