// kiln::compile: compiled results equal eager ones (values and gradients),
// graph breaks resume or raise as asked, and graphs are cached and guarded.
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"

#include "compile/compile_util.h"
#include "compile/graph.h"

namespace kiln::test {
namespace {

TEST_F(Compile, ElementwiseChainMatchesEagerOnBothBackends) {
  manual_seed(60);
  auto fn = [](const Tensor& x, const Tensor& y) {
    Tensor t = x * y + 1.5;
    t = relu(t) - x / 3.0;
    return sigmoid(t) * tanh(y) + exp(-square(x));
  };
  for (const char* b : {"cpp", "interpreter"}) {
    auto f = compile(fn, backend(b));
    const int64_t runs = compiler::detail::compiler_runs();
    testing::internal::CaptureStderr();
    for (int call = 0; call < 2; ++call) {
      const Tensor x = randn({37, 129}), y = randn({37, 129});
      expect_same(f(x, y), fn(x, y), std::string(b) + " call " + std::to_string(call));
    }
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << b;  // no fallback warning
    EXPECT_EQ(compiler::detail::compiler_runs() - runs, std::string(b) == "cpp" ? 1 : 0) << b;
    EXPECT_EQ(f.cache_entries(), 1) << b;
    EXPECT_EQ(f.recompiles(), 0) << b;
  }
  // A changing C++ number is an input, not a constant: no recompile.
  auto scaled = compile([](const Tensor& x, double s) { return x * s + s; });
  for (double s : {0.5, 2.0, -3.0}) {
    const Tensor x = randn({10});
    expect_same(scaled(x, s), x * s + s, "scalar " + std::to_string(s));
  }
  EXPECT_EQ(scaled.recompiles(), 0);
  // Non-contiguous, broadcast and zero-size inputs take the op-by-op path where the loop does not fit.
  auto f = compile(fn);
  const Tensor xt = randn({20, 30}).t(), yb = randn({30, 1});
  expect_same(f(xt, yb), fn(xt, yb), "transposed and broadcast");
  expect_same(f(randn({0, 4}), randn({0, 4})), fn(randn({0, 4}), randn({0, 4})), "zero-size");
}

TEST_F(Compile, NormsFuseIntoTheLoopsThatConsumeThem) {
  manual_seed(66);
  const Tensor w = randn({48}), b = randn({48});
  auto ln_block = [&](const Tensor& x) { return x + gelu(layer_norm(x, {48}, w, b), "tanh"); };
  auto rms_block = [&](const Tensor& x) { return silu(rms_norm(x, {48}, w)) * 2.0; };
  auto plain_ln = [&](const Tensor& x) { return relu(layer_norm(x, {48})) - x; };
  auto f = compile(ln_block);
  auto g = compile(rms_block);
  auto h = compile(plain_ln);
  testing::internal::CaptureStderr();
  for (int64_t rows : {1, 7, 300}) {
    const Tensor x = randn({rows, 48});
    expect_same(f(x), ln_block(x), "layer_norm rows " + std::to_string(rows));
    expect_same(g(x), rms_block(x), "rms_norm rows " + std::to_string(rows));
    expect_same(h(x), plain_ln(x), "layer_norm without affine rows " + std::to_string(rows));
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // The normalised tensor itself kept alive: the loop writes it too.
  auto both = compile([&](const Tensor& x) {
    Tensor n = layer_norm(x, {48}, w, b);
    return std::vector<Tensor>{n, exp(n) + 1.0};
  });
  const Tensor x = randn({5, 48});
  auto r = both(x);
  expect_same(r[0], layer_norm(x, {48}, w, b), "normalised");
  expect_same(r[1], exp(layer_norm(x, {48}, w, b)) + 1.0, "consumer");
}

// A norm after other work of the loop (the residual add before the next
// block's layer_norm): its row statistics are sums in the loop's passes, so
// the add, the norm and what follows run as one loop that writes both the
// sum and the normalised rows; equal to eager for layer_norm with and
// without affine parameters and rms_norm.
TEST_F(Compile, NormsLaterInALoopTakeTheirStatisticsInItsPasses) {
  manual_seed(69);
  const Tensor w = randn({40}), b = randn({40});
  auto residual_ln = [&](const Tensor& x, const Tensor& y) {
    const Tensor sum = x + y * 0.5;
    return std::vector<Tensor>{sum, layer_norm(sum, {40}, w, b)};
  };
  auto residual_plain = [&](const Tensor& x, const Tensor& y) { return layer_norm(x - y, {40}) * 3.0; };
  auto residual_rms = [&](const Tensor& x, const Tensor& y) { return rms_norm(exp(x) + y, {40}, w) + x; };
  auto f = compile(residual_ln);
  auto g = compile(residual_plain);
  auto h = compile(residual_rms);
  for (int64_t rows : {1, 9, 257}) {
    const Tensor x = randn({rows, 40}), y = randn({rows, 40});
    const std::string what = "rows " + std::to_string(rows);
    const int64_t loops = compiler::detail::fused_loop_runs();
    const std::vector<Tensor> got = f(x, y), want = residual_ln(x, y);
    EXPECT_EQ(compiler::detail::fused_loop_runs() - loops, 1) << what;
    expect_same(got[0], want[0], what + " sum");
    expect_same(got[1], want[1], what + " layer_norm", 1e-5);
    const int64_t loops2 = compiler::detail::fused_loop_runs();
    expect_same(g(x, y), residual_plain(x, y), what + " layer_norm without affine", 1e-5);
    EXPECT_EQ(compiler::detail::fused_loop_runs() - loops2, 1) << what;
    const int64_t loops3 = compiler::detail::fused_loop_runs();
    expect_same(h(x, y), residual_rms(x, y), what + " rms_norm", 1e-5);
    EXPECT_EQ(compiler::detail::fused_loop_runs() - loops3, 1) << what;
  }
}

// A linear layer's bias add that only the next GEMM reads runs inside its
// GEMM (bmm_bias, beta = 1 onto the bias rows); an add whose bias-free
// input is also wanted does not. Results and gradients equal eager.
TEST_F(Compile, BiasAddsFoldIntoTheirGemm) {
  manual_seed(70);
  const Tensor w1 = randn({24, 40}).requires_grad_(), b1 = randn({24}).requires_grad_(), w2 = randn({5, 24});
  auto chain = [&](const Tensor& x) { return matmul(linear(x, w1, b1), w2.t()); };
  auto both = [&](const Tensor& x) {
    const Tensor y = matmul(x, w1.t());
    return std::vector<Tensor>{y, y + b1};
  };
  auto f = compile(chain);
  auto g = compile(both);
  profiler::enable(true);
  for (int64_t rows : {1, 7}) {
    const std::string what = "rows " + std::to_string(rows);
    const Tensor x = randn({3, rows, 40}).requires_grad_();
    profiler::reset();
    const Tensor got = f(x), want = chain(x);
    EXPECT_EQ(profiled_calls("bmm_bias"), 1) << what;
    expect_same(got, want, what, 1e-4);
    const Tensor go = randn(want.sizes());
    const auto have = autograd::grad({got}, {x, w1, b1}, {go}), expect = autograd::grad({want}, {x, w1, b1}, {go});
    for (size_t i = 0; i < have.size(); ++i) expect_same(have[i], expect[i], what + " grad " + std::to_string(i), 1e-4);
    NoGradGuard no_grad;
    profiler::reset();
    const std::vector<Tensor> r = g(x.detach());
    EXPECT_EQ(profiled_calls("bmm_bias"), 0) << what;
    const std::vector<Tensor> e = both(x.detach());
    expect_same(r[0], e[0], what + " without bias", 1e-4);
    expect_same(r[1], e[1], what + " with bias", 1e-4);
  }
  profiler::enable(false);
}

TEST_F(Compile, BroadcastsRowSumsAndColumnSumsRunInOneLoop) {
  manual_seed(67);
  // Per-column (bias), per-row (scale) and 0-dim operands, a row sum used
  // inside the loop, a reshape, and two column sums over odd sizes: one
  // generated loop, equal to eager.
  auto fn = [](const Tensor& x, const Tensor& bias, const Tensor& scale) {
    const Tensor y = (x + bias) * scale;
    const Tensor centred = y - y.sum({-1}, true) / 129.0;
    const Tensor flat = (centred * 0.5).view({-1, 129});
    return std::vector<Tensor>{centred, (flat * x.view({-1, 129})).sum({0}), centred.sum({0, 1}, true)};
  };
  auto f = compile(fn);
  for (int64_t rows : {37, 300}) {
    const Tensor x = randn({3, rows, 129}), bias = randn({129}), scale = randn({3, rows, 1});
    const int64_t loops = compiler::detail::fused_loop_runs();
    const std::vector<Tensor> got = f(x, bias, scale), want = fn(x, bias, scale);
    EXPECT_EQ(compiler::detail::fused_loop_runs() - loops, 1) << rows;
    for (size_t i = 0; i < got.size(); ++i) expect_same(got[i], want[i], "rows " + std::to_string(rows) + " result " + std::to_string(i), 1e-4);
  }
  // Operands the loop cannot index (a transposed input, a broadcast over a
  // leading dim) and zero rows run op by op, with the same results.
  const Tensor xt = randn({129, 37}).t().unsqueeze(0), bias = randn({129}), scale = randn({37, 1});
  const std::vector<Tensor> got = f(xt, bias, scale), want = fn(xt, bias, scale);
  for (size_t i = 0; i < got.size(); ++i) expect_same(got[i], want[i], "fallback result " + std::to_string(i), 1e-4);
  const Tensor x0 = randn({3, 0, 129}), s0 = randn({3, 0, 1});
  const std::vector<Tensor> got0 = f(x0, bias, s0), want0 = fn(x0, bias, s0);
  for (size_t i = 0; i < got0.size(); ++i) expect_same(got0[i], want0[i], "zero rows result " + std::to_string(i));
}

TEST_F(Compile, LayerNormAndGeluBackwardsFuseWithTheirGradientSums) {
  manual_seed(68);
  // The backward of layer_norm (row sums), of the bias adds (column sums)
  // and of tanh-GELU become generated loops; gradients equal eager's.
  const Tensor w = randn({48}).requires_grad_(), b = randn({48}).requires_grad_();
  const Tensor w1 = (randn({48, 96}) * 0.2).requires_grad_(), b1 = randn({96}).requires_grad_();
  auto fn = [&](const Tensor& x) { return (gelu(matmul(layer_norm(x, {48}, w, b), w1) + b1, "tanh") * x.sum({-1}, true)).sum(); };
  auto f = compile(fn);
  for (int call = 0; call < 2; ++call) {
    const Tensor x = randn({5, 31, 48}).requires_grad_();
    const Tensor lc = f(x), le = fn(x);
    const int64_t loops = compiler::detail::fused_loop_runs();
    const auto gc = autograd::grad({lc}, {x, w, b, w1, b1}), ge = autograd::grad({le}, {x, w, b, w1, b1});
    EXPECT_GE(compiler::detail::fused_loop_runs() - loops, 2) << call;
    expect_same(lc, le, "loss", 1e-4);
    const char* names[] = {"dx", "dw", "db", "dw1", "db1"};
    for (size_t i = 0; i < gc.size(); ++i) expect_same(gc[i], ge[i], std::string(names[i]) + " call " + std::to_string(call), 1e-3);
  }
}

TEST_F(Compile, TanhGeluAndItsGradientHoldAtTheExponentialsLimits) {
  manual_seed(69);
  // The generated loops take exp(-2u) as kiln_exp2, clamped to [2^-126,
  // 2^128]: the ends of that range (and inf, NaN) must give what eager does.
  const std::vector<float> ends = {-INFINITY, -1e30f, -1e4f, -100.0f, -40.0f, -20.0f, -10.0f, -5.5f, -1.0f, -1e-3f, -0.0f, 0.0f,
                           1e-3f, 1.0f, 5.5f, 10.0f, 20.0f, 40.0f, 100.0f, 1e4f, 1e30f, INFINITY, NAN};
  const Tensor spread = randn({41}) * 8.0;  // odd-sized, values across the curve
  std::vector<float> xs = ends, finite_xs(ends.begin() + 1, ends.end() - 2);  // finite: no -inf, inf, NaN
  for (int64_t i = 0; i < spread.numel(); ++i) {
    xs.push_back(spread.data_ptr<float>()[i]);
    finite_xs.push_back(spread.data_ptr<float>()[i]);
  }
  auto values_of = [&](const Tensor& x) { return gelu(x, "tanh") * 1.0; };
  auto fv = compile(values_of);
  const int64_t loops = compiler::detail::fused_loop_runs();
  const Tensor x = tensor(xs);
  expect_close(fv(x), values(values_of(x)), 1e-5, 1e-6, "gelu_tanh");
  // Gradients where they are finite (eager's are NaN at +-inf too, but
  // through 0 * inf, which the generated formula need not reproduce).
  const Tensor finite = tensor(finite_xs).requires_grad_();
  const Tensor g = randn({finite.numel()});
  auto fn = [&](const Tensor& t) { return (gelu(t, "tanh") * g).sum(); };
  auto f = compile(fn);
  const auto gc = autograd::grad({f(finite)}, {finite}), ge = autograd::grad({fn(finite)}, {finite});
  EXPECT_GE(compiler::detail::fused_loop_runs() - loops, 2);  // forward and backward ran generated loops
  expect_close(gc[0], values(ge[0]), 1e-5, 1e-6, "gelu_tanh gradient");
  // sigmoid and silu keep eager's subnormal tail (x in [-104, -87]):
  // log(sigmoid(x)) is about x there, not -inf; so does the tanh GELU (x in
  // about [-10.7, -10]): sqrt of its negative subnormals is NaN, not -0.
  std::vector<float> deep;
  for (int i = 0; i <= 40; ++i) deep.push_back(-86.0f - 0.5f * static_cast<float>(i));
  const Tensor xd = tensor(deep);
  auto log_sigmoid = [](const Tensor& t) { return log(sigmoid(t * 1.0)); };
  auto root_silu = [](const Tensor& t) { return sqrt(silu(t * 1.0)); };
  expect_close(compile(log_sigmoid)(xd), values(log_sigmoid(xd)), 1e-3, 1e-6, "log(sigmoid(x)) in the subnormal band");
  const std::vector<double> gs = values(compile(root_silu)(xd)), ws = values(root_silu(xd));
  for (size_t i = 0; i < deep.size(); ++i)
    EXPECT_EQ(std::isnan(gs[i]), std::isnan(ws[i])) << "sqrt(silu(" << deep[i] << ")): " << gs[i] << ", eager's " << ws[i];
  std::vector<float> gelu_tail;
  for (int i = 0; i <= 60; ++i) gelu_tail.push_back(-9.9f - 0.0125f * static_cast<float>(i));
  const Tensor xg = tensor(gelu_tail);
  auto gelu_scaled = [](const Tensor& t) { return gelu(t * 1.0, "tanh") * 1e30; };
  auto root_gelu = [](const Tensor& t) { return sqrt(gelu(t * 1.0, "tanh")); };
  expect_close(compile(gelu_scaled)(xg), values(gelu_scaled(xg)), 1e-3, 1e-6, "tanh GELU in the subnormal band, scaled");
  const std::vector<double> gg = values(compile(root_gelu)(xg)), wg = values(root_gelu(xg));
  int subnormal_results = 0;
  for (size_t i = 0; i < gelu_tail.size(); ++i) {
    EXPECT_EQ(std::isnan(gg[i]), std::isnan(wg[i])) << "sqrt(gelu_tanh(" << gelu_tail[i] << ")): " << gg[i] << ", eager's " << wg[i];
    subnormal_results += std::isnan(wg[i]);
  }
  EXPECT_GT(subnormal_results, 10);  // the band is really probed
}

TEST_F(Compile, GradientsOfColumnSlicesAreWrittenByOneLoop) {
  manual_seed(69);
  // Three column slices of one tensor (a fused QKV projection): their
  // gradients (slice_backward, zero outside the slice) and the sum of them
  // become one loop, with the bias gradient; equal to eager.
  const Tensor bias = randn({120}).requires_grad_();
  auto fn = [&](const Tensor& x, const Tensor& a) {
    const Tensor h = x + bias;
    return (h.narrow(2, 0, 40) * a + h.narrow(2, 40, 40) * h.narrow(2, 80, 40).exp() + h.narrow(2, 7, 3).sum({-1}, true)).sum();
  };
  auto f = compile(fn);
  for (int call = 0; call < 2; ++call) {
    const Tensor x = randn({3, 37, 120}).requires_grad_(), a = randn({3, 37, 40});
    const Tensor lc = f(x, a), le = fn(x, a);
    const int64_t loops = compiler::detail::fused_loop_runs();
    const auto gc = autograd::grad({lc}, {x, bias}), ge = autograd::grad({le}, {x, bias});
    EXPECT_GE(compiler::detail::fused_loop_runs() - loops, 1) << call;
    expect_same(lc, le, "loss", 1e-4);
    expect_same(gc[0], ge[0], "dx call " + std::to_string(call), 1e-4);
    expect_same(gc[1], ge[1], "dbias call " + std::to_string(call), 1e-3);
  }
}

TEST_F(Compile, MlpLayerNormGeluResidualAndLossWithGradients) {
  manual_seed(61);
  nn::Linear fc1(16, 32), fc2(32, 16);
  nn::LayerNorm ln(16);
  auto block = [&](const Tensor& x, const Tensor& target) {
    const Tensor h = x + fc2(gelu(fc1(ln(x)), "tanh"));
    return nn::cross_entropy(h, target);
  };
  for (const char* b : {"cpp", "interpreter"}) {
    const Tensor x = randn({8, 16}), target = randint(0, 16, {8});
    auto f = compile(block, backend(b));
    const Tensor loss_c = f(x, target);
    const std::vector<Tensor> params = {fc1.weight, fc1.bias, fc2.weight, ln.weight};
    auto grads_c = autograd::grad({loss_c}, params);
    const Tensor loss_e = block(x, target);
    auto grads_e = autograd::grad({loss_e}, params);
    expect_same(loss_c, loss_e, std::string(b) + " loss");
    for (size_t i = 0; i < params.size(); ++i) expect_same(grads_c[i], grads_e[i], std::string(b) + " grad " + std::to_string(i));
  }
  // The targets are checked on the tensor passed in: no graph break, and a
  // bad target still raises cross_entropy's error when compiled.
  const Tensor x = randn({8, 16});
  const compiler::ExplainOutput e = compiler::explain(block, x, randint(0, 16, {8}));
  EXPECT_EQ(e.graph_break_count, 0) << e.to_string();
  auto f = compile(block);
  expect_error([&] { f(x, full({8}, 16.0, kInt64)); }, {"[cross_entropy]", "target values must be in [0, 16)"});
}

TEST_F(Compile, GptBlockForwardAndBackward) {
  manual_seed(62);
  nn::GPTConfig c;
  c.n_embd = 32, c.n_head = 4, c.block_size = 16, c.n_layer = 1;
  nn::Block block(c);
  auto f = compile(block);
  const Tensor x = randn({2, 16, 32}).requires_grad_();
  const Tensor yc = f(x);
  const Tensor ye = block.forward(x);
  expect_same(yc, ye, "block out");
  const Tensor g = randn({2, 16, 32});
  expect_same(autograd::grad({yc}, {x}, {g})[0], autograd::grad({ye}, {x}, {g})[0], "block dx");
  // flex_attention and its causal block mask are graph nodes: the block is one graph.
  const compiler::ExplainOutput e = compiler::explain([&](const Tensor& in) { return block.forward(in); }, x);
  EXPECT_EQ(e.graph_count, 1) << e.to_string();
  EXPECT_EQ(e.graph_break_count, 0) << e.to_string();
  // Parameter gradients through the compiled backward (flex_attention_backward inside it) equal eager's.
  const std::vector<Tensor> params = block.parameters();
  const auto pc = autograd::grad({f(x)}, params, {g}), pe = autograd::grad({block.forward(x)}, params, {g});
  for (size_t i = 0; i < params.size(); ++i) expect_same(pc[i], pe[i], "block parameter " + std::to_string(i), 1e-4);
}

TEST_F(Compile, AGptTrainingStepCompilesOnMetaAndItsGraphIsNotReusedOnTheCpu) {
  nn::GPTConfig c;
  c.vocab_size = 37, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 24;
  manual_seed(72);
  nn::GPT cpu_model(c), eager_model(c);
  eager_model.load_state_dict(cpu_model.state_dict());
  nn::GPT meta_model = [&] {
    const DefaultDeviceGuard meta(kMeta);
    return nn::GPT(c);
  }();
  nn::GPT* model = &meta_model;
  auto step = [&](const Tensor& idx, const Tensor& y) {
    const Tensor loss = nn::cross_entropy(model->forward(idx).view({-1, c.vocab_size}), y.view({-1}));
    loss.backward();
    return loss;
  };
  const Tensor idx = randint(0, c.vocab_size, {3, 11}), y = randint(0, c.vocab_size, {3, 11});
  const Tensor meta_idx = idx.to(kMeta), meta_y = y.to(kMeta);
  // One graph, forward and backward, with no break.
  const compiler::ExplainOutput e = compiler::explain(step, meta_idx, meta_y);
  EXPECT_EQ(e.graph_count, 1) << e.to_string();
  EXPECT_EQ(e.graph_break_count, 0) << e.to_string();
  meta_model.zero_grad();
  auto f = compile(step);
  for (int call = 0; call < 2; ++call) {  // the second adds into the gradients
    const Tensor loss = f(meta_idx, meta_y);
    EXPECT_TRUE(loss.is_meta());
    EXPECT_EQ(loss.dim(), 0);
    for (const auto& [name, p] : meta_model.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_TRUE(p.grad().is_meta()) << name;
      EXPECT_EQ(p.grad().sizes(), p.sizes()) << name;
    }
  }
  // The same program on the CPU: a device guard fails, so it compiles anew
  // and computes what eager computes.
  model = &cpu_model;
  const int entries = f.cache_entries();
  const Tensor loss = f(idx, y);
  EXPECT_EQ(f.cache_entries(), entries + 1);
  model = &eager_model;
  expect_same(loss, step(idx, y), "cpu loss");
  const auto got = cpu_model.named_parameters(), want = eager_model.named_parameters();
  for (size_t i = 0; i < got.size(); ++i) expect_same(got[i].second.grad(), want[i].second.grad(), got[i].first, 1e-4);
}

TEST_F(Compile, BackwardIsCompiledIntoOneNodePerGraph) {
  manual_seed(66);
  // Two results (one a view, one merged by CSE with an intermediate), an
  // input without grad, a no_grad region and a slice: gradients of every
  // input equal eager's, through one compiled_graph node.
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& c) {
    const Tensor h = gelu(x * w + c, "tanh");
    Tensor scale;
    {
      NoGradGuard no_grad;
      scale = sigmoid(w) * 2.0;
    }
    const Tensor y = h * scale + exp(x.slice(1, 0, 5) .sum({1}, true)) * w;
    return std::vector<Tensor>{y, (x * w + c).select(0, 1), y.t()};
  };
  for (const char* b : {"cpp", "interpreter"}) {
    auto f = compile(fn, backend(b));
    for (int call = 0; call < 2; ++call) {
      const Tensor x = randn({6, 33}, kFloat32).requires_grad_(), w = randn({6, 33}).requires_grad_();
      const Tensor c = randn({33});
      const std::vector<Tensor> rc = f(x, w, c), re = fn(x, w, c);
      const std::string what = std::string(b) + " call " + std::to_string(call);
      EXPECT_EQ(rc[0].grad_fn_name(), "compiled_graph_backward") << what;
      const std::vector<Tensor> g = {randn({6, 33}), randn({33}), randn({33, 6})};
      const auto gc = autograd::grad(rc, {x, w}, g), ge = autograd::grad(re, {x, w}, g);
      for (size_t i = 0; i < rc.size(); ++i) expect_same(rc[i], re[i], what + " result " + std::to_string(i));
      expect_same(gc[0], ge[0], what + " dx", 1e-4);
      expect_same(gc[1], ge[1], what + " dw", 1e-4);
    }
    EXPECT_EQ(f.cache_entries(), 1) << b;
  }
}

TEST_F(Compile, ABackwardInsideTheStepAccumulatesIntoExistingGrads) {
  // loss.backward() inside the compiled step, called twice without zeroing:
  // the second call adds into .grad with add_, an in-place op that ends the
  // graph (which once freed the trace the accumulation was still reading).
  for (const char* b : {"cpp", "interpreter"}) {
    manual_seed(71);
    const Tensor w1 = randn({5, 7}).requires_grad_(), w2 = randn({7, 3}).requires_grad_();
    const Tensor v1 = w1.detach().clone().requires_grad_(), v2 = w2.detach().clone().requires_grad_();
    auto step_of = [](const Tensor& p, const Tensor& q) {
      return [p, q](const Tensor& x) {
        const Tensor loss = square(matmul(tanh(matmul(x, p)), q)).sum();
        loss.backward();
        return loss;
      };
    };
    auto compiled = compile(step_of(w1, w2), backend(b));
    const auto eager = step_of(v1, v2);
    for (int call = 0; call < 3; ++call) {
      const Tensor x = randn({4, 5});
      expect_same(compiled(x), eager(x), std::string(b) + " loss " + std::to_string(call));
      expect_same(w1.grad(), v1.grad(), std::string(b) + " w1.grad after call " + std::to_string(call), 1e-5);
      expect_same(w2.grad(), v2.grad(), std::string(b) + " w2.grad after call " + std::to_string(call), 1e-5);
    }
  }
}

TEST_F(Compile, CompiledBackwardChecksSavedValuesAndRetainGraph) {
  manual_seed(67);
  auto f = compile([](const Tensor& x, const Tensor& w) { return (tanh(x * w) * w).sum(); });
  const Tensor x = randn({4, 5}), w = randn({4, 5}).requires_grad_();
  Tensor loss = f(x, w);
  loss.backward({}, /*retain_graph=*/true);
  const Tensor first = w.grad().clone();
  loss.backward();
  expect_same(w.grad(), first * 2.0, "second backward accumulates");
  expect_error([&] { loss.backward(); }, {"backward", "second time"});
  loss = f(x, w);
  {
    NoGradGuard no_grad;
    w.add_(1.0);  // w is saved by the graph's backward
  }
  expect_error([&] { loss.backward(); }, {"modified by an inplace operation", "compiled_graph"});
}

TEST_F(Compile, BackwardWithDynamicDimsIsReplayedOpByOp) {
  manual_seed(68);
  auto fn = [](const Tensor& x) { return (x * x).sum({1}); };
  CompileOptions o;
  o.dynamic = true;
  auto f = compile(fn, o);
  for (int64_t n : {3, 5}) {
    const Tensor x = randn({n, 4}).requires_grad_();
    const Tensor y = f(x);
    EXPECT_EQ(y.grad_fn_name(), "sum_backward");
    expect_same(autograd::grad({y}, {x}, {ones({n})})[0], x * 2.0, "dx");
  }
}

TEST_F(Compile, ConstantsAreFoldedOnceAndHandedOutAsCopies) {
  manual_seed(69);
  // arange, ones and what is computed from them alone are constants of the
  // graph; a C++ number is an input read per call (so "* 0.5" is not), and
  // rand is never folded. The program may write into a returned constant
  // without changing the next call's.
  auto fn = [](const Tensor& x) {
    const Tensor pos = arange(7, kFloat32) + ones({7});
    return std::vector<Tensor>{x * (pos * 0.5) + rand({7}), pos};
  };
  for (const char* b : {"cpp", "interpreter"}) {
    auto f = compile(fn, backend(b));
    const Tensor x = randn({3, 7});
    for (int call = 0; call < 2; ++call) {
      manual_seed(70);
      const std::vector<Tensor> rc = f(x);
      manual_seed(70);
      const std::vector<Tensor> re = fn(x);
      expect_same(rc[0], re[0], std::string(b) + " result");
      expect_same(rc[1], re[1], std::string(b) + " constant");
      rc[1].fill_(-1.0);
    }
    EXPECT_EQ(f.folded_constants(), 3) << b;  // arange, ones, add
  }
}

TEST_F(Compile, WritesToRealTensorsAreGraphNodes) {
  manual_seed(71);
  // An optimizer-like update under no_grad: one graph, no break, the same
  // values and version bumps as eager, and a changing rate recompiles nothing.
  // The cpp backend's loop writes p and m in place while `before` reads the
  // old p in the same loop.
  auto update = [](const Tensor& p, const Tensor& m, const Tensor& g, double lr) {
    NoGradGuard no_grad;
    const Tensor before = p * 2.0 + 1.0;
    p.mul_(0.99);
    m.mul_(0.9).add_(g, 0.1);
    p.sub_(m / (sqrt(abs(m)) + 1e-3) * lr);
    return p.sum() + before;
  };
  for (const char* b : {"cpp", "interpreter"}) {
    auto f = compile(update, backend(b));
    const Tensor p = randn({33, 7}), m = randn({33, 7}), pe = p.clone(), me = m.clone();
    for (int call = 0; call < 3; ++call) {
      const Tensor g = randn({33, 7});
      const double lr = 0.1 / (call + 1);
      const uint64_t version = p.version();
      const Tensor sc = f(p, m, g, lr), se = update(pe, me, g, lr);
      const std::string what = std::string(b) + " call " + std::to_string(call);
      expect_same(p, pe, what + " p");
      expect_same(m, me, what + " m");
      expect_same(sc, se, what + " sum", 1e-4);
      EXPECT_GT(p.version(), version) << what;
    }
    EXPECT_EQ(f.cache_entries(), 1) << b;
    const auto e = compiler::explain(update, p, m, randn({33, 7}), 0.5);
    EXPECT_EQ(e.graph_break_count, 0) << b;
    EXPECT_EQ(e.graph_count, 1) << b;
  }
}

// A C++ number is a graph input already in its operand's dtype: no
// conversion node per number (an AdamW step has eight per parameter).
TEST_F(Compile, NumbersEnterTheGraphInTheirOperandsDtype) {
  manual_seed(74);
  auto fn = [](const Tensor& x, double s) { return x * s + 1.0; };
  const auto e = compiler::explain(fn, randn({5}), 0.5);
  ASSERT_EQ(e.ops_per_graph.size(), 1u);
  EXPECT_EQ(e.ops_per_graph[0], 2) << e.to_string();  // mul and add
  for (DType dt : {kFloat32, kBFloat16}) {
    auto f = compile(fn);
    const Tensor x = randn({37}).to(dt);
    for (double s : {0.1, -3.7})
      expect_same(f(x, s).to(kFloat64), fn(x, s).to(kFloat64), std::string(dtype_name(dt)) + " s=" + std::to_string(s));
    EXPECT_EQ(f.cache_entries(), 1) << dtype_name(dt);
  }
}

TEST_F(Compile, ReadsOfWrittenMemoryBreakTheGraphFirst) {
  manual_seed(72);
  const Tensor p = randn({4, 5}), row = p.select(0, 1);  // row: another view of p's memory
  auto fn = [&](const Tensor& x) {
    NoGradGuard no_grad;
    p.add_(x);
    const Tensor seen = row * 2.0;                // reads p's memory through another handle
    p.mul_(2.0);
    const Tensor later = p.select(0, 2) * 3.0;    // a view taken after the write
    p.add_(1.0);
    const float first = p.data_ptr<float>()[0];   // the written tensor's memory
    return seen + first + later;
  };
  const Tensor x = randn({4, 5});
  const Tensor saved = p.clone();
  const Tensor want = fn(x);
  p.copy_(saved);
  auto f = compile(fn);
  expect_same(f(x), want, "result");
  p.copy_(saved);
  const auto e = compiler::explain(fn, x);
  ASSERT_EQ(e.graph_break_count, 3);
  EXPECT_EQ(e.breaks[0].reason, "a view of a tensor written in this graph, by 'mul'");  // row * 2
  EXPECT_EQ(e.breaks[1].reason, "a view of a tensor written in this graph, by 'select'");
  EXPECT_EQ(e.breaks[2].reason, "data_ptr()");
  // Each break carries the program's frames: this test's, not kiln's.
  for (const auto& b : e.breaks) {
    ASSERT_FALSE(b.user_stack.empty()) << e.to_string();
    EXPECT_NE(b.user_stack[0].find("kiln-tests+0x"), std::string::npos) << e.to_string();
    for (const std::string& f : b.user_stack) EXPECT_EQ(f.find("libkiln"), std::string::npos) << f;
  }
  EXPECT_NE(e.to_string().find("  from "), std::string::npos) << e.to_string();
}

// AdamW's step is one graph under fullgraph from its first call, which
// creates the state inside the graph (Note [Writes to pending tensors]).
TEST_F(Compile, AdamWStepCompiles) {
  for (bool amsgrad : {false, true}) {
    manual_seed(73);
    nn::Linear a(6, 5), b(6, 5);
    {
      NoGradGuard no_grad;
      b.weight.copy_(a.weight), b.bias.copy_(a.bias);
    }
    optim::AdamWOptions o;
    o.lr = 1e-2, o.weight_decay = 0.1, o.amsgrad = amsgrad;
    optim::AdamW oa(a.parameters(), o), ob(b.parameters(), o);
    CompileOptions full;
    full.fullgraph = true;
    auto step = compile([&] { ob.step(); }, full);
    const std::string what = amsgrad ? "amsgrad " : "";
    for (int s = 0; s < 4; ++s) {
      const Tensor x = randn({3, 6});
      square(a(x)).sum().backward();
      square(b(x)).sum().backward();
      oa.set_lr(1e-2 / (s + 1)), ob.set_lr(1e-2 / (s + 1));
      oa.step();
      step();
      expect_same(b.weight, a.weight, what + "weight after step " + std::to_string(s));
      expect_same(b.bias, a.bias, what + "bias after step " + std::to_string(s));
      oa.zero_grad(), ob.zero_grad();
    }
    EXPECT_LE(step.recompiles(), 1) << what;  // the first step creates the state (a different graph)
    const nn::StateDict sa = oa.state_dict(), sb = ob.state_dict();
    for (const auto& [k, v] : sa) expect_same(sb.at(k), v, what + "state " + k);
  }
}

TEST_F(Compile, ControlFlowOnCppStateStaysCorrect) {
  manual_seed(63);
  bool scale = true;
  auto fn = [&](const Tensor& x) { return scale ? x * 2.0 + 1.0 : exp(x) - 1.0; };
  auto f = compile(fn);
  const Tensor x = randn({64});
  expect_same(f(x), fn(x), "branch a");
  scale = false;
  expect_same(f(x), fn(x), "branch b");
  scale = true;
  expect_same(f(x), fn(x), "branch a again");
  EXPECT_EQ(f.cache_entries(), 2);  // one graph per branch, each reused
}

TEST_F(Compile, ItemBreaksTheGraphAndResumes) {
  manual_seed(64);
  auto fn = [](const Tensor& x) {
    const Tensor s = sum(x * x);
    const double v = s.item<double>();  // needs a concrete value: graph break
    return v > 0 ? x / std::sqrt(v) : x;
  };
  const Tensor x = randn({50});
  auto f = compile(fn);
  expect_same(f(x), fn(x), "normalised");
  const compiler::ExplainOutput e = compiler::explain(fn, x);
  EXPECT_EQ(e.graph_count, 2);
  EXPECT_EQ(e.graph_break_count, 1);
  ASSERT_EQ(e.breaks.size(), 1u);
  EXPECT_EQ(e.breaks[0].reason, "item()");
  EXPECT_NE(e.breaks[0].location.find("compile_test.cpp:"), std::string::npos) << e.breaks[0].location;
  ASSERT_EQ(e.ops_per_graph.size(), 2u);
  EXPECT_EQ(e.ops_per_graph[0], 2);  // mul, sum
  EXPECT_NE(e.to_string().find("Graph break count: 1"), std::string::npos);
}

TEST_F(Compile, BreaksFromPrintingDataPtrInPlaceAndExplicitBreaks) {
  manual_seed(65);
  auto fn = [](const Tensor& x) {
    Tensor y = x + 1.0;
    std::ostringstream os;
    os << y;  // printing
    Tensor z = y * 2.0;
    z.add_(1.0);  // in-place on a traced tensor
    compiler::graph_break();
    const float first = (z * 1.0).data_ptr<float>()[0];
    return z + first;
  };
  const Tensor x = randn({5});
  auto f = compile(fn);
  expect_same(f(x), fn(x), "after breaks");
  const auto e = compiler::explain(fn, x);
  ASSERT_EQ(e.graph_break_count, 4);
  EXPECT_EQ(e.breaks[0].reason, "printing a tensor");
  EXPECT_EQ(e.breaks[0].location, "unknown");  // operator<< cannot see its caller
  EXPECT_EQ(e.breaks[1].reason, "in-place op 'add'");
  EXPECT_EQ(e.breaks[2].reason, "compiler::graph_break()");
  EXPECT_EQ(e.breaks[3].reason, "data_ptr()");
  EXPECT_NE(e.breaks[3].location.find("compile_test.cpp:"), std::string::npos);
  // An in-place op on real data with nothing traced before it is no break.
  const Tensor u = randn({3});
  const auto quiet = compiler::explain([&u](const Tensor& t) { t.copy_(u); return t + 1.0; }, randn({3}));
  EXPECT_EQ(quiet.graph_break_count, 0);
}

TEST_F(Compile, ErrorOnGraphBreakNestsAndFullgraphAlwaysRaises) {
  auto fn = [](const Tensor& x) {
    const Tensor s = sum(x);
    return x * s.item<double>();
  };
  const Tensor x = randn({4});
  auto f = compile(fn);
  {
    compiler::ErrorOnGraphBreak outer(true);
    try {
      f(x);
      ADD_FAILURE() << "expected a GraphBreakError";
    } catch (const GraphBreakError& e) {
      EXPECT_EQ(e.reason, "item()");
      EXPECT_NE(std::string(e.what()).find("item()"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("compile_test.cpp:"), std::string::npos) << e.what();
    }
    {
      compiler::ErrorOnGraphBreak inner(false);  // the innermost wins: resumes
      expect_same(f(x), fn(x), "inner false");
    }
    EXPECT_THROW(f(x), GraphBreakError);
  }
  expect_same(f(x), fn(x), "no guard");
  auto wrapped = compiler::error_on_graph_break(true, fn);
  auto fw = compile(wrapped);
  EXPECT_THROW(fw(x), GraphBreakError);
  CompileOptions full;
  full.fullgraph = true;
  auto ff = compile(fn, full);
  compiler::ErrorOnGraphBreak off(false);
  try {
    ff(x);
    ADD_FAILURE() << "fullgraph must raise";
  } catch (const GraphBreakError& e) {
    EXPECT_NE(std::string(e.what()).find("fullgraph"), std::string::npos);
  }
  // After an error the next call starts clean.
  auto fe = compile([](const Tensor& t) { return t + 1.0; });
  expect_same(fe(x), x + 1.0, "after errors");
}

TEST_F(Compile, RecompilesOnShapeChangeButNotForDynamicDims) {
  auto fn = [](const Tensor& x) { return relu(x) * 2.0 + x; };
  CompileOptions fixed;
  fixed.dynamic = false;  // no automatic dynamic shapes: one graph per size
  auto f = compile(fn, fixed);
  for (int64_t n : {8, 9, 10}) {
    const Tensor x = randn({2, n});
    expect_same(f(x), fn(x), "shape " + std::to_string(n));
  }
  EXPECT_EQ(f.recompiles(), 2);
  // By default (PyTorch's automatic dynamic shapes) the second size makes
  // the dim dynamic: lengths 8, 16, 32, 24 compile twice; the first size
  // keeps its own graph.
  auto a = compile(fn);
  for (int64_t n : {8, 16, 32, 24, 8}) {
    const Tensor x = randn({2, n});
    expect_same(a(x), fn(x), "automatic " + std::to_string(n));
  }
  EXPECT_EQ(a.recompiles(), 1);
  EXPECT_EQ(a.cache_entries(), 2);
  // A dim of size 1 stays specialized (broadcasting depends on it).
  const Tensor one = randn({2, 1});
  expect_same(a(one), fn(one), "size 1");
  EXPECT_EQ(a.cache_entries(), 3);
  auto g = compile(fn);
  for (int64_t n : {8, 9, 10, 11}) {
    const Tensor x = randn({2, n});
    compiler::mark_dynamic(x, 1);
    expect_same(g(x), fn(x), "dynamic " + std::to_string(n));
  }
  EXPECT_EQ(g.recompiles(), 0);
  CompileOptions dyn;
  dyn.dynamic = true;
  auto h = compile(fn, dyn);
  for (int64_t n : {3, 30, 300}) h(randn({n}));
  EXPECT_EQ(h.recompiles(), 0);
  expect_error([] { compiler::mark_dynamic(randn({2}), 3); }, {"[compiler::mark_dynamic]", "dim 3", "[2]"});
}

TEST_F(Compile, RecompileLimitFallsBackToEagerWithOneWarning) {
  auto fn = [](const Tensor& x) { return x * 3.0 - 1.0; };
  CompileOptions o;
  o.recompile_limit = 2;
  auto f = compile(fn, o);
  testing::internal::CaptureStderr();
  for (int64_t n = 1; n <= 6; ++n) {
    const Tensor x = randn({n});
    expect_same(f(x), fn(x), "n=" + std::to_string(n));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("recompile limit (2) reached"), std::string::npos) << err;
  EXPECT_EQ(err.find("recompile limit"), err.rfind("recompile limit"));  // once
  EXPECT_EQ(f.recompiles(), 2);
}

TEST_F(Compile, StanceForceEagerCompilesNothing) {
  auto f = compile([](const Tensor& x) { return x * 2.0 + 1.0; });
  compiler::set_stance("force_eager");
  const Tensor x = randn({4});
  expect_same(f(x), x * 2.0 + 1.0, "eager");
  EXPECT_EQ(f.cache_entries(), 0);
  compiler::set_stance("default");
  f(x);
  EXPECT_EQ(f.cache_entries(), 1);
  expect_error([] { compiler::set_stance("fast"); }, {"[compiler::set_stance]", "'fast'"});
  expect_error([] { compile([](const Tensor& t) { return t; }, backend("gpu")); }, {"[compile]", "'gpu'"});
}

TEST_F(Compile, CommonSubexpressionsStayDistinctTensors) {
  auto fn = [](const Tensor& x) {
    Tensor a = exp(x) + 1.0, b = exp(x) + 1.0;  // merged by CSE
    return std::vector<Tensor>{a, b};
  };
  const Tensor x = randn({6});
  auto f = compile(fn);
  auto r = f(x);
  expect_same(r[0], exp(x) + 1.0, "a");
  r[0].add_(1.0);  // must not change b
  expect_same(r[1], exp(x) + 1.0, "b");
}

// Generated loops are unloaded with the last plan using them: compiling
// many distinct graphs does not use up the process's memory mappings.
TEST_F(Compile, GeneratedCodeIsUnloadedWithItsLastPlan) {
  auto mappings = [] {
    std::ifstream maps("/proc/self/maps");
    return std::count(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>(), '\n');
  };
  auto cached_objects = [&] {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    int n = 0;
    while (std::getline(maps, line)) n += line.find(cache_dir_) != std::string::npos;
    return n;
  };
  const Tensor x = randn({64});
  const auto before = mappings();
  for (int ops = 1; ops <= 10; ++ops) {  // ten distinct graphs, ten shared objects
    auto chain = [ops](const Tensor& t) {
      Tensor y = t;
      for (int i = 0; i < ops; ++i) y = relu(y * 2.0 - 1.0);
      return y;
    };
    auto f = compile(chain);
    expect_same(f(x), chain(x), std::to_string(ops) + " ops");
    EXPECT_GT(cached_objects(), 0) << "the loop is loaded while its plan lives";
  }
  EXPECT_EQ(cached_objects(), 0) << "every generated object is closed";
  EXPECT_LT(mappings() - before, 10) << "mappings grew by " << mappings() - before;
}

TEST_F(Compile, DiskCacheServesASecondProcess) {
  auto fn = [](const Tensor& x) { return sigmoid(x * 1.25 + 0.5) * x; };
  const Tensor x = randn({100});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto f = compile(fn);
    const bool ok = f(x).sizes() == x.sizes();
    _exit(ok && compiler::detail::compiler_runs() > 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not compile";
  const int64_t before = compiler::detail::compiler_runs();
  auto f = compile(fn);
  expect_same(f(x), fn(x), "from the disk cache");
  EXPECT_EQ(compiler::detail::compiler_runs(), before);  // the child's shared object was reused
}

// The disk cache key holds what the compiler says it is: after an upgrade
// (the same command, another --version) the loops are built again.
TEST_F(Compile, DiskCacheTellsCompilersApart) {
  char dir[] = "/tmp/kiln-cxx-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string script = std::string(dir) + "/c++", version = std::string(dir) + "/version";
  {
    std::ofstream f(script);
    // The compiler this run uses (a cross compiler under qemu) behind the script.
    const char* outer = std::getenv("KILN_CXX");
    f << "#!/bin/sh\nif [ \"$1\" = --version ]; then cat " << version << "; exit 0; fi\nexec "
      << (outer && *outer ? outer : "c++") << " \"$@\"\n";
  }
  ::chmod(script.c_str(), 0755);
  const ScopedEnv cxx("KILN_CXX", script);
  auto fn = [](const Tensor& x) { return sigmoid(x * 0.75 - 0.25) * x + 1.5; };
  const Tensor x = randn({50});
  // Compiles in a child process whose compiler says `says`; true when it ran the compiler.
  auto child_compiled = [&](const char* says) {
    std::ofstream(version) << says << "\n";
    const pid_t child = fork();
    if (child == 0) {
      const int64_t before = compiler::detail::compiler_runs();  // the parent's count, inherited
      auto f = compile(fn);
      const bool ok = f(x).sizes() == x.sizes();
      _exit(!ok ? 2 : compiler::detail::compiler_runs() > before ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) < 2) << says;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  EXPECT_TRUE(child_compiled("compiler 1.0"));
  EXPECT_FALSE(child_compiled("compiler 1.0")) << "the same compiler reuses the cache";
  EXPECT_TRUE(child_compiled("compiler 2.0")) << "another compiler builds again";
  std::filesystem::remove_all(dir);
}

TEST_F(Compile, BrokenCompilerFallsBackToTheInterpreterWithAWarning) {
  const ScopedEnv cxx("KILN_CXX", "/nonexistent/c++");
  auto fn = [](const Tensor& x) { return tanh(x) * 2.0 - x; };
  auto f = compile(fn);
  const Tensor x = randn({33});
  testing::internal::CaptureStderr();
  const Tensor y = f(x);
  const std::string err = testing::internal::GetCapturedStderr();
  expect_same(y, fn(x), "fallback");
  EXPECT_NE(err.find("the C++ compiler failed"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln::test
