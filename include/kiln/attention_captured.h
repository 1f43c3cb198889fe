// Tensors a FlexAttention score_mod captures (a learned bias table, per-head
// scales), differentiated like PyTorch's flex_attention differentiates the
// tensors its score_mod closes over.
//
// Note [Tensors a score_mod captures]
// A C++ lambda's captures cannot be enumerated, so a score_mod reads a tensor
// through a CapturedTensor it captures by value:
//   CapturedTensor bias(table);  // table (H, 2 * D + 1) requires grad
//   auto mod = [bias](auto s, int64_t, int64_t h, int64_t q, int64_t kv) {
//     return s + bias(h, std::clamp<int64_t>(kv - q, -D, D) + D);
//   };
// A read gives a CapturedValue, which adds, subtracts, multiplies and divides
// with the score of any type. flex_attention finds the tensors a score_mod
// reads by calling it once at each corner of the (b, h, q, kv) space with a
// tape on (CaptureTape), and then differentiates them: the backward pass runs
// the score_mod on dual numbers once for d/d(score) and once per read, each
// read in turn getting derivative 1. A read in the backward pass of a tensor
// that requires grad and that the corners did not find is an error after the
// pass: a gradient is never dropped silently. Reads see the tensor's values at
// the time of the call (an optimizer's in-place update between steps shows).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln {

namespace attention_detail {
struct CaptureTape;
inline thread_local CaptureTape* capture_tape = nullptr;
}  // namespace attention_detail

// One element a score_mod read, possibly through affine arithmetic with
// plain numbers (bias(h, d) * 0.5 + 1): its value, where the element came from
// and d(value)/d(element).
struct CapturedValue {
  double value;
  const Tensor* source;  // the CapturedTensor's tensor
  int64_t index;         // the element's row-major index in it
  int read = -1;         // its number among the reads on the thread's tape
  double scale = 1;      // d value / d element
  // A plain number where nothing tracks it (the forward pass; a read that
  // meets another read, which the tape then reports, see CaptureTape).
  operator double() const { return value; }  // NOLINT: implicit
};

// The reads of score_mod calls, in order: each read while a tape is set on
// the thread is numbered (and kept in `reads` when target < 0); read number
// `target` gets derivative 1 when it meets a dual-number score. A read that
// never meets one became a plain number on the way (its gradient would be
// lost).
namespace attention_detail {
struct CaptureTape {
  std::vector<CapturedValue> reads;
  std::vector<char> met;  // per read: it met a dual number
  int target = -1;
  int count = 0;
  void start(int t) {
    target = t;
    count = 0;
    if (t < 0) reads.clear(), met.clear();
  }
};
}  // namespace attention_detail

class CapturedTensor {
 public:
  explicit CapturedTensor(Tensor t) : t_(std::move(t)) {
    check(t_.defined() && (t_.dtype() == kFloat32 || t_.dtype() == kFloat64), "CapturedTensor",
          "expected a float32 or float64 tensor but got ", t_.defined() ? dtype_name(t_.dtype()) : "an undefined tensor");
  }
  // The element at (i0, i1, ...), one index per dim, each in [0, size).
  template <std::integral... I>
  CapturedValue operator()(I... index) const {
    return at({static_cast<int64_t>(index)...});
  }
  const Tensor& tensor() const { return t_; }

 private:
  CapturedValue at(std::initializer_list<int64_t> index) const {
    check(static_cast<int64_t>(index.size()) == t_.dim(), "CapturedTensor", "a read of a ", t_.dim(),
          "-d tensor ", shape_text(t_.sizes()), " got ", index.size(), " indices");
    int64_t off = 0, linear = 0, d = 0;
    for (int64_t i : index) {
      check(i >= 0 && i < t_.size(d), "CapturedTensor", "index ", i, " out of range for dim ", d, " of size ",
            t_.size(d), " (tensor ", shape_text(t_.sizes()), ")");
      linear = linear * t_.size(d) + i;
      off += i * t_.stride(d++);
    }
    // The flex kernels read q, k and v first, so a trace has its concrete values by now.
    const void* data = t_.impl()->data();
    const double v = t_.dtype() == kFloat32 ? static_cast<const float*>(data)[off] : static_cast<const double*>(data)[off];
    CapturedValue c{v, &t_, linear};
    if (attention_detail::CaptureTape* tape = attention_detail::capture_tape) {
      c.read = tape->count++;
      if (tape->target < 0) tape->reads.push_back(c), tape->met.push_back(0);
    }
    return c;
  }
  Tensor t_;
};

// Affine arithmetic of a read with plain numbers keeps it a read.
inline CapturedValue with(CapturedValue c, double value, double scale) {
  c.value = value;
  c.scale *= scale;
  return c;
}
inline CapturedValue operator-(CapturedValue a) { return with(a, -a.value, -1); }
inline CapturedValue operator+(CapturedValue a, double k) { return with(a, a.value + k, 1); }
inline CapturedValue operator+(double k, CapturedValue a) { return with(a, k + a.value, 1); }
inline CapturedValue operator-(CapturedValue a, double k) { return with(a, a.value - k, 1); }
inline CapturedValue operator-(double k, CapturedValue a) { return with(a, k - a.value, -1); }
inline CapturedValue operator*(CapturedValue a, double k) { return with(a, a.value * k, k); }
inline CapturedValue operator*(double k, CapturedValue a) { return with(a, k * a.value, k); }
inline CapturedValue operator/(CapturedValue a, double k) { return with(a, a.value / k, 1 / k); }
inline CapturedValue operator/(double k, CapturedValue a) { return with(a, k / a.value, -k / (a.value * a.value)); }

// Two reads together are a plain number (where a dual-number score tracks
// reads, the tape reports them).
inline double operator+(CapturedValue a, CapturedValue b) { return a.value + b.value; }
inline double operator-(CapturedValue a, CapturedValue b) { return a.value - b.value; }
inline double operator*(CapturedValue a, CapturedValue b) { return a.value * b.value; }
inline double operator/(CapturedValue a, CapturedValue b) { return a.value / b.value; }

// With a score of a plain floating type (the forward pass) a read is a
// number. (A float constant is taken for a score too: the tape's count of
// conversions catches the lost gradient, see CaptureTape.)
template <std::floating_point S> S operator+(S a, CapturedValue b) { return a + static_cast<S>(b.value); }
template <std::floating_point S> S operator+(CapturedValue a, S b) { return static_cast<S>(a.value) + b; }
template <std::floating_point S> S operator-(S a, CapturedValue b) { return a - static_cast<S>(b.value); }
template <std::floating_point S> S operator-(CapturedValue a, S b) { return static_cast<S>(a.value) - b; }
template <std::floating_point S> S operator*(S a, CapturedValue b) { return a * static_cast<S>(b.value); }
template <std::floating_point S> S operator*(CapturedValue a, S b) { return static_cast<S>(a.value) * b; }
template <std::floating_point S> S operator/(S a, CapturedValue b) { return a / static_cast<S>(b.value); }
template <std::floating_point S> S operator/(CapturedValue a, S b) { return static_cast<S>(a.value) / b; }

namespace attention_detail {

// Sets the thread's tape for a scope.
struct TapeScope {
  explicit TapeScope(CaptureTape* t) : saved(capture_tape) { capture_tape = t; }
  ~TapeScope() { capture_tape = saved; }
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;
  CaptureTape* saved;
};

// The derivative a read carries into a dual number (see CaptureTape).
inline double read_derivative(const CapturedValue& c) {
  CaptureTape* tape = capture_tape;
  if (!tape || c.read < 0) return 0;
  if (tape->target < 0 && static_cast<size_t>(c.read) < tape->met.size()) tape->met[c.read] = 1;
  return c.read >= 0 && c.read == tape->target ? c.scale : 0;
}

}  // namespace attention_detail
}  // namespace kiln

KILN_API_END
