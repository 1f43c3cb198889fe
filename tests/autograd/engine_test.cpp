// The autograd engine: accumulation into leaves, retain_graph, no_grad,
// hooks, in-place ops and the saved-tensor version check.
#include "autograd/graph.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Autograd, GradientsAccumulateIntoLeaves) {
  Tensor x = tensor<double>({1, 2, 3}).requires_grad_();
  Tensor y = (x * x).sum();
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn_name(), "sum_backward");
  y.backward();
  expect_close(x.grad(), {2, 4, 6}, 0, 0, "d sum(x^2)");
  (x * 3).sum().backward();
  expect_close(x.grad(), {5, 7, 9}, 0, 0, "accumulated");
  Tensor z = x * 2;
  z.backward(tensor<double>({1, 0, -1}));
  expect_close(x.grad(), {7, 7, 7}, 0, 0, "explicit gradient");
}

TEST(Autograd, FirstGradientIsTakenOverOnlyWhenNothingElseHoldsIt) {
  // A gradient computed for the leaf alone becomes .grad without a copy; one
  // the caller still holds (passed through by add) or a view is copied.
  Tensor x = tensor<double>({1, 2, 3}).requires_grad_();
  const Tensor g = tensor<double>({1, 1, 1});
  (x + 1.0).backward(g);
  EXPECT_NE(x.grad().data_ptr<double>(), g.data_ptr<double>());
  g.add_(5.0);
  expect_close(x.grad(), {1, 1, 1}, 0, 0, "not the caller's tensor");
  Tensor w = tensor<double>({1, 2, 3, 4}).requires_grad_();
  (w.view({2, 2}) * 2.0).sum().backward();
  expect_close(w.grad(), {2, 2, 2, 2}, 0, 0, "through a view");
  w.grad().add_(1.0);  // the leaf's own gradient: accumulation continues from it
  (w * 1.0).sum().backward();
  expect_close(w.grad(), {4, 4, 4, 4}, 0, 0, "accumulated");
}

TEST(Autograd, SharedSubgraphsSumTheirContributions) {
  Tensor x = tensor<double>({2.0}).requires_grad_();
  Tensor a = x * x;           // 4
  Tensor b = a * x + a;       // x^3 + x^2
  b.backward();
  expect_close(x.grad(), {3 * 4 + 2 * 2}, 1e-12, 0, "d(x^3 + x^2) at 2");
}

TEST(Autograd, RetainGraphAndReleasedGraphs) {
  Tensor x = tensor<double>({1.5}).requires_grad_();
  Tensor y = exp(x);
  y.backward({}, true);
  y.backward();
  expect_close(x.grad(), {2 * std::exp(1.5)}, 1e-12, 0, "two passes");
  expect_error([&] { y.backward(); }, {"[backward]", "second time", "retain_graph"});
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard g;
    EXPECT_FALSE(is_grad_enabled());
    EXPECT_FALSE((x * 2).requires_grad());
    EnableGradGuard e;
    EXPECT_TRUE((x * 2).requires_grad());
  }
  EXPECT_TRUE(is_grad_enabled());
  Tensor d = (x * 2).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_FALSE((ones({2}) * 2).requires_grad());
  EXPECT_FALSE(argmax(x * 2).requires_grad());  // integer outputs never require grad
  expect_error([] { ones({2}, kInt64).requires_grad_(); }, {"[requires_grad_]", "int64"});
}

TEST(Autograd, HooksSeeAndReplaceGradients) {
  Tensor x = tensor<double>({1, 2}).requires_grad_();
  Tensor seen;
  x.register_hook([&](const Tensor& g) {
    seen = g.clone();
    return g * 10;
  });
  Tensor h = x * 3;
  h.register_hook([](const Tensor& g) { return g + 1; });  // a non-leaf hook
  h.sum().backward();
  expect_close(seen, {6, 6}, 0, 0, "leaf hook sees (1 + 1) * 3");
  expect_close(x.grad(), {60, 60}, 0, 0, "leaf hook's replacement is accumulated");
}

TEST(Autograd, InPlaceOpsRebaseHistory) {
  Tensor x = tensor<double>({1, 2, 3}).requires_grad_();
  Tensor y = x * 2;
  y.mul_(y);  // y = (2x)^2
  y.add_(x);  // y = 4x^2 + x
  y.sum().backward();
  expect_close(x.grad(), {9, 17, 25}, 1e-12, 0, "d(4x^2 + x)");
  expect_error([&] { x.add_(ones({3}, kFloat64)); }, {"[add]", "leaf", "in-place"});
  {
    NoGradGuard g;
    x.add_(ones({3}, kFloat64));  // allowed without grad mode, as in PyTorch
  }
  expect_close(x, {2, 3, 4}, 0, 0, "no_grad in-place update of a leaf");
  // A view of a leaf that requires grad may not be written (PyTorch's rule too).
  expect_error([&] { x.select(0, 1).mul_(2); }, {"[mul]", "view of a leaf tensor that requires grad"});
}

// Note [Writing into views]: writes through several views of one base
// (a row, a column, a transposed block), as PyTorch's CopySlices.
TEST(Autograd, InPlaceOpsOnViewsRebaseTheirBase) {
  manual_seed(2460);
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const Tensor& y = in[1];
    Tensor b = x * 1.0;                          // a non-leaf base, 4 x 5
    b.select(0, 1).mul_(y.select(0, 0));         // a row, by a tensor that requires grad
    b.select(1, 3).add_(square(y.select(0, 1).slice(0, 0, 4)));  // a column (crossing the row)
    b.slice(0, 2, 4).slice(1, 0, 2).t().mul_(3.0);  // a transposed block
    Tensor v = b.slice(1, 1, 3);
    v.copy_(tanh(v) * y.slice(1, 0, 2).sum({0}));  // copy_ into a view, reading the view itself
    return std::vector<Tensor>{b * b};
  };
  const Tensor x = randn({4, 5}, kFloat64).requires_grad_(), y = randn({2, 5}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(fn, {x, y}));
  const Tensor b = fn({x, y})[0];
  EXPECT_EQ(b.grad_fn_name(), "mul_backward");
  // A buffer that did not require grad gets history from what is written into it.
  const Tensor w = randn({3}, kFloat64).requires_grad_();
  Tensor buf = zeros({2, 3}, kFloat64);
  buf.select(0, 1).copy_(w * 2.0);
  ASSERT_TRUE(buf.requires_grad());
  EXPECT_EQ(buf.grad_fn_name(), "CopySlices");
  (buf * buf).sum().backward();
  expect_close(w.grad(), values(w.detach() * 8.0), 1e-12, 0, "d sum((2w)^2) / dw");
}

TEST(Autograd, ModifyingASavedTensorIsAnError) {
  Tensor x = tensor<double>({1, 2}).requires_grad_();
  Tensor a = x * 1;
  Tensor y = a * a;  // saves a
  a.add_(ones({2}, kFloat64));
  expect_error([&] { y.sum().backward(); },
               {"[backward]", "modified by an inplace operation", "[float64 [2]]", "version 1", "expected version 0"});
  // Ops that save nothing are unaffected.
  Tensor b = x * 1;
  Tensor z = b + b;
  b.add_(ones({2}, kFloat64));
  z.sum().backward();
  expect_close(x.grad(), {2, 2}, 0, 0, "add saves nothing");
}

TEST(Autograd, FunctionalGradDoesNotTouchLeaves) {
  Tensor x = tensor<double>({1, 2}).requires_grad_();
  Tensor w = tensor<double>({3, 4}).requires_grad_();
  Tensor y = (x * w).sum();
  auto g = autograd::grad({y}, {x}, {}, true);
  expect_close(g[0], {3, 4}, 0, 0, "dy/dx");
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  Tensor unused = ones({1}, kFloat64).requires_grad_();
  expect_error([&] { autograd::grad({y}, {unused}, {}, true); }, {"[grad]", "allow_unused"});
  EXPECT_FALSE(autograd::grad({y}, {unused}, {}, true, true)[0].defined());
}

TEST(Autograd, MixedDTypesAndBroadcastGradientsHaveInputShapes) {
  Tensor w = randn({4}, kFloat64).requires_grad_();
  Tensor x = randn({3, 4});  // float32, no grad
  Tensor y = (x * w).sum();  // promoted to float64
  y.backward();
  EXPECT_EQ(w.grad().sizes(), Shape({4}));
  EXPECT_EQ(w.grad().dtype(), kFloat64);
  expect_close(w.grad(), values(sum(x.to(kFloat64), {0})), 1e-12, 1e-12, "broadcast gradient summed");
  Tensor f = randn({2, 3}).requires_grad_();
  (f.to(kFloat64) * 2).sum().backward();
  EXPECT_EQ(f.grad().dtype(), kFloat32);
}

TEST(Autograd, BackwardErrors) {
  Tensor x = ones({2}).requires_grad_();
  expect_error([&] { (x * 2).backward(); }, {"[backward]", "one element", "[2]"});
  expect_error([&] { ones({1}).backward(); }, {"[backward]", "does not require grad"});
  expect_error([&] { (x * 2).backward(ones({3})); }, {"[backward]", "[3]", "[2]"});
  expect_error([&] { x.as_strided({1}, {1}) * 1; }, {"[as_strided]", "no backward formula"});
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

TEST(Autograd, EveryOpHasABackwardEntry) {
  // as_strided views arbitrary memory; its gradient is not defined yet.
  for (const OpDef* op : all_ops()) {
    const char* name = op->name.c_str();
    if (op->name == "as_strided") continue;
    EXPECT_TRUE(op->backward != nullptr) << "no backward entry for " << name;
  }
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

TEST(Autograd, CreateGraphGivesGradientsWithHistory) {
  manual_seed(2440);
  const Tensor x = randn({5}, kFloat64).requires_grad_(), v = randn({5}, kFloat64);
  // f = sum(x^3 * exp(x)): a Hessian-vector product through create_graph.
  const Tensor f = (x * x * x * exp(x)).sum();
  const Tensor g = autograd::grad({f}, {x}, {}, false, false, /*create_graph=*/true)[0];
  ASSERT_TRUE(g.requires_grad());
  const Tensor hv = autograd::grad({(g * v).sum()}, {x})[0];
  const auto xs = values(x), vs = values(v);
  std::vector<double> want;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double a = xs[i];
    want.push_back((6 * a + 6 * a * a + a * a * a) * std::exp(a) * vs[i]);  // (x^3 e^x)'' v
  }
  expect_close(hv, want, 1e-10, 1e-12, "Hessian-vector product");
  // A gradient penalty: backward(create_graph) leaves .grad with history.
  const Tensor w = randn({3}, kFloat64).requires_grad_();
  (square(w) * w).sum().backward({}, false, /*create_graph=*/true);
  ASSERT_TRUE(w.grad().requires_grad());
  const Tensor penalty = square(w.grad()).sum();  // sum (3 w^2)^2
  const Tensor pg = autograd::grad({penalty}, {w})[0];
  const auto ws = values(w.detach());
  std::vector<double> want_pg;
  for (double a : ws) want_pg.push_back(36 * a * a * a);
  expect_close(pg, want_pg, 1e-10, 1e-12, "gradient penalty");
}

// Note [Saved values the formula does not read]: as in PyTorch, writing in
// place to an operand only the other operand's gradient would read is fine
// when that gradient is not needed; when it is, the write is an error.
TEST(Autograd, AWriteToASavedOperandOnlyAnUnneededGradientReadsIsFine) {
  manual_seed(2442);
  const Tensor x = randn({3, 4}, kFloat64).requires_grad_(), w = randn({4, 2}, kFloat64);
  for (const bool matmul_op : {true, false}) {
    Tensor a = x * 1.0;  // a non-leaf that requires grad
    const Tensor y = matmul_op ? matmul(a, w) : a * w.sum();
    {
      NoGradGuard g;
      a.mul_(2.0);  // y's gradient for a needs w only
    }
    y.sum().backward();
    const Tensor want = matmul_op ? matmul(ones({3, 2}, kFloat64), w.t()) : full({3, 4}, w.sum().item<double>(), kFloat64);
    expect_close(x.grad(), values(want), 1e-12, 1e-12, matmul_op ? "a @ w" : "a * s");
    x.set_grad(Tensor());
  }
  // The other way round the written operand is read: an error naming it.
  const Tensor v = randn({4, 2}, kFloat64).requires_grad_();
  Tensor b = x.detach() * 1.0;
  const Tensor y = matmul(b, v);
  b.mul_(2.0);
  expect_error([&] { y.sum().backward(); }, {"[backward]", "modified by an inplace operation", "matmul"});
}

// Note [Backwards that run outside autograd]: a record_function backward
// (here a kernel's) under create_graph gives the right first-order gradient,
// and a second backward through it raises instead of treating the gradient
// as a constant (a gradient penalty silently without its second-order part).
TEST(Autograd, SecondBackwardThroughABackwardOutsideAutogradRaises) {
  manual_seed(2441);
  const Tensor x = randn({4}, kFloat64).requires_grad_();
  auto cube = [](const Tensor& t) {
    const Tensor y = (t.detach() * t.detach() * t.detach()).clone();
    autograd::record_function("cube", {t}, {y}, [saved = t.detach()](const std::vector<Tensor>& g) {
      NoGradGuard no_grad;  // as a kernel would
      return std::vector<Tensor>{g[0] * 3.0 * saved * saved};
    });
    return y;
  };
  const Tensor g = autograd::grad({cube(x).sum()}, {x}, {}, false, false, /*create_graph=*/true)[0];
  ASSERT_TRUE(g.requires_grad());
  expect_close(g, values(x.detach() * x.detach() * 3.0), 1e-12, 1e-12, "first order");
  expect_error([&] { autograd::grad({g.sum()}, {x}); }, {"[backward]", "'cube'", "outside autograd", "create_graph"});
  expect_error([&] { (square(g).sum() + x.sum()).backward(); }, {"[backward]", "'cube'"});
  // Without create_graph nothing changes.
  const Tensor g1 = autograd::grad({cube(x).sum()}, {x})[0];
  EXPECT_FALSE(g1.requires_grad());
}

}  // namespace
}  // namespace kiln::test
