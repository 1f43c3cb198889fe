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
#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "autograd/graph.h"
#include "core/allocator.h"
#include "graph.h"
#include "kiln/ops.h"

namespace kiln::compiler::detail {

struct BackwardVariants;

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
  // Per saved: its index in the forward's saved values (the full graph's
  // `saved`, which the forward keeps; a variant reads some of them).
  std::vector<int> saved_index;
  // What the graphs for other sets of flowing gradients are built from.
  std::shared_ptr<BackwardVariants> variants;
};

// Note [Gradients that do not flow]
// The compiled node is recorded with materialize_grads = false: the
// gradient of an output that no gradient reached arrives undefined, and
// the backward that runs is the graph differentiated with only the
// gradients that flow (built on first need, then cached here). So a formula
// runs only where eager would run it (log's at 0 with a zero gradient is
// 0 * inf = NaN), and only the saved values that graph reads are unpacked
// (one modified in place under no_grad matters only to the outputs whose
// backward reads it, as in eager).
struct BackwardVariants {
  Trace forward;  // the forward trace's metadata, without memory
  std::vector<int> order, rep;
  std::string backend;
  std::mutex mu;
  std::map<std::vector<bool>, std::shared_ptr<const BackwardGraph>> built;
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
  // to `bind`; its own unwritten memory, since like may have none.
  Tensor input(const TensorImpl& like, int bind) {
    auto impl = std::make_shared<TensorImpl>(like);
    impl->autograd.reset();
    impl->storage = std::make_shared<StorageImpl>(
        layout_extent_nbytes(like.sizes, like.strides, like.storage_offset, like.dtype, "compile"), like.device);
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
      for (TensorMeta& m : output_metas(op, inputs, attrs)) outs.push_back(empty_output(std::move(m)));
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

// Calls the formulas of the nodes in `order` in reverse under the
// recorder, with gradients flowing from the live outputs `flowing` marks
// (all when null).
void differentiate(const Trace& t, const std::vector<int>& order, const std::vector<int>& rep,
                   const std::vector<bool>* flowing, BackwardGraph& g) {
  struct {
    const std::vector<int>& order;
    const std::vector<int>& rep;
  } plan{order, rep};
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
    defs[n] = node.op->backward;
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
    const int b = static_cast<int>(g.outputs.size());
    g.outputs.push_back(v);
    if (flowing && !(*flowing)[b]) continue;
    const TensorImpl& m = meta_of(v);
    accumulate(plan.rep[v], rec.input(*empty(m.sizes, m.dtype).impl(), -1 - b));
  }
  for (auto it = plan.order.rbegin(); it != plan.order.rend(); ++it) {
    const TracedNode& node = t.nodes[*it];
    const autograd::BackwardDef* def = defs[*it];
    bool any_grad = false;
    for (int o : node.outputs) any_grad = any_grad || grad[o].defined();
    if (!def || !def->fn || !any_grad) continue;
    std::vector<int> inputs;
    for (int in : node.inputs) inputs.push_back(plan.rep[in]);
    std::vector<Tensor> gin;
    try {
      gin = call_formula(*def, node, inputs, value, meta_of, req, grad);
    } catch (NotTraceable& e) {
      e.why = "in the backward of '" + node.op->name + "', " + e.why;
      throw;
    }
    for (size_t i = 0; i < inputs.size() && i < gin.size(); ++i)
      if (gin[i].defined()) accumulate(inputs[i], gin[i]);
  }
  for (int v : g.inputs) g.results.push_back(grad[v].defined() ? rec.value_of(grad[v]) : -1);
}

}  // namespace

std::vector<Tensor> call_formula(const autograd::BackwardDef& def, const TracedNode& node, const std::vector<int>& inputs,
                                 const std::function<Tensor(int)>& value,
                                 const std::function<const TensorImpl&(int)>& meta,
                                 const std::vector<bool>& wants_grad, const std::vector<Tensor>& grad) {
  std::vector<Tensor> ins, outs, grads;
  std::vector<TensorMeta> input_meta;
  std::vector<bool> needs;
  bool any_need = false;
  for (int v : inputs) {
    const TensorImpl& m = meta(v);
    input_meta.emplace_back(m.sizes, m.dtype, m.strides, m.storage_offset, m.device);
    needs.push_back(wants_grad[v]);
    any_need = any_need || needs.back();
    if (def.save & autograd::kSaveInputs) ins.push_back(value(v));
  }
  if (!any_need) return std::vector<Tensor>(inputs.size());
  for (int o : node.outputs) {
    if (def.save & autograd::kSaveOutputs) outs.push_back(value(o));
    const TensorImpl& m = meta(o);
    grads.push_back(grad[o].defined() ? grad[o] : zeros(m.sizes, m.dtype));
  }
  autograd::BackwardContext ctx{ins, outs, input_meta, node.attrs, grads, needs};
  std::vector<Tensor> gin = def.fn(ctx);
  for (size_t i = 0; i < gin.size() && i < needs.size(); ++i)
    if (!needs[i]) gin[i] = Tensor();
  return gin;
}

namespace {

// A copy of t's metadata that holds no tensor memory and no autograd
// history (kept by a plan to build backward variants later).
Trace metadata_copy(const Trace& t) {
  auto strip = [](const TensorImpl& i, bool requires_grad) {
    auto c = std::make_shared<TensorImpl>(i);
    c->storage.reset();
    c->autograd.reset();
    if (requires_grad) c->autograd = std::make_shared<AutogradMeta>(), c->autograd->requires_grad = true;
    return c;
  };
  Trace c;
  for (const Tensor& x : t.externals) c.externals.push_back(x.defined() ? Tensor(strip(*x.impl(), x.requires_grad())) : x);
  c.value_ext = t.value_ext;
  for (const auto& v : t.values) c.values.push_back(v ? strip(*v, false) : nullptr);
  c.nodes = t.nodes;
  c.live = t.live;
  return c;
}

// Differentiates t (see differentiate) and compiles the backward graph.
// Throws NotTraceable or Error when a formula cannot be traced.
std::shared_ptr<BackwardGraph> compile_backward(const Trace& t, const std::vector<int>& order,
                                                const std::vector<int>& rep, const std::vector<bool>* flowing,
                                                const std::string& backend, std::string* warning) {
  auto g = std::make_shared<BackwardGraph>();
  {
    // The recorder's values are pending tensors too: Note [Untouched blocks].
    const core::UnwrittenAllocations pending_storage;
    differentiate(t, order, rep, flowing, *g);
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
  for (size_t s = 0; s < g->bind.size(); ++s)
    if (g->bind[s] >= 0 && used[g->slot_value[s]]) g->saved.push_back(g->bind[s]);
  compile_backend(backend)(bt, g->plan, warning);
  std::vector<bool> results(bt.num_values(), false);
  for (int r : g->results)
    if (r >= 0) results[g->plan.rep[r]] = true;
  schedule_frees(bt, g->plan, results);
  // The placeholders' memory is not needed any more: the plan keeps only
  // metadata. Bound inputs are rebound on every call.
  for (auto& v : bt.values)
    if (v) v->storage.reset();
  for (size_t s = 0; s < g->bind.size(); ++s)
    if (g->bind[s] != BackwardGraph::kConstant) bt.externals[s].impl()->storage.reset();
  return g;
}

// The backward for the outputs whose gradients flow.
const BackwardGraph& variant_for(const BackwardGraph& full, const std::vector<bool>& flowing) {
  if (std::all_of(flowing.begin(), flowing.end(), [](bool f) { return f; })) return full;
  BackwardVariants& vs = *full.variants;
  std::lock_guard<std::mutex> lock(vs.mu);
  std::shared_ptr<const BackwardGraph>& slot = vs.built[flowing];
  if (slot) return *slot;
  std::shared_ptr<BackwardGraph> g;
  std::string warning;
  try {
    g = compile_backward(vs.forward, vs.order, vs.rep, &flowing, vs.backend, &warning);
  } catch (const NotTraceable& e) {
    fail("compiled_graph_backward", "the backward of a compiled graph for some of its outputs could not be traced: ",
         e.why);
  }
  if (!warning.empty()) std::cerr << "[kiln.compile] warning: " << warning << "\n";
  for (int v : g->saved) {
    const auto it = std::find(full.saved.begin(), full.saved.end(), v);
    check(it != full.saved.end(), "compiled_graph_backward", "the backward for some outputs reads forward value ", v,
          ", which the forward did not save");
    g->saved_index.push_back(static_cast<int>(it - full.saved.begin()));
  }
  slot = std::move(g);
  return *slot;
}

}  // namespace

void build_backward(const Trace& t, Plan& plan, const std::string& backend, std::string* warning) {
  std::shared_ptr<BackwardGraph> g;
  try {
    g = compile_backward(t, plan.order, plan.rep, nullptr, backend, warning);
  } catch (const NotTraceable& e) {
    plan.backward_note = e.why;
    return;
  } catch (const Error& e) {
    plan.backward_note = e.what();
    return;
  }
  plan.saved.assign(t.num_values(), false);
  for (size_t i = 0; i < g->saved.size(); ++i) {
    plan.saved[g->saved[i]] = true;
    g->saved_index.push_back(static_cast<int>(i));
  }
  g->variants = std::make_shared<BackwardVariants>();
  g->variants->forward = metadata_copy(t);
  g->variants->order = plan.order;
  g->variants->rep = plan.rep;
  g->variants->backend = backend;
  plan.backward = std::move(g);
}

std::string backward_string(const Plan& plan) {
  return graph_string(plan.backward->trace) + plan.backward->plan.source;
}

void record_backward(const Plan& plan, const std::vector<Tensor>& vals, const std::vector<Tensor>& handed,
                     const std::vector<bool>& written_in_place) {
  const BackwardGraph& g = *plan.backward;
  std::vector<Tensor> inputs, outputs;
  for (int v : g.inputs) inputs.push_back(vals[v]);
  for (int v : g.outputs) outputs.push_back(handed[v]);
  std::vector<autograd::SavedTensor> saved;
  for (int v : g.saved) {
    saved.push_back(autograd::save(vals[v]));
    if (written_in_place[v]) saved.back().version += 1;
  }
  EnableGradGuard grad_mode;  // the nodes were traced with grad enabled
  autograd::record_function(
      "compiled_graph", inputs, outputs,
      [backward = plan.backward, saved = std::move(saved)](const std::vector<Tensor>& grads) {
        std::vector<bool> flowing;
        for (const Tensor& gr : grads) flowing.push_back(gr.defined());
        const BackwardGraph& g = variant_for(*backward, flowing);
        const Trace& bt = g.trace;
        std::vector<Tensor> vals(bt.num_values());
        size_t next_saved = 0;
        for (size_t s = 0; s < g.bind.size(); ++s) {
          const int b = g.bind[s], v = g.slot_value[s];
          if (b == BackwardGraph::kConstant) vals[v] = bt.externals[s];
          else if (b < 0) vals[v] = grads[-1 - b].contiguous();  // traced contiguous
          else if (next_saved < g.saved.size() && g.saved[next_saved] == b)
            vals[v] = saved[g.saved_index[next_saved++]].unpack("compiled_graph");
        }
        run_plan(g.plan, bt, vals, false);
        std::vector<Tensor> result;
        for (int r : g.results) result.push_back(r >= 0 ? vals[g.plan.rep[r]] : Tensor());
        return result;
      },
      /*materialize_grads=*/false);
}

}  // namespace kiln::compiler::detail
