// kiln::compile's backends, registered by name (an internal registry:
// kiln-internal-tests, which links the library's objects).
#include "kiln/compile.h"
#include "kiln/kiln.h"

#include "compile/compile_util.h"
#include "compile/graph.h"

namespace kiln::test {
namespace {

// Backends are registered by name; the plan goes to the one the options name.
int test_backend_calls = 0;
void count_and_take_nothing(const compiler::detail::Trace&, compiler::detail::Plan&, std::string*) {
  ++test_backend_calls;
}

TEST_F(Compile, BackendsAreChosenByRegisteredName) {
  compiler::detail::register_compile_backend("test_counting", count_and_take_nothing);
  expect_error([] { compiler::detail::register_compile_backend("test_counting", count_and_take_nothing); },
               {"[compile]", "backend 'test_counting' is registered twice"});
  auto fn = [](const Tensor& x) { return relu(x * 2.0 - 1.0) * x; };
  CompileOptions o;
  o.backend = "test_counting";
  auto f = compile(fn, o);
  const Tensor x = randn({9, 7});
  const int64_t loops = compiler::detail::fused_loop_runs();
  expect_same(f(x), fn(x), "through a backend that takes no node");
  EXPECT_EQ(test_backend_calls, 1);
  EXPECT_EQ(compiler::detail::fused_loop_runs(), loops);  // nothing fused: the interpreter ran every node
  o.backend = "no_such_backend";
  expect_error([&] { compile(fn, o); },
               {"[compile]", "unknown backend 'no_such_backend'", "\"cpp\"", "\"interpreter\"", "\"test_counting\""});
}

}  // namespace
}  // namespace kiln::test
