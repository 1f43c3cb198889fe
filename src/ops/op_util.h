// Shared helpers of the op front ends: dim wrapping, shape text for error
// messages, casting rules, and common shape functions.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln::ops {

using kiln::shape_str;
using kiln::shape_text;

// Sums a broadcast gradient back to `shape` (the inverse of expand), for
// the backward formulas.
Tensor sum_to(const Tensor& g, const Shape& shape);

// Wraps a possibly negative dim into [0, ndim); a 0-dim tensor accepts 0 and -1.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// A 0-d tensor as a 1-d one of one element (others unchanged), for ops that
// treat a 0-d input as a single element along dim 0.
Tensor at_least_1d(const Tensor& t);

// Sorted, unique, wrapped dims; empty means all dims.
Shape reduction_dims(const Tensor& x, const Shape& dims, const char* op);
Shape reduced_shape(const Shape& sizes, const Shape& dims, bool keepdim);

// PyTorch's can_cast: a float cannot go into an integer, nor a number into bool.
bool can_cast(DType from, DType to);

// A C++ number as an operand beside tensor t: for a floating t (which a
// wrapped number never promotes) already in t's dtype, one fill instead of a
// float64 number and its conversion; otherwise wrapped_scalar(v).
Tensor number_beside(const Tensor& t, Scalar v);

// Checks scatter's arguments (index and src of x's rank, index within both)
// for `op` and returns dim wrapped.
int64_t check_scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const char* op);

// scatter's src may be larger than its index, which reads only src's
// leading index-shaped block: that block, and a block's gradient placed in
// zeros of src's sizes (itself when they match).
Tensor leading_block(const Tensor& src, const Tensor& index);
Tensor block_in_zeros(const Tensor& block_grad, const Shape& src_sizes, const Tensor& index);

// Shape functions shared by many ops.
std::vector<TensorMeta> same_as_first(std::span<const Tensor> in, const Attrs&);
std::vector<TensorMeta> one_output(Shape sizes, DType dtype);  // one output, sizes moved in
// The pointwise ops' shape functions: the broadcast sizes, in the memory
// format of the first input of those sizes (a relu or an add of a
// channels-last tensor is channels-last, as PyTorch's TensorIterator keeps).
std::vector<TensorMeta> pointwise_like_first(std::span<const Tensor> in, const Attrs&);
std::vector<TensorMeta> broadcast_all(std::span<const Tensor> in, const Attrs&);      // dtype of input 0
std::vector<TensorMeta> broadcast_to_bool(std::span<const Tensor> in, const Attrs&);  // bool result
// `m`'s strides for an output in `x`'s suggested memory format (row-major: none).
void follow_memory_format(TensorMeta& m, const Tensor& x);
std::vector<TensorMeta> from_size_attrs(std::span<const Tensor>, const Attrs& a);    // attrs size, dtype
// A layer's backward outputs (grad input, grad weight, grad bias), each of
// its sizes where attribute "input_grad" / "weight_grad" / "bias_grad" asks
// for it and of 0 elements where not; grad input in the memory format of
// format_of.
std::vector<TensorMeta> asked_gradients(const Attrs& a, DType dtype, const Shape& input, const Shape& weight,
                                        const Shape& bias, const Tensor& format_of);

// The op declared with its backward formula (OpDef::backward).
inline OpDef with_backward(OpDef def, const autograd::BackwardDef* backward) {
  def.backward = backward;
  return def;
}

// Dispatches a one-output op on tensors.
inline Tensor call(const OpDef& op, std::initializer_list<Tensor> in, const Attrs& attrs = {}) {
  return dispatch1(op, std::span<const Tensor>(in.begin(), in.size()), attrs);
}
// Same, writing into `out` (out= and in-place forms).
inline void call_out(const OpDef& op, const Tensor& out, std::initializer_list<Tensor> in, const Attrs& attrs = {}) {
  const Tensor outs[] = {out};
  dispatch(op, std::span<const Tensor>(in.begin(), in.size()), attrs, outs);
}

}  // namespace kiln::ops
