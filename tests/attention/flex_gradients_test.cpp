// FlexAttention: gradients of the tensors score mods capture, and their
// misuse (attention/flex_reference.h).
#include "attention/flex_reference.h"

namespace kiln::test {
namespace {

// Tensors captured by a score mod get gradients when they require grad: a
// relative-position bias table and ALiBi slopes, by gradcheck in float64 and
// against the dense reference (whose bias is built from the table by ops).
TEST(FlexAttention, GradientsOfLearnedScoreModTensors) {
  manual_seed(46);
  const int64_t L = 11, S = 13, H = 2, maxd = 3, W = 2 * maxd + 1;
  Inputs in = make_qkv(2, H, H, L, S, 3, 2);
  const auto bm = create_block_mask(SlidingWindowMask{6}, 1, 1, L, S, 4);
  Tensor table = randn({H, W}, kFloat64).requires_grad_(), slopes = randn({H}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{flex_attention(t[0], t[1], t[2], RelativePositionBias{t[3], maxd}, bm).out};
      },
      {in.q, in.k, in.v, table}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{flex_attention(t[0], t[1], t[2], AlibiScore{t[3]}, bm).out};
      },
      {in.q.detach(), in.k.detach(), in.v.detach(), slopes}));
  // float32 attention, float64 table: the table's gradient against the dense
  // float64 reference, where bias[h, i, j] = table[h, clamp(j - i) + maxd]
  // is an index_select, so its gradient flows back to the table by ops.
  Tensor idx = empty({L * S}, kInt64);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) idx.data_ptr<int64_t>()[i * S + j] = std::clamp<int64_t>(j - i, -maxd, maxd) + maxd;
  const Tensor q32 = in.q.to(kFloat32).detach().requires_grad_(), k32 = in.k.to(kFloat32).detach(),
               v32 = in.v.to(kFloat32).detach();
  const Tensor go = randn({2, H, L, 2}, kFloat64);
  flex_attention(q32, k32, v32, RelativePositionBias{table, maxd}, bm).out.backward(go.to(kFloat32));
  const Tensor got = table.grad().clone();
  const Tensor ref_table = table.detach().requires_grad_();
  const Tensor bias = index_select(ref_table, 1, idx).reshape({H, L, S});
  dense_attention(in.q.detach(), in.k.detach(), in.v.detach(), dense_mask(SlidingWindowMask{6}, 2, H, L, S), bias, 0)
      .out.backward(go);
  expect_close(got, values(ref_table.grad()), 1e-4, 1e-5, "table gradient, float32 attention");
  EXPECT_FALSE(k32.grad().defined());  // inputs that do not require grad get none
}

// A score_mod lambda that reads tensors through CapturedTensors (Note
// [Tensors a score_mod captures]): per-head scales multiplying the score
// and a relative-position bias, both learned. gradcheck in float64, and the
// gradients of float32 attention against the dense float64 reference.
TEST(FlexAttention, GradientsOfTensorsALambdaCaptures) {
  manual_seed(47);
  const int64_t L = 9, S = 12, H = 2, maxd = 3, W = 2 * maxd + 1;
  Inputs in = make_qkv(2, H, H, L, S, 3, 2);
  const auto bm = create_block_mask(SlidingWindowMask{5}, 1, 1, L, S, 4);
  auto mod_of = [maxd](const Tensor& scale, const Tensor& table) {
    return [scale = CapturedTensor(scale), bias = CapturedTensor(table), maxd](auto s, int64_t, int64_t h, int64_t q,
                                                                               int64_t kv) {
      return s * scale(h) + bias(h, std::clamp<int64_t>(kv - q, -maxd, maxd) + maxd) * 0.5;
    };
  };
  const Tensor scale = (rand({H}, kFloat64) + 0.5).requires_grad_(), table = randn({H, W}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{flex_attention(t[0], t[1], t[2], mod_of(t[3], t[4]), bm).out};
      },
      {in.q, in.k, in.v, scale, table}));
  // float32 attention and a float32 table: against the dense reference,
  // whose scores are scaled and biased by ops.
  Tensor idx = empty({L * S}, kInt64);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) idx.data_ptr<int64_t>()[i * S + j] = std::clamp<int64_t>(j - i, -maxd, maxd) + maxd;
  const Tensor table32 = table.detach().to(kFloat32).requires_grad_(), scale64 = scale.detach().requires_grad_();
  const Tensor q32 = in.q.to(kFloat32).detach().requires_grad_(), k32 = in.k.to(kFloat32).detach(),
               v32 = in.v.to(kFloat32).detach();
  const Tensor go = randn({2, H, L, 2}, kFloat64);
  flex_attention(q32, k32, v32, mod_of(scale64, table32), bm).out.backward(go.to(kFloat32));
  ASSERT_TRUE(table32.grad().defined() && scale64.grad().defined());
  const Tensor ref_table = table.detach().requires_grad_(), ref_scale = scale.detach().requires_grad_();
  const Tensor qs = in.q.detach() * ref_scale.reshape({1, H, 1, 1});  // (q k^T / sqrt(E)) * scale[h]
  const Tensor bias = index_select(ref_table, 1, idx).reshape({H, L, S}) * 0.5;
  dense_attention(qs, in.k.detach(), in.v.detach(), dense_mask(SlidingWindowMask{5}, 2, H, L, S), bias, 0)
      .out.backward(go);
  expect_close(table32.grad(), values(ref_table.grad()), 1e-4, 1e-5, "bias table gradient");
  expect_close(scale64.grad(), values(ref_scale.grad()), 1e-4, 1e-5, "scale gradient");
  // Reads see the tensor as it is at the call (an optimizer's update shows).
  const Tensor before = flex_attention(q32, k32, v32, mod_of(scale64, table32), bm).out.detach();
  {
    NoGradGuard g;
    table32.mul_(2.0);  // (a shift of every entry would cancel in the softmax)
  }
  const Tensor after = flex_attention(q32, k32, v32, mod_of(scale64, table32), bm).out.detach();
  EXPECT_GT((after - before).abs().max().item<double>(), 1e-3);
}

// Reads that would lose a gradient, and bad reads, are errors that say so.
TEST(FlexAttention, CapturedTensorMisuseIsRefused) {
  manual_seed(48);
  Inputs in = make_qkv(1, 2, 2, 5, 5, 3, 2);
  const Tensor table = randn({2, 5}).requires_grad_();
  const CapturedTensor bias(table);
  // A float constant is taken for a score: the read became a plain number.
  auto lossy = [bias](auto s, int64_t, int64_t h, int64_t, int64_t kv) { return s + bias(h, kv) * 0.5f; };
  expect_error([&] { flex_attention(in.q, in.k, in.v, lossy); }, {"flex_attention", "CapturedTensor", "plain number"});
  {
    NoGradGuard g;  // nothing to differentiate: fine
    flex_attention(in.q, in.k, in.v, lossy);
  }
  auto out_of_range = [bias](auto s, int64_t, int64_t h, int64_t, int64_t kv) { return s + bias(h, kv + 1); };
  expect_error([&] { flex_attention(in.q, in.k, in.v, out_of_range); },
               {"CapturedTensor", "index 5", "dim 1", "size 5"});
  auto one_index = [bias](auto s, int64_t, int64_t h, int64_t, int64_t) { return s + bias(h); };
  expect_error([&] { flex_attention(in.q, in.k, in.v, one_index); }, {"CapturedTensor", "2-d", "1 indices"});
  expect_error([] { CapturedTensor(zeros({3}, kInt64)); }, {"CapturedTensor", "float32 or float64", "int64"});
  // A tensor read only away from every corner of the score space.
  const Tensor hidden = zeros({1}).requires_grad_();
  auto interior = [bias, h2 = CapturedTensor(hidden)](auto s, int64_t, int64_t h, int64_t q, int64_t kv) {
    return q == 2 && kv == 2 ? s + h2(0) : s + bias(h, kv);
  };
  const Tensor out = flex_attention(in.q, in.k, in.v, interior).out;
  expect_error([&] { out.sum().backward(); }, {"flex_attention", "did not read", "corner"});
}

}  // namespace
}  // namespace kiln::test
