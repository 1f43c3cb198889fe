// Tensors a kernel makes for its own use, without the op front ends: no
// dispatch, autograd or tracing (a kernel runs below them), and no call up
// into src/ops. Views share the storage; copies go through copy_kernel.
#pragma once
#include "kiln/tensor.h"

namespace kiln::cpu {

// t's storage seen with another layout (checked to stay inside it).
Tensor view_of(const Tensor& t, Shape sizes, Shape strides, int64_t storage_offset);
// Elements [start, start + length) of dim.
Tensor narrowed(const Tensor& t, int64_t dim, int64_t start, int64_t length);
// t itself when contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& t);
// Whether t is channels-last (3d): which path a kernel with a rows form takes.
bool channels_last(const Tensor& t);
// t itself when dense in format f, else a copy in that format.
Tensor contiguous(const Tensor& t, MemoryFormat f);
// A contiguous copy of t in dtype.
Tensor converted(const Tensor& t, DType dtype);
// Contiguous t's elements with new sizes of the same count (a view).
Tensor reshaped_contiguous(const Tensor& t, Shape sizes);
// dst = src, same sizes, any dtypes.
void copy_into(const Tensor& dst, const Tensor& src);

}  // namespace kiln::cpu
