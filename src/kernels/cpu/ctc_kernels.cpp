// CTC's forward (alpha) and backward (beta) recursions over the extended
// label sequence l' = (blank, l1, blank, l2, ..., blank), in log space and
// double precision whatever the input's float dtype; one task per batch
// sample. The backward recomputes alpha rather than saving an (N, T, 2S+1)
// tensor from the forward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

// One sample's view of the inputs: log_probs (T, N, C) at sample n, its
// extended labels, and its lengths.
template <class T>
struct Sample {
  const T* lp;  // lp[t * t_stride + c * c_stride]
  int64_t t_stride, c_stride, steps;
  std::vector<int64_t> labels;  // l', 2 L + 1 entries

  double at(int64_t t, int64_t s) const {
    return static_cast<double>(lp[t * t_stride + labels[static_cast<size_t>(s)] * c_stride]);
  }
  // s may also come from s - 2 (a skip over a blank between two different labels).
  bool can_skip(int64_t s) const {
    return s >= 2 && labels[static_cast<size_t>(s)] != labels[static_cast<size_t>(s - 2)];
  }
};

// in: log_probs, targets, input_lengths, target_lengths (the forward's
// inputs, after the gradient in the backward's).
template <class T>
Sample<T> sample(std::span<const Tensor> in, int64_t n, int64_t blank) {
  const Tensor& log_probs = in[0];
  const Tensor& targets = in[1];
  const int64_t length = in[3].data_ptr<int64_t>()[n * in[3].stride(0)];
  Sample<T> s{log_probs.data_ptr<T>() + n * log_probs.stride(1), log_probs.stride(0), log_probs.stride(2),
              in[2].data_ptr<int64_t>()[n * in[2].stride(0)], {}};
  s.labels.assign(static_cast<size_t>(2 * length + 1), blank);
  const int64_t* tg = targets.data_ptr<int64_t>() + n * targets.stride(0);
  for (int64_t i = 0; i < length; ++i) s.labels[static_cast<size_t>(2 * i + 1)] = tg[i * targets.stride(1)];
  return s;
}

// alpha[t][s]: log of the probability of all path prefixes up to t that
// end at l'(s). Returns alpha (steps x S') and -log p.
template <class T>
double forward(const Sample<T>& x, std::vector<double>& alpha) {
  const int64_t S = static_cast<int64_t>(x.labels.size());
  if (x.steps == 0) return S == 1 ? 0.0 : std::numeric_limits<double>::infinity();
  alpha.assign(static_cast<size_t>(x.steps * S), kNegInf);
  alpha[0] = x.at(0, 0);
  if (S > 1) alpha[1] = x.at(0, 1);
  for (int64_t t = 1; t < x.steps; ++t) {
    const double* prev = &alpha[static_cast<size_t>((t - 1) * S)];
    double* cur = &alpha[static_cast<size_t>(t * S)];
    for (int64_t s = 0; s < S; ++s) {
      double v = prev[s];
      if (s >= 1) v = log_add(v, prev[s - 1]);
      if (x.can_skip(s)) v = log_add(v, prev[s - 2]);
      cur[s] = v == kNegInf ? kNegInf : v + x.at(t, s);
    }
  }
  const double* last = &alpha[static_cast<size_t>((x.steps - 1) * S)];
  return -(S > 1 ? log_add(last[S - 1], last[S - 2]) : last[S - 1]);
}

template <class F>
void each_float(DType dt, F f) {
  if (dt == kFloat64)
    f(double{});
  else
    f(float{});
}

}  // namespace

// Inputs: log_probs (T, N, C), targets (N, S) int64, input_lengths (N),
// target_lengths (N); attrs: blank, zero_infinity. Output: -log p per sample.
void ctc_loss_kernel(const OpCall& c) {
  const Tensor& lp = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const int64_t blank = c.attrs.get_int("blank");
  const bool zero_infinity = c.attrs.get_bool("zero_infinity");
  each_float(lp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    parallel_for(0, lp.size(1), 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> alpha;
      for (int64_t n = lo; n < hi; ++n) {
        const double nll = forward(sample<T>(c.inputs, n, blank), alpha);
        out.data_ptr<T>()[n] = static_cast<T>(zero_infinity && std::isinf(nll) ? 0.0 : nll);
      }
    });
  });
}

// Inputs: grad (N), log_probs, targets, input_lengths, target_lengths, nll
// (N, the forward's output); attrs as the forward. Output: d loss / d
// log_probs (T, N, C): -grad_n exp(log(sum over s with l'(s) = c of
// alpha_t(s) beta_t(s)) + nll - log_probs[t, n, c]), zero past the sample's
// length (and for an infinite loss under zero_infinity).
void ctc_loss_backward_kernel(const OpCall& c) {
  const Tensor& grad = c.inputs[0];
  const Tensor& lp = c.inputs[1];
  const Tensor& out = c.outputs[0];
  const int64_t blank = c.attrs.get_int("blank");
  const bool zero_infinity = c.attrs.get_bool("zero_infinity");
  const int64_t steps = lp.size(0), N = lp.size(1), C = lp.size(2);
  each_float(lp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* g = out.data_ptr<T>();  // contiguous (T, N, C)
    parallel_for(0, N, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> alpha, beta, total(static_cast<size_t>(C));
      for (int64_t n = lo; n < hi; ++n) {
        for (int64_t t = 0; t < steps; ++t) std::fill(g + (t * N + n) * C, g + (t * N + n + 1) * C, T(0));
        const Sample<T> x = sample<T>(c.inputs.subspan(1), n, blank);
        const double nll = forward(x, alpha);
        const double gn = static_cast<double>(grad.data_ptr<T>()[n * grad.stride(0)]);
        if (x.steps == 0 || (zero_infinity && std::isinf(nll))) continue;
        const int64_t S = static_cast<int64_t>(x.labels.size());
        // beta[t][s]: the suffixes from t on that start at l'(s) and
        // finish the labelling, l'(s)'s own probability at t included.
        beta.assign(static_cast<size_t>(x.steps * S), kNegInf);
        double* last = &beta[static_cast<size_t>((x.steps - 1) * S)];
        last[S - 1] = x.at(x.steps - 1, S - 1);
        if (S > 1) last[S - 2] = x.at(x.steps - 1, S - 2);
        for (int64_t t = x.steps - 2; t >= 0; --t) {
          const double* next = &beta[static_cast<size_t>((t + 1) * S)];
          double* cur = &beta[static_cast<size_t>(t * S)];
          for (int64_t s = 0; s < S; ++s) {
            double v = next[s];
            if (s + 1 < S) v = log_add(v, next[s + 1]);
            if (s + 2 < S && x.can_skip(s + 2)) v = log_add(v, next[s + 2]);
            cur[s] = v == kNegInf ? kNegInf : v + x.at(t, s);
          }
        }
        for (int64_t t = 0; t < x.steps; ++t) {
          std::fill(total.begin(), total.end(), kNegInf);
          for (int64_t s = 0; s < S; ++s) {
            const size_t k = static_cast<size_t>(t * S + s);
            const size_t label = static_cast<size_t>(x.labels[static_cast<size_t>(s)]);
            total[label] = log_add(total[label], alpha[k] + beta[k]);
          }
          for (int64_t ch = 0; ch < C; ++ch) {
            const double lpv = static_cast<double>(x.lp[t * x.t_stride + ch * x.c_stride]);
            const double share = total[static_cast<size_t>(ch)] == kNegInf
                                     ? 0.0
                                     : std::exp(total[static_cast<size_t>(ch)] + nll - lpv);
            g[(t * N + n) * C + ch] = static_cast<T>(-gn * share);
          }
        }
      }
    });
  });
}

}  // namespace kiln::cpu
