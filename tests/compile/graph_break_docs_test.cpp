// Every example of PyTorch 2.9's documentation of error_on_graph_break
// ("Toggling error_on_graph_break") and of nested graph breaks ("Nested
// Graph Breaks"), with the outcome PyTorch documents: decorators become
// compiler::error_on_graph_break(bool, fn) wrappers, context managers
// compiler::ErrorOnGraphBreak guards, torch._dynamo.graph_break()
// compiler::graph_break(). "No error, but there is a graph break" is checked
// as: the compiled result equals eager's, and explain() of the same call
// reports the break.
#include "compile/compile_util.h"
#include "kiln/kiln.h"

namespace kiln::test {
namespace {

using compiler::ErrorOnGraphBreak;
using compiler::error_on_graph_break;

Tensor break_between(const Tensor& x) {
  const Tensor y = x + 1.0;
  compiler::graph_break();
  return y + 2.0;
}

// The compiled callable gives eager's value, and the same call traced by
// explain() has `breaks` graph breaks.
template <class F>
void expect_resumes(F fn, int breaks, const std::string& what) {
  const Tensor x = randn({3});
  auto compiled = compile(fn);
  expect_same(compiled(x), x + 3.0, what);
  const compiler::ExplainOutput e = compiler::explain(fn, x);
  EXPECT_EQ(e.graph_break_count, breaks) << what << "\n" << e.to_string();
}

// The call raises GraphBreakError for the explicit break.
template <class F>
void expect_break_error(F&& call, const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << ": expected a GraphBreakError";
  } catch (const GraphBreakError& e) {
    EXPECT_NE(e.reason.find("graph_break()"), std::string::npos) << what << ": " << e.what();
  }
}

// "error_on_graph_break(False) example": a function decorated False, called
// through another function from a compiled function decorated True.
TEST_F(Compile, DocsErrorOnGraphBreakFalseUnderTrue) {
  auto code_with_a_difficult_graph_break = error_on_graph_break(false, [](const Tensor& x) { return break_between(x); });
  auto inner = [&](const Tensor& x) { return code_with_a_difficult_graph_break(x); };
  auto fn = error_on_graph_break(true, compile(inner));  // @error_on_graph_break(True) @torch.compile
  const Tensor x = randn({3});
  expect_same(fn(x), x + 3.0, "no error");
  ErrorOnGraphBreak strict(true);
  EXPECT_EQ(compiler::explain(inner, x).graph_break_count, 1);  // but there is a graph break
}

// The same with the context manager inside the compiled function.
TEST_F(Compile, DocsErrorOnGraphBreakFalseAsAContextManager) {
  auto body = [](const Tensor& x) {
    const Tensor y = x + 1.0;
    {
      ErrorOnGraphBreak allow(false);
      compiler::graph_break();  // no error
    }
    return y + 2.0;
  };
  ErrorOnGraphBreak strict(true);
  expect_resumes(body, 1, "context manager");
}

// Monkey patching a third-party module's forward with the decorator.
TEST_F(Compile, DocsErrorOnGraphBreakFalseOnAThirdPartyModule) {
  struct ThirdPartyModule {
    Tensor forward(const Tensor& x) const { return break_between(x); }
  } tp_mod;
  auto patched_forward = error_on_graph_break(false, [&](const Tensor& x) { return tp_mod.forward(x); });
  ErrorOnGraphBreak strict(true);
  expect_resumes([&](const Tensor& x) { return patched_forward(x); }, 1, "patched forward");
  // Unpatched, the same module raises under error_on_graph_break(True).
  auto unpatched = compile([&](const Tensor& x) { return tp_mod.forward(x); });
  expect_break_error([&] { unpatched(randn({3})); }, "unpatched forward");
}

// "error_on_graph_break(True) example": the break in the compiled function
// itself resumes; the one in inner2, decorated True, raises.
TEST_F(Compile, DocsErrorOnGraphBreakTrueUnderFalse) {
  int line = 0;
  auto inner2 = error_on_graph_break(true, [&line](const Tensor& x) {
    const Tensor y = x + 1.0;
    line = __LINE__ + 1;
    compiler::graph_break();  // error
    return y + 2.0;
  });
  auto inner = [&](const Tensor& x) { return inner2(x); };
  auto fn = compile([&](const Tensor& x) {
    const Tensor y = x + 4.0;
    compiler::graph_break();  // no error
    return inner(y);
  });
  try {
    fn(randn({3}));
    ADD_FAILURE() << "expected a GraphBreakError";
  } catch (const GraphBreakError& e) {
    EXPECT_EQ(e.location, std::string(__FILE__) + ":" + std::to_string(line)) << e.what();
  }
}

// "Nesting behavior": a context manager in a nested call turns the setting
// off for the calls beneath it.
TEST_F(Compile, DocsErrorOnGraphBreakAppliesToNestedCalls) {
  auto inner = [](const Tensor& x) { return break_between(x); };
  auto inner2 = [&](const Tensor& x) {
    ErrorOnGraphBreak allow(false);
    return inner(x);
  };
  auto fn = error_on_graph_break(true, compile(inner2));
  const Tensor x = randn({3});
  expect_same(fn(x), x + 3.0, "no error");
}

// A region inside another region: False inside True inside the default.
TEST_F(Compile, DocsErrorOnGraphBreakRegionsNest) {
  auto inner = [](const Tensor& x) {
    const Tensor y = x + 1.0;
    {
      ErrorOnGraphBreak allow(false);
      compiler::graph_break();
    }
    return y + 2.0;
  };
  auto inner2 = [&](const Tensor& x) {
    ErrorOnGraphBreak strict(true);
    return inner(x);
  };
  expect_resumes(inner2, 1, "nested regions");
}

// "Interaction with fullgraph": fullgraph=True wins over a function
// decorated False.
TEST_F(Compile, DocsFullgraphTakesPrecedenceOverErrorOnGraphBreak) {
  auto inner = error_on_graph_break(false, [](const Tensor& x) { return break_between(x); });
  auto fn = compile([&](const Tensor& x) { return inner(x); }, fullgraph());
  expect_break_error([&] { fn(randn({3})); }, "fullgraph=True over error_on_graph_break(False)");
}

// fullgraph=True cannot be toggled back: a fullgraph=False compile called
// from a fullgraph=True one still raises.
TEST_F(Compile, DocsFullgraphCannotBeToggledBackToFalse) {
  CompileOptions loose;
  loose.fullgraph = false;
  auto inner = compile([](const Tensor& x) { return break_between(x); }, loose);
  auto fn = compile([&](const Tensor& x) { return inner(x); }, fullgraph());
  expect_break_error([&] { fn(randn({3})); }, "fullgraph=False inside fullgraph=True");
}

// And a fullgraph=True compile called from a fullgraph=False one raises.
TEST_F(Compile, DocsAnInnerFullgraphCompileRaisesInsideALooseOne) {
  auto inner = compile([](const Tensor& x) { return break_between(x); }, fullgraph());
  auto fn = compile([&](const Tensor& x) { return inner(x); });
  expect_break_error([&] { fn(randn({3})); }, "fullgraph=True inside fullgraph=False");
}

// "Nested Graph Breaks": f -> inner2 -> inner1, which breaks. PyTorch
// resumes only top-level frames, so it compiles inner2 and inner1 as
// top-level functions of their own: six graphs ({x+16}, {x+4}, {x+1}, {x+2},
// {x+8}, {x+32}) and the same break traced three times. kiln traces tensor
// ops, not frames, so the break ends one graph wherever it is: two graphs
// ({x+16, x+4, x+1} and {x+2, x+8, x+32}), the break met once, and the
// result the same as eager's, which is what the documented semantics
// (compiled_f_semantics) compute.
TEST_F(Compile, DocsNestedGraphBreaksResumeAfterTheBreak) {
  auto inner1 = [](const Tensor& x) {
    const Tensor y = x + 1.0;
    compiler::graph_break();  // stop tracing due to graph break
    return y + 2.0;
  };
  auto inner2 = [&](const Tensor& x) { return inner1(x + 4.0) + 8.0; };
  auto f = [&](const Tensor& x) { return inner2(x + 16.0) + 32.0; };
  const Tensor x = randn({3});
  auto compiled = compile(f);
  for (int call = 0; call < 2; ++call) expect_same(compiled(x), x + 63.0, "f(x) = x + 63");
  EXPECT_EQ(compiled.cache_entries(), 2);  // the two graphs, compiled once each
  const compiler::ExplainOutput e = compiler::explain(f, x);
  EXPECT_EQ(e.graph_count, 2) << e.to_string();
  EXPECT_EQ(e.graph_break_count, 1) << e.to_string();
  ASSERT_EQ(e.ops_per_graph.size(), 2u);
  EXPECT_EQ(e.ops_per_graph[0], 3) << e.to_string();
  EXPECT_EQ(e.ops_per_graph[1], 3) << e.to_string();
}

}  // namespace
}  // namespace kiln::test
