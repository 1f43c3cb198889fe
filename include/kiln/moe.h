// nn::MoE: a mixture-of-experts feed-forward layer with its experts sharded
// across the ranks of a process group (expert parallelism). A linear router
// picks each token's top-k experts (weights: the softmax probabilities of
// those k, renormalised); tokens travel to their experts' ranks and back
// with the differentiable all_to_all_v, so gradients flow to the router, the
// experts and the input. Without a group every expert is local.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed.h"
#include "kiln/nn.h"

namespace kiln::nn {

// One expert: Linear(C, hidden) -> tanh GELU -> Linear(hidden, C).
class Expert : public UnaryModule {
 public:
  Expert(int64_t n_embd, int64_t hidden);
  Tensor forward(const Tensor& x) override;
  Linear up, down;
};

class MoE : public UnaryModule {
 public:
  // num_experts must be a multiple of the group's size; rank r holds
  // experts [r * E / W, (r + 1) * E / W). Every expert's initial weights are
  // drawn on every rank in global order (the same model whatever W).
  // init, if given, runs on every expert as it is made (all of them, in
  // order, before the other ranks' are dropped).
  MoE(int64_t n_embd, int64_t num_experts, int64_t top_k, int64_t hidden,
      distributed::ProcessGroup* group = nullptr, const std::function<void(Expert&)>& init = {});
  ~MoE() override;
  Tensor forward(const Tensor& x) override;  // (..., C) -> (..., C)

  int64_t num_experts() const { return num_experts_; }
  int64_t first_local_expert() const { return first_local_; }
  // Parameters of this rank's experts (named "experts.<global index>.*"):
  // data parallelism must not average them (DistributedDataParallel's
  // local_parameters).
  static bool is_expert_parameter(const std::string& name);

  Linear router;
  std::vector<std::unique_ptr<Expert>> experts;  // this rank's

 private:
  std::unique_ptr<Module> list_;  // "experts": the local experts by global index
  int64_t num_experts_, top_k_, first_local_ = 0;
  distributed::ProcessGroup* group_;
};

}  // namespace kiln::nn

KILN_API_END
