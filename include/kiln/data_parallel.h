// nn::DistributedDataParallel: data-parallel training over a process group
// (kiln/distributed.h), as torch.nn.parallel.DistributedDataParallel. It
// broadcasts rank 0's parameters and buffers at construction, then, while a
// backward runs, all-reduces (averages) the gradients in buckets: a bucket
// is reduced as soon as its last parameter's gradient is accumulated, in
// the order the backward produces them (parameters in reverse order).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstddef>
#include <functional>
#include <string>
#include <memory>

#include "kiln/distributed.h"
#include "kiln/nn.h"

namespace kiln::nn {

class DistributedDataParallel {
 public:
  // Every rank constructs it (collective) on the same model architecture.
  // Every parameter that requires grad must get a gradient in every
  // backward (as PyTorch's default, find_unused_parameters=false).
  // local_parameters(name): a parameter each rank holds its own of (a
  // mixture of experts' experts, MoE::is_expert_parameter). It is neither
  // broadcast nor averaged: its gradient already sums every rank's loss
  // (their tokens came to it), so it is divided by the world size instead,
  // which makes it the gradient of the mean loss, as the averaged ones are.
  explicit DistributedDataParallel(Module& module, distributed::ProcessGroup& group = distributed::default_group(),
                                   double bucket_cap_mb = 25.0,
                                   std::function<bool(const std::string&)> local_parameters = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() { return module_; }
  size_t num_buckets() const;

 private:
  struct State;
  Module& module_;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::nn

KILN_API_END
