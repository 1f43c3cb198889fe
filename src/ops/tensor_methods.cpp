// Tensor methods that are the free-function ops under another spelling
// (x.sum() for sum(x)); the methods with in-place or view semantics sit in
// their op family's file.
#include "kiln/ops.h"

namespace kiln {

Tensor Tensor::sum(Shape dims, bool keepdim) const { return kiln::sum(*this, std::move(dims), keepdim); }
Tensor Tensor::mean(Shape dims, bool keepdim) const { return kiln::mean(*this, std::move(dims), keepdim); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::pow(Scalar e) const { return kiln::pow(*this, e); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::softmax(int64_t d) const { return kiln::softmax(*this, d); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool keepdim) const { return kiln::argmax(*this, d, keepdim); }

}  // namespace kiln
