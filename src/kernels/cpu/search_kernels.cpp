// searchsorted: a binary search of each value in its row of sorted
// boundaries, with PyTorch's comparisons (`!(b >= v)` moves right for the
// left side, `!(b > v)` for the right side), so a NaN value lands after
// every boundary; boundaries holding NaN give what PyTorch's search gives.
#include <algorithm>

#include "core/convert.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {

void searchsorted_kernel(const OpCall& c) {
  const Tensor& bounds = c.inputs[0];  // contiguous (..., M); 1-D: one row shared by every value
  const Tensor& vals = c.inputs[1];    // contiguous, bounds' dtype
  const Tensor& out = c.outputs[0];
  const bool right = c.attrs.get_bool("right");
  const int64_t m = bounds.size(-1), total = vals.numel();
  const bool shared = bounds.dim() == 1;
  const int64_t row_len = shared || vals.dim() == 0 ? std::max<int64_t>(total, 1) : vals.size(-1);
  visit_dtype(bounds.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<is_16bit_float<T>, float, T>;
    const T* b = static_cast<const T*>(bounds.raw_data());
    const T* v = static_cast<const T*>(vals.raw_data());
    parallel_for(0, total, kGrain / 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const C x = convert<C>(v[i]);
        const T* row = shared ? b : b + (i / row_len) * m;
        int64_t first = 0, last = m;
        while (first < last) {
          const int64_t mid = first + (last - first) / 2;
          const C at = convert<C>(row[mid]);
          if (right ? !(at > x) : !(at >= x)) first = mid + 1;
          else last = mid;
        }
        if (out.dtype() == kInt32) static_cast<int32_t*>(out.raw_data())[i] = static_cast<int32_t>(first);
        else static_cast<int64_t*>(out.raw_data())[i] = first;
      }
    });
  });
}

}  // namespace kiln::cpu
