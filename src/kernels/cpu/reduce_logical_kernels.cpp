// all and any over a set of dims (reduce_kernels.h).
#include "kernels/cpu/reduce_kernels.h"

namespace kiln::cpu {

template void reduce_kernel<ReduceOp::All>(const OpCall&);
template void reduce_kernel<ReduceOp::Any>(const OpCall&);

}  // namespace kiln::cpu
