// The autograd graph: per-tensor AutogradMeta, graph Nodes with their edges
// to the nodes of their inputs, and the registry of backward formulas.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "ops/op_util.h"

namespace kiln {

struct Node;

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::shared_ptr<Node> accumulator;  // a leaf's AccumulateGrad, created once
  std::vector<std::function<Tensor(const Tensor&)>> hooks;  // for leaves
  // A leaf's hooks that run after its .grad was accumulated (DDP's buckets).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

namespace autograd {

// Where a gradient flows: input `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
};

}  // namespace autograd

struct Node {
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grads: one per output of this node (undefined ones become zeros first,
  // unless materialize_grads is false). Returns one gradient per next edge
  // (undefined where not needed). A node that no gradient reached is not
  // applied: undefined flows on (Note [Gradients that do not flow]).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grads) = 0;
  virtual void release_saved() {}
  bool materialize_grads = true;

  std::vector<autograd::Edge> next_edges;
  std::vector<TensorMeta> output_meta;
  // Hooks of the non-leaf tensors this node produced, by output number.
  std::vector<std::vector<std::function<Tensor(const Tensor&)>>> output_hooks;
};

namespace autograd {

// A tensor kept for the backward pass, with the version it had when saved,
// so a later in-place change is reported instead of giving wrong gradients.
struct SavedTensor {
  Tensor tensor;  // an alias without autograd history (no reference cycles)
  uint64_t version = 0;
  Tensor unpack(const std::string& op) const;
  // Modified in place since it was saved (unpack would raise).
  bool stale() const { return tensor.defined() && tensor.version() != version; }
};
// keep_history: an op's saved input keeps its autograd history, so a
// backward with create_graph differentiates through it (no cycle: an
// input's history is older than the node saving it).
SavedTensor save(const Tensor& t, bool keep_history = false);

void register_backward(const std::string& op, BackwardFn fn, uint8_t save);
void register_nondifferentiable(const std::string& op);

// The AccumulateGrad node of a leaf (created on first use).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);
AutogradMeta& meta(const Tensor& t);  // creates it when missing
// A new handle on t's data whose history is output `output_nr` of `fn`
// (t itself keeps its own).
Tensor alias_with_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr);

using ops::sum_to;  // the backward formulas' (src/ops/op_util.h)

}  // namespace autograd
}  // namespace kiln
