// LSTM and GRU (and their cells) as PyTorch's, composed of ops, so autograd
// and kiln::compile come with them. Each layer and direction projects the
// whole input sequence at once (one GEMM: x W_ih^T + b_ih) and then steps
// through time with the recurrent product h W_hh^T + b_hh.
#include <cmath>
#include <string>

#include "kiln/error.h"
#include "kiln/nn.h"

namespace kiln::nn {
namespace {

// Gate k of H-wide gates packed along the last dim.
Tensor gate(const Tensor& gates, int64_t k, int64_t H) { return gates.narrow(-1, k * H, H); }

// LSTM: gates i, f, g, o; c' = f c + i g, h' = o tanh(c').
std::pair<Tensor, Tensor> lstm_step(const Tensor& gates_x, const Tensor& h, const Tensor& c, const Tensor& w_hh,
                                    const Tensor& b_hh) {
  const int64_t H = h.size(-1);
  const Tensor gates = gates_x + linear(h, w_hh, b_hh);
  const Tensor c_next = sigmoid(gate(gates, 1, H)) * c + sigmoid(gate(gates, 0, H)) * tanh(gate(gates, 2, H));
  return {sigmoid(gate(gates, 3, H)) * tanh(c_next), c_next};
}

// GRU: gates r, z, n; n = tanh(x_n + r (h W_hn^T + b_hn)), h' = (1 - z) n + z h.
std::pair<Tensor, Tensor> gru_step(const Tensor& gates_x, const Tensor& h, const Tensor&, const Tensor& w_hh,
                                   const Tensor& b_hh) {
  const int64_t H = h.size(-1);
  const Tensor gates_h = linear(h, w_hh, b_hh);
  const Tensor r = sigmoid(gate(gates_x, 0, H) + gate(gates_h, 0, H));
  const Tensor z = sigmoid(gate(gates_x, 1, H) + gate(gates_h, 1, H));
  const Tensor n = tanh(gate(gates_x, 2, H) + r * gate(gates_h, 2, H));
  return {(1 - z) * n + z * h, Tensor()};
}

Tensor uniform_weight(Shape shape, int64_t hidden) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  Tensor t = empty(std::move(shape));
  init::uniform_(t, -bound, bound);
  return t;
}

void check_sizes(const char* op, int64_t input_size, int64_t hidden_size) {
  check(input_size > 0 && hidden_size > 0, op, "expected positive input_size and hidden_size but got ", input_size,
        " and ", hidden_size);
}

// A cell's state: given (checked against (N, H) or, unbatched, (H)) or zeros.
Tensor cell_state(const char* op, const Tensor& given, const Tensor& x, int64_t H) {
  const Shape want = x.dim() == 1 ? Shape{H} : Shape{x.size(0), H};
  if (!given.defined()) return zeros(want, x.options());
  check(given.sizes() == want, op, "expected a hidden state of shape ", shape_text(want), " but got ",
        shape_text(given.sizes()));
  return given;
}

void check_cell_input(const char* op, const Tensor& x, int64_t input_size) {
  check((x.dim() == 1 || x.dim() == 2) && x.size(-1) == input_size, op, "expected input of shape (N, ", input_size,
        ") or (", input_size, ") but got ", shape_text(x.sizes()));
}

}  // namespace

RNNBase::RNNBase(const char* name, int64_t gates, int64_t in, int64_t hidden, RNNOptions o)
    : input_size(in), hidden_size(hidden), options(o), name_(name) {
  check_sizes(name, in, hidden);
  check(o.num_layers >= 1, name, "expected num_layers >= 1 but got ", o.num_layers);
  check(o.dropout >= 0 && o.dropout <= 1, name, "expected dropout in [0, 1] but got ", o.dropout);
  const int64_t dirs = o.bidirectional ? 2 : 1;
  for (int64_t l = 0; l < o.num_layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t layer_in = l == 0 ? in : hidden * dirs;
      register_parameter("weight_ih" + suffix, &params_store_.emplace_back(uniform_weight({gates * hidden, layer_in}, hidden)));
      register_parameter("weight_hh" + suffix, &params_store_.emplace_back(uniform_weight({gates * hidden, hidden}, hidden)));
      if (!o.bias) continue;
      register_parameter("bias_ih" + suffix, &params_store_.emplace_back(uniform_weight({gates * hidden}, hidden)));
      register_parameter("bias_hh" + suffix, &params_store_.emplace_back(uniform_weight({gates * hidden}, hidden)));
    }
}

std::array<Tensor*, 4> RNNBase::layer_params(int64_t layer, int64_t direction) {
  const int64_t dirs = options.bidirectional ? 2 : 1, per = options.bias ? 4 : 2;
  check(layer >= 0 && layer < options.num_layers && direction >= 0 && direction < dirs, name_, "no layer ", layer,
        " direction ", direction);
  const size_t at = static_cast<size_t>((layer * dirs + direction) * per);
  return {&params_store_[at], &params_store_[at + 1], options.bias ? &params_store_[at + 2] : nullptr,
          options.bias ? &params_store_[at + 3] : nullptr};
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                                const Step& step) {
  const bool unbatched = input.dim() == 2;
  check((input.dim() == 3 || unbatched) && input.size(-1) == input_size, name_, "expected input of shape (L, N, ",
        input_size, ")", options.batch_first ? " (batch_first: (N, L, ...))" : "", " or (L, ", input_size,
        ") but got ", shape_text(input.sizes()));
  const Tensor x = unbatched ? input.unsqueeze(1) : options.batch_first ? input.transpose(0, 1) : input;
  const int64_t L = x.size(0), N = x.size(1), H = hidden_size, dirs = options.bidirectional ? 2 : 1;
  const Shape state_shape = unbatched ? Shape{options.num_layers * dirs, H} : Shape{options.num_layers * dirs, N, H};
  auto state = [&](const Tensor& given, bool wanted) {
    if (!wanted) return Tensor();
    if (!given.defined()) return zeros({options.num_layers * dirs, N, H}, x.options());
    check(given.sizes() == state_shape, name_, "expected a state of shape ", shape_text(state_shape), " but got ",
          shape_text(given.sizes()));
    return unbatched ? given.unsqueeze(1) : given;
  };
  const bool has_cell = c0.defined() || name_ == std::string("LSTM");
  const Tensor h_init = state(h0, true), c_init = state(c0, has_cell);
  Tensor layer_input = x;
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < options.num_layers; ++l) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < dirs; ++d) {
      const auto [w_ih, w_hh, b_ih, b_hh] = layer_params(l, d);
      const Tensor gates_x = linear(layer_input, *w_ih, b_ih ? *b_ih : Tensor());  // (L, N, gates * H)
      Tensor h = h_init.select(0, l * dirs + d), c = has_cell ? c_init.select(0, l * dirs + d) : Tensor();
      std::vector<Tensor> steps(static_cast<size_t>(L));
      for (int64_t t = 0; t < L; ++t) {
        const int64_t time = d ? L - 1 - t : t;
        std::tie(h, c) = step(gates_x.select(0, time), h, c, *w_hh, b_hh ? *b_hh : Tensor());
        steps[static_cast<size_t>(time)] = h;
      }
      outputs.push_back(L ? stack(steps, 0) : zeros({0, N, H}, x.options()));
      h_n.push_back(h);
      if (has_cell) c_n.push_back(c);
    }
    layer_input = dirs == 2 ? cat(outputs, -1) : outputs[0];
    if (l + 1 < options.num_layers && is_training() && options.dropout > 0)
      layer_input = nn::dropout(layer_input, options.dropout, true);
  }
  Tensor out = unbatched ? layer_input.squeeze(1) : options.batch_first ? layer_input.transpose(0, 1) : layer_input;
  Tensor hn = stack(h_n, 0), cn = has_cell ? stack(c_n, 0) : Tensor();
  if (unbatched) hn = hn.squeeze(1), cn = has_cell ? cn.squeeze(1) : cn;
  return {out, hn, cn};
}

LSTM::LSTM(int64_t in, int64_t hidden, RNNOptions o) : RNNBase("LSTM", 4, in, hidden, o) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input,
                                                             std::optional<std::tuple<Tensor, Tensor>> hx) {
  const Tensor h0 = hx ? std::get<0>(*hx) : Tensor(), c0 = hx ? std::get<1>(*hx) : Tensor();
  check(!hx || (h0.defined() && c0.defined()), "LSTM", "expected hx as two defined tensors (h_0, c_0)");
  const auto [out, hn, cn] = run(input, h0, c0, lstm_step);
  return {out, {hn, cn}};
}

GRU::GRU(int64_t in, int64_t hidden, RNNOptions o) : RNNBase("GRU", 3, in, hidden, o) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) {
  const auto [out, hn, cn] = run(input, hx, Tensor(), gru_step);
  return {out, hn};
}

RNNCellBase::RNNCellBase(const char* name, int64_t gates, int64_t in, int64_t hidden, bool bias) {
  check_sizes(name, in, hidden);
  weight_ih = uniform_weight({gates * hidden, in}, hidden);
  weight_hh = uniform_weight({gates * hidden, hidden}, hidden);
  register_parameter("weight_ih", &weight_ih);
  register_parameter("weight_hh", &weight_hh);
  if (!bias) return;
  bias_ih = uniform_weight({gates * hidden}, hidden);
  bias_hh = uniform_weight({gates * hidden}, hidden);
  register_parameter("bias_ih", &bias_ih);
  register_parameter("bias_hh", &bias_hh);
}

LSTMCell::LSTMCell(int64_t in, int64_t hidden, bool bias) : RNNCellBase("LSTMCell", 4, in, hidden, bias) {}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  check_cell_input("LSTMCell", input, weight_ih.size(1));
  const int64_t H = weight_hh.size(1);
  const Tensor h = cell_state("LSTMCell", hx ? std::get<0>(*hx) : Tensor(), input, H);
  const Tensor c = cell_state("LSTMCell", hx ? std::get<1>(*hx) : Tensor(), input, H);
  const auto [h1, c1] = lstm_step(linear(input, weight_ih, bias_ih), h, c, weight_hh, bias_hh);
  return {h1, c1};
}

GRUCell::GRUCell(int64_t in, int64_t hidden, bool bias) : RNNCellBase("GRUCell", 3, in, hidden, bias) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  check_cell_input("GRUCell", input, weight_ih.size(1));
  const Tensor h = cell_state("GRUCell", hx, input, weight_hh.size(1));
  return gru_step(linear(input, weight_ih, bias_ih), h, Tensor(), weight_hh, bias_hh).first;
}

}  // namespace kiln::nn
