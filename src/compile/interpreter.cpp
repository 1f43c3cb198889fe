// Runs a plan: each kept node through its kernel (or, when the graph's
// inputs require grad, through the dispatcher so autograd records it), fused
// loops through their generated code, then hands every live pending tensor
// its value.
#include <unordered_set>

#include "graph.h"
#include "kiln/autograd.h"

namespace kiln::compiler::detail {
namespace {

// Makes the program's pending tensor `dst` the computed `src`: same memory,
// layout, version counter and autograd history.
void transplant(TensorImpl& dst, const Tensor& src) {
  const TensorImpl* s = src.impl();
  dst.storage = s->storage;
  dst.sizes = s->sizes;
  dst.strides = s->strides;
  dst.storage_offset = s->storage_offset;
  dst.version = s->version;
  dst.is_view = s->is_view;
  dst.autograd = s->autograd;
}

}  // namespace

void execute(const Plan& plan, Trace& t) {
  std::vector<Tensor> vals(t.num_values());
  bool grad = false;
  for (int v = 0; v < t.num_values(); ++v)
    if (t.value_ext[v] >= 0) {
      vals[v] = t.externals[t.value_ext[v]];
      grad = grad || vals[v].requires_grad();
    }
  // Autograd must record only when some op was traced with grad enabled.
  bool any_grad_node = false;
  for (const TracedNode& n : t.nodes) any_grad_node = any_grad_node || n.grad_enabled;
  grad = grad && any_grad_node;
  std::vector<Tensor> ins;
  auto run_node = [&](int n) {
    const TracedNode& node = t.nodes[n];
    ins.clear();
    for (int in : node.inputs) ins.push_back(vals[plan.rep[in]]);
    std::vector<Tensor> outs;
    if (grad) {
      // Under the grad mode the op was traced with; restored on exit.
      struct GradMode {
        bool prev = is_grad_enabled();
        explicit GradMode(bool on) { set_grad_enabled(on); }
        ~GradMode() { set_grad_enabled(prev); }
      } mode(node.grad_enabled);
      outs = dispatch(*node.op, ins, node.attrs);
    } else {
      outs = run_kernel(*node.op, ins, node.attrs);
    }
    for (size_t o = 0; o < outs.size(); ++o) vals[node.outputs[o]] = std::move(outs[o]);
  };
  for (size_t i = 0; i < plan.order.size(); ++i) {
    const FusedKernel* k = plan.fused[i].get();
    if (!k) {
      run_node(plan.order[i]);
    } else if (grad || !run_fused(*k, vals, t)) {
      // Generated loops record no autograd history: with inputs that
      // require grad the group runs op by op through the dispatcher.
      for (int n : fused_nodes(*k)) run_node(n);
    }
  }
  // Two live tensors merged by CSE must not share memory (eager gives each
  // its own): the second gets a copy.
  std::unordered_set<const TensorImpl*> handed;
  for (int v = 0; v < t.num_values(); ++v) {
    if (!t.live[v]) continue;
    Tensor src = vals[plan.rep[v]];
    if (!handed.insert(src.impl()).second) src = src.clone();
    transplant(*t.values[v], src);
  }
}

}  // namespace kiln::compiler::detail
