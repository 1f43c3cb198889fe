// Runs a plan: each kept node through its kernel, fused loops through their
// generated code, then hands every live pending tensor its value. With
// inputs that require grad, the compiled backward is recorded as one
// autograd node; without one, the nodes go through the dispatcher so that
// autograd records each.
#include <algorithm>

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

bool records_grad(const Trace& t) {
  if (t.no_history) return false;
  bool input_grad = false, grad_node = false;
  for (const Tensor& x : t.externals) input_grad = input_grad || x.requires_grad();
  for (const TracedNode& n : t.nodes) grad_node = grad_node || n.grad_enabled;
  return input_grad && grad_node;
}

void run_plan(const Plan& plan, const Trace& t, std::vector<Tensor>& vals, bool record_grad) {
  for (const auto& [v, c] : plan.constants) vals[v] = c;
  std::vector<Tensor> ins;
  auto run_node = [&](int n) {
    const TracedNode& node = t.nodes[n];
    ins.clear();
    for (int in : node.inputs) ins.push_back(vals[plan.rep[in]]);
    const OpDef* op = node.op;
    if (!plan.bias_of.empty() && plan.bias_of[n] >= 0) {  // fold_bias_adds
      ins.push_back(vals[plan.rep[plan.bias_of[n]]]);
      op = plan.gemm_with_bias;
    }
    std::vector<Tensor> outs;
    if (record_grad) {
      // Under the grad mode the op was traced with; restored on exit.
      const AutoGradMode mode(node.grad_enabled);
      outs = dispatch(*op, ins, node.attrs);
    } else {
      outs = run_kernel(*op, ins, node.attrs);
    }
    for (size_t o = 0; o < outs.size(); ++o) vals[node.outputs[o]] = std::move(outs[o]);
  };
  for (size_t i = 0; i < plan.order.size(); ++i) {
    const FusedEntry* k = plan.fused[i].get();
    if (!k) {
      run_node(plan.order[i]);
    } else if (record_grad || !k->run(vals, t)) {
      // Fused entries record no autograd history: when autograd must
      // record, the group runs op by op through the dispatcher.
      for (int n : k->nodes()) run_node(n);
    }
    if (i < plan.frees.size())
      for (int v : plan.frees[i]) vals[v] = Tensor();
  }
}

void execute(const Plan& plan, Trace& t) {
  std::vector<Tensor> vals(t.num_values());
  for (int v = 0; v < t.num_values(); ++v)
    if (t.value_ext[v] >= 0) vals[v] = t.externals[t.value_ext[v]];
  const bool grad = records_grad(t);
  run_plan(plan, t, vals, grad && !plan.backward);
  // Two live tensors merged by CSE must not share memory when eager gives
  // each its own (computed values): the second gets a copy. Two equal views
  // of one base share it in eager too, and keep sharing it.
  std::vector<bool> is_view(t.num_values(), false);
  for (const TracedNode& n : t.nodes)
    for (int o : n.outputs) is_view[o] = n.op->kind == OpKind::View;
  std::vector<Tensor> handed(t.num_values());
  // Values handed out as a tensor an earlier live value already is (by
  // sorting, not a hash set: this runs on every call).
  std::vector<std::pair<const TensorImpl*, int>> by_impl;
  for (int v = 0; v < t.num_values(); ++v)
    if (t.live[v]) {
      handed[v] = vals[plan.rep[v]];
      by_impl.emplace_back(handed[v].impl(), v);
    }
  std::sort(by_impl.begin(), by_impl.end());
  std::vector<bool> again(t.num_values(), false);
  for (size_t i = 1; i < by_impl.size(); ++i) again[by_impl[i].second] = by_impl[i].first == by_impl[i - 1].first;
  for (int v = 0; v < t.num_values(); ++v) {
    if (!t.live[v]) continue;
    // A folded constant belongs to the cached plan: the program gets a copy.
    // Replayed through autograd, the copy carries the value's history (the
    // graph may be running inside a no_grad region, at a break).
    if ((again[v] && !is_view[v]) || is_constant(plan, plan.rep[v])) {
      EnableGradGuard history;
      handed[v] = handed[v].clone();
    }
  }
  if (grad && plan.backward) {
    // A value a fused loop wrote into its destination in place is that
    // destination after its version moves (below): saved as such, as eager
    // would have saved it after its in-place op.
    std::vector<bool> written_in_place(t.num_values(), false);
    for (const Trace::Writeback& w : t.writebacks)
      written_in_place[plan.rep[w.value]] = vals[plan.rep[w.value]].impl() == w.dst.impl();
    record_backward(plan, vals, handed, written_in_place);
  }
  for (int v = 0; v < t.num_values(); ++v)
    if (t.live[v]) transplant(*t.values[v], handed[v]);
  NoGradGuard no_grad;  // recorded only when grad mode was off
  for (const Trace::Writeback& w : t.writebacks) {
    // A fused loop may have written dst in place already.
    const Tensor& value = vals[plan.rep[w.value]];
    if (value.impl() == w.dst.impl()) w.dst.bump_version();
    else w.dst.copy_(value);
  }
}

}  // namespace kiln::compiler::detail
