// What the collectives share with symmetric_memory.cpp. Internal.
#pragma once
#include "distributed/world.h"

namespace kiln::distributed::detail {

// The heap block holding t's data (t from symm_mem::empty on this rank).
World::Block block_of(World& w, const Tensor& t, const char* op);

}  // namespace kiln::distributed::detail
