// LSTM, GRU and their cells against recurrences written here over doubles
// from the modules' parameters (PyTorch's gate orders), with several
// layers, both directions, batch_first, unbatched inputs and given
// states; gradcheck; parameter names; dropout between layers; errors.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

double sigm(double x) { return 1 / (1 + std::exp(-x)); }

using Mat = std::vector<std::vector<double>>;  // [time or batch][feature]

// W (rows x cols) times v, plus b.
std::vector<double> affine(const std::vector<double>& W, const std::vector<double>& b, const std::vector<double>& v,
                           int64_t rows) {
  const int64_t cols = static_cast<int64_t>(v.size());
  std::vector<double> r(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    double s = b.empty() ? 0 : b[static_cast<size_t>(i)];
    for (int64_t j = 0; j < cols; ++j) s += W[static_cast<size_t>(i * cols + j)] * v[static_cast<size_t>(j)];
    r[static_cast<size_t>(i)] = s;
  }
  return r;
}

// One cell step over doubles: LSTM (c given) or GRU.
void step(bool lstm, int64_t H, const std::vector<double>& gx, const std::vector<double>& gh, std::vector<double>& h,
          std::vector<double>& c) {
  for (int64_t k = 0; k < H; ++k) {
    const size_t u = static_cast<size_t>(k);
    if (lstm) {
      const double i = sigm(gx[u] + gh[u]), f = sigm(gx[u + H] + gh[u + H]), g = std::tanh(gx[u + 2 * H] + gh[u + 2 * H]),
                   o = sigm(gx[u + 3 * H] + gh[u + 3 * H]);
      c[u] = f * c[u] + i * g;
      h[u] = o * std::tanh(c[u]);
    } else {
      const double r = sigm(gx[u] + gh[u]), z = sigm(gx[u + H] + gh[u + H]);
      const double n = std::tanh(gx[u + 2 * H] + r * gh[u + 2 * H]);
      h[u] = (1 - z) * n + z * h[u];
    }
  }
}

// The whole network for one batch element: x [time][feature], states per
// layer * direction. Returns the output sequence; h_n, c_n updated.
Mat reference_rnn(nn::RNNBase& m, bool lstm, Mat x, std::vector<std::vector<double>>& h_n,
                  std::vector<std::vector<double>>& c_n) {
  const int64_t H = m.hidden_size, G = lstm ? 4 : 3, dirs = m.options.bidirectional ? 2 : 1;
  const int64_t L = static_cast<int64_t>(x.size());
  for (int64_t l = 0; l < m.options.num_layers; ++l) {
    Mat out(static_cast<size_t>(L));
    for (int64_t d = 0; d < dirs; ++d) {
      const auto p = m.layer_params(l, d);
      const std::vector<double> w_ih = values(*p[0]), w_hh = values(*p[1]);
      const std::vector<double> b_ih = p[2] ? values(*p[2]) : std::vector<double>{}, b_hh = p[3] ? values(*p[3]) : std::vector<double>{};
      std::vector<double>& h = h_n[static_cast<size_t>(l * dirs + d)];
      std::vector<double>& c = c_n[static_cast<size_t>(l * dirs + d)];
      for (int64_t t = 0; t < L; ++t) {
        const int64_t time = d ? L - 1 - t : t;
        step(lstm, H, affine(w_ih, b_ih, x[static_cast<size_t>(time)], G * H), affine(w_hh, b_hh, h, G * H), h, c);
        out[static_cast<size_t>(time)].insert(out[static_cast<size_t>(time)].end(), h.begin(), h.end());
      }
    }
    x = out;
  }
  return x;
}

TEST(RNN, LstmAndGruMatchTheirRecurrences) {
  manual_seed(5601);
  for (bool lstm : {true, false})
    for (bool bidirectional : {false, true})
      for (bool batch_first : {false, true})
        for (bool given_state : {false, true}) {
          nn::RNNOptions o;
          o.num_layers = 2, o.bidirectional = bidirectional, o.batch_first = batch_first, o.bias = !given_state;
          std::unique_ptr<nn::RNNBase> m;
          if (lstm) m = std::make_unique<nn::LSTM>(3, 4, o);
          else m = std::make_unique<nn::GRU>(3, 4, o);
          m->to(kFloat64);
          const int64_t L = 5, N = 2, H = 4, dirs = bidirectional ? 2 : 1;
          const Tensor x = randn({L, N, 3}, kFloat64);
          const Tensor h0 = randn({2 * dirs, N, H}, kFloat64), c0 = randn({2 * dirs, N, H}, kFloat64);
          const Tensor input = batch_first ? x.transpose(0, 1) : x;
          Tensor out, hn, cn;
          if (lstm) {
            auto& net = static_cast<nn::LSTM&>(*m);
            const auto r = given_state ? net.forward(input, std::tuple{h0, c0}) : net.forward(input);
            out = std::get<0>(r), hn = std::get<0>(std::get<1>(r)), cn = std::get<1>(std::get<1>(r));
          } else {
            std::tie(out, hn) = static_cast<nn::GRU&>(*m).forward(input, given_state ? h0 : Tensor());
          }
          if (batch_first) out = out.transpose(0, 1);
          const std::string what = std::string(lstm ? "LSTM" : "GRU") + (bidirectional ? " bidirectional" : "") +
                                   (batch_first ? " batch_first" : "") + (given_state ? " h0, no bias" : "");
          ASSERT_EQ(out.sizes(), (Shape{L, N, dirs * H})) << what;
          for (int64_t n = 0; n < N; ++n) {
            Mat seq;
            for (int64_t t = 0; t < L; ++t) seq.push_back(values(x.select(0, t).select(0, n)));
            std::vector<std::vector<double>> h(static_cast<size_t>(2 * dirs)), c(h.size());
            for (int64_t s = 0; s < 2 * dirs; ++s) {
              h[static_cast<size_t>(s)] = given_state ? values(h0.select(0, s).select(0, n)) : std::vector<double>(H, 0.0);
              c[static_cast<size_t>(s)] = given_state ? values(c0.select(0, s).select(0, n)) : std::vector<double>(H, 0.0);
            }
            const Mat want = reference_rnn(*m, lstm, seq, h, c);
            for (int64_t t = 0; t < L; ++t)
              expect_close(out.select(0, t).select(0, n), want[static_cast<size_t>(t)], 1e-12, 1e-12, what + " output");
            for (int64_t s = 0; s < 2 * dirs; ++s) {
              expect_close(hn.select(0, s).select(0, n), h[static_cast<size_t>(s)], 1e-12, 1e-12, what + " h_n");
              if (lstm) expect_close(cn.select(0, s).select(0, n), c[static_cast<size_t>(s)], 1e-12, 1e-12, what + " c_n");
            }
          }
        }
}

TEST(RNN, UnbatchedCellsAndNames) {
  manual_seed(5602);
  nn::LSTM lstm(3, 2);
  const Tensor x = randn({4, 3});
  const auto [out, states] = lstm.forward(x);
  EXPECT_EQ(out.sizes(), (Shape{4, 2}));
  EXPECT_EQ(std::get<0>(states).sizes(), (Shape{1, 2}));
  expect_close(out, values(std::get<0>(lstm.forward(x.unsqueeze(1))).squeeze(1)), 0, 0, "unbatched");
  // The cells give one step of the same recurrence.
  nn::LSTMCell cell(3, 2);
  nn::GRUCell gcell(3, 2);
  nn::GRU gru(3, 2);
  {
    NoGradGuard no_grad;
    for (const auto& [name, t] : cell.named_parameters()) lstm.state_dict().at(name + "_l0").copy_(t);
    for (const auto& [name, t] : gcell.named_parameters()) gru.state_dict().at(name + "_l0").copy_(t);
  }
  const Tensor x1 = randn({2, 3});
  expect_close(std::get<0>(cell.forward(x1)), values(std::get<0>(lstm.forward(x1.unsqueeze(0))).squeeze(0)), 1e-6,
               1e-6, "LSTMCell");
  expect_close(gcell.forward(x1), values(std::get<0>(gru.forward(x1.unsqueeze(0))).squeeze(0)), 1e-6, 1e-6, "GRUCell");
  EXPECT_EQ(gcell.forward(x1.select(0, 0)).sizes(), (Shape{2}));
  // PyTorch's names.
  nn::RNNOptions o;
  o.num_layers = 2, o.bidirectional = true;
  std::vector<std::string> names;
  for (const auto& [name, t] : nn::GRU(3, 2, o).named_parameters()) names.push_back(name);
  EXPECT_EQ(names.size(), 16u);
  EXPECT_EQ(names[0], "weight_ih_l0");
  EXPECT_EQ(names[4], "weight_ih_l0_reverse");
  EXPECT_EQ(names[8], "weight_ih_l1");
  EXPECT_EQ(nn::GRU(3, 2, o).named_parameters()[8].second.sizes(), (Shape{6, 4}));  // 2 directions in
}

TEST(RNN, GradientsAndDropout) {
  manual_seed(5603);
  nn::RNNOptions o;
  o.num_layers = 2, o.bidirectional = true;
  nn::LSTM lstm(2, 3, o);
  nn::GRU gru(2, 3, o);
  lstm.to(kFloat64), gru.to(kFloat64);
  const Tensor x = randn({3, 2, 2}, kFloat64).requires_grad_(), h0 = randn({4, 2, 3}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        const auto [out, st] = lstm.forward(in[0], std::tuple{in[1], in[1] * 0.5});
        return std::vector<Tensor>{out, std::get<1>(st)};
      },
      {x, h0}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{std::get<0>(gru.forward(in[0], in[1]))}; },
      {x, h0}));
  // Dropout 1 between layers: the second layer sees zeros in training only.
  o.dropout = 1.0, o.bidirectional = false;
  nn::GRU dropped(2, 3, o);
  const Tensor a = std::get<0>(dropped.forward(randn({4, 1, 2}))), b = std::get<0>(dropped.forward(randn({4, 1, 2})));
  expect_close(a, values(b), 0, 0, "training: the inputs never reach layer 2");
  dropped.eval();
  EXPECT_GT(max(abs(std::get<0>(dropped.forward(randn({4, 1, 2}))) - a)).item<double>(), 0.0);
}

TEST(RNN, Errors) {
  nn::LSTM lstm(3, 2);
  expect_error([&] { lstm.forward(randn({4, 2, 5})); }, {"[LSTM]", "(L, N, 3)", "[4, 2, 5]"});
  expect_error([&] { lstm.forward(randn({4, 2, 3}), std::tuple{zeros({1, 3, 2}), zeros({1, 2, 2})}); },
               {"[LSTM]", "state of shape [1, 2, 2]", "[1, 3, 2]"});
  nn::GRU gru(3, 2);
  expect_error([&] { gru.forward(randn({4, 3}), zeros({1, 1, 2})); }, {"[GRU]", "[1, 2]"});
  expect_error([] { nn::GRU(0, 2); }, {"[GRU]", "positive"});
  nn::RNNOptions o;
  o.num_layers = 0;
  expect_error([&] { nn::LSTM(3, 2, o); }, {"[LSTM]", "num_layers"});
  nn::GRUCell cell(3, 2);
  expect_error([&] { cell.forward(randn({2, 4})); }, {"[GRUCell]", "(N, 3)"});
  expect_error([&] { cell.forward(randn({2, 3}), zeros({3, 2})); }, {"[GRUCell]", "[2, 2]", "[3, 2]"});
}

}  // namespace
}  // namespace kiln::test
