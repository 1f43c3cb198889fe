// kiln::compile: PyTorch's torch.compile for kiln. A compiled callable runs
// its function under a tracing mode of the dispatcher: ops record nodes of a
// graph instead of computing, every tensor the function reads (arguments,
// parameters, captured tensors) is a graph input bound afresh on each call,
// and the graph is computed when the function returns or when the program
// needs a concrete value (a graph break: item(), data_ptr(), printing, an
// in-place op, compiler::graph_break()). Graphs are looked up by structure
// (ops, attributes, input dtypes/shapes/strides), so each call re-traces and
// control flow that depends on C++ state stays correct; a graph seen before
// runs its cached compiled form. See Note [Tracing by pending tensors] in
// src/compile/tracer.cpp.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <memory>
#include <optional>
#include "kiln/source_location.h"
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln {

struct CompileOptions {
  bool fullgraph = false;         // any graph break is an error
  // true: every dim of every input is dynamic; false: only those marked by
  // mark_dynamic; unset (PyTorch's dynamic=None): also, per graph, a dim
  // whose size changed since the graph was compiled (automatic dynamic
  // shapes: lengths 8, 16, 32 compile twice, not three times).
  std::optional<bool> dynamic;
  std::string backend = "cpp";    // "cpp" (generated C++ for fused loops) or "interpreter"
  // Only "default": PyTorch's "reduce-overhead" (CUDA graphs) and
  // "max-autotune" (kernel search) have no kiln counterpart yet and are
  // refused by name, as is anything else.
  std::string mode = "default";
  int recompile_limit = 8;        // after this many recompiles the call site runs eagerly
};

// A graph break where breaks are errors (fullgraph, error_on_graph_break).
class GraphBreakError : public Error {
 public:
  GraphBreakError(const std::string& what, std::string reason, std::string location)
      : Error(what), reason(std::move(reason)), location(std::move(location)) {}
  std::string reason;    // e.g. "item()"
  std::string location;  // "file:line" of the call that broke, or "unknown"
};

namespace compiler {

// Ends the current graph here (as torch._dynamo.graph_break()).
void graph_break(SourceLocation where = SourceLocation::current());

// Scoped: while alive, graph breaks on this thread raise GraphBreakError
// (true) or resume in a new graph (false). Nestable; the innermost wins.
// fullgraph = true makes breaks errors whatever the guards say.
class ErrorOnGraphBreak {
 public:
  explicit ErrorOnGraphBreak(bool error);
  ~ErrorOnGraphBreak();
  ErrorOnGraphBreak(const ErrorOnGraphBreak&) = delete;
  ErrorOnGraphBreak& operator=(const ErrorOnGraphBreak&) = delete;
};
bool error_on_graph_break();  // what the innermost guard says (false without one)

// The callable wrapped so that it runs under ErrorOnGraphBreak(error).
template <class F>
auto error_on_graph_break(bool error, F fn) {
  return [error, fn = std::move(fn)](auto&&... args) mutable -> decltype(auto) {
    ErrorOnGraphBreak guard(error);
    return fn(std::forward<decltype(args)>(args)...);
  };
}

// As torch.compiler.set_stance: "default" compiles; "force_eager" runs
// every compiled callable eagerly; "eager_on_recompile" runs a graph eagerly
// where it would be compiled again (graphs already compiled still run
// compiled); "fail_on_recompile" raises kiln::Error, naming the changed
// guard, where a graph would be compiled again.
void set_stance(const std::string& stance);

// Compiles once for every size of dim `dim` of t (the structure key ignores
// that size), so a growing sequence length does not recompile.
void mark_dynamic(const Tensor& t, int64_t dim);

// Whether the "cpp" backend can fuse dispatcher op `op_name` into its
// generated loops (on float32 tensors of fitting shapes): an elementwise op
// whose math is in pointwise_math.h, a reshaping view, a sum, layer_norm,
// slice_backward. The others run their kernels between the loops.
bool fuses(std::string_view op_name);

struct GraphBreakInfo {
  std::string reason, location;     // location: the user's file:line, or "unknown"
  std::string explanation, hint;    // empty for a reason without one
  // The program's frames where the break was seen, innermost first, as
  // "MODULE+0xOFFSET (symbol)" (addr2line -Cfe MODULE OFFSET gives file:line
  // in a build with debug info); kiln's own frames left out.
  std::vector<std::string> user_stack;
};
struct GraphInfo {
  std::vector<std::string> ops;     // the traced ops, in order
  std::vector<std::string> guards;  // per input: what a cached graph requires of it
  double compile_seconds = 0;       // 0 when the graph came from the cache
};
// As PyTorch's ExplainOutput: the graphs, their ops and guards, and the breaks.
struct ExplainOutput {
  int graph_count = 0;
  int graph_break_count = 0;
  std::vector<GraphBreakInfo> breaks;
  std::vector<int> ops_per_graph;
  std::vector<GraphInfo> graphs;
  std::string to_string() const;
};

namespace detail {
// The cache and counters of one compiled callable (src/compile/).
class CallSite;
std::shared_ptr<CallSite> make_call_site(const CompileOptions& options);
int recompiles(const CallSite& site);
int cache_entries(const CallSite& site);
// Values constant folding computed ahead, over the cached graphs.
int folded_constants(const CallSite& site);
ExplainOutput explain_output(const CallSite& site);
// How many times this process ran the system C++ compiler (cpp backend).
int64_t compiler_runs();
// How many generated loops this process ran (cpp backend; a loop whose
// inputs did not fit and ran op by op is not counted).
int64_t fused_loop_runs();

class Tracer;

// Traces the calls made while alive; finish() computes the last graph.
// Without finish() (an exception), the pending graph is dropped. Inactive
// (the function runs eagerly, or inline in an enclosing trace) under the
// force_eager stance, past the recompile limit, or inside another trace.
class TraceScope {
 public:
  explicit TraceScope(CallSite& site, bool explaining = false);
  ~TraceScope();
  void finish();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  std::unique_ptr<Tracer> tracer_;
  bool inline_fullgraph_ = false;  // nested, with fullgraph=true
};
}  // namespace detail

}  // namespace compiler

// The result of kiln::compile: call it like the function it wraps.
template <class F>
class Compiled {
 public:
  Compiled(F fn, const CompileOptions& options) : fn_(std::move(fn)), site_(compiler::detail::make_call_site(options)) {}

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    compiler::detail::TraceScope scope(*site_);
    if constexpr (std::is_void_v<decltype(fn_(std::forward<Args>(args)...))>) {
      fn_(std::forward<Args>(args)...);
      scope.finish();
    } else {
      auto result = fn_(std::forward<Args>(args)...);
      scope.finish();
      return result;
    }
  }
  // How many times a graph of this callable was compiled again because its
  // inputs' dtypes/shapes/strides (or the traced structure) changed.
  int recompiles() const { return compiler::detail::recompiles(*site_); }
  int cache_entries() const { return compiler::detail::cache_entries(*site_); }
  int folded_constants() const { return compiler::detail::folded_constants(*site_); }

 private:
  F fn_;
  std::shared_ptr<compiler::detail::CallSite> site_;
};

template <class F>
  requires(!std::is_base_of_v<nn::Module, F>)
Compiled<F> compile(F fn, const CompileOptions& options = {}) {
  return Compiled<F>(std::move(fn), options);
}

// A module's forward, compiled (the module is read at each call: parameter
// updates are seen).
inline auto compile(nn::UnaryModule& module, const CompileOptions& options = {}) {
  return compile([&module](const Tensor& x) { return module.forward(x); }, options);
}

namespace compiler {
// Runs fn(args...) once under tracing and reports its graphs and breaks.
template <class F, class... Args>
ExplainOutput explain(F fn, Args&&... args) {
  CompileOptions o;
  o.backend = "interpreter";
  auto site = detail::make_call_site(o);
  {
    detail::TraceScope scope(*site, /*explaining=*/true);
    fn(std::forward<Args>(args)...);
    scope.finish();
  }
  return detail::explain_output(*site);
}
}  // namespace compiler

}  // namespace kiln

KILN_API_END
