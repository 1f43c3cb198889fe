// Kernel-side tensors (kernel_tensors.h).
#include "kernels/cpu/kernel_tensors.h"

#include "kernels/cpu/kernels.h"
#include "kiln/dispatch.h"

namespace kiln::cpu {

Tensor view_of(const Tensor& t, Shape sizes, Shape strides, int64_t storage_offset) {
  return Tensor(restrided(*t.impl(), std::move(sizes), std::move(strides), storage_offset, "kernel view"));
}

Tensor narrowed(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape sizes = t.sizes();
  sizes[dim] = length;
  return view_of(t, std::move(sizes), t.strides(), t.storage_offset() + start * t.stride(dim));
}

void copy_into(const Tensor& dst, const Tensor& src) {
  check(dst.sizes() == src.sizes(), "kernel copy", "sizes ", shape_text(dst.sizes()), " and ", shape_text(src.sizes()),
        " differ");
  const Tensor ins[] = {src};
  Tensor outs[] = {dst};
  const Attrs none;
  copy_kernel(OpCall{ins, none, outs});
}

Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = empty(t.sizes(), TensorOptions(dtype).device(t.device()));
  copy_into(out, t);
  return out;
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : converted(t, t.dtype()); }

bool channels_last(const Tensor& t) { return t.dim() >= 4 && t.suggest_memory_format() != MemoryFormat::Contiguous; }

Tensor contiguous(const Tensor& t, MemoryFormat f) {
  if (t.is_contiguous(f)) return t;
  Tensor out = empty(t.sizes(), TensorOptions(t.dtype()).device(t.device()), f);
  copy_into(out, t);
  return out;
}

Tensor reshaped_contiguous(const Tensor& t, Shape sizes) {
  check(t.is_contiguous() && shape_numel(sizes) == t.numel(), "kernel view", "cannot see ", shape_text(t.sizes()),
        " as ", shape_text(sizes));
  Shape strides = contiguous_strides(sizes);
  return view_of(t, std::move(sizes), std::move(strides), t.storage_offset());
}

}  // namespace kiln::cpu
