// The strided elementwise loop (our TensorIterator): N operands over one
// broadcast shape. It drops size-1 dims, merges dims that are contiguous for
// every operand, and hands the kernel 1-D segments (pointers + byte strides)
// so kernels only ever write an inner loop. Work is split over the thread
// pool by element count.
#pragma once
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/convert.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// What sums and products of T accumulate in: double for every float type,
// int64 for integers and bool (PyTorch's CPU accumulate types).
template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<T> || is_16bit_float<T>, double, int64_t>;

// Elements per task: below ~32K a thread hand-off costs more than it saves.
inline constexpr int64_t kGrain = 32768;

// f(float{}) or f(double{}) for a float32 / float64 dtype; any other is op's error.
template <class F>
void visit_f32_f64(DType dt, const char* op, F&& f) {
  if (dt == kFloat32)
    f(float{});
  else if (dt == kFloat64)
    f(double{});
  else
    fail(op, "expected a float32 or float64 tensor but got ", dt);
}

template <int N>
struct LoopPlan {
  Shape sizes;                                 // after dropping and merging dims
  std::array<std::vector<int64_t>, N> strides;  // bytes, per operand per dim
  std::array<char*, N> data{};
  int64_t numel = 1;
};

// Operand 0 is usually the output, the others inputs. Each operand is
// broadcast to `shape` (aligned at the right; size-1 dims read with stride 0).
template <int N>
LoopPlan<N> make_plan(const std::array<const Tensor*, N>& ops, const Shape& shape) {
  LoopPlan<N> p;
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::array<std::vector<int64_t>, N> full;
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *ops[k];
    p.data[k] = static_cast<char*>(t.raw_data());
    full[k].assign(nd, 0);
    const int64_t off = nd - t.dim();
    const int64_t es = static_cast<int64_t>(t.element_size());
    for (int64_t d = 0; d < t.dim(); ++d)
      full[k][off + d] = t.size(d) == 1 ? 0 : t.stride(d) * es;
  }
  // Dims in the order of operand 0's memory, outermost first (stable: a
  // row-major output keeps the logical order), so that a channels-last or
  // otherwise permuted output is walked along its memory and merges as well.
  std::vector<int64_t> order(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::abs(full[0][static_cast<size_t>(a)]) > std::abs(full[0][static_cast<size_t>(b)]);
  });
  for (int64_t d : order) {
    if (shape[d] == 1) continue;
    const int64_t last = static_cast<int64_t>(p.sizes.size()) - 1;
    bool merge = last >= 0;
    for (int k = 0; k < N && merge; ++k) merge = p.strides[k][last] == full[k][d] * shape[d];
    if (merge) {
      p.sizes[last] *= shape[d];
      for (int k = 0; k < N; ++k) p.strides[k][last] = full[k][d];
    } else {
      p.sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) p.strides[k].push_back(full[k][d]);
    }
  }
  p.numel = shape_numel(p.sizes);
  if (shape_numel(shape) == 0) p.numel = 0;
  return p;
}

// Calls fn(char* const ptrs[N], const int64_t strides[N], int64_t n) on 1-D
// segments that together cover every element once.
template <int N, class F>
void for_each_segment(const LoopPlan<N>& p, F&& fn, int64_t grain = kGrain) {
  if (p.numel == 0) return;
  const int64_t nd = static_cast<int64_t>(p.sizes.size());
  if (nd == 0) {
    std::array<int64_t, N> zero{};
    fn(p.data.data(), zero.data(), int64_t{1});
    return;
  }
  const int64_t inner = p.sizes[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = p.strides[k][nd - 1];
  parallel_for(0, p.numel, grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd);
    int64_t rem = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % p.sizes[d];
      rem /= p.sizes[d];
    }
    std::array<char*, N> ptrs;
    while (begin < end) {
      for (int k = 0; k < N; ++k) {
        char* q = p.data[k];
        for (int64_t d = 0; d < nd; ++d) q += idx[d] * p.strides[k][d];
        ptrs[k] = q;
      }
      const int64_t n = std::min(inner - idx[nd - 1], end - begin);
      fn(ptrs.data(), inner_strides.data(), n);
      begin += n;
      idx[nd - 1] += n;
      for (int64_t d = nd - 1; d > 0 && idx[d] == p.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

// A typed elementwise map: out[i] = f(in0[i], in1[i], ...), every operand of
// its own C++ type. A segment whose operands are all contiguous runs as a
// loop over typed pointers, which the compiler vectorises (the byte-strided
// loop it replaces there did not: a fill then ran at a fraction of memset's
// speed, now close to it); other segments take the strided loop.
template <typename Out, typename... In, class F>
void map_elementwise(const Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, F f) {
  constexpr int N = 1 + sizeof...(In);
  std::array<const Tensor*, N> ops;
  ops[0] = &out;
  for (size_t i = 0; i < sizeof...(In); ++i) ops[i + 1] = ins[i];
  auto plan = make_plan<N>(ops, out.sizes());
  for_each_segment<N>(plan, [&](char* const* p, const int64_t* s, int64_t n) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      if (s[0] == static_cast<int64_t>(sizeof(Out)) && ((s[I + 1] == static_cast<int64_t>(sizeof(In))) && ...)) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        const std::tuple<const In*...> in{reinterpret_cast<const In*>(p[I + 1])...};
        for (int64_t i = 0; i < n; ++i) o[i] = f(std::get<I>(in)[i]...);
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[I + 1] + i * s[I + 1])...);
      }
    }(std::index_sequence_for<In...>{});
  });
}

// Copies n float32 values in from a strided T array (converting), or out to one.
template <typename T>
inline void load_f32(const char* src, int64_t stride, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(*reinterpret_cast<const T*>(src + i * stride));
}
template <typename T>
inline void store_f32(const float* src, char* dst, int64_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(dst + i * stride) = static_cast<T>(src[i]);
}

}  // namespace kiln::cpu

namespace kiln::cpu {

// Calls fn(std::array<char*, N> bases, int64_t line) once for every 1-D line
// along `dim`: the tensors have equal sizes except along `dim`, and each
// base points at element 0 of that line in each tensor. Lines run in
// parallel; `line_cost` (elements per line) sets the grain.
template <int N, class F>
void for_each_line(const std::array<const Tensor*, N>& ts, int64_t dim, int64_t line_cost, F&& fn) {
  const Tensor& ref = *ts[0];
  const int64_t nd = ref.dim();
  Shape outer_sizes;
  std::array<Shape, N> outer_strides;
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim) continue;
    outer_sizes.push_back(ref.size(d));
    for (int k = 0; k < N; ++k)
      outer_strides[k].push_back(ts[k]->stride(d) * static_cast<int64_t>(ts[k]->element_size()));
  }
  const int64_t lines = shape_numel(outer_sizes);
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(line_cost, 1));
  parallel_for(0, lines, grain, [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) {
      std::array<char*, N> bases;
      for (int k = 0; k < N; ++k) bases[k] = static_cast<char*>(ts[k]->raw_data());
      int64_t rem = l;
      for (int64_t d = static_cast<int64_t>(outer_sizes.size()) - 1; d >= 0; --d) {
        const int64_t i = rem % outer_sizes[d];
        rem /= outer_sizes[d];
        for (int k = 0; k < N; ++k) bases[k] += i * outer_strides[k][d];
      }
      fn(bases, l);
    }
  });
}

}  // namespace kiln::cpu
