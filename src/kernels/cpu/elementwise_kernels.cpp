// The comparison, logical_not and where kernels (the unary and binary
// ones: elementwise_kernels.h and its parts).
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/integer_functors.h"

namespace kiln::cpu {

template <CompareOp OP>
void compare_kernel(const OpCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<is_16bit_float<T>, float, T>;
    map_elementwise<bool, T, T>(c.outputs[0], {&a, &b}, [](T x, T y) {
      return compare_scalar<OP, C>(static_cast<C>(x), static_cast<C>(y));
    });
  });
}

void logical_not_kernel(const OpCall& c) {
  visit_dtype(c.inputs[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    map_elementwise<bool, T>(c.outputs[0], {&c.inputs[0]}, [](T x) { return !convert<bool>(x); });
  });
}

void where_kernel(const OpCall& c) {
  visit_dtype(c.outputs[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    map_elementwise<T, bool, T, T>(c.outputs[0], {&c.inputs[0], &c.inputs[1], &c.inputs[2]},
                                   [](bool m, T x, T y) { return m ? x : y; });
  });
}

// Explicit instantiations: the op table takes their addresses.
template void compare_kernel<CompareOp::Eq>(const OpCall&);
template void compare_kernel<CompareOp::Ne>(const OpCall&);
template void compare_kernel<CompareOp::Lt>(const OpCall&);
template void compare_kernel<CompareOp::Le>(const OpCall&);
template void compare_kernel<CompareOp::Gt>(const OpCall&);
template void compare_kernel<CompareOp::Ge>(const OpCall&);
template void compare_kernel<CompareOp::And>(const OpCall&);
template void compare_kernel<CompareOp::Or>(const OpCall&);
template void compare_kernel<CompareOp::Xor>(const OpCall&);

}  // namespace kiln::cpu
