// Note [Tracing by pending tensors]
// While a compiled callable runs, a Tracer is the innermost dispatcher mode of
// its thread. A compute op is not run: its shape function gives the outputs'
// metadata and the Tracer hands back "pending" tensors of that shape with
// storage allocated but not written (the caching allocator makes this cheap),
// recording a node. Views of pending tensors are real views of that storage,
// recorded too; views of real tensors, and every tensor the program reads
// that is not pending, are graph inputs. When the program needs a value
// (Tensor::data_ptr/raw_data/item and printing call detail::on_concrete_value,
// which the Tracer hooks; in-place ops; compiler::graph_break) or returns,
// the graph so far is compiled (or found in the call site's cache by its
// structure key) and run, and each pending tensor the program still holds is
// given its value in place (transplant: storage, layout, version counter and
// autograd history), so every handle the program has stays valid. Tracing
// then resumes in a new graph in which those tensors are inputs.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/graph.h"
#include "core/allocator.h"
#include "graph.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/ops.h"
#include "pointer_map.h"
#include "user_stack.h"

namespace kiln::compiler {
namespace detail {
namespace {

// KILN_LOGS=graph_breaks,recompiles,output_code
struct Logs {
  bool graph_breaks = false, recompiles = false, output_code = false;
  Logs() {
    const char* e = std::getenv("KILN_LOGS");
    const std::string s = e ? e : "";
    graph_breaks = s.find("graph_breaks") != std::string::npos;
    recompiles = s.find("recompiles") != std::string::npos;
    output_code = s.find("output_code") != std::string::npos;
  }
};
// Read at each use (breaks and compiles are rare), so a program may turn
// logging on and off while it runs.
Logs logs() { return Logs(); }

enum class Stance { Default, ForceEager, EagerOnRecompile, FailOnRecompile };
std::atomic<Stance> stance{Stance::Default};
thread_local std::vector<bool> error_guards;
thread_local Tracer* current = nullptr;
// Compiled callables with fullgraph=true running inline in an enclosing
// trace: their breaks are errors whatever the enclosing compile says.
thread_local int inline_fullgraph = 0;
// Frames of the program's own stack a logged or explained break shows.
constexpr int kUserStackFrames = 6;

// The user's line: that of the public call in progress (an in-place op
// breaking inside it), else where the break was seen.
std::string location_str(const SourceLocation& seen) {
  const SourceLocation& where = kiln::detail::api_location ? *kiln::detail::api_location : seen;
  if (where.line() == 0) return "unknown";
  return std::string(where.file_name()) + ":" + std::to_string(where.line());
}

}  // namespace

// What a compiled graph's structure key guarded about one input, to name
// the guard that failed when the graph is compiled again.
struct InputGuard {
  Device device;
  DType dtype;
  Shape sizes, strides;
  uint64_t dynamic;  // dims whose size the key leaves out
  bool requires_grad;
};

// Explanations and hints for the kinds of graph break (as PyTorch 2.9 gives
// with each break), by the start of the reason.
struct BreakKind {
  const char* reason_prefix;
  const char* explanation;
  const char* hint;
};
constexpr BreakKind kBreakKinds[] = {
    {"item()", "the program reads a tensor's value in C++, which a traced graph cannot give before it runs",
     "keep the value a tensor (where, clamp, maximum) or read it outside the compiled function"},
    {"data_ptr", "the program reads a tensor's memory, which a traced graph has not written yet",
     "read the memory outside the compiled function"},
    {"printing", "printing needs the tensor's values", "print outside the compiled function, or accept the break"},
    {"in-place op", "an in-place op on a tensor computed in this graph, on a view, or under grad mode runs eagerly",
     "use the out-of-place op, or write under NoGradGuard to a tensor made outside the compiled function"},
    {"a view of a tensor written", "a view of memory this graph writes would see the old values",
     "take the view before the write or after the compiled function"},
    {"a tensor that requires grad read",
     "a leaf updated under no_grad is read again with grad enabled: eager reads the leaf itself",
     "read it in the next call, or outside the compiled function"},
    {"compiler::graph_break()", "an explicit graph break", "remove the compiler::graph_break() call"},
    {"collective", "a collective talks to other processes: it runs eagerly, in the program's order",
     "compile the computation before and after the collective as separate functions"},
};
const BreakKind* break_kind(const std::string& reason) {
  for (const BreakKind& k : kBreakKinds)
    if (reason.rfind(k.reason_prefix, 0) == 0) return &k;
  return nullptr;
}

// Note [Sizes in attributes]
// Ops carry sizes computed by the program in their attributes (a reshape to
// {B * T, C}), so the structure key of a graph changes with a dynamic dim
// even where the graph does not. After automatic dynamic shapes made a dim
// dynamic, the compile knows two observations of the graph: the last
// compile's key and this one's. Their skeletons (the keys with every integer
// attribute left out) being equal, each integer is fitted as (p * s + r) / q
// of the size s of the dim that changed (p = 0: a constant; q > 1 where the
// graph reads B * T and an attribute holds T); the plan is then
// kept as a symbolic entry, which later traces with the same skeleton hit
// when each of their integers is its expression of their own s. Plans run
// against the current trace's attributes and sizes, and generated loops
// check the sizes they are given, so the plan holds at every s, unless it
// folded constants (a factory's values at one size: no entry) or was built
// where a fitted value equalled a constant one or the dim a static input dim
// (an equality the passes may have used: no entry).
struct SymbolicEntry {
  std::vector<int64_t> p, r, q;  // per integer of the skeleton: (p * s + r) / q, exactly
  size_t slot, dim;           // s: this dim of this input
  std::shared_ptr<const Plan> plan;
};
// The skeleton of a structure key, and its integers in order.
void split_numbers(const std::string& key, std::string* skeleton, std::vector<int64_t>* numbers) {
  skeleton->clear();
  numbers->clear();
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] != kNumberMark) {
      skeleton->push_back(key[i]);
      continue;
    }
    size_t end = i + 1;
    if (end < key.size() && key[end] == '-') ++end;
    while (end < key.size() && key[end] >= '0' && key[end] <= '9') ++end;
    numbers->push_back(std::stoll(key.substr(i + 1, end - i - 1)));
    skeleton->push_back('#');
    i = end - 1;
  }
}

class CallSite {
 public:
  explicit CallSite(CompileOptions o) : options(std::move(o)) {}
  CompileOptions options;
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> cache;  // "graph index|structure key"
  std::unordered_map<int, int> keys_per_graph;
  std::unordered_map<int, std::vector<InputGuard>> guards;  // per graph index: the last compile's inputs
  std::unordered_map<int, std::vector<uint64_t>> automatic_dynamic;  // per graph index, per input: dims made dynamic
  // Note [Sizes in attributes]: entries by skeleton and dynamic inputs key;
  // per graph index, the last compile's skeleton and integers.
  std::unordered_map<std::string, std::vector<SymbolicEntry>> symbolic;
  std::unordered_map<int, std::pair<std::string, std::vector<int64_t>>> last_numbers;
  std::unordered_set<std::string> logged_breaks;            // "reason at location", each logged once
  int recompiles = 0;
  bool gave_up = false;  // past the recompile limit: runs eagerly
  ExplainOutput explain;
};

std::shared_ptr<CallSite> make_call_site(const CompileOptions& options) {
  compile_backend(options.backend);  // refuses an unknown name, listing the known ones
  check(options.mode == "default", "compile", "mode '", options.mode, "' is not supported",
        options.mode == "reduce-overhead" || options.mode == "max-autotune" || options.mode == "max-autotune-no-cudagraphs"
            ? " on kiln's CPU backends"
            : "",
        ": expected \"default\"");
  return std::make_shared<CallSite>(options);
}
int recompiles(const CallSite& site) { return site.recompiles; }
int cache_entries(const CallSite& site) { return static_cast<int>(site.cache.size()); }
ExplainOutput explain_output(const CallSite& site) { return site.explain; }
int folded_constants(const CallSite& site) {
  int n = 0;
  for (const auto& [key, plan] : site.cache) n += static_cast<int>(plan->constants.size());
  return n;
}

class Tracer : public DispatchMode {
 public:
  Tracer(CallSite& site, bool explaining) : site_(site), explaining_(explaining) {
    begin_key();
    current = this;
    intercept_ = std::make_unique<InterceptScope>(this, &Tracer::hook);
    prev_backward_hook_ = std::exchange(kiln::detail::traced_backward_hook, &Tracer::backward_hook);
  }
  ~Tracer() override {
    kiln::detail::traced_backward_hook = prev_backward_hook_;
    intercept_.reset();
    current = nullptr;
  }

  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    if (executing_) return dispatch(op, inputs, attrs, out);
    if (op.has_side_effects) {
      if (!trace_.nodes.empty()) graph_break("collective '" + op.name + "'", SourceLocation());
      return run_eagerly(op, inputs, attrs, out);
    }
    // A tensor that requires grad and was written under no_grad in this
    // graph holds a value computed without history, while eager reads the
    // leaf itself: end the graph so that it is read as an input.
    if (is_grad_enabled())
      for (const Tensor& t : inputs)
        if (written_.count(t.impl()) && t.requires_grad()) {
          graph_break("a tensor that requires grad read with grad enabled after an in-place update under no_grad, "
                      "by '" + op.name + "'",
                      SourceLocation());
          break;
        }
    for (const Tensor& t : inputs)
      if (reads_stale_memory(t, op)) {
        graph_break("a view of a tensor written in this graph, by '" + op.name + "'", SourceLocation());
        break;
      }
    if (!out.empty()) {
      if (records_write(op, inputs, attrs, out) || records_pending_write(op, inputs, attrs, out))
        return {out.begin(), out.end()};
      // Other in-place and out= ops write memory the program can see:
      // compute everything traced so far, then run the op eagerly (not
      // traced into the next graph: which graph it lands in must not
      // depend on what the first call compiled).
      if (!trace_.nodes.empty()) graph_break("in-place op '" + op.name + "'", SourceLocation());
      return run_eagerly(op, inputs, attrs, out);
    }
    bool any_pending = false;
    for (const Tensor& t : inputs) any_pending = any_pending || pending_.contains(t.impl());
    if (op.runs_while_tracing && !any_pending) return run_eagerly(op, inputs, attrs, out);
    if (op.kind == OpKind::View && !any_pending) return dispatch(op, inputs, attrs);  // a view of real data is real
    // The shape function (or run_kernel for a view) may need a concrete
    // value and break; value ids are taken only after it.
    std::vector<Tensor> outs;
    if (op.kind == OpKind::View) {
      outs = run_kernel(op, inputs, attrs);
      for (const Tensor& t : inputs)  // its memory now has another handle: Note [Writes to pending tensors]
        if (pending_.contains(t.impl())) viewed_.insert(t.impl()->storage.get());
    } else {
      std::vector<TensorMeta> metas = output_metas(op, inputs, attrs);
      const core::UnwrittenAllocations pending_storage;  // never written: Note [Untouched blocks]
      outs.reserve(metas.size());
      for (TensorMeta& m : metas) outs.push_back(empty_output(std::move(m)));
    }
    record(op, inputs, attrs, outs);
    return outs;
  }

  // Runs op for real, its own calls untraced too.
  std::vector<Tensor> run_eagerly(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                                  std::span<const Tensor> out) {
    const bool was = std::exchange(executing_, true);
    struct Restore {
      bool& flag;
      bool value;
      ~Restore() { flag = value; }
    } restore{executing_, was};
    return dispatch(op, inputs, attrs, out);
  }

  // Adds a node whose outputs are the pending tensors outs; returns the
  // value id of the first.
  int record(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs, const std::vector<Tensor>& outs) {
    TracedNode node{&op, attrs, {}, {}, is_grad_enabled()};
    node.inputs.reserve(inputs.size());
    node.outputs.reserve(outs.size());
    key_ += op.name;
    key_ += '(';
    for (const Tensor& t : inputs) {
      node.inputs.push_back(value_of(t));
      key_ += std::to_string(node.inputs.back()) + ",";
    }
    key_ += node.grad_enabled ? ")g" : ")";
    append_attrs(key_, attrs);
    bool grad = false;
    for (int in : node.inputs) grad = grad || (node.grad_enabled && value_grad_[in]);
    for (const Tensor& o : outs) {
      node.outputs.push_back(trace_.add_output(o));
      value_grad_.push_back(grad);
      pending_.add(o.impl(), node.outputs.back());
      // What eager would say of it (the graph's run gives it its history).
      if (grad && is_floating(o.dtype())) autograd::meta(o).requires_grad = true;
    }
    trace_.nodes.push_back(std::move(node));
    key_ += '\n';
    return trace_.nodes.back().outputs.empty() ? -1 : trace_.nodes.back().outputs[0];
  }

  // A pending tensor for the result of an in-place op's functional form,
  // when that result has dst's shape and dtype (else undefined: not
  // recorded as a write).
  static Tensor functional_result(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                                  const TensorImpl& dst) {
    const std::vector<TensorMeta> metas = output_metas(op, inputs, attrs);
    if (metas.size() != 1 || metas[0].sizes != dst.sizes || metas[0].dtype != dst.dtype ||
        *metas[0].device != dst.device)
      return Tensor();
    const core::UnwrittenAllocations pending_storage;  // never written: Note [Untouched blocks]
    return empty(metas[0].sizes, TensorOptions(metas[0].dtype).device(metas[0].device));
  }

  // Note [Writes to real tensors]
  // An in-place or out= op on a real tensor (a parameter, an optimizer
  // state), with grad mode off, is recorded as its functional form: the
  // node computes the new value, later reads of the destination handle see
  // that value, and after the graph ran the destination gets it (a copy, so
  // its version counter moves as in eager). What would read the old memory
  // instead (another view of the destination, a view taken of it now, a
  // concrete value) ends the graph first. Writes to pending tensors, and
  // writes under grad mode (autograd's in-place rules), still break.
  bool records_write(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                     std::span<const Tensor> out) {
    if (out.size() != 1 || is_grad_enabled() || op.kind != OpKind::Compute) return false;
    const Tensor& dst = out[0];
    const TensorImpl* d = dst.impl();
    if (pending_.contains(d) || d->is_view) return false;
    if (mutated_.count(d->storage.get()) && !written_.count(d)) return false;
    const Tensor pending = functional_result(op, inputs, attrs, *d);
    if (!pending.defined()) return false;
    const int v = record(op, inputs, attrs, {pending});
    // The graph input bound to dst, when the graph read dst before its first
    // write (this op included): in the key, so a plan may let a fused loop
    // write dst in place.
    auto it = std::find_if(trace_.writebacks.begin(), trace_.writebacks.end(),
                           [d](const Trace::Writeback& w) { return w.dst.impl() == d; });
    int over = -1;
    if (it != trace_.writebacks.end()) over = it->over;
    else if (const int* read = ext_.find(d); read && trace_.value_ext[*read] >= 0) over = *read;
    // Not in place when the graph read dst's memory through another tensor
    // too (a view taken eagerly): a loop may read that one after the write.
    if (over >= 0 && it == trace_.writebacks.end())
      for (const Tensor& e : trace_.externals)
        if (e.impl() != d && e.impl()->storage == d->storage) over = -1;
    ext_.set(d, v);  // later reads of dst
    written_.insert(d);
    mutated_.insert(d->storage.get());
    if (it == trace_.writebacks.end()) trace_.writebacks.push_back({dst, v, over});
    else it->value = v;
    key_ += "write " + std::to_string(v) + (over >= 0 ? " over " + std::to_string(over) : std::string()) + "\n";
    return true;
  }

  // Note [Writes to pending tensors]
  // An in-place op under no_grad on a tensor this graph computed (an
  // optimizer's state made by zeros_like on its first step) is recorded as
  // its functional form as well: the program's handle is rebound to the new
  // value, and the old value is left to a placeholder only the graph holds.
  // Not when the tensor is a view or has views (they would not see the
  // write) or carries autograd history (which eager keeps through the write).
  bool records_pending_write(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                             std::span<const Tensor> out) {
    if (out.size() != 1 || is_grad_enabled() || op.kind != OpKind::Compute) return false;
    const TensorImpl* d = out[0].impl();
    const int* it = pending_.find(d);
    if (!it || d->is_view || viewed_.count(d->storage.get()) || value_grad_[*it]) return false;
    const int old_value = *it;
    const Tensor placeholder = functional_result(op, inputs, attrs, *d);
    if (!placeholder.defined()) return false;
    const int new_value = record(op, inputs, attrs, {placeholder});
    std::swap(trace_.values[old_value], trace_.values[new_value]);
    pending_.set(d, new_value);
    pending_.set(placeholder.impl(), old_value);
    return true;
  }

  // Note [Backward inside a trace]
  // loss.backward() on a traced loss is traced into the same graph: the
  // backward formulas of the nodes so far are called in reverse order, as
  // the engine would call them, and record their ops as nodes; each input
  // of the graph that requires grad (a parameter) gets its gradient
  // accumulated into .grad, which the program then reads as a traced
  // tensor (an optimizer step in the same graph); an input with history
  // from outside the graph passes its gradient on to the autograd engine,
  // whose formulas are traced as well. So a whole training step
  // (forward, backward, optimizer) is one graph, with no break under
  // fullgraph. The graph's outputs then carry no autograd history (eager's
  // would, with a graph already freed by that backward). Left to the
  // engine, after the graph ran: a root not computed in this graph, or an
  // op without a formula.
  static bool backward_hook(const Tensor& root, const Tensor& gradient) {
    Tracer* tr = current;
    return tr && !tr->executing_ && tr->backward_in_trace(root, gradient);
  }
  bool backward_in_trace(const Tensor& root, const Tensor& gradient) {
    const int* found = pending_.find(root.impl());
    if (!found) return false;
    const int r = *found;
    check(value_grad_[r], "backward", "element 0 of tensors does not require grad and does not have a grad_fn");
    const int nv = trace_.num_values();  // values from here on are the backward's
    for (const TracedNode& node : trace_.nodes)
      if (node.grad_enabled && !node.op->backward) return false;
    if (gradient.defined())
      check(gradient.sizes() == root.sizes(), "backward", "gradient has shape ", shape_text(gradient.sizes()),
            " but the output has shape ", shape_text(root.sizes()));
    else
      check(root.numel() == 1, "backward", "grad can be implicitly created only for outputs with one element, ",
            "but the output has shape ", shape_text(root.sizes()));
    NoGradGuard no_grad;  // as the engine runs formulas
    auto handle = [&](int v) {
      return trace_.value_ext[v] >= 0 ? trace_.externals[trace_.value_ext[v]] : Tensor(trace_.values[v]);
    };
    auto meta = [&](int v) -> const TensorImpl& {
      return trace_.value_ext[v] >= 0 ? *trace_.externals[trace_.value_ext[v]].impl() : *trace_.values[v];
    };
    const size_t forward_nodes = trace_.nodes.size();  // the seed below is a node too
    std::vector<Tensor> grad(nv);
    grad[r] = gradient.defined() ? gradient.to(root.dtype()) : ones(root.sizes(), root.dtype());
    for (size_t k = forward_nodes; k-- > 0;) {
      const TracedNode node = trace_.nodes[k];  // a copy: the formulas append nodes
      bool any_grad = false;
      for (int o : node.outputs) any_grad = any_grad || grad[o].defined();
      if (!node.grad_enabled || !any_grad) continue;
      const autograd::BackwardDef* def = node.op->backward;
      if (!def->fn) continue;
      const std::vector<Tensor> gin = call_formula(*def, node, node.inputs, handle, meta, value_grad_, grad);
      for (size_t i = 0; i < node.inputs.size() && i < gin.size(); ++i) {
        if (!gin[i].defined()) continue;
        Tensor& acc = grad[node.inputs[i]];
        acc = acc.defined() ? add(acc, gin[i]) : gin[i];
      }
    }
    // Into the leaves' .grad, after their hooks, as AccumulateGrad does. A
    // gradient this backward made and no other leaf took becomes .grad
    // itself; any other (an input, a forward value, a shared one) a copy.
    // Inputs with history from outside the graph (a view of a parameter,
    // taken eagerly while tracing) go on through the autograd engine, whose
    // formulas and accumulations are traced too.
    //
    // The leaves and their gradients are taken out of the trace first: a
    // hook, or add_ into an existing .grad (an in-place op), may end the
    // graph, which clears the trace (a use after free before).
    std::vector<std::pair<Tensor, Tensor>> leaves;  // (leaf, its gradient)
    std::vector<Tensor> with_history, their_grads;
    for (int v = 0; v < nv; ++v) {
      if (trace_.value_ext[v] < 0 || !value_grad_[v] || !grad[v].defined()) continue;
      const Tensor x = trace_.externals[trace_.value_ext[v]];
      if (x.is_leaf()) leaves.emplace_back(x, grad[v]);
      else with_history.push_back(x), their_grads.push_back(grad[v]);
    }
    grad.clear();
    const int graph = graph_index_;
    std::unordered_set<const TensorImpl*> taken;
    for (auto& [x, g] : leaves) {
      for (auto& hook : autograd::meta(x).hooks) {
        Tensor h = hook(g);
        if (h.defined()) g = h;
      }
      // Made by this backward (and in this graph still): it can become .grad itself.
      const int* id = graph == graph_index_ ? pending_.find(g.impl()) : nullptr;
      const bool fresh = id && *id >= nv && taken.insert(g.impl()).second;
      if (!x.grad().defined()) x.set_grad(fresh ? g : g.clone());
      else x.grad().add_(g);
    }
    if (!with_history.empty()) autograd::backward(with_history, their_grads);
    trace_.no_history = true;
    return true;
  }

  // Whether reading t would see memory a recorded write has not reached.
  bool reads_stale_memory(const Tensor& t, const OpDef& op) const {
    if (mutated_.empty() || !mutated_.count(t.impl()->storage.get())) return false;
    return op.kind == OpKind::View || !written_.count(t.impl());
  }

  void graph_break(const std::string& reason, const SourceLocation& where) {
    const std::string loc = location_str(where);
    if (site_.options.fullgraph || inline_fullgraph > 0 || error_on_graph_break()) {
      const BreakKind* k = break_kind(reason);
      throw GraphBreakError("[compile] graph break: " + reason + " at " + loc +
                                (site_.options.fullgraph || inline_fullgraph > 0 ? " (fullgraph=true)"
                                                                                  : " (error_on_graph_break is set)") +
                                (k ? std::string(". Explanation: ") + k->explanation + ". Hint: " + k->hint : ""),
                            reason, loc);
    }
    bool first = false;
    std::vector<std::string> stack;
    if (explaining_ || logs().graph_breaks) {
      stack = user_stack(kUserStackFrames);
      std::lock_guard<std::mutex> lock(site_.mu);
      site_.explain.graph_break_count++;
      const BreakKind* k = break_kind(reason);
      site_.explain.breaks.push_back({reason, loc, k ? k->explanation : "", k ? k->hint : "", stack});
      first = site_.logged_breaks.insert(reason + " at " + loc).second;
    }
    if (logs().graph_breaks && first) {  // each distinct break once per compiled callable
      std::cerr << "[kiln.compile] graph break: " << reason << " at " << loc << "\n";
      if (const BreakKind* k = break_kind(reason))
        std::cerr << "  explanation: " << k->explanation << "\n  hint: " << k->hint << "\n";
      std::cerr << "  user stack (innermost first; addr2line -Cfe MODULE OFFSET gives file:line):\n";
      for (const std::string& f : stack) std::cerr << "    " << f << "\n";
    }
    flush();
  }

  // Compiles (or fetches) and runs the graph traced so far.
  void flush() {
    if (trace_.nodes.empty()) {
      reset();
      return;
    }
    trace_.live.assign(trace_.values.size(), false);
    for (const Trace::Writeback& w : trace_.writebacks) trace_.live[w.value] = true;
    if (trace_.no_history) key_ += "no history\n";
    key_ += "live:";
    for (int v = 0; v < trace_.num_values(); ++v) {
      trace_.live[v] = trace_.live[v] || (trace_.values[v] && trace_.values[v].use_count() > 1);  // held outside the tracer
      key_ += trace_.live[v] ? '1' : '0';
    }
    last_compile_seconds_ = 0;
    std::shared_ptr<const Plan> plan = lookup_or_compile();
    if (explaining_) {
      site_.explain.graph_count++;
      site_.explain.ops_per_graph.push_back(static_cast<int>(trace_.nodes.size()));
      GraphInfo g;
      for (const TracedNode& n : trace_.nodes) g.ops.push_back(n.op->name);
      const std::vector<InputGuard> guards = input_guards();
      for (size_t i = 0; i < guards.size(); ++i) {
        std::ostringstream os;
        os << "input " << i << ": " << (guards[i].device.is_cpu() ? "" : guards[i].device.str() + " ") << guards[i].dtype
           << " [";
        for (size_t d = 0; d < guards[i].sizes.size(); ++d)
          os << (d ? ", " : "") << ((guards[i].dynamic >> d) & 1 && guards[i].sizes[d] > 1 ? std::string("s") + std::to_string(d)
                                                                                       : std::to_string(guards[i].sizes[d]));
        os << "] requires_grad=" << (guards[i].requires_grad ? "true" : "false");
        g.guards.push_back(os.str());
      }
      g.compile_seconds = last_compile_seconds_;
      site_.explain.graphs.push_back(std::move(g));
    }
    // While the graph runs, kernels read pending memory freely (the hook
    // ignores it) and ops pass through on_op; the trace is dropped after,
    // also when execution throws.
    struct Executing {
      Tracer& t;
      explicit Executing(Tracer& tr) : t(tr) { t.executing_ = true; }
      ~Executing() {
        t.executing_ = false;
        t.reset();
      }
    } executing(*this);
    execute(*plan, trace_);
    ++graph_index_;
  }

  static void hook(const TensorImpl* t, const char* what, const SourceLocation& where) {
    Tracer* tr = current;
    if (tr && !tr->executing_ && (tr->pending_.contains(t) || (t->storage && tr->mutated_.count(t->storage.get()))))
      tr->graph_break(what, where);
  }

 private:
  int value_of(const Tensor& t) {
    if (const int* it = pending_.find(t.impl())) return *it;
    if (const int* it = ext_.find(t.impl())) return *it;
    const int v = trace_.add_input(t);
    value_grad_.push_back(t.requires_grad());
    ext_.set(t.impl(), v);
    return v;  // its description enters the key at the end (inputs_key)
  }

  // Dims of input `slot` the key leaves out: every dim with dynamic=true;
  // those marked by mark_dynamic; unless dynamic=false, those whose size
  // changed between compiles of this graph (automatic dynamic shapes).
  uint64_t dynamic_dims(size_t slot, bool automatic = true) const {
    const CompileOptions& o = site_.options;
    if (o.dynamic == true) return ~uint64_t(0);
    uint64_t dyn = trace_.externals[slot].impl()->dynamic_dims;
    if (o.dynamic != false && automatic)
      if (const auto it = site_.automatic_dynamic.find(graph_index_); it != site_.automatic_dynamic.end() && slot < it->second.size())
        dyn |= it->second[slot];
    return dyn;
  }
  // The inputs' part of the structure key: per input, its value id, dtype,
  // shape (dynamic dims as '?'), layout and whether it requires grad. As in
  // PyTorch, a dynamic dim of size 0 or 1 is specialized: broadcasting, and
  // so the plan, depends on it. *any_dynamic: some dim was left out.
  std::string inputs_key(bool* any_dynamic, bool automatic = true) const {
    std::string k;
    *any_dynamic = false;
    for (size_t slot = 0; slot < trace_.externals.size(); ++slot) {
      const Tensor& t = trace_.externals[slot];
      const TensorImpl* i = t.impl();
      const uint64_t dyn = dynamic_dims(slot, automatic);
      k += "in ";
      k += std::to_string(slot);
      k += device_type_name(t.device().type());  // a literal: no string built per input on each call
      if (t.device().index() >= 0) k += std::to_string(t.device().index());
      k += dtype_name(i->dtype);
      k += '[';
      for (size_t d = 0; d < i->sizes.size(); ++d) {
        const bool left_out = ((dyn >> d) & 1) && i->sizes[d] > 1;
        *any_dynamic = *any_dynamic || left_out;
        k += left_out ? std::string("?,") : std::to_string(i->sizes[d]) + ",";
      }
      k += ']';
      if (dyn == 0) {
        for (int64_t st : i->strides) k += std::to_string(st) + ",";
      } else {
        k += t.is_contiguous() ? "c" : "s";  // strides follow the dynamic sizes
      }
      k += t.requires_grad() ? "g" : "";
      k += i->wrapped_number ? "w\n" : "\n";
    }
    return k;
  }
  // Automatic dynamic shapes: the dims whose size differs from the last
  // compile of this graph (both sizes above 1) become dynamic for it; true
  // when a dim newly did.
  bool mark_changed_dims(const std::vector<InputGuard>& was) {
    if (site_.options.dynamic == false) return false;
    auto& masks = site_.automatic_dynamic[graph_index_];
    masks.resize(std::max(masks.size(), trace_.externals.size()), 0);
    bool marked = false;
    for (size_t slot = 0; slot < was.size() && slot < trace_.externals.size(); ++slot) {
      const TensorImpl* i = trace_.externals[slot].impl();
      if (was[slot].dtype != i->dtype || was[slot].sizes.size() != i->sizes.size()) continue;
      for (size_t d = 0; d < i->sizes.size() && d < 64; ++d)
        if (was[slot].sizes[d] != i->sizes[d] && was[slot].sizes[d] > 1 && i->sizes[d] > 1 && !((masks[slot] >> d) & 1)) {
          masks[slot] |= uint64_t(1) << d;
          marked = true;
        }
    }
    return marked;
  }

  // Note [Sizes in attributes]: the plan of a symbolic entry this trace's
  // integers fit, if any. (Under site_.mu.)
  std::shared_ptr<const Plan> symbolic_hit(const std::string& inputs) const {
    if (site_.symbolic.empty()) return nullptr;
    std::string skeleton;
    std::vector<int64_t> numbers;
    split_numbers(key_, &skeleton, &numbers);
    const auto it = site_.symbolic.find(skeleton + inputs);
    if (it == site_.symbolic.end()) return nullptr;
    for (const SymbolicEntry& e : it->second) {
      if (e.slot >= trace_.externals.size() || e.dim >= trace_.externals[e.slot].impl()->sizes.size()) continue;
      const int64_t s = trace_.externals[e.slot].impl()->sizes[e.dim];
      bool fits = numbers.size() == e.p.size();
      for (size_t i = 0; fits && i < numbers.size(); ++i) fits = numbers[i] * e.q[i] == e.p[i] * s + e.r[i];
      if (fits) return e.plan;
    }
    return nullptr;
  }
  // After a compile (under site_.mu, before the guards are replaced): a
  // symbolic entry for the plan when the last compile of this graph and
  // this one fit, and this one's integers for the next compile.
  void remember_numbers(const std::shared_ptr<const Plan>& plan, const std::string& inputs, bool any_dynamic) {
    std::string skeleton;
    std::vector<int64_t> numbers;
    split_numbers(key_, &skeleton, &numbers);
    auto& last = site_.last_numbers[graph_index_];
    const auto was = site_.guards.find(graph_index_);
    if (any_dynamic && plan->constants.empty() && was != site_.guards.end() && last.first == skeleton)
      if (std::optional<SymbolicEntry> e = fit(was->second, last.second, numbers)) {
        e->plan = plan;
        site_.symbolic[skeleton + inputs].push_back(std::move(*e));
      }
    last = {std::move(skeleton), std::move(numbers)};
  }
  // The integers a (at the last compile's sizes) and b (now) as
  // (p * s + r) / q of the one size s that changed between them.
  std::optional<SymbolicEntry> fit(const std::vector<InputGuard>& was, const std::vector<int64_t>& a,
                                   const std::vector<int64_t>& b) const {
    if (was.size() != trace_.externals.size() || a.size() != b.size()) return std::nullopt;
    SymbolicEntry e{};
    int64_t s0 = 0, s1 = 0;
    std::vector<int64_t> static_sizes, constants, fitted;
    for (size_t i = 0; i < was.size(); ++i) {
      const Shape& now = trace_.externals[i].impl()->sizes;
      if (was[i].sizes.size() != now.size()) return std::nullopt;
      for (size_t d = 0; d < now.size(); ++d) {
        if (was[i].sizes[d] == now[d]) {
          static_sizes.push_back(now[d]);
        } else if (s1 == 0) {
          s0 = was[i].sizes[d], s1 = now[d], e.slot = i, e.dim = d;
        } else if (was[i].sizes[d] != s0 || now[d] != s1) {
          return std::nullopt;  // two sizes changed
        }
      }
    }
    if (s0 <= 1 || s1 <= 1) return std::nullopt;
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t g = std::gcd(b[i] - a[i], s1 - s0);  // > 0: s1 != s0
      int64_t p = (b[i] - a[i]) / g, q = (s1 - s0) / g;
      if (q < 0) p = -p, q = -q;
      e.p.push_back(p);
      e.q.push_back(q);
      e.r.push_back(a[i] * q - p * s0);
      (p == 0 ? constants : fitted).push_back(b[i]);
    }
    auto among = [](const std::vector<int64_t>& xs, int64_t v) { return std::find(xs.begin(), xs.end(), v) != xs.end(); };
    if (among(static_sizes, s1) || among(constants, s1)) return std::nullopt;
    for (int64_t v : fitted)
      if (among(static_sizes, v) || among(constants, v)) return std::nullopt;
    return e;
  }

  // The graph reads meta tensors (the tracer's pending tensors took the
  // inputs' device, so its values are all meta too).
  bool on_meta() const {
    return std::any_of(trace_.externals.begin(), trace_.externals.end(), [](const Tensor& t) { return t.is_meta(); });
  }

  // The guards of the graph traced now.
  std::vector<InputGuard> input_guards() const {
    std::vector<InputGuard> g;
    for (size_t slot = 0; slot < trace_.externals.size(); ++slot) {
      const Tensor& x = trace_.externals[slot];
      const TensorImpl* i = x.impl();
      g.push_back({x.device(), i->dtype, i->sizes, i->strides, dynamic_dims(slot), x.requires_grad()});
    }
    return g;
  }
  // Why the graph at this index misses the cache, as PyTorch names a failed
  // guard: the first input whose dtype, size, stride or requires_grad
  // differs from the last compile of this graph, else the ops.
  static std::string recompile_reason(const std::vector<InputGuard>& was, const std::vector<InputGuard>& now) {
    auto input = [](size_t i) { return " of input " + std::to_string(i) + " (the " + std::to_string(i + 1) + ". tensor the graph read)"; };
    for (size_t i = 0; i < was.size() && i < now.size(); ++i) {
      const InputGuard &a = was[i], &b = now[i];
      std::ostringstream os;
      os << std::boolalpha;
      if (a.device != b.device)
        os << "device mismatch" << input(i) << ". expected " << a.device.str() << ", actual " << b.device.str();
      else if (a.dtype != b.dtype) os << "dtype mismatch" << input(i) << ". expected " << a.dtype << ", actual " << b.dtype;
      else if (a.sizes.size() != b.sizes.size())
        os << "rank mismatch" << input(i) << ". expected " << a.sizes.size() << ", actual " << b.sizes.size();
      else if (a.requires_grad != b.requires_grad)
        os << "requires_grad mismatch" << input(i) << ". expected " << a.requires_grad << ", actual " << b.requires_grad;
      for (size_t d = 0; os.tellp() == 0 && d < a.sizes.size(); ++d) {
        const bool dynamic = ((a.dynamic & b.dynamic) >> d) & 1;
        if (a.sizes[d] != b.sizes[d] && (!dynamic || a.sizes[d] <= 1 || b.sizes[d] <= 1))
          os << "size mismatch at index " << d << input(i) << ". expected " << a.sizes[d] << ", actual " << b.sizes[d];
      }
      for (size_t d = 0; os.tellp() == 0 && a.dynamic == 0 && d < a.strides.size(); ++d)
        if (a.strides[d] != b.strides[d])
          os << "stride mismatch at index " << d << input(i) << ". expected " << a.strides[d] << ", actual " << b.strides[d];
      if (os.tellp() > 0) return os.str();
    }
    if (was.size() != now.size())
      return "the graph reads " + std::to_string(now.size()) + " tensors, expected " + std::to_string(was.size());
    return "the traced ops, their attributes or the tensors the program keeps changed";
  }

  std::shared_ptr<const Plan> lookup_or_compile() {
    std::string reason;
    bool any_dynamic = false;
    // A graph compiled for these exact sizes first, then one with the dims
    // automatic dynamic shapes left out (PyTorch keeps both entries too).
    std::string key = key_ + inputs_key(&any_dynamic, false), inputs;
    {
      std::lock_guard<std::mutex> lock(site_.mu);
      if (auto it = site_.cache.find(key); it != site_.cache.end()) return it->second;
      inputs = inputs_key(&any_dynamic);
      key = key_ + inputs;
      if (auto it = site_.cache.find(key); it != site_.cache.end()) return it->second;
      if (auto plan = symbolic_hit(inputs)) return plan;
      if (site_.keys_per_graph[graph_index_] > 0) {
        const std::vector<InputGuard>& was = site_.guards[graph_index_];
        reason = recompile_reason(was, input_guards());
        if (mark_changed_dims(was)) {  // the graph again, with those dims dynamic
          inputs = inputs_key(&any_dynamic);
          key = key_ + inputs;
          reason += " (the dim is dynamic from now on)";
          if (auto it = site_.cache.find(key); it != site_.cache.end()) return it->second;
          if (auto plan = symbolic_hit(inputs)) return plan;
        }
        const Stance st = stance.load();
        if (st == Stance::FailOnRecompile)
          fail("compile", "graph ", graph_index_, " would be compiled again (set_stance(\"fail_on_recompile\")): ", reason);
        if (st == Stance::EagerOnRecompile) {
          // Op by op, uncached: what eager would run.
          auto eager = std::make_shared<Plan>(optimize(trace_));
          return eager;
        }
      }
    }
    const auto compile_start = std::chrono::steady_clock::now();
    auto plan = std::make_shared<Plan>(optimize(trace_));
    fold_constants(trace_, *plan, std::vector<bool>(trace_.num_values(), false));
    std::string warning;
    // Formulas bake sizes into attributes: with dynamic dims the graph is
    // replayed through autograd instead (Note [Compiled backward]).
    // A graph of meta tensors computes no values: its ops run their shape
    // functions one by one (the interpreter), forward and backward.
    const std::string& backend = on_meta() ? std::string("interpreter") : site_.options.backend;
    if (records_grad(trace_) && !any_dynamic) build_backward(trace_, *plan, backend, &warning);
    compile_backend(backend)(trace_, *plan, &warning);
    std::vector<bool> keep = trace_.live;  // handed to the program, or read by the backward
    for (size_t v = 0; v < plan->saved.size(); ++v) keep[v] = keep[v] || plan->saved[v];
    for (int v = 0; v < trace_.num_values(); ++v) keep[plan->rep[v]] = keep[plan->rep[v]] || trace_.live[v];
    schedule_frees(trace_, *plan, keep);
    last_compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
    if (!warning.empty()) std::cerr << "[kiln.compile] warning: " << warning << "\n";
    if (logs().output_code) {
      std::cerr << "[kiln.compile] graph " << graph_index_ << ":\n" << graph_string(trace_) << plan->source;
      if (plan->backward) std::cerr << "[kiln.compile] backward of graph " << graph_index_ << ":\n" << backward_string(*plan);
      if (!plan->backward_note.empty())
        std::cerr << "[kiln.compile] backward of graph " << graph_index_ << " replayed op by op: " << plan->backward_note << "\n";
    }
    std::lock_guard<std::mutex> lock(site_.mu);
    remember_numbers(plan, inputs, any_dynamic);
    site_.guards[graph_index_] = input_guards();
    if (site_.keys_per_graph[graph_index_]++ > 0) {
      site_.recompiles++;
      if (logs().recompiles)
        std::cerr << "[kiln.compile] recompile " << site_.recompiles << " of graph " << graph_index_ << ": " << reason
                  << "\n";
      if (site_.recompiles >= site_.options.recompile_limit && !site_.gave_up) {
        site_.gave_up = true;
        std::cerr << "[kiln.compile] warning: recompile limit (" << site_.options.recompile_limit
                  << ") reached; this compiled callable runs eagerly from now on\n";
      }
    }
    if (!site_.gave_up) site_.cache.emplace(key, plan);
    return plan;
  }

  // Keeps the containers' capacity: a step traces the same graphs again,
  // and regrowing them (the key alone is tens of KiB for an optimizer step)
  // made glibc consolidate its free lists on every large reallocation.
  void reset() {
    trace_.externals.clear();
    trace_.value_ext.clear();
    trace_.values.clear();
    trace_.nodes.clear();
    trace_.live.clear();
    trace_.writebacks.clear();
    trace_.no_history = false;
    pending_.clear();
    ext_.clear();
    written_.clear();
    mutated_.clear();
    viewed_.clear();
    value_grad_.clear();
    begin_key();
  }
  // The structure key starts with the graph's index at its call site.
  void begin_key() {
    key_.clear();  // keeps its capacity: the key is rebuilt on every call
    key_ += std::to_string(graph_index_);
    key_ += '|';
  }

  CallSite& site_;
  bool explaining_;
  double last_compile_seconds_ = 0;  // of the graph being flushed
  bool executing_ = false;
  int graph_index_ = 0;
  std::unique_ptr<InterceptScope> intercept_;
  kiln::detail::TracedBackwardHook prev_backward_hook_ = nullptr;
  Trace trace_;
  PointerMap pending_, ext_;  // tensor -> value id: pending (computed in the graph), inputs
  std::unordered_set<const TensorImpl*> written_;   // destinations of recorded writes
  std::unordered_set<const StorageImpl*> mutated_;  // and their memory
  std::unordered_set<const StorageImpl*> viewed_;   // memory of pending tensors that views were taken of
  std::vector<bool> value_grad_;                     // per value: whether it carries autograd history
  std::string key_;

};

TraceScope::TraceScope(CallSite& site, bool explaining) {
  if (current) {  // nested: runs inline in the enclosing trace, under its own fullgraph
    inline_fullgraph_ = site.options.fullgraph;
    inline_fullgraph += inline_fullgraph_;
    return;
  }
  if (stance.load() == Stance::ForceEager || site.gave_up) return;
  tracer_ = std::make_unique<Tracer>(site, explaining);
}

TraceScope::~TraceScope() { inline_fullgraph -= inline_fullgraph_; }

void TraceScope::finish() {
  if (!tracer_) return;
  tracer_->flush();
  tracer_.reset();
}

}  // namespace detail

void graph_break(SourceLocation where) {
  if (detail::current) detail::current->graph_break("compiler::graph_break()", where);
}

ErrorOnGraphBreak::ErrorOnGraphBreak(bool error) { detail::error_guards.push_back(error); }
ErrorOnGraphBreak::~ErrorOnGraphBreak() { detail::error_guards.pop_back(); }
bool error_on_graph_break() { return !detail::error_guards.empty() && detail::error_guards.back(); }

void set_stance(const std::string& name) {
  using detail::Stance;
  static const std::pair<const char*, Stance> kStances[] = {{"default", Stance::Default},
                                                            {"force_eager", Stance::ForceEager},
                                                            {"eager_on_recompile", Stance::EagerOnRecompile},
                                                            {"fail_on_recompile", Stance::FailOnRecompile}};
  for (const auto& [n, s] : kStances)
    if (name == n) return detail::stance.store(s);
  fail("compiler::set_stance", "unknown stance '", name,
       "': expected \"default\", \"force_eager\", \"eager_on_recompile\" or \"fail_on_recompile\"");
}

void mark_dynamic(const Tensor& t, int64_t dim) {
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  check(d >= 0 && d < t.dim() && d < 64, "compiler::mark_dynamic", "dim ", dim, " is out of range for a tensor of shape ",
        shape_text(t.sizes()));
  t.impl()->dynamic_dims |= uint64_t(1) << d;
}

std::string ExplainOutput::to_string() const {
  std::ostringstream os;
  os << "Graph count: " << graph_count << "\nGraph break count: " << graph_break_count << "\n";
  for (size_t i = 0; i < breaks.size(); ++i) {
    os << "Break " << i + 1 << ": " << breaks[i].reason << " at " << breaks[i].location << "\n";
    if (!breaks[i].explanation.empty()) os << "  explanation: " << breaks[i].explanation << "\n  hint: " << breaks[i].hint << "\n";
    for (const std::string& f : breaks[i].user_stack) os << "  from " << f << "\n";
  }
  for (size_t i = 0; i < graphs.size(); ++i) {
    const GraphInfo& g = graphs[i];
    os << "Graph " << i + 1 << ": " << g.ops.size() << " ops";
    if (g.compile_seconds > 0) os << ", compiled in " << g.compile_seconds * 1e3 << " ms";
    os << "\n  ops:";
    for (const std::string& op : g.ops) os << " " << op;
    os << "\n";
    for (const std::string& guard : g.guards) os << "  guard: " << guard << "\n";
  }
  return os.str();
}

}  // namespace kiln::compiler
