// Extensions loaded into the runtime: their ops by name from C++, errors
// inside them as kiln::Error naming the op, and the ABI version check.
#include "kiln/call_op.h"
#include "kiln/compile.h"
#include "kiln/extension.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Extension, ItsOpsAreCalledByNameAndGiveTheirValues) {
  load_extension(KILN_TEST_EXTENSION);
  load_extension(KILN_TEST_EXTENSION);  // a second load does nothing
  const Tensor x = randn({3, 5}), y = randn({5, 3}).t();  // y non-contiguous
  const Tensor got = std::get<Tensor>(call_op("testext::scale_add", {x, y, 0.25})[0]);
  expect_close(got, values(add(x, y, 0.25)), 1e-6, 1e-7, "x + 0.25 y");
  const Tensor g2 = std::get<Tensor>(call_op("testext::scale_add", {x, y}, {{"alpha", int64_t{-2}}})[0]);
  expect_close(g2, values(x - y * 2), 1e-6, 1e-7, "keyword alpha");
  const std::vector<IValue> s = call_op("testext::stats", {x});
  ASSERT_EQ(s.size(), 2u);
  expect_close(std::get<Tensor>(s[0]), values(x.sum()), 0, 0, "sum");
  EXPECT_EQ(std::get<int64_t>(s[1]), 15);
  expect_error([&] { call_op("testext::scale_add", {x, randn({2})}, {{"alpha", 1.0}}); },
               {"[testext::scale_add]", "the extension's kernel failed", "x and y must be float32 tensors of one shape"});
  expect_error([&] { call_op("testext::scale_add", {x}); }, {"testext::scale_add", "missing the argument 'y'"});
  // No backward declared: a gradient would be lost, so the call is refused.
  const Tensor w = randn({3, 5}).requires_grad_();
  expect_error([&] { call_op("testext::scale_add", {w, x, 1.0}); },
               {"[testext::scale_add]", "requires grad", "no backward"});
  {
    NoGradGuard inference;
    EXPECT_NO_THROW(call_op("testext::scale_add", {w, x, 1.0}));
  }
}

// An extension op has no shape function to be traced by: under kiln::compile
// it is a graph break naming the op (an error under fullgraph), and the
// compiled function still computes what eager does.
TEST(Extension, UnderCompileItsOpsAreGraphBreaksThatNameThem) {
  load_extension(KILN_TEST_EXTENSION);
  const Tensor x = randn({4, 6});
  auto fn = [](const Tensor& a) {
    return std::get<Tensor>(call_op("testext::scale_add", {a * 2.0, a, 0.5})[0]) + 1.0;
  };
  auto compiled = compile(fn);
  expect_close(compiled(x), values(fn(x)), 0, 0, "compiled with a break");
  CompileOptions full;
  full.fullgraph = true;
  auto strict = compile(fn, full);
  expect_error([&] { strict(x); }, {"the extension op 'testext::scale_add'"});
}

// With a shape function the op goes through the dispatcher: kiln::compile
// traces it (one graph under fullgraph) and autograd records it with its
// backward op.
TEST(Extension, WithAShapeFunctionItsOpsAreTracedAndDifferentiated) {
  load_extension(KILN_TEST_EXTENSION);
  const Tensor x = randn({4, 6}), y = randn({4, 6});
  auto fn = [&](const Tensor& a) {
    return std::get<Tensor>(call_op("testext::scale_add_traced", {a * 2.0, y, 0.5})[0]) + 1.0;
  };
  CompileOptions full;
  full.fullgraph = true;
  auto compiled = compile(fn, full);
  expect_close(compiled(x), values(x * 2.0 + y * 0.5 + 1.0), 1e-6, 1e-6, "compiled, one graph");
  expect_close(compiled(y), values(y * 2.0 + y * 0.5 + 1.0), 1e-6, 1e-6, "second call");
  const Tensor a = randn({4, 6}, kFloat64).requires_grad_(), b = randn({4, 6}, kFloat64).requires_grad_();
  const Tensor g = randn({4, 6}, kFloat64);
  (std::get<Tensor>(call_op("testext::scale_add_traced", {a.to(kFloat32), b.to(kFloat32), 3.0})[0]).to(kFloat64) * g)
      .sum()
      .backward();
  expect_close(a.grad(), values(g), 1e-6, 1e-6, "d/dx");
  expect_close(b.grad(), values(g * 3.0), 1e-6, 1e-6, "d/dy");
}

// Built against the frozen stable headers of ABI 1.0 (tests/stable/v1.0).
TEST(Extension, OneBuiltAgainstTheFrozenOnePointZeroHeadersStillWorks) {
  load_extension(KILN_TEST_EXTENSION_V1_0);
  const Tensor x = randn({2, 7}), y = randn({2, 7});
  expect_close(std::get<Tensor>(call_op("testext_v1_0::scale_add", {x, y, 1.5})[0]), values(add(x, y, 1.5)), 1e-6,
               1e-7, "scale_add");
  EXPECT_EQ(std::get<int64_t>(call_op("testext_v1_0::stats", {x})[1]), 14);
}

TEST(Extension, VersionsOtherThanTheRuntimesAreRefused) {
  expect_error([] { load_extension(KILN_TEST_EXTENSION_MAJOR2); },
               {"[load_extension]", KILN_TEST_EXTENSION_MAJOR2, "stable ABI 2.0", "provides 1.0"});
  expect_error([] { load_extension(KILN_TEST_EXTENSION_MINOR9); },
               {"[load_extension]", KILN_TEST_EXTENSION_MINOR9, "stable ABI 1.9", "provides 1.0"});
  EXPECT_FALSE(has_public_op("major2::noop"));
  EXPECT_FALSE(has_public_op("minor9::noop"));
  expect_error([] { load_extension("/nonexistent/ext.so"); }, {"[load_extension]", "cannot load '/nonexistent/ext.so'"});
}

}  // namespace
}  // namespace kiln::test
