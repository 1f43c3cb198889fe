// Reductions over a set of dims (reduce_kernel): the loops, instantiated
// per op in reduce_kernels.cpp (sum, prod), reduce_extreme_kernels.cpp (amax,
// amin) and reduce_logical_kernels.cpp (all, any): each op's loops for every
// dtype pair take about ten seconds to compile, too long for one unit.
// A contiguous input whose reduced dims form
// one block is viewed as (A, R, C): with C == 1 each output reduces one
// contiguous row (SIMD for float32 sum and max); otherwise rows of C outputs
// are accumulated together. Any other layout takes a strided loop per output.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {
namespace reduce_detail {

// One reduction: an identity, a combine step, and NaN handling for max/min.
template <ReduceOp OP, typename A>
struct Reducer {
  static A identity() {
    if constexpr (OP == ReduceOp::Sum || OP == ReduceOp::Any) return A(0);
    else if constexpr (OP == ReduceOp::Prod || OP == ReduceOp::All) return A(1);
    else if constexpr (OP == ReduceOp::Max)
      return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::lowest();
    else
      return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity() : std::numeric_limits<A>::max();
  }
  static A combine(A acc, A v) {
    if constexpr (OP == ReduceOp::Sum) return acc + v;
    else if constexpr (OP == ReduceOp::Prod) return acc * v;
    else if constexpr (OP == ReduceOp::All) return (acc != A(0)) && (v != A(0));
    else if constexpr (OP == ReduceOp::Any) return (acc != A(0)) || (v != A(0));
    else if constexpr (OP == ReduceOp::Max)
      return (v != v || acc != acc) ? (acc != acc ? acc : v) : (v > acc ? v : acc);
    else return (v != v || acc != acc) ? (acc != acc ? acc : v) : (v < acc ? v : acc);
  }
};

// Max and min keep the input type (no widening), the others widen.
template <ReduceOp OP, typename T>
using reduce_acc_t = std::conditional_t<OP == ReduceOp::Max || OP == ReduceOp::Min,
                                        std::conditional_t<is_16bit_float<T>, float, T>, acc_t<T>>;

// Splits the input into (A, R, C) when it is contiguous and the reduced dims
// are adjacent; returns false otherwise.
inline bool as_block(const Tensor& x, const Shape& dims, int64_t& A, int64_t& R, int64_t& C) {
  if (!x.is_contiguous() || dims.empty()) return false;
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] != dims[i - 1] + 1) return false;
  A = R = C = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dims.front()) A *= x.size(d);
    else if (d <= dims.back()) R *= x.size(d);
    else C *= x.size(d);
  }
  return true;
}

template <ReduceOp OP, typename T, typename O>
void reduce_typed(const Tensor& x, const Tensor& out, const Shape& dims) {
  using Acc = reduce_acc_t<OP, T>;
  using Red = Reducer<OP, Acc>;
  // std::vector<bool> packs bits; keep one byte per accumulator instead.
  using Store = std::conditional_t<std::is_same_v<Acc, bool>, uint8_t, Acc>;
  O* o = out.data_ptr<O>();  // contiguous: allocated by the dispatcher
  int64_t A, R, C;
  if (as_block(x, dims, A, R, C)) {
    const T* p = x.data_ptr<T>();
    if (C == 1) {
      auto reduce_row = [](const T* row, int64_t n) -> Acc {
        if constexpr (std::is_same_v<T, float> && OP == ReduceOp::Sum)
          return simd::sum_f32(row, static_cast<size_t>(n));
        else if constexpr (std::is_same_v<T, float> && OP == ReduceOp::Max)
          return simd::max_f32(row, static_cast<size_t>(n));
        else {
          Acc acc = Red::identity();
          for (int64_t r = 0; r < n; ++r) acc = Red::combine(acc, convert<Acc>(row[r]));
          return acc;
        }
      };
      if (A == 1 && R >= 2 * kGrain) {
        // One long row: fixed-size pieces in parallel, combined in order, so
        // the result does not depend on the thread count.
        const int64_t piece = 4 * kGrain, npieces = (R + piece - 1) / piece;
        std::vector<Store> partial(static_cast<size_t>(npieces));
        parallel_for(0, npieces, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) partial[i] = reduce_row(p + i * piece, std::min(piece, R - i * piece));
        });
        Acc acc = Red::identity();
        for (Store v : partial) acc = Red::combine(acc, static_cast<Acc>(v));
        o[0] = convert<O>(acc);
        return;
      }
      parallel_for(0, A, std::max<int64_t>(1, kGrain / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
        for (int64_t a = b; a < e; ++a) o[a] = convert<O>(reduce_row(p + a * R, R));
      });
      return;
    }
    // Rows of C outputs: accumulate whole rows, which reads memory in order.
    parallel_for(0, A * C, std::max<int64_t>(256, kGrain / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t start = b; start < e;) {
        const int64_t a = start / C, c0 = start % C;
        const int64_t n = std::min(C - c0, e - start);
        std::vector<Store> acc(static_cast<size_t>(n), Red::identity());
        for (int64_t r = 0; r < R; ++r) {
          const T* row = p + (a * R + r) * C + c0;
          if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float> && OP == ReduceOp::Sum) {
            simd::accumulate_f32(reinterpret_cast<float*>(acc.data()), row, static_cast<size_t>(n));
          } else {
            for (int64_t i = 0; i < n; ++i) acc[i] = Red::combine(static_cast<Acc>(acc[i]), convert<Acc>(row[i]));
          }
        }
        for (int64_t i = 0; i < n; ++i) o[start + i] = convert<O>(static_cast<Acc>(acc[i]));
        start += n;
      }
    });
    return;
  }
  // Strided: for each output, walk the reduced dims with an odometer.
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  Shape kept_sizes, kept_strides, red_sizes, red_strides;
  for (int64_t d = 0; d < nd; ++d) {
    (reduced[d] ? red_sizes : kept_sizes).push_back(x.size(d));
    (reduced[d] ? red_strides : kept_strides).push_back(x.stride(d));
  }
  const int64_t nred = shape_numel(red_sizes);
  const T* base = x.data_ptr<T>();
  parallel_for(0, out.numel(), std::max<int64_t>(1, kGrain / std::max<int64_t>(nred, 1)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(red_sizes.size());
    for (int64_t oi = b; oi < e; ++oi) {
      int64_t off = 0, rem = oi;
      for (int64_t d = static_cast<int64_t>(kept_sizes.size()) - 1; d >= 0; --d) {
        off += (rem % kept_sizes[d]) * kept_strides[d];
        rem /= kept_sizes[d];
      }
      Acc acc = Red::identity();
      std::fill(idx.begin(), idx.end(), 0);
      for (int64_t r = 0; r < nred; ++r) {
        int64_t roff = 0;
        for (size_t d = 0; d < idx.size(); ++d) roff += idx[d] * red_strides[d];
        acc = Red::combine(acc, convert<Acc>(base[off + roff]));
        for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
          if (++idx[d] < red_sizes[d]) break;
          idx[d] = 0;
        }
      }
      o[oi] = convert<O>(acc);
    }
  });
}

}  // namespace reduce_detail

template <ReduceOp OP>
void reduce_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Shape& dims = c.attrs.get_shape("dims");
  visit_dtype(x.dtype(), [&](auto in_tag) {
    using T = decltype(in_tag);
    visit_dtype(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      // Only the pairs the front ends produce are instantiated.
      constexpr bool same = std::is_same_v<T, O>;
      constexpr bool widened = std::is_same_v<O, int64_t> && !std::is_floating_point_v<T> && !is_16bit_float<T>;
      constexpr bool to_bool = std::is_same_v<O, bool>;
      if constexpr (same || widened || to_bool) reduce_detail::reduce_typed<OP, T, O>(x, out, dims);
      else fail("reduce", "unsupported dtype pair ", x.dtype(), " -> ", out.dtype());
    });
  });
}

}  // namespace kiln::cpu
