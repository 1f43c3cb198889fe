// MultiheadAttention against attention written here over doubles from the
// module's own parameters (both of its paths: flex_attention and the
// materialised scores), with every kind of mask, batch_first, unbatched and
// cross attention; the weights it returns; gradcheck; dropout; then
// TransformerEncoderLayer (post- and pre-norm) against its definition
// composed from its submodules, TransformerEncoder, state_dict names, errors.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Masks {
  Tensor attn, padding;  // as passed to forward
  bool causal = false;
};

// Reference MHA over doubles: inputs batch-major (N, L, E), (N, S, E);
// returns the output (N, L, E) and per-head probabilities (N, H, L, S).
std::pair<std::vector<double>, std::vector<double>> reference_mha(const nn::MultiheadAttention& m, const Tensor& query,
                                                                  const Tensor& key, const Tensor& value,
                                                                  const Masks& masks) {
  const int64_t N = query.size(0), L = query.size(1), S = key.size(1), E = m.embed_dim, H = m.num_heads,
                D = m.head_dim;
  const std::vector<double> W = values(m.in_proj_weight), B = values(m.in_proj_bias), Wo = values(m.out_proj.weight),
                            Bo = values(m.out_proj.bias);
  const std::vector<double> xq = values(query.contiguous()), xk = values(key.contiguous()), xv = values(value.contiguous());
  auto project = [&](const std::vector<double>& x, int64_t len, int64_t part) {
    std::vector<double> r(static_cast<size_t>(N * len * E));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t t = 0; t < len; ++t)
        for (int64_t o = 0; o < E; ++o) {
          double s = B[static_cast<size_t>(part * E + o)];
          for (int64_t i = 0; i < E; ++i)
            s += W[static_cast<size_t>((part * E + o) * E + i)] * x[static_cast<size_t>((n * len + t) * E + i)];
          r[static_cast<size_t>((n * len + t) * E + o)] = s;
        }
    return r;
  };
  const std::vector<double> q = project(xq, L, 0), k = project(xk, S, 1), v = project(xv, S, 2);
  const std::vector<double> am = masks.attn.defined() ? values(masks.attn.to(kFloat64)) : std::vector<double>{};
  const bool am_bool = masks.attn.defined() && masks.attn.dtype() == kBool, am_3d = masks.attn.defined() && masks.attn.dim() == 3;
  const std::vector<double> pm = masks.padding.defined() ? values(masks.padding.to(kFloat64)) : std::vector<double>{};
  const bool pm_bool = masks.padding.defined() && masks.padding.dtype() == kBool;
  std::vector<double> probs(static_cast<size_t>(N * H * L * S)), heads(static_cast<size_t>(N * L * E));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l) {
        std::vector<double> sc(static_cast<size_t>(S));
        double top = kNegInf;
        for (int64_t s = 0; s < S; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[static_cast<size_t>((n * L + l) * E + h * D + d)] * k[static_cast<size_t>((n * S + s) * E + h * D + d)];
          double x = dot / std::sqrt(static_cast<double>(D));
          if (!am.empty()) {
            const double a = am[static_cast<size_t>((am_3d ? (n * H + h) * L * S : 0) + l * S + s)];
            x = am_bool ? (a != 0 ? kNegInf : x) : x + a;
          }
          if (!pm.empty()) {
            const double p = pm[static_cast<size_t>(n * S + s)];
            x = pm_bool ? (p != 0 ? kNegInf : x) : x + p;
          }
          if (masks.causal && s > l) x = kNegInf;
          sc[static_cast<size_t>(s)] = x;
          top = std::max(top, x);
        }
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - top));
        for (int64_t s = 0; s < S; ++s) {
          const double p = sc[static_cast<size_t>(s)] / z;
          probs[static_cast<size_t>(((n * H + h) * L + l) * S + s)] = p;
          for (int64_t d = 0; d < D; ++d)
            heads[static_cast<size_t>((n * L + l) * E + h * D + d)] += p * v[static_cast<size_t>((n * S + s) * E + h * D + d)];
        }
      }
  std::vector<double> out(static_cast<size_t>(N * L * E));
  for (int64_t r = 0; r < N * L; ++r)
    for (int64_t o = 0; o < E; ++o) {
      double s = Bo[static_cast<size_t>(o)];
      for (int64_t i = 0; i < E; ++i) s += Wo[static_cast<size_t>(o * E + i)] * heads[static_cast<size_t>(r * E + i)];
      out[static_cast<size_t>(r * E + o)] = s;
    }
  return {out, probs};
}

std::vector<double> head_average(const std::vector<double>& probs, int64_t N, int64_t H, int64_t L, int64_t S) {
  std::vector<double> r(static_cast<size_t>(N * L * S));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L * S; ++i) r[static_cast<size_t>(n * L * S + i)] += probs[static_cast<size_t>((n * H + h) * L * S + i)] / H;
  return r;
}

TEST(MultiheadAttention, BothPathsMatchFloat64WithEveryMask) {
  manual_seed(5501);
  const int64_t E = 8, H = 2, N = 3, L = 5, S = 7;
  nn::MultiheadAttention m(E, H);
  m.to(kFloat64);
  nn::init::normal_(m.in_proj_bias, 0, 0.1);
  nn::init::normal_(m.out_proj.bias, 0, 0.1);
  const Tensor q = randn({N, L, E}, kFloat64), k = randn({N, S, E}, kFloat64), v = randn({N, S, E}, kFloat64);
  Tensor causal_padding = zeros({N, S}, kBool);
  causal_padding.select(0, 1).narrow(0, 0, 1).fill_(true);  // never the first key of a causal row: no row is all masked
  std::vector<std::pair<std::string, Masks>> cases = {
      {"none", {}},
      {"bool attn_mask", {rand({L, S}) > 0.7, {}}},
      {"float attn_mask per head", {randn({N * H, L, S}, kFloat64), {}}},
      {"bool key_padding_mask", {{}, rand({N, S}) > 0.6}},
      {"float key_padding_mask", {{}, randn({N, S})}},
      {"both, float32 attn_mask", {randn({L, S}), rand({N, S}) > 0.8}},
      {"causal", {{}, {}, true}},
  };
  // Keep one key per row: masks never block a whole row (PyTorch gives NaN there).
  for (auto& [name, masks] : cases) {
    if (masks.attn.defined() && masks.attn.dtype() == kBool) masks.attn.narrow(-1, 0, 1).fill_(false);
    if (masks.padding.defined() && masks.padding.dtype() == kBool) masks.padding.narrow(-1, 0, 1).fill_(false);
  }
  for (const auto& [name, masks] : cases) {
    const auto [want, probs] = reference_mha(m, q, k, v, masks);
    for (bool batch_first : {true, false}) {
      m.batch_first = batch_first;
      auto layout = [&](const Tensor& t) { return batch_first ? t : t.transpose(0, 1); };
      const Tensor want_t = layout(tensor(want).reshape({N, L, E}));
      const auto [fast, no_weights] = m.forward(layout(q), layout(k), layout(v), masks.padding, false, masks.attn, true, masks.causal);
      EXPECT_FALSE(no_weights.defined());
      expect_close(fast, values(want_t.contiguous()), 1e-10, 1e-10, name + " (flex_attention)");
      const auto [slow, weights] = m.forward(layout(q), layout(k), layout(v), masks.padding, true, masks.attn, true, masks.causal);
      expect_close(slow, values(want_t.contiguous()), 1e-10, 1e-10, name + " (materialised)");
      expect_close(weights, head_average(probs, N, H, L, S), 1e-12, 1e-12, name + " averaged weights");
      const auto per_head = std::get<1>(m.forward(layout(q), layout(k), layout(v), masks.padding, true, masks.attn, false, masks.causal));
      EXPECT_EQ(per_head.sizes(), (Shape{N, H, L, S}));
      expect_close(per_head, probs, 1e-12, 1e-12, name + " per-head weights");
    }
  }
  // Unbatched (L, E): the batch of one without its dim.
  m.batch_first = false;
  const auto [want, probs] = reference_mha(m, q.narrow(0, 0, 1), k.narrow(0, 0, 1), v.narrow(0, 0, 1), {});
  const auto [y, w] = m.forward(q.select(0, 0), k.select(0, 0), v.select(0, 0));
  EXPECT_EQ(y.sizes(), (Shape{L, E}));
  EXPECT_EQ(w.sizes(), (Shape{L, S}));
  expect_close(y, want, 1e-10, 1e-10, "unbatched");
}

TEST(MultiheadAttention, Float32PathsAgreeAndGradientsFlow) {
  manual_seed(5502);
  nn::MultiheadAttention m(12, 3, 0.0, true, true);
  const Tensor x = randn({2, 9, 12}), mask = rand({9, 9}) > 0.5;
  mask.narrow(-1, 0, 1).fill_(false);
  const Tensor a = std::get<0>(m.forward(x, x, x, {}, false, mask));
  const Tensor b = std::get<0>(m.forward(x, x, x, {}, true, mask));
  expect_close(a, values(b), 1e-5, 1e-5, "float32 flex against materialised");
  // Gradients: every input (float64), through both paths.
  m.to(kFloat64);
  const Tensor q = randn({2, 3, 12}, kFloat64).requires_grad_(), kv = randn({2, 4, 12}, kFloat64).requires_grad_();
  for (bool need_weights : {false, true})
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{std::get<0>(m.forward(in[0], in[1], in[1], {}, need_weights, {}, true, true))};
        },
        {q, kv}))
        << need_weights;
  // The parameters' gradients are the same from both paths.
  std::vector<Tensor> grads[2];
  for (int path = 0; path < 2; ++path) {
    m.zero_grad();
    square(std::get<0>(m.forward(q, kv, kv, {}, path == 1))).sum().backward();
    for (const Tensor& p : m.parameters()) grads[path].push_back(p.grad().clone());
  }
  for (size_t i = 0; i < grads[0].size(); ++i) expect_close(grads[0][i], values(grads[1][i]), 1e-10, 1e-10, "param grad");
}

TEST(MultiheadAttention, DropoutActsOnlyInTraining) {
  manual_seed(5503);
  nn::MultiheadAttention m(4, 2, 1.0);
  const Tensor x = randn({3, 2, 4});
  // p = 1 drops every weight: only out_proj's bias remains.
  const Tensor y = std::get<0>(m.forward(x, x, x, {}, false));
  expect_close(y, values(m.out_proj.bias.expand({3, 2, 4}).contiguous()), 0, 0, "training, p = 1");
  m.eval();
  const Tensor z = std::get<0>(m.forward(x, x, x, {}, false));
  EXPECT_GT(max(abs(z - m.out_proj.bias)).item<double>(), 1e-3);
}

// The post-norm (or pre-norm) layer composed from its own submodules.
Tensor reference_layer(nn::TransformerEncoderLayer& l, const Tensor& x) {
  auto attend = [&](const Tensor& t) { return std::get<0>(l.self_attn.forward(t, t, t, {}, true)); };
  auto ff = [&](const Tensor& t) {
    const Tensor h = linear(t, l.linear1.weight, l.linear1.bias);
    return linear(l.options.activation == "relu" ? relu(h) : gelu(h), l.linear2.weight, l.linear2.bias);
  };
  auto norm = [](nn::LayerNorm& n, const Tensor& t) { return layer_norm(t, {t.size(-1)}, n.weight, n.bias, n.eps); };
  if (l.options.norm_first) {
    const Tensor y = x + attend(norm(l.norm1, x));
    return y + ff(norm(l.norm2, y));
  }
  const Tensor y = norm(l.norm1, x + attend(x));
  return norm(l.norm2, y + ff(y));
}

TEST(TransformerEncoderLayer, MatchesItsDefinition) {
  manual_seed(5504);
  for (bool norm_first : {false, true})
    for (const std::string activation : {"relu", "gelu"}) {
      nn::TransformerEncoderLayerOptions o;
      o.dim_feedforward = 16, o.norm_first = norm_first, o.activation = activation;
      nn::TransformerEncoderLayer layer(8, 2, o);
      layer.to(kFloat64);
      layer.eval();
      const Tensor x = randn({5, 3, 8}, kFloat64);  // (L, N, E)
      expect_close(layer.forward(x), values(reference_layer(layer, x)), 1e-10, 1e-10,
                   activation + (norm_first ? " pre-norm" : " post-norm"));
      EXPECT_TRUE(autograd::gradcheck(
          [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{layer.forward(in[0])}; },
          {randn({3, 2, 8}, kFloat64).requires_grad_()}));
    }
  // PyTorch's parameter names.
  nn::TransformerEncoderLayer layer(8, 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : layer.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                             "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                                             "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                                             "norm1.bias", "norm2.weight", "norm2.bias"}));
  nn::TransformerEncoderLayerOptions no_bias;
  no_bias.bias = false;
  EXPECT_EQ(nn::TransformerEncoderLayer(8, 2, no_bias).named_parameters().size(), 6u);  // weights only
}

TEST(TransformerEncoderLayer, EncoderStacksLayersAndTrains) {
  manual_seed(5505);
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 32, o.dropout = 0.0, o.batch_first = true;
  nn::TransformerEncoder enc(16, 4, 2, o, true);
  EXPECT_TRUE(enc.state_dict().count("layers.1.self_attn.in_proj_weight"));
  EXPECT_TRUE(enc.state_dict().count("norm.weight"));
  const Tensor x = randn({4, 6, 16}), pad = zeros({4, 6}, kBool);
  pad.select(0, 2).narrow(0, 4, 2).fill_(true);
  Tensor y = x;
  for (auto& l : enc.layers) y = l->forward(y, {}, pad, true);
  expect_close(enc.forward(x, {}, pad, true), values((*enc.norm)(y)), 0, 0, "the layers in order, then the norm");
  // A few SGD steps fit a fixed target.
  const Tensor target = randn({4, 6, 16});
  optim::SGD opt(enc.parameters(), {0.05});
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    opt.zero_grad();
    const Tensor loss = nn::mse_loss(enc.forward(x, {}, pad, true), target);
    loss.backward();
    opt.step();
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.9);
}

TEST(MultiheadAttention, Errors) {
  expect_error([] { nn::MultiheadAttention(10, 3); }, {"[MultiheadAttention]", "divisible", "10", "3"});
  nn::MultiheadAttention m(4, 2);
  const Tensor x = randn({3, 2, 4});
  expect_error([&] { m.forward(x, x, randn({3, 2})); }, {"[MultiheadAttention]", "all 3-D"});
  expect_error([&] { m.forward(randn({3, 2, 5}), x, x); }, {"[MultiheadAttention]", "embed_dim 4"});
  expect_error([&] { m.forward(x, x, randn({4, 2, 4})); }, {"[MultiheadAttention]", "one shape"});
  expect_error([&] { m.forward(x, x, x, {}, true, ones({3, 4}, kBool)); }, {"[MultiheadAttention]", "(3, 3)", "[3, 4]"});
  expect_error([&] { m.forward(x, x, x, ones({3, 3}, kBool)); }, {"[MultiheadAttention]", "key_padding_mask", "[2, 3]"});
  expect_error([&] { m.forward(x, x, x, {}, true, ones({3, 3}, kInt64)); }, {"[MultiheadAttention]", "bool", "int64"});
  nn::TransformerEncoderLayerOptions o;
  o.activation = "tanh";
  expect_error([&] { nn::TransformerEncoderLayer(4, 2, o); }, {"[TransformerEncoderLayer]", "'tanh'"});
}

}  // namespace
}  // namespace kiln::test
