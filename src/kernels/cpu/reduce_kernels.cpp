// sum and prod over a set of dims (reduce_kernels.h).
#include "kernels/cpu/reduce_kernels.h"

namespace kiln::cpu {

template void reduce_kernel<ReduceOp::Sum>(const OpCall&);
template void reduce_kernel<ReduceOp::Prod>(const OpCall&);

}  // namespace kiln::cpu
