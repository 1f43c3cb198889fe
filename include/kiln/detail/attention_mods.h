// The dual number that differentiates score_mods, the wrapper of a
// score_mod reading CapturedTensors, and the traits the kernels dispatch on.
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/detail/aligned_buffer.h"
#include "kiln/detail/attention_simd.h"
#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln::attention_detail {

// Forward-mode dual number: value and derivative with respect to the score.
template <class T>
struct Dual {
  T v, d;
  Dual(T value = 0, T deriv = 0) : v(value), d(deriv) {}  // NOLINT: built from plain numbers in score_mods
  // A captured tensor's element: a constant, but for the read the thread's
  // tape differentiates (Note [Tensors a score_mod captures]).
  Dual(const CapturedValue& c) : v(static_cast<T>(c.value)), d(static_cast<T>(read_derivative(c))) {}  // NOLINT
  friend Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
  friend Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
  friend Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
  friend Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
  friend Dual tanh(Dual a) {
    const T t = std::tanh(a.v);
    return {t, a.d * (1 - t * t)};
  }
  friend Dual exp(Dual a) {
    const T e = std::exp(a.v);
    return {e, a.d * e};
  }
};

// A score_mod that reads CapturedTensors, with the ones the probe found
// (Note [Tensors a score_mod captures]): learned() names them and
// backward_learned_at adds their gradients at one score. `missed` is set
// when the backward pass reads a tensor requiring grad that is not among
// them, or a read of one that never met the score.
template <class ScoreMod>
struct CapturedScoreMod {
  ScoreMod mod;
  std::vector<Tensor> tensors;
  std::shared_ptr<std::atomic<bool>> missed = std::make_shared<std::atomic<bool>>(false);
  template <class S>
  S operator()(S s, int64_t b, int64_t h, int64_t q, int64_t kv) const {
    return mod(s, b, h, q, kv);
  }
  std::vector<Tensor> learned() const { return tensors; }
  template <class T>
  void backward_learned_at(double g, T score, int64_t b, int64_t h, int64_t q, int64_t kv,
                           double* const* grads) const {
    thread_local CaptureTape tape;
    TapeScope scope(&tape);
    tape.start(-1);
    (void)mod(Dual<T>(score, T(0)), b, h, q, kv);
    const std::vector<CapturedValue> reads = tape.reads;
    const std::vector<char> met = tape.met;
    for (size_t k = 0; k < reads.size(); ++k) {
      size_t t = 0;
      while (t < tensors.size() && tensors[t].impl() != reads[k].source->impl()) ++t;
      if (t == tensors.size() || !met[k]) {
        if (reads[k].source->requires_grad()) missed->store(true);
        continue;
      }
      tape.start(static_cast<int>(k));
      grads[t][reads[k].index] += g * static_cast<double>(mod(Dual<T>(score, T(0)), b, h, q, kv).d);
    }
  }
};
template <class M>
concept LearnsAtScore = requires(const M& m, double g, int64_t i, double* const* grads) {
  { m.learned() } -> std::convertible_to<std::vector<Tensor>>;
  m.backward_learned_at(g, 0.0f, i, i, i, i, grads);
};
template <class M>
concept LearnsTensors = HasLearnedTensors<M> || LearnsAtScore<M>;

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace kiln::attention_detail

KILN_API_END
