// Compiled results equal eager ones: each case here is a program on which
// kiln::compile once gave another value, gradient, requires_grad or error
// than eager, reduced to its core (issue #24). Every case runs on both
// backends.
#include "compile/compile_util.h"
#include "kiln/autograd.h"
#include "kiln/kiln.h"

namespace kiln::test {
namespace {

const char* const kBackends[] = {"cpp", "interpreter"};

TEST_F(Compile, RowSumsBroadcastAlongTheLastDimAreReadPerColumn) {
  manual_seed(2401);
  const Tensor b = randn({8});
  auto row_sum_broadcast = [](const Tensor& x) { return (x + x.sum({-1})) * 2.0; };
  // A norm's weight computed as a row sum of a square tensor.
  auto norm_weight = [&](const Tensor& s) { return gelu(layer_norm(s + 1.0, {8}, s.sum({-1}), b)); };
  for (const char* be : kBackends) {
    auto f = compile(row_sum_broadcast, backend(be));
    auto g = compile(norm_weight, backend(be));
    const Tensor x = randn({4, 4}), s = randn({8, 8});
    expect_same(f(x), row_sum_broadcast(x), std::string(be) + " (x + x.sum(-1)) * 2");
    expect_same(g(s), norm_weight(s), std::string(be) + " layer_norm weight from a row sum", 1e-4);
  }
}

TEST_F(Compile, AnInPlaceUpdateWaitsForEarlierReadsOfItsDestination) {
  manual_seed(2402);
  auto fn = [](const Tensor& x, const Tensor& w) {
    NoGradGuard g;
    Tensor m = maximum(x * 2.0 + 1.0, w);
    w.mul_(3.0);
    return m;
  };
  for (const char* be : kBackends) {
    const Tensor x = randn({16, 8}), w = randn({16, 8});
    const Tensor w_eager = w.clone(), w_compiled = w.clone();
    auto f = compile(fn, backend(be));
    expect_same(f(x, w_compiled), fn(x, w_eager), std::string(be) + " maximum read before the write");
    expect_same(w_compiled, w_eager, std::string(be) + " the written destination");
  }
}

TEST_F(Compile, DynamicPlansDistinguishBroadcastDims) {
  manual_seed(2403);
  auto fn = [](const Tensor& a, const Tensor& b) { return (a * 2.0 + b) * 3.0; };
  for (const char* be : kBackends) {
    CompileOptions o = backend(be);
    o.dynamic = true;
    auto f = compile(fn, o);
    const Tensor a = randn({4, 4});
    for (Shape bs : {Shape{4, 1}, Shape{1, 4}, Shape{4, 4}, Shape{1, 1}}) {
      const Tensor b = randn(bs);
      expect_same(f(a, b), fn(a, b), std::string(be) + " b of shape " + shape_str(bs));
    }
  }
}

TEST_F(Compile, GradientsOfBroadcastOperandsAreSummedToTheirShape) {
  manual_seed(2404);
  auto fn = [](const Tensor& b, const Tensor& a) { return b - a; };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    for (int call = 0; call < 2; ++call) {
      const Tensor a = randn({2, 1}).requires_grad_(), b = randn({1}).requires_grad_();
      const Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
      const Tensor g = randn({2, 1});
      f(b, a).backward(g);
      fn(b2, a2).backward(g);
      expect_same(b.grad(), b2.grad(), std::string(be) + " grad of b");
      expect_same(a.grad(), a2.grad(), std::string(be) + " grad of a");
    }
  }
}

TEST_F(Compile, AFoldedGemmBiasIsStoredForItsOtherReaders) {
  manual_seed(2405);
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    const Tensor bb = b * 2.0;
    return relu(matmul(x, w) + bb) + (bb + 1.0);
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor x = randn({3, 5}), w = randn({5, 4}), b = randn({4});
    expect_same(f(x, w, b), fn(x, w, b), std::string(be) + " relu(x @ w + bb) + (bb + 1)");
  }
}

TEST_F(Compile, DetachStopsTheCompiledGradient) {
  manual_seed(2406);
  auto fn = [](const Tensor& x) {
    const Tensor h = x * 3.0;
    return (h * h.detach()).sum();
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor x = randn({5, 3}).requires_grad_(), x2 = x.detach().clone().requires_grad_();
    f(x).backward();
    fn(x2).backward();
    expect_same(x.grad(), x2.grad(), std::string(be) + " h * h.detach()");
    expect_same(x.grad(), x2 * 9.0, std::string(be) + " 9x");
  }
}

TEST_F(Compile, ALeafUpdatedUnderNoGradStillRequiresGrad) {
  manual_seed(2407);
  auto fn = [](const Tensor& a, const Tensor& d) {
    {
      NoGradGuard g;
      a.add_(d);
    }
    return (a * a).sum();
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor d = randn({6});
    const Tensor a = randn({6}).requires_grad_(), a2 = a.detach().clone().requires_grad_();
    const Tensor got = f(a, d), want = fn(a2, d);
    ASSERT_TRUE(got.requires_grad()) << be;
    expect_same(got, want, std::string(be) + " value");
    got.backward();
    want.backward();
    expect_same(a.grad(), a2.grad(), std::string(be) + " grad");
  }
}

TEST_F(Compile, AnOutputWithoutGradientRunsNoFormula) {
  auto fn = [](const Tensor& x) { return std::vector<Tensor>{x * 2.0, log(x)}; };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor x = zeros({3}).requires_grad_();
    f(x)[0].sum().backward();
    expect_same(x.grad(), full({3}, 2.0), std::string(be) + " d(2x)/dx at 0, log(x) unused");
    // Both outputs' gradients flow: the full backward, as eager.
    const Tensor y = full({3}, 0.5).requires_grad_(), y2 = y.detach().clone().requires_grad_();
    auto outs = f(y), eager = fn(y2);
    (outs[0].sum() + outs[1].sum()).backward();
    (eager[0].sum() + eager[1].sum()).backward();
    expect_same(y.grad(), y2.grad(), std::string(be) + " both outputs");
    // Only the second output's gradient flows.
    const Tensor z = full({3}, 0.25).requires_grad_();
    f(z)[1].sum().backward();
    expect_same(z.grad(), full({3}, 4.0), std::string(be) + " d(log x)/dx alone");
  }
}

TEST_F(Compile, ASavedValueModifiedInPlaceOnlyConcernsItsOwnGradient) {
  manual_seed(2409);
  auto fn = [](const Tensor& y) {
    const Tensor out = y * 2.0;
    const Tensor t = tanh(y);
    {
      NoGradGuard g;
      t.mul_(2.0);
    }
    return std::vector<Tensor>{out, t};
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor y = randn({4}).requires_grad_(), y2 = y.detach().clone().requires_grad_();
    auto outs = f(y), eager = fn(y2);
    expect_same(outs[1], eager[1], std::string(be) + " t");
    outs[0].sum().backward();
    eager[0].sum().backward();
    expect_same(y.grad(), y2.grad(), std::string(be) + " unrelated output's gradient");
    // Through t, eager raises: so does the compiled backward.
    auto again = f(y);
    EXPECT_THROW(again[1].sum().backward(), Error) << be;
    EXPECT_THROW(fn(y2)[1].sum().backward(), Error) << be;
  }
}

TEST_F(Compile, AnInputOnlyDeadCodeReadsGetsNoGradient) {
  manual_seed(2410);
  auto fn = [](const Tensor& x, const Tensor& y) {
    const Tensor unused = x * 2.0;
    (void)unused;
    return (y * 3.0).sum();
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor x = randn({3}).requires_grad_(), y = randn({3}).requires_grad_();
    f(x, y).backward();
    EXPECT_FALSE(x.grad().defined()) << be;
    expect_same(y.grad(), full({3}, 3.0), std::string(be) + " grad of y");
    const auto grads = autograd::grad({f(x, y)}, {x, y}, {}, false, /*allow_unused=*/true);
    EXPECT_FALSE(grads[0].defined()) << be;
    EXPECT_THROW(autograd::grad({f(x, y)}, {x, y}), Error) << be;
  }
}

TEST_F(Compile, GeneratedLoopsRoundLikeEager) {
  // a * b = 4e38 overflows float32; an FMA would keep a * b + c finite.
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c) { return a * b + c; };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor a = full({64}, 2e19), c = full({64}, -1e38);
    expect_same(f(a, a, c), fn(a, a, c), std::string(be) + " a * b + c");
    EXPECT_TRUE(std::isinf(f(a, a, c)[0].item<float>())) << be;
  }
  // Eager rounds a * alpha and a layer_norm's x_hat * w before adding too
  // (the compiler contracted them into FMAs in eager kernels; differential
  // seeds 21958 and 20465): 3 * -3e38 is -inf, x_hat * -3e38 overflows.
  auto alpha_add = [](const Tensor& x, const Tensor& y) { return add(x, y, 3.0) * 2.0; };
  auto affine = [](const Tensor& x, const Tensor& w) { return tanh(layer_norm(silu(x), {8}, w, w)) + 1.0; };
  for (const char* be : kBackends) {
    auto f = compile(alpha_add, backend(be));
    auto g = compile(affine, backend(be));
    const Tensor x = full({37}, INFINITY), y = full({37}, -3e38);
    EXPECT_TRUE(std::isnan(alpha_add(x, y)[36].item<float>()));  // inf + -inf, the SIMD body and the tail alike
    expect_same(f(x, y), alpha_add(x, y), std::string(be) + " add(x, y, alpha=3)");
    manual_seed(2413);
    const Tensor w = tensor<float>({-3e38f, -3e38f, -3e38f, -3e38f, 1, 1, 1, 1});
    const Tensor rows = randn({5, 8});
    expect_same(g(rows, w), affine(rows, w), std::string(be) + " layer_norm with a weight near -FLT_MAX");
  }
}

// CSE must not merge a computed value the program gets with another one:
// eager gives each its own tensor, so an in-place write to the output after
// the call reached the other's saved copy (differential seed 14970).
TEST_F(Compile, OutputsAreNotMergedWithValuesAGradientSaved) {
  manual_seed(2414);
  auto fn = [](const Tensor& x) { return std::vector<Tensor>{x.sum(), x.sum() * x}; };
  for (const char* be : kBackends) {
    for (const bool dynamic : {false, true}) {
      CompileOptions o = backend(be);
      o.dynamic = dynamic;
      auto f = compile(fn, o);
      const Tensor x = randn({7}).requires_grad_(), x2 = x.detach().clone().requires_grad_();
      auto got = f(x), want = fn(x2);
      got[0].mul_(3.0);
      want[0].mul_(3.0);
      ASSERT_NO_THROW(got[1].sum().backward()) << be;
      want[1].sum().backward();
      expect_same(x.grad(), x2.grad(), std::string(be) + " gradient after the output was written");
    }
  }
}

// Two equal computations a gradient flows through stay two (tester seed
// 59064): merged, the backward of square(x) takes g1 + g2 once, 2x (0 + 1) =
// inf at x = inf, where eager's 2x * 0 + 2x * 1 is NaN.
TEST_F(Compile, ComputationsAGradientFlowsThroughAreNotMerged) {
  auto fn = [](const Tensor& x) { return (square(x) * 0.0).sum() + square(x).sum(); };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor x = tensor(std::vector<float>{INFINITY, 2.0f, -3.0f}).requires_grad_();
    const Tensor x2 = x.detach().clone().requires_grad_();
    f(x).backward();
    fn(x2).backward();
    expect_same(x.grad(), x2.grad(), std::string(be) + " gradient of two squares at inf");
  }
}

// Note [A layer_norm's mean]: a constant row normalises to exactly 0 in the
// generated loops as in eager, for odd lengths too, whether the loop reads
// the row from memory (a head) or computes it (a row max broadcast, seed 52198).
TEST_F(Compile, LayerNormOfAConstantRowIsZeroInLoopsAsInEager) {
  manual_seed(2416);
  auto computed = [](const Tensor& x) { return layer_norm(maximum(amax(x, {-1}, true), x), {x.size(-1)}) * 3.0; };
  auto from_memory = [](const Tensor& x) { return layer_norm(x, {x.size(-1)}) * 3.0 + 1.0; };
  const int64_t loops = compiler::detail::fused_loop_runs();
  for (const int64_t n : {7, 16, 33, 129, 1000}) {
    const Tensor x = randn({5, n}) * 1e3;
    const Tensor rows = amax(x, {-1}, true).expand({5, n}).contiguous();
    const std::vector<double> a = values(compile(computed)(x)), b = values(compile(from_memory)(rows));
    const std::vector<double> ea = values(computed(x)), eb = values(from_memory(rows));
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(ea[i], 0.0) << "eager, n = " << n;
      ASSERT_EQ(a[i], 0.0) << "computed row, n = " << n;
      ASSERT_EQ(eb[i], 1.0) << "eager, n = " << n;
      ASSERT_EQ(b[i], 1.0) << "row from memory, n = " << n;
    }
  }
  EXPECT_GE(compiler::detail::fused_loop_runs() - loops, 10);  // each ran a generated loop
}

// Note [Sizes in attributes]: sequence lengths through reshapes whose
// attributes carry B * T compile twice (the second compile makes T dynamic
// and fits the attributes as functions of it), then every length hits.
TEST_F(Compile, SizesInAttributesFollowADynamicDim) {
  manual_seed(2415);
  const Tensor w = randn({8, 16}), b = randn({16});
  auto fn = [&](const Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1);
    const Tensor h = gelu(matmul(x.reshape({B * T, 8}), w) + b);
    return h.reshape({B, T, 16}).sum({1}) / static_cast<double>(16);  // a constant, not T
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    for (int64_t t : {5, 7, 9, 6, 7, 12}) {
      const Tensor x = randn({4, t, 8});
      expect_same(f(x), fn(x), std::string(be) + " T = " + std::to_string(t), 1e-4);
    }
    EXPECT_EQ(f.recompiles(), 1) << be;
  }
  // A size the program bakes into a value (arange(T)) is folded to a
  // constant of one size: that plan stays for its own size only.
  auto positions = [](const Tensor& x) { return x + arange(0, static_cast<double>(x.size(1))).to(kFloat32); };
  auto g = compile(positions);
  for (int64_t t : {5, 7, 9, 6}) {
    const Tensor x = randn({3, t});
    expect_same(g(x), positions(x), "x + arange(T), T = " + std::to_string(t));
  }
  // Where the new length equals a constant size (T = 8 = x's last dim) the
  // passes may have relied on it: no symbolic entry is made, and the results
  // stay right at every length.
  auto h = compile(fn);
  for (int64_t t : {5, 8, 9, 6}) {
    const Tensor x = randn({2, t, 8});
    expect_same(h(x), fn(x), "T = " + std::to_string(t) + " after T = 8", 1e-4);
  }
}

// create_graph through a compiled function: the first-order gradient is
// eager's, and a second backward through the compiled graph raises (PyTorch:
// "torch.compile with aot_autograd does not currently support double
// backward") instead of dropping the second-order terms.
TEST_F(Compile, DoubleBackwardThroughACompiledGraphRaises) {
  auto fn = [](const Tensor& x) { return (x * x * x).sum(); };
  auto f = compile(fn);
  for (int call = 0; call < 2; ++call) {
    const Tensor x = randn({4}).requires_grad_();
    const Tensor g = autograd::grad({f(x)}, {x}, {}, false, false, /*create_graph=*/true)[0];
    ASSERT_TRUE(g.requires_grad());
    expect_same(g, x.detach() * x.detach() * 3.0, "first order", 1e-5);
    expect_error([&] { autograd::grad({g.sum()}, {x}); }, {"[backward]", "compiled_graph", "create_graph"});
  }
}

TEST_F(Compile, RecompileReasonsNameTheFailedGuard) {
  auto fn = [](const Tensor& x, const Tensor& y) { return x * 2.0 + y; };
  auto f = compile(fn);
  f(randn({4, 8}), randn({8}));
  compiler::set_stance("fail_on_recompile");
  expect_error([&] { f(randn({4, 16}), randn({16})); },
               {"[compile]", "fail_on_recompile", "size mismatch at index 1 of input 0", "expected 8, actual 16"});
  expect_error([&] { f(randn({4, 8}), randn({8}, kFloat64)); }, {"dtype mismatch", "input 2", "expected float32, actual float64"});
  expect_error([&] { f(randn({4, 8}), randn({8}).requires_grad_()); }, {"requires_grad mismatch", "input 2", "expected false, actual true"});
  expect_error([&] { f(randn({8, 4}).t(), randn({8})); }, {"stride mismatch at index 0 of input 0"});
  // The graph already compiled still runs.
  const Tensor x = randn({4, 8}), y = randn({8});
  expect_same(f(x, y), fn(x, y), "cached graph under fail_on_recompile");
  // eager_on_recompile: new shapes run eagerly, nothing is compiled or cached.
  compiler::set_stance("eager_on_recompile");
  const Tensor x2 = randn({3, 5}), y2 = randn({5});
  expect_same(f(x2, y2), fn(x2, y2), "eager on recompile");
  EXPECT_EQ(f.cache_entries(), 1);
  EXPECT_EQ(f.recompiles(), 0);
  compiler::set_stance("default");
  f(x2, y2);
  EXPECT_EQ(f.cache_entries(), 2);
  EXPECT_EQ(f.recompiles(), 1);
}

TEST_F(Compile, UnknownModesAndStancesAreRefusedByName) {
  CompileOptions o;
  o.mode = "max-autotune";
  expect_error([&] { compile([](const Tensor& t) { return t; }, o); }, {"[compile]", "mode 'max-autotune'", "CPU"});
  o.mode = "fastest";
  expect_error([&] { compile([](const Tensor& t) { return t; }, o); }, {"[compile]", "mode 'fastest'", "\"default\""});
  expect_error([] { compiler::set_stance("eager_on_recompiles"); },
               {"[compiler::set_stance]", "'eager_on_recompiles'", "fail_on_recompile"});
}

TEST_F(Compile, EachDistinctBreakIsLoggedOnceWithAnExplanation) {
  setenv("KILN_LOGS", "graph_breaks", 1);
  auto f = compile([](const Tensor& x) {
    const Tensor y = x * 2.0;
    compiler::graph_break();
    return y + 1.0;
  });
  testing::internal::CaptureStderr();
  for (int call = 0; call < 3; ++call) f(randn({4}));
  const std::string err = testing::internal::GetCapturedStderr();
  unsetenv("KILN_LOGS");
  EXPECT_NE(err.find("graph break: compiler::graph_break() at "), std::string::npos) << err;
  EXPECT_EQ(err.find("[kiln.compile] graph break"), err.rfind("[kiln.compile] graph break")) << err;  // once, not per call
  EXPECT_NE(err.find("explanation: an explicit graph break"), std::string::npos) << err;
  EXPECT_NE(err.find("hint: "), std::string::npos) << err;
}

TEST_F(Compile, AnInlinedCompileKeepsItsFullgraph) {
  const CompileOptions full = fullgraph();
  auto inner = compile(
      [](const Tensor& x) {
        const Tensor y = x * 2.0;
        compiler::graph_break();
        return y + 1.0;
      },
      full);
  auto outer = compile([&](const Tensor& x) { return inner(x) * 3.0; });  // fullgraph=false
  expect_error([&] { outer(randn({4})); }, {"[compile] graph break", "fullgraph=true"});
  // A fullgraph=false compile inside a fullgraph=true one: the outer's fullgraph holds.
  auto loose = compile([](const Tensor& x) {
    compiler::graph_break();
    return x + 1.0;
  });
  auto strict = compile([&](const Tensor& x) { return loose(x) * 2.0; }, full);
  EXPECT_THROW(strict(randn({4})), GraphBreakError);
  // And after the errors, the outer one compiles normally again.
  auto plain = compile([](const Tensor& x) { return x * 2.0; });
  const Tensor x = randn({4});
  expect_same(plain(x), x * 2.0, "after");
}

// Trains two copies of a model for 20 steps, one eagerly and one with the
// whole step (forward, backward, AdamW, zero_grad) compiled under
// fullgraph, in float64: the parameters must stay equal.
template <class Model, class Batch>
void expect_whole_step_matches(Model& eager_model, Model& compiled_model, Batch&& batch, const std::string& what) {
  eager_model.to(kFloat64), compiled_model.to(kFloat64);
  compiled_model.load_state_dict(eager_model.state_dict());
  optim::AdamWOptions o;
  o.lr = 3e-3, o.weight_decay = 0.01;
  optim::AdamW eager_opt(eager_model.parameters(), o), compiled_opt(compiled_model.parameters(), o);
  auto step = [](auto& model, auto& opt, const Tensor& x, const Tensor& y) {
    Tensor loss = nn::cross_entropy(model.forward(x).flatten(0, -2), y.flatten());
    loss.backward();
    opt.step();
    opt.zero_grad();
    return loss;
  };
  const CompileOptions full = fullgraph();
  auto compiled = compile([&](const Tensor& x, const Tensor& y) { return step(compiled_model, compiled_opt, x, y); }, full);
  for (int s = 0; s < 20; ++s) {
    const auto [x, y] = batch();
    const Tensor le = step(eager_model, eager_opt, x, y);
    const Tensor lc = compiled(x, y);
    expect_same(lc, le, what + " loss at step " + std::to_string(s), 1e-10);
  }
  const auto pe = eager_model.named_parameters(), pc = compiled_model.named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    expect_same(pc[i].second, pe[i].second, what + " " + pe[i].first + " after 20 steps", 1e-10);
    EXPECT_FALSE(pc[i].second.grad().defined()) << what << " zero_grad inside the step";
  }
  EXPECT_EQ(compiled.recompiles(), 1) << what;  // the first step creates AdamW's state: another graph
  const compiler::ExplainOutput e = compiler::explain([&](const Tensor& x, const Tensor& y) { return step(compiled_model, compiled_opt, x, y); },
                                                       batch().first, batch().second);
  EXPECT_EQ(e.graph_count, 1) << what << "\n" << e.to_string();
  EXPECT_EQ(e.graph_break_count, 0) << what << "\n" << e.to_string();
}

struct Mlp : nn::Module {
  nn::Linear fc1{12, 32}, fc2{32, 5};
  Mlp() { register_module("fc1", &fc1), register_module("fc2", &fc2); }
  Tensor forward(const Tensor& x) { return fc2(gelu(fc1(x), "tanh")); }
};

TEST_F(Compile, AWholeTrainingStepCompilesAndTrainsAsEager) {
  manual_seed(2430);
  Mlp me, mc;
  expect_whole_step_matches(me, mc, [] { return std::make_pair(randn({8, 12}, kFloat64), randint(0, 5, {8})); }, "mlp");
  nn::GPTConfig c;
  c.vocab_size = 17, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  nn::GPT ge(c), gc(c);
  expect_whole_step_matches(ge, gc, [] { return std::make_pair(randint(0, 17, {2, 8}), randint(0, 17, {2, 8})); }, "gpt");
}

TEST_F(Compile, BackwardInsideACompiledFunctionAccumulatesLikeEager) {
  manual_seed(2431);
  auto fn = [](const Tensor& x, const Tensor& w) {
    const Tensor loss = (tanh(x * w) * w).sum();
    loss.backward();
    return w.grad() * 2.0;  // read back inside the same graph
  };
  for (const char* be : kBackends) {
    auto f = compile(fn, backend(be));
    const Tensor x = randn({5, 3});
    const Tensor w = randn({3}).requires_grad_(), w2 = w.detach().clone().requires_grad_();
    w.set_grad(ones({3})), w2.set_grad(ones({3}));  // accumulates into an existing .grad
    expect_same(f(x, w), fn(x, w2), std::string(be) + " 2 * w.grad");
    expect_same(w.grad(), w2.grad(), std::string(be) + " w.grad");
    // A root that does not require grad raises as in eager.
    auto g = compile([](const Tensor& x) { (x * 2.0).sum().backward(); return x; });
    expect_error([&] { g(randn({3})); }, {"[backward]", "does not require grad"});
  }
}

TEST_F(Compile, BreaksInsideInPlaceOpsNameTheUsersLine) {
  const CompileOptions full = fullgraph();
  int line = 0;
  auto f = compile(
      [&](const Tensor& x) {
        Tensor y = x * 2.0;
        line = __LINE__ + 1;
        y.add_(1.0);  // an in-place op on a traced tensor under grad mode: a break
        return y;
      },
      full);
  try {
    f(randn({3}).requires_grad_());
    ADD_FAILURE() << "fullgraph must raise";
  } catch (const GraphBreakError& e) {
    EXPECT_EQ(e.location, std::string(__FILE__) + ":" + std::to_string(line)) << e.what();
    EXPECT_NE(std::string(e.what()).find("Hint: "), std::string::npos) << e.what();
  }
}

TEST_F(Compile, ExplainGivesEachGraphsOpsGuardsAndCompileTime) {
  const compiler::ExplainOutput e = compiler::explain(
      [](const Tensor& x) {
        const Tensor y = relu(x) * 2.0;
        compiler::graph_break();
        return exp(y);
      },
      randn({4, 8}));
  ASSERT_EQ(e.graph_count, 2) << e.to_string();
  ASSERT_EQ(e.graphs.size(), 2u);
  EXPECT_EQ(e.graphs[0].ops, (std::vector<std::string>{"relu", "mul"}));
  EXPECT_EQ(e.graphs[1].ops, (std::vector<std::string>{"exp"}));
  ASSERT_FALSE(e.graphs[0].guards.empty());
  EXPECT_EQ(e.graphs[0].guards[0], "input 0: float32 [4, 8] requires_grad=false");
  EXPECT_GT(e.graphs[0].compile_seconds, 0);
  ASSERT_EQ(e.breaks.size(), 1u);
  EXPECT_EQ(e.breaks[0].explanation, "an explicit graph break");
  EXPECT_NE(e.to_string().find("ops: relu mul"), std::string::npos) << e.to_string();
}

// The toolbox's newer ops inside compiled programs: LAPACK decompositions,
// ctc_loss, the recurrent and attention layers: values and gradients as eager.
TEST_F(Compile, LinalgCtcAndRecurrentLayersGiveEagerValuesAndGradients) {
  manual_seed(2460);
  auto solver = [](const Tensor& a, const Tensor& b) {
    const Tensor A = matmul(a, a.transpose(-1, -2)) + 3.0 * eye(4);
    const auto [Q, R] = linalg::qr(a);
    return linalg::solve(A, b).sum() + linalg::det(A).log().sum() + linalg::cholesky(A).sum() + R.abs().sum() +
           linalg::svdvals(a).sum();
  };
  const Tensor lengths = tensor<int64_t>({6, 5}), target_lengths = tensor<int64_t>({2, 3});
  const Tensor targets = tensor<int64_t>({1, 2, 0, 3, 1, 2}).reshape({2, 3});
  auto ctc = [&](const Tensor& logits) { return nn::ctc_loss(log_softmax(logits, 2), targets, lengths, target_lengths); };
  nn::LSTM lstm(3, 4);
  nn::MultiheadAttention mha(4, 2);
  auto layers = [&](const Tensor& x) {
    const Tensor h = std::get<0>(lstm.forward(x));
    return square(std::get<0>(mha.forward(h, h, h, {}, false))).mean();
  };
  for (const char* be : kBackends) {
    const Tensor a = randn({2, 4, 4}).requires_grad_(), b = randn({2, 4, 3});
    const Tensor eager = solver(a, b);
    eager.backward();
    const Tensor eager_grad = a.grad().clone();
    a.set_grad({});
    const Tensor compiled = compile(solver, backend(be))(a, b);
    compiled.backward();
    expect_same(compiled, eager, std::string(be) + " linalg", 1e-4);
    expect_same(a.grad(), eager_grad, std::string(be) + " linalg gradient", 1e-3);
    const Tensor logits = randn({6, 2, 4}).requires_grad_();
    const Tensor e = ctc(logits);
    e.backward();
    const Tensor ctc_grad = logits.grad().clone();
    logits.set_grad({});
    const Tensor c = compile(ctc, backend(be))(logits);
    c.backward();
    expect_same(c, e, std::string(be) + " ctc_loss", 1e-5);
    expect_same(logits.grad(), ctc_grad, std::string(be) + " ctc_loss gradient", 1e-5);
    const Tensor x = randn({5, 2, 3});
    expect_same(compile(layers, backend(be))(x), layers(x), std::string(be) + " LSTM + MultiheadAttention", 1e-5);
  }
}

}  // namespace
}  // namespace kiln::test
