// What the collectives share with symmetric_memory.cpp. Internal.
#pragma once
#include <memory>

#include "distributed/world.h"

namespace kiln::distributed::detail {

// The heap block holding t's data (t from symm_mem::empty on this rank).
World::Block block_of(World& w, const Tensor& t, const char* op);

// symm_mem::rendezvous with the caller's name in its errors (a collective
// checks its buffer through it: cached, so after the first call it is one
// lookup).
std::shared_ptr<symm_mem::SymmetricMemory> rendezvous(const Tensor& t, const char* op);

// The dtypes and reductions the collectives take (collectives.cpp).
void check_reduction(DType dtype, ReduceOp op, const char* name);
// dst[lo, hi) = the reduction, in rank order, of elements [lo, hi) of the
// flat arrays at bases[0..W) (16-bit floats accumulate in float32).
void reduce(DType dtype, ReduceOp op, const std::vector<const uint8_t*>& bases, void* dst, int64_t lo, int64_t hi);

}  // namespace kiln::distributed::detail
