// amax and amin over a set of dims (reduce_kernels.h), max and min along
// one dim with their indices.
#include "kernels/cpu/reduce_kernels.h"

namespace kiln::cpu {

template void reduce_kernel<ReduceOp::Max>(const OpCall&);
template void reduce_kernel<ReduceOp::Min>(const OpCall&);

// max/min along one dim with indices; the first extreme wins and NaN counts
// as the extreme, as in PyTorch.
// The outputs with `dim` kept (size 1): themselves, or a view with it put back.
static Tensor with_dim_kept(const Tensor& t, int64_t dim, bool kept) {
  if (kept) return t;
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t stride = dim < t.dim() ? t.stride(dim) * t.size(dim) : 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return view_of(t, std::move(sizes), std::move(strides), t.storage_offset());
}

static void extreme_dim(const OpCall& c, bool largest) {
  const Tensor& x = c.inputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const bool kept = c.attrs.get_bool("keepdim") || x.dim() == 0;
  const Tensor vals = with_dim_kept(c.outputs[0], dim, kept);
  const Tensor idx = with_dim_kept(c.outputs[1], dim, kept);
  const int64_t R = x.size(dim);
  const int64_t xs = x.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<is_16bit_float<T>, float, T>;
    for_each_line<3>({&x, &vals, &idx}, dim, R, [&](const std::array<char*, 3>& b, int64_t) {
      const T* p = reinterpret_cast<const T*>(b[0]);
      C best = convert<C>(p[0]);
      int64_t bi = 0;
      for (int64_t r = 1; r < R; ++r) {
        const C v = convert<C>(p[r * xs]);
        if (best != best) break;  // NaN found: it stays
        if (v != v || (largest ? v > best : v < best)) best = v, bi = r;
      }
      *reinterpret_cast<T*>(b[1]) = convert<T>(best);
      *reinterpret_cast<int64_t*>(b[2]) = bi;
    });
  });
}
void max_dim_kernel(const OpCall& c) { extreme_dim(c, true); }
void min_dim_kernel(const OpCall& c) { extreme_dim(c, false); }

}  // namespace kiln::cpu
