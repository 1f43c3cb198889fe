// Note [Compiled backward]
// When a graph's inputs require grad, kiln::compile differentiates the graph
// ahead of time instead of letting autograd record every op: each kept
// node's backward formula (the same functions eager autograd calls, written
// in ops) is called, in reverse order, on placeholder tensors under a
// recording mode, which gives a backward graph: its inputs are the forward
// values the formulas read, the gradients of the forward's outputs and the
// constants the formulas made; its results are the gradients of the
// forward's inputs. That graph goes through the same passes and backend as
// any other (so its elementwise chains fuse too). At run time the forward
// runs without autograd, through its fused loops, and one autograd node
// (record_function) stands for the whole graph; its backward binds the
// saved forward values and the incoming gradients and runs the backward
// plan. The forward's fused loops write the values the backward reads
// (Plan::saved). A formula that needs a concrete value, an in-place op or an
// op without a formula ends the attempt: the graph is then replayed op by op
// through autograd, which is always correct. Graphs with dynamic dims are
// replayed too, since formulas bake sizes into attributes.
#include <unordered_map>
#include <unordered_set>

#include "autograd/graph.h"
#include "core/allocator.h"
#include "graph.h"
#include "kiln/ops.h"

namespace kiln::compiler::detail {

struct BackwardGraph {
  Trace trace;  // placeholders only: every input is bound at run time
  Plan plan;
  // Per input slot of the backward trace: a forward value id (>= 0), the
  // gradient of outputs[-1 - b] (< 0), or kConstant (externals holds it).
  static constexpr int kConstant = INT32_MIN;
  std::vector<int> bind;
  std::vector<int> slot_value;  // per input slot: its value id in the backward trace
  std::vector<int> inputs;      // forward inputs that require grad: the autograd node's inputs
  std::vector<int> outputs;     // forward live values carrying grad: the autograd node's outputs
  std::vector<int> results;     // per inputs: backward value holding its gradient, or -1 (none)
  std::vector<int> saved;       // forward values bound (bind >= 0), in slot order
};

namespace {

struct NotTraceable {
  std::string why;
};

// Records every op called on this thread while alive into a trace,
// computing nothing. Tensors it has not seen become inputs of the trace.
class Recorder final : public DispatchMode {
 public:
  explicit Recorder(BackwardGraph& g) : g_(g) {
    active = this;
    intercept_ = std::make_unique<InterceptScope>(this, &Recorder::hook);
  }
  ~Recorder() override {
    intercept_.reset();
    active = nullptr;
  }

  // An input of the backward graph with like's metadata, bound at run time
  // to `bind`.
  Tensor input(const TensorImpl& like, int bind) {
    auto impl = std::make_shared<TensorImpl>(like);
    impl->autograd.reset();
    Tensor t(std::move(impl));
    add_input(t, bind);
    return t;
  }
  int value_of(const Tensor& t) {
    if (auto it = ids_.find(t.impl()); it != ids_.end()) return it->second;
    // Made by a formula outside the dispatcher: a constant of the graph,
    // unless it aliases a traced value (its memory holds nothing yet).
    if (storages_.count(t.impl()->storage.get()))
      throw NotTraceable{"a formula aliases a value outside the dispatcher"};
    return add_input(t, BackwardGraph::kConstant);
  }

  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    if (!out.empty()) throw NotTraceable{"the formula runs the in-place op '" + op.name + "'"};
    TracedNode node{&op, attrs, {}, {}, false};
    for (const Tensor& t : inputs) node.inputs.push_back(value_of(t));
    std::vector<Tensor> outs;
    if (op.kind == OpKind::View) {
      outs = run_kernel(op, inputs, attrs);  // metadata only
    } else {
      for (const TensorMeta& m : op.shape(inputs, attrs)) outs.push_back(empty(m.sizes, m.dtype));
    }
    for (const Tensor& o : outs) {
      node.outputs.push_back(g_.trace.add_output(o));
      ids_.emplace(o.impl(), node.outputs.back());
      storages_.insert(o.impl()->storage.get());
    }
    g_.trace.nodes.push_back(std::move(node));
    return outs;
  }

 private:
  int add_input(const Tensor& t, int bind) {
    const int v = g_.trace.add_input(t);
    ids_.emplace(t.impl(), v);
    if (bind != BackwardGraph::kConstant) storages_.insert(t.impl()->storage.get());
    g_.bind.push_back(bind);
    g_.slot_value.push_back(v);
    return v;
  }
  static void hook(const TensorImpl* t, const char* what, const SourceLocation&) {
    if (active && active->ids_.count(t)) throw NotTraceable{std::string("a formula reads a value (") + what + ")"};
  }

  static thread_local Recorder* active;
  BackwardGraph& g_;
  std::unique_ptr<InterceptScope> intercept_;
  std::unordered_map<const TensorImpl*, int> ids_;
  std::unordered_set<const StorageImpl*> storages_;  // of every traced value
};
thread_local Recorder* Recorder::active = nullptr;

bool is_dynamic(const Tensor& t) { return t.impl()->dynamic_dims != 0; }

// Calls the formulas of plan's nodes in reverse order under the recorder.
void differentiate(const Trace& t, const Plan& plan, BackwardGraph& g) {
  NoGradGuard no_grad;  // as the engine runs formulas
  Recorder rec(g);
  const int nv = t.num_values();
  auto meta_of = [&](int v) -> const TensorImpl& {
    return t.value_ext[v] >= 0 ? *t.externals[t.value_ext[v]].impl() : *t.values[v];
  };
  // Which values carry gradient, forward.
  std::vector<bool> req(nv, false);
  for (int v = 0; v < nv; ++v)
    if (t.value_ext[v] >= 0) {
      const Tensor& x = t.externals[t.value_ext[v]];
      if (is_dynamic(x)) throw NotTraceable{"an input has dynamic dims"};
      req[v] = x.requires_grad();
      if (req[v]) g.inputs.push_back(v);
    }
  std::vector<const autograd::BackwardDef*> defs(t.nodes.size(), nullptr);
  for (int n : plan.order) {
    const TracedNode& node = t.nodes[n];
    bool any = false;
    for (int in : node.inputs) any = any || req[plan.rep[in]];
    if (!node.grad_enabled || !any) continue;
    defs[n] = autograd::find_backward(node.op->name);
    if (!defs[n]) throw NotTraceable{"'" + node.op->name + "' has no backward formula"};
    if (!defs[n]->fn) continue;
    for (int o : node.outputs) req[o] = is_floating(meta_of(o).dtype);
  }
  std::vector<Tensor> placeholder(nv), grad(nv);
  auto value = [&](int v) -> const Tensor& {
    if (!placeholder[v].defined()) placeholder[v] = rec.input(meta_of(v), v);
    return placeholder[v];
  };
  auto accumulate = [&](int v, const Tensor& x) { grad[v] = grad[v].defined() ? add(grad[v], x) : x; };
  for (int v = 0; v < nv; ++v) {
    if (!t.live[v] || !req[plan.rep[v]]) continue;
    const TensorImpl& m = meta_of(v);
    accumulate(plan.rep[v], rec.input(*empty(m.sizes, m.dtype).impl(), -1 - static_cast<int>(g.outputs.size())));
    g.outputs.push_back(v);
  }
  for (auto it = plan.order.rbegin(); it != plan.order.rend(); ++it) {
    const TracedNode& node = t.nodes[*it];
    const autograd::BackwardDef* def = defs[*it];
    bool any_grad = false;
    for (int o : node.outputs) any_grad = any_grad || grad[o].defined();
    if (!def || !def->fn || !any_grad) continue;
    std::vector<Tensor> ins, outs, grads;
    std::vector<TensorMeta> input_meta;
    std::vector<bool> needs;
    for (int in : node.inputs) {
      const TensorImpl& m = meta_of(plan.rep[in]);
      input_meta.emplace_back(m.sizes, m.dtype, m.strides, m.storage_offset);
      needs.push_back(req[plan.rep[in]]);
      if (def->save & autograd::kSaveInputs) ins.push_back(value(plan.rep[in]));
    }
    for (int o : node.outputs) {
      if (def->save & autograd::kSaveOutputs) outs.push_back(value(o));
      const TensorImpl& m = meta_of(o);
      grads.push_back(grad[o].defined() ? grad[o] : zeros(m.sizes, m.dtype));
    }
    autograd::BackwardContext ctx{ins, outs, input_meta, node.attrs, grads, needs};
    std::vector<Tensor> gin;
    try {
      gin = def->fn(ctx);
    } catch (NotTraceable& e) {
      e.why = "in the backward of '" + node.op->name + "', " + e.why;
      throw;
    }
    for (size_t i = 0; i < node.inputs.size() && i < gin.size(); ++i)
      if (needs[i] && gin[i].defined()) accumulate(plan.rep[node.inputs[i]], gin[i]);
  }
  for (int v : g.inputs) g.results.push_back(grad[v].defined() ? rec.value_of(grad[v]) : -1);
}

}  // namespace

void build_backward(const Trace& t, Plan& plan, const std::string& backend, std::string* warning) {
  auto g = std::make_shared<BackwardGraph>();
  try {
    // The recorder's values are pending tensors too: Note [Untouched blocks].
    const core::UnwrittenAllocations pending_storage;
    differentiate(t, plan, *g);
  } catch (const NotTraceable& e) {
    plan.backward_note = e.why;
    return;
  } catch (const Error& e) {
    plan.backward_note = e.what();
    return;
  }
  Trace& bt = g->trace;
  bt.live.assign(bt.num_values(), false);
  for (int r : g->results)
    if (r >= 0) bt.live[r] = true;
  g->plan = optimize(bt);
  std::vector<bool> constant_inputs(bt.num_values(), false);  // the numbers formulas made
  for (size_t s = 0; s < g->bind.size(); ++s) constant_inputs[g->slot_value[s]] = g->bind[s] == BackwardGraph::kConstant;
  fold_constants(bt, g->plan, constant_inputs);
  // Only the inputs the kept nodes or the results read are bound.
  std::vector<bool> used(bt.num_values(), false);
  for (int n : g->plan.order)
    for (int in : bt.nodes[n].inputs) used[g->plan.rep[in]] = true;
  for (int r : g->results)
    if (r >= 0) used[g->plan.rep[r]] = true;
  plan.saved.assign(t.num_values(), false);
  for (size_t s = 0; s < g->bind.size(); ++s)
    if (g->bind[s] >= 0 && used[g->slot_value[s]]) {
      g->saved.push_back(g->bind[s]);
      plan.saved[g->bind[s]] = true;
    }
  if (backend == "cpp") generate_cpp(bt, g->plan, warning);
  std::vector<bool> results(bt.num_values(), false);
  for (int r : g->results)
    if (r >= 0) results[g->plan.rep[r]] = true;
  schedule_frees(bt, g->plan, results);
  // The placeholders' memory is not needed any more: the plan keeps only
  // sizes. Bound inputs are rebound on every call.
  for (auto& v : bt.values)
    if (v) v->storage.reset();
  for (size_t s = 0; s < g->bind.size(); ++s)
    if (g->bind[s] != BackwardGraph::kConstant) bt.externals[s] = Tensor();
  plan.backward = std::move(g);
}

std::string backward_string(const Plan& plan) {
  return graph_string(plan.backward->trace) + plan.backward->plan.source;
}

void record_backward(const Plan& plan, const std::vector<Tensor>& vals, const std::vector<Tensor>& handed) {
  const BackwardGraph& g = *plan.backward;
  std::vector<Tensor> inputs, outputs;
  for (int v : g.inputs) inputs.push_back(vals[v]);
  for (int v : g.outputs) outputs.push_back(handed[v]);
  std::vector<autograd::SavedTensor> saved;
  for (int v : g.saved) saved.push_back(autograd::save(vals[v]));
  EnableGradGuard grad_mode;  // the nodes were traced with grad enabled
  autograd::record_function(
      "compiled_graph", inputs, outputs,
      [backward = plan.backward, saved = std::move(saved)](const std::vector<Tensor>& grads) {
        const BackwardGraph& g = *backward;
        const Trace& bt = g.trace;
        std::vector<Tensor> vals(bt.num_values());
        size_t next_saved = 0;
        for (size_t s = 0; s < g.bind.size(); ++s) {
          const int b = g.bind[s], v = g.slot_value[s];
          if (b == BackwardGraph::kConstant) vals[v] = bt.externals[s];
          else if (b < 0) vals[v] = grads[-1 - b].contiguous();  // traced contiguous
          else if (next_saved < g.saved.size() && g.saved[next_saved] == b) vals[v] = saved[next_saved++].unpack("compiled_graph");
        }
        run_plan(g.plan, bt, vals, false);
        std::vector<Tensor> result;
        for (int r : g.results) result.push_back(r >= 0 ? vals[g.plan.rep[r]] : Tensor());
        return result;
      });
}

}  // namespace kiln::compiler::detail
