// gradcheck (float64 central differences) on every differentiable op.
#include "test_util.h"

namespace kiln::test {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(Shape s, double lo = -1.0, double hi = 1.0) {
  return (rand(std::move(s), kFloat64) * (hi - lo) + lo).requires_grad_();
}

// First and second derivatives (gradgradcheck, through create_graph).
void expect_gradcheck(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs) {
  auto vec = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; };
  try {
    autograd::gradcheck(vec, inputs);
  } catch (const Error& e) {
    ADD_FAILURE() << name << ": " << e.what();
  }
  try {
    autograd::gradgradcheck(vec, inputs);
  } catch (const Error& e) {
    ADD_FAILURE() << name << " (second derivatives): " << e.what();
  }
}

TEST(Gradcheck, UnaryOps) {
  manual_seed(20);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"neg", [](auto& v) { return neg(v[0]); }},          {"abs", [](auto& v) { return abs(v[0]); }},
      {"exp", [](auto& v) { return exp(v[0]); }},          {"expm1", [](auto& v) { return expm1(v[0]); }},
      {"sin", [](auto& v) { return sin(v[0]); }},          {"cos", [](auto& v) { return cos(v[0]); }},
      {"tanh", [](auto& v) { return tanh(v[0]); }},        {"sigmoid", [](auto& v) { return sigmoid(v[0]); }},
      {"relu", [](auto& v) { return relu(v[0]); }},        {"gelu", [](auto& v) { return gelu(v[0]); }},
      {"gelu_tanh", [](auto& v) { return gelu(v[0], "tanh"); }}, {"silu", [](auto& v) { return silu(v[0]); }},
      {"erf", [](auto& v) { return erf(v[0]); }},          {"square", [](auto& v) { return square(v[0]); }},
      {"clamp", [](auto& v) { return clamp(v[0], -0.5, 0.5); }},
      {"leaky_relu", [](auto& v) { return leaky_relu(v[0], 0.2); }},
      {"elu", [](auto& v) { return elu(v[0], 0.7); }},
      {"softplus", [](auto& v) { return softplus(v[0], 2.0, 1.5); }},  // both sides of the threshold
      {"hardtanh", [](auto& v) { return hardtanh(v[0], -0.5, 0.6); }},
      {"hardsigmoid", [](auto& v) { return hardsigmoid(v[0] * 4); }},  // some past +-3
      {"hardswish", [](auto& v) { return hardswish(v[0] * 4); }},
      {"mish", [](auto& v) { return mish(v[0] * 3); }},
      {"floor", [](auto& v) { return floor(v[0]) * v[0]; }},
  };
  for (const auto& [name, fn] : ops) expect_gradcheck(name, fn, {leaf({3, 4})});
  const std::vector<std::pair<const char*, Fn>> positive = {
      {"log", [](auto& v) { return log(v[0]); }},          {"log1p", [](auto& v) { return log1p(v[0]); }},
      {"sqrt", [](auto& v) { return sqrt(v[0]); }},        {"rsqrt", [](auto& v) { return rsqrt(v[0]); }},
      {"reciprocal", [](auto& v) { return reciprocal(v[0]); }},
  };
  for (const auto& [name, fn] : positive) expect_gradcheck(name, fn, {leaf({3, 4}, 0.5, 2.0)});
}

TEST(Gradcheck, BinaryOpsWithBroadcasting) {
  manual_seed(21);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add", [](auto& v) { return add(v[0], v[1], 0.5); }}, {"sub", [](auto& v) { return sub(v[0], v[1], 2); }},
      {"mul", [](auto& v) { return mul(v[0], v[1]); }},       {"div", [](auto& v) { return div(v[0], v[1] + 3); }},
      {"pow", [](auto& v) { return pow(v[0] + 2, v[1]); }},   {"maximum", [](auto& v) { return maximum(v[0], v[1]); }},
      {"minimum", [](auto& v) { return minimum(v[0], v[1]); }}, {"fmod", [](auto& v) { return fmod(v[0] * 5, v[1] + 3); }},
      {"where", [](auto& v) { return where(v[0] > 0, v[0], v[1]); }},
      {"lerp", [](auto& v) { return lerp(v[0], v[1], 0.3); }},
      {"scalar_pow", [](auto& v) { return pow(v[0] + 2, 2.5) + v[1]; }},
      {"threshold_backward", [](auto& v) { return threshold_backward(v[0], v[1], 0.1); }},
  };
  for (const auto& [name, fn] : ops) {
    expect_gradcheck(std::string(name) + " same shape", fn, {leaf({3, 4}), leaf({3, 4})});
    expect_gradcheck(std::string(name) + " broadcast", fn, {leaf({3, 1}), leaf({4})});
  }
}

TEST(Gradcheck, Reductions) {
  manual_seed(22);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"sum_all", [](auto& v) { return sum(v[0]); }},
      {"sum_dims", [](auto& v) { return sum(v[0], {0, 2}); }},
      {"sum_keepdim", [](auto& v) { return sum(v[0], {1}, true); }},
      {"mean", [](auto& v) { return mean(v[0], {1}); }},
      {"prod", [](auto& v) { return prod(v[0], {2}); }},
      {"amax", [](auto& v) { return amax(v[0], {1}); }},
      {"amin", [](auto& v) { return amin(v[0]); }},
      {"var", [](auto& v) { return var(v[0], {2}); }},
      {"std", [](auto& v) { return kiln::std(v[0], {0, 1}); }},
      {"logsumexp", [](auto& v) { return logsumexp(v[0], {2}); }},
      {"norm", [](auto& v) { return norm(v[0], 2, {1}); }},
      {"max_dim", [](auto& v) { return std::get<0>(max(v[0], 1)); }},
      {"min_dim", [](auto& v) { return std::get<0>(min(v[0], 2, true)); }},
      {"cumsum", [](auto& v) { return cumsum(v[0], 1); }},
      {"sort", [](auto& v) { return std::get<0>(sort(v[0], 2)); }},
      {"topk", [](auto& v) { return std::get<0>(topk(v[0], 2, 1)); }},
  };
  for (const auto& [name, fn] : ops) expect_gradcheck(name, fn, {leaf({2, 3, 4})});
  // prod through an exact zero.
  Tensor z = tensor<double>({0.0, 2.0, 3.0, 0.5}).requires_grad_();
  expect_gradcheck("prod with a zero", [](auto& v) { return prod(v[0]); }, {z});
}

TEST(Gradcheck, MatmulAndNNFunctions) {
  manual_seed(23);
  expect_gradcheck("mm", [](auto& v) { return mm(v[0], v[1]); }, {leaf({3, 4}), leaf({4, 2})});
  // kiln::compile's GEMM with a folded bias add (Note [Bias in the GEMM]).
  expect_gradcheck("bmm_bias", [](auto& v) { return dispatch(*find_op("bmm_bias"), std::vector<Tensor>{v[0], v[1], v[2]})[0]; },
                   {leaf({2, 3, 4}), leaf({2, 4, 5}), leaf({5})});
  expect_gradcheck("batched matmul broadcast", [](auto& v) { return matmul(v[0], v[1]); },
                   {leaf({2, 3, 4}), leaf({4, 5})});
  // (..., M, K) x (K, N) runs as one folded product: contiguous and transposed (copied) inputs.
  expect_gradcheck("matmul folded", [](auto& v) { return matmul(v[0], v[1]); }, {leaf({2, 3, 3, 4}), leaf({4, 5})});
  expect_gradcheck("matmul folded transposed", [](auto& v) { return matmul(v[0].transpose(0, 2), v[1]); },
                   {leaf({4, 3, 2, 5}), leaf({5, 3})});
  expect_gradcheck("linear 3-D", [](auto& v) { return linear(v[0], v[1], v[2]); }, {leaf({2, 3, 3}), leaf({4, 3}), leaf({4})});
  expect_gradcheck("matmul vector", [](auto& v) { return matmul(v[0], v[1]); }, {leaf({4}), leaf({2, 4, 3})});
  expect_gradcheck("linear", [](auto& v) { return linear(v[0], v[1], v[2]); }, {leaf({2, 3}), leaf({4, 3}), leaf({4})});
  expect_gradcheck("softmax", [](auto& v) { return softmax(v[0], 1); }, {leaf({3, 5})});
  expect_gradcheck("log_softmax", [](auto& v) { return log_softmax(v[0], 0); }, {leaf({3, 5})});
  expect_gradcheck("layer_norm", [](auto& v) { return layer_norm(v[0], {5}, v[1], v[2]); },
                   {leaf({3, 5}), leaf({5}), leaf({5})});
  expect_gradcheck("layer_norm 2 dims, no affine", [](auto& v) { return layer_norm(v[0], {2, 3}); }, {leaf({2, 2, 3})});
  expect_gradcheck("rms_norm", [](auto& v) { return rms_norm(v[0], {4}, v[1]); }, {leaf({3, 4}), leaf({4})});
  Tensor idx = tensor<int64_t>({2, 0, 2}, {3});
  expect_gradcheck("embedding", [&](auto& v) { return embedding(v[0], idx.view({1, 3})); }, {leaf({4, 3})});
}

TEST(Gradcheck, ViewsAndIndexing) {
  manual_seed(24);
  Tensor idx = tensor<int64_t>({1, 0, 1, 1, 2, 0}, {2, 3});
  // scatter with repeated indices keeps an unspecified writer (as in PyTorch): unique ones here.
  Tensor perm = tensor<int64_t>({1, 0, 2, 2, 0, 3}, {2, 3});
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"view", [](auto& v) { return v[0].view({4, 3}) * 2; }},
      {"reshape copy", [](auto& v) { return v[0].t().reshape({-1}); }},
      {"permute", [](auto& v) { return v[0].permute({1, 0}) * v[0].t(); }},
      {"expand", [](auto& v) { return v[0].select(0, 1).expand({3, 4}) * 1.5; }},
      {"slice", [](auto& v) { return v[0].slice(1, 1, 4, 2) * 3; }},
      {"select", [](auto& v) { return v[0].select(1, 2) * v[0].select(0, -1).slice(0, 0, 3); }},
      {"slice_backward", [](auto& v) { return slice_backward(v[0].slice(0, 0, 2), {5, 4}, 0, 1, 5, 2) * 2; }},
      {"select_backward", [](auto& v) { return select_backward(v[0].select(0, 1), {2, 4}, 0, 1) * 2; }},
      {"unsqueeze squeeze", [](auto& v) { return v[0].unsqueeze(1).squeeze(1) + 1; }},
      {"unfold", [](auto& v) { return v[0].unfold(1, 2, 1) * 2; }},
      {"cat", [](auto& v) { return cat({v[0], v[0] * 2}, 1); }},
      {"stack", [](auto& v) { return stack({v[0], v[0].neg()}, 0); }},
      {"gather", [&](auto& v) { return gather(v[0], 1, idx); }},
      {"index_select", [](auto& v) { return index_select(v[0], 1, tensor<int64_t>({3, 0, 3})); }},
      {"scatter", [&](auto& v) { return scatter(v[0], 1, perm, v[0].slice(1, 0, 3) * 2); }},
      {"scatter_add", [&](auto& v) { return scatter_add(v[0], 1, idx, v[0].slice(1, 0, 3)); }},
      {"tril", [](auto& v) { return tril(v[0], 1); }},
      {"triu", [](auto& v) { return triu(v[0]); }},
      {"masked_fill", [](auto& v) { return masked_fill(v[0], v[0] > 0, 0.5); }},
      {"split", [](auto& v) { return split(v[0], 2, 1)[1] * 3; }},
  };
  for (const auto& [name, fn] : ops) expect_gradcheck(name, fn, {leaf({3, 4})});
}

}  // namespace
}  // namespace kiln::test
