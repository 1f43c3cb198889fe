// The traced graph of kiln::compile and what compiling it produces.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/dispatch.h"

namespace kiln::autograd {
struct BackwardDef;
}

namespace kiln::compiler::detail {

// While alive, `mode` is the innermost dispatcher mode of this thread and
// `hook` sees every concrete-value access (item, data_ptr, printing): how
// the tracer and the backward recorder intercept a program.
class InterceptScope {
 public:
  InterceptScope(DispatchMode* mode, kiln::detail::ConcreteValueHook hook)
      : prev_(std::exchange(kiln::detail::concrete_value_hook, hook)), guard_(mode) {}
  ~InterceptScope() { kiln::detail::concrete_value_hook = prev_; }
  InterceptScope(const InterceptScope&) = delete;
  InterceptScope& operator=(const InterceptScope&) = delete;

 private:
  kiln::detail::ConcreteValueHook prev_;
  ModeGuard guard_;
};

// Values are numbered in the order the trace met them; a value is either a
// graph input (ext >= 0: a tensor the program read, bound on each call) or
// an output of a node.
struct TracedNode {
  const OpDef* op;
  Attrs attrs;
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids
  bool grad_enabled;         // the grad mode the op was called under
};

struct Trace {
  std::vector<Tensor> externals;                    // by input slot
  std::vector<int> value_ext;                       // per value: input slot, or -1
  std::vector<std::shared_ptr<TensorImpl>> values;  // per value: the pending tensor (null for inputs)
  std::vector<TracedNode> nodes;
  std::vector<bool> live;  // per value: still held by the program when the graph ran
  // In-place and out= ops on real tensors: after the graph ran, each
  // destination is given the last value written to it (Note [Writes to
  // real tensors] in tracer.cpp). Those values count as live.
  // `over`: the graph input bound to dst when the graph read dst before its
  // first write (a fused loop may then write dst in place), else -1.
  struct Writeback {
    Tensor dst;
    int value;
    int over;
  };
  std::vector<Writeback> writebacks;
  // The program ran backward() inside this graph (Note [Backward inside a
  // trace]): its outputs carry no autograd history.
  bool no_history = false;
  int num_values() const { return static_cast<int>(value_ext.size()); }
  // New value ids: a graph input bound to t, or a node output held by the
  // pending tensor t.
  int add_input(const Tensor& t) {
    value_ext.push_back(static_cast<int>(externals.size()));
    values.push_back(nullptr);
    externals.push_back(t);
    return num_values() - 1;
  }
  int add_output(const Tensor& t) {
    value_ext.push_back(-1);
    values.push_back(t.impl_ptr());
    return num_values() - 1;
  }
};

// A backend's unit of work that runs in place of a group of nodes (the cpp
// backend's generated loop, cpp_kernel.h). The interpreter runs it where
// the plan says, knowing nothing of how it computes.
class FusedEntry {
 public:
  virtual ~FusedEntry() = default;
  // The nodes it replaces, in order: run one by one when it cannot run.
  virtual const std::vector<int>& nodes() const = 0;
  // Runs over the values computed so far, writing its results into vals;
  // false (nothing done) when this call's inputs do not fit it.
  virtual bool run(std::vector<Tensor>& vals, const Trace& t) const = 0;
};
// The compiled backward of a graph whose inputs require grad (backward.cpp).
struct BackwardGraph;

// What compiling a graph structure gives; valid for every trace with the
// same structure key (node and value numbering are identical).
struct Plan {
  std::vector<int> order;  // nodes to run, in order, after dead-code elimination
  std::vector<int> rep;    // per value: the value computing it (common subexpressions merged)
  // Per entry of order: null, or a fused loop that runs instead of that node
  // (and of the other nodes of its group, which are not in order).
  std::vector<std::shared_ptr<const FusedEntry>> fused;
  std::string source;      // generated C++ (cpp backend), for KILN_LOGS=output_code
  // Per node: the bias value a matmul runs with as gemm_with_bias
  // (its bias add folded in by fold_bias_adds), or -1; empty: none.
  std::vector<int> bias_of;
  const OpDef* gemm_with_bias = nullptr;
  // Values computed once when the plan was made (constant folding), bound
  // before the nodes run; never handed to the program without a copy.
  std::vector<std::pair<int, Tensor>> constants;
  // Per entry of order: values nothing after it reads, dropped once it ran
  // so that the allocator reuses their memory (see schedule_frees).
  std::vector<std::vector<int>> frees;
  // With inputs that require grad: the backward graph, and the forward
  // values it reads (fused loops must write them). Null backward: the graph
  // is replayed op by op through autograd instead (backward_note says why).
  std::shared_ptr<const BackwardGraph> backward;
  std::vector<bool> saved;
  std::string backward_note;
};

// A value's sizes, dtype and contiguity, whether a graph input or computed.
inline const Shape& sizes_of(const Trace& t, int v) {
  return t.value_ext[v] >= 0 ? t.externals[t.value_ext[v]].sizes() : t.values[v]->sizes;
}
inline DType dtype_of_value(const Trace& t, int v) {
  return t.value_ext[v] >= 0 ? t.externals[t.value_ext[v]].dtype() : t.values[v]->dtype;
}
inline bool contiguous_value(const Trace& t, int v) {
  if (t.value_ext[v] >= 0) return t.externals[t.value_ext[v]].is_contiguous();
  return t.values[v]->strides == contiguous_strides(t.values[v]->sizes);
}
inline bool plain_f32(const Trace& t, int v) { return dtype_of_value(t, v) == kFloat32 && contiguous_value(t, v); }

// Calls fn(value) for each value node n reads when the plan runs it: its
// inputs, and the bias a matmul runs with (Plan::bias_of).
template <class Fn>
void for_each_read(const Trace& t, const Plan& p, int n, Fn&& fn) {
  for (int in : t.nodes[n].inputs) fn(p.rep[in]);
  if (!p.bias_of.empty() && p.bias_of[n] >= 0) fn(p.rep[p.bias_of[n]]);
}

// Calls the backward formula `def` of node (as the autograd engine would):
// inputs are its input value ids (merged by CSE where the caller merges),
// value(v) gives the tensor of a value the formula saves, meta(v) any
// value's metadata, wants_grad[v] whether a value carries gradient, grad[v]
// the gradient reaching an output (undefined: zeros). Returns one gradient
// per input, undefined where none is wanted. Shared by the compiled
// backward (backward.cpp) and the backward traced into a graph (tracer.cpp).
std::vector<Tensor> call_formula(const autograd::BackwardDef& def, const TracedNode& node, const std::vector<int>& inputs,
                                 const std::function<Tensor(int)>& value,
                                 const std::function<const TensorImpl&(int)>& meta,
                                 const std::vector<bool>& wants_grad, const std::vector<Tensor>& grad);

// Whether running the trace must record autograd history: some input
// requires grad and some op was traced with grad enabled.
bool records_grad(const Trace& t);

// Appends attrs to a structure key, without the random ops' seed and
// offset (values of one call, which each trace carries itself). Integers
// (and shape entries) follow kNumberMark, so that a key can be split into
// its skeleton and its numbers (Note [Sizes in attributes]).
constexpr char kNumberMark = '\x1f';
void append_attrs(std::string& key, const Attrs& attrs);

// One line per node, for KILN_LOGS=output_code.
std::string graph_string(const Trace& t);

// Passes: common-subexpression elimination, then dead-code elimination
// (nodes whose results nobody needs).
Plan optimize(const Trace& t);
// Constant folding: nodes whose inputs are all constants (no inputs at all,
// like zeros or arange, or inputs marked in constant_inputs, or folded
// results) are run now and leave plan.order; random ops are never folded.
void fold_constants(const Trace& t, Plan& plan, const std::vector<bool>& constant_inputs);
bool is_constant(const Plan& plan, int v);
// Stage "fold bias adds" (a backend's choice: it changes the GEMM's
// rounding): a float32 bias add of a GEMM's result runs inside the GEMM
// (Note [Bias in the GEMM]); fills plan.bias_of and plan.gemm_with_bias.
void fold_bias_adds(const Trace& t, Plan& plan);
// Buffer reuse: fills plan.frees, after the backend fixed plan.order.
// Values in `keep` (read after the plan ran) are never freed.
void schedule_frees(const Trace& t, Plan& plan, const std::vector<bool>& keep);
// A compile backend: takes over the nodes of a simplified plan it can run
// faster (fills plan.fused, may reorder plan.order); what it leaves runs
// through the interpreter. On failure it leaves the plan as it was and says
// why in *warning. Registered by name (backends.cpp): "interpreter" takes
// nothing, "cpp" (cpp_backend.cpp) fuses elementwise chains into generated
// C++ (compiled, cached on disk, loaded).
using BackendFn = void (*)(const Trace& t, Plan& plan, std::string* warning);
void register_compile_backend(const std::string& name, BackendFn generate);
// The backend registered as `name`; a kiln::Error listing the known ones otherwise.
BackendFn compile_backend(const std::string& name);
// Differentiates the plan's graph (before the backend runs) by tracing the ops'
// backward formulas, and compiles the result with `backend`. Sets
// plan.backward and plan.saved, or plan.backward_note when some formula
// cannot be traced. See Note [Compiled backward] in backward.cpp.
void build_backward(const Trace& t, Plan& plan, const std::string& backend, std::string* warning);
// The backward graph and its generated C++, for KILN_LOGS=output_code.
std::string backward_string(const Plan& plan);
// Makes `outputs` (the tensors handed to the forward's live values
// plan.backward lists) differentiable through the compiled backward; vals
// are the forward's values; written_in_place marks those whose version
// moves once more after the graph (a writeback made in place).
void record_backward(const Plan& plan, const std::vector<Tensor>& vals, const std::vector<Tensor>& outputs,
                     const std::vector<bool>& written_in_place);
// Runs the plan's nodes over vals, whose graph inputs are filled in; node
// results are written into vals. record_grad: every node goes through the
// dispatcher under the grad mode it was traced with, so autograd records it.
void run_plan(const Plan& plan, const Trace& t, std::vector<Tensor>& vals, bool record_grad);
// Runs the plan on the trace's inputs and makes every live pending tensor
// hold its value.
void execute(const Plan& plan, Trace& t);

}  // namespace kiln::compiler::detail
