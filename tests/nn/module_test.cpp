// Module bookkeeping, the layers, losses against float64 references, and
// the GPT learning a batch by heart.
#include <cmath>

#include "kiln/gpt.h"
#include "kiln/io.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct TwoLayer : nn::UnaryModule {
  TwoLayer() : fc1(3, 4), fc2(4, 2) {
    register_module("fc1", &fc1);
    register_module("fc2", &fc2);
    scale = ones({2});
    register_buffer("scale", &scale);
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))) * scale; }
  nn::Linear fc1, fc2;
  Tensor scale;
};

TEST(Module, NamesParametersAndStateDict) {
  manual_seed(30);
  TwoLayer m;
  auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "fc1.weight");
  EXPECT_EQ(named[3].first, "fc2.bias");
  EXPECT_EQ(m.num_parameters(), 3 * 4 + 4 + 4 * 2 + 2);
  for (auto& [n, p] : named) EXPECT_TRUE(p.requires_grad()) << n;
  auto sd = m.state_dict();
  EXPECT_EQ(sd.size(), 5u);
  EXPECT_TRUE(sd.count("scale"));
  // Linear computes x @ W^T + b.
  Tensor x = randn({5, 3});
  const Tensor want = matmul(x, m.fc1.weight.t()) + m.fc1.bias;
  expect_close(m.fc1(x), values(want), 1e-6, 1e-6, "linear");
  const double bound = 1 / std::sqrt(3.0);
  EXPECT_LE(amax(abs(m.fc1.weight)).item<double>(), bound);
}

TEST(Module, LoadStateDictChecksKeysAndShapes) {
  TwoLayer a, b;
  b.load_state_dict(a.state_dict());
  Tensor x = randn({2, 3});
  EXPECT_EQ(values(a(x)), values(b(x)));
  auto sd = a.state_dict();
  sd.erase("fc2.bias");
  expect_error([&] { b.load_state_dict(sd); }, {"[load_state_dict]", "missing keys: fc2.bias"});
  b.load_state_dict(sd, false);  // non-strict tolerates it
  sd = a.state_dict();
  sd["extra"] = ones({1});
  expect_error([&] { b.load_state_dict(sd); }, {"[load_state_dict]", "unexpected keys: extra"});
  sd = a.state_dict();
  sd["fc1.weight"] = ones({4, 4});
  expect_error([&] { b.load_state_dict(sd); }, {"[load_state_dict]", "fc1.weight", "[4, 4]", "[4, 3]"});
}

TEST(Module, TrainEvalToDTypeAndZeroGrad) {
  TwoLayer m;
  m.eval();
  EXPECT_FALSE(m.fc1.is_training());
  m.train();
  EXPECT_TRUE(m.fc2.is_training());
  m.to(kFloat64);
  EXPECT_EQ(m.fc1.weight.dtype(), kFloat64);
  EXPECT_TRUE(m.fc1.weight.requires_grad());
  EXPECT_EQ(m.scale.dtype(), kFloat64);
  Tensor y = m(randn({2, 3}, kFloat64)).sum();
  y.backward();
  EXPECT_TRUE(m.fc1.weight.grad().defined());
  m.zero_grad();
  EXPECT_FALSE(m.fc1.weight.grad().defined());
}

// Module::to converts in place (Note [Converting in place]): a handle taken
// before (an optimizer's) sees the converted tensor and its gradient, and an
// optimizer built before the call trains the converted model.
TEST(Module, ToConvertsInPlaceSoAnOptimizerBuiltBeforeStillTrains) {
  manual_seed(3);
  TwoLayer m;
  optim::SGDOptions o;
  o.lr = 0.05;
  optim::SGD opt(m.parameters(), o);
  const Tensor handle = m.fc1.weight;  // as the optimizer holds it
  m(randn({2, 3})).sum().backward();
  const Tensor grad32 = m.fc1.weight.grad().clone();
  m.to(kFloat64);
  EXPECT_TRUE(handle.is_same(m.fc1.weight));
  EXPECT_EQ(handle.dtype(), kFloat64);
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_EQ(handle.grad().dtype(), kFloat64);
  expect_close(handle.grad(), values(grad32.to(kFloat64)), 0, 0, "gradient converted with its tensor");
  opt.zero_grad();
  manual_seed(4);
  const Tensor x = randn({32, 3}, kFloat64), target = randn({32, 2}, kFloat64) * 0.1;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = nn::mse_loss(m(x), target);
    (step == 0 ? first : last) = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
  // Back to float32 the same way, the optimizer still attached.
  m.to(kFloat32);
  EXPECT_EQ(handle.dtype(), kFloat32);
  Tensor loss = nn::mse_loss(m(x.to(kFloat32)), target.to(kFloat32));
  opt.zero_grad();
  loss.backward();
  opt.step();
  EXPECT_EQ(handle.grad().dtype(), kFloat32);
}

TEST(Module, DropoutAndSequential) {
  manual_seed(31);
  nn::Dropout d(0.3);
  Tensor x = ones({100000});
  Tensor y = d(x);
  const double zero_frac = mean(eq(y, wrapped_scalar(0)).to(kFloat64)).item<double>();
  EXPECT_NEAR(zero_frac, 0.3, 0.01);
  EXPECT_NEAR(mean(y).item<double>(), 1.0, 0.02);  // scaled by 1 / (1 - p)
  d.eval();
  EXPECT_TRUE(d(x).is_same(x));
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Linear>(3, 5));
  s.push_back(std::make_shared<nn::GELU>());
  s.push_back(std::make_shared<nn::Linear>(5, 1));
  EXPECT_EQ(s(randn({4, 3})).sizes(), Shape({4, 1}));
  EXPECT_EQ(s.named_parameters()[2].first, "2.weight");
}

TEST(Loss, CrossEntropyMatchesReference) {
  manual_seed(32);
  Tensor logits = randn({6, 5}, kFloat64);
  Tensor target = tensor<int64_t>({0, 4, 2, -100, 1, 4});
  const auto lv = values(logits);
  auto ref = [&](double smoothing, bool mean_red) {
    double total = 0;
    int count = 0;
    std::vector<double> per;
    for (int i = 0; i < 6; ++i) {
      const int64_t t = target.data_ptr<int64_t>()[i];
      if (t == -100) {
        per.push_back(0);
        continue;
      }
      double m = -1e300, s = 0;
      for (int c = 0; c < 5; ++c) m = std::max(m, lv[i * 5 + c]);
      for (int c = 0; c < 5; ++c) s += std::exp(lv[i * 5 + c] - m);
      const double lse = m + std::log(s);
      double nll = lse - lv[i * 5 + t], smooth = 0;
      for (int c = 0; c < 5; ++c) smooth += (lse - lv[i * 5 + c]) / 5;
      const double l = (1 - smoothing) * nll + smoothing * smooth;
      per.push_back(l);
      total += l;
      ++count;
    }
    return mean_red ? std::vector<double>{total / count} : per;
  };
  expect_close(nn::cross_entropy(logits, target), ref(0, true), 1e-12, 1e-12, "mean, ignore_index");
  expect_close(nn::cross_entropy(logits, target, -100, 0.1), ref(0.1, true), 1e-12, 1e-12, "label smoothing");
  expect_close(nn::cross_entropy(logits, target, -100, 0, "none"), ref(0, false), 1e-12, 1e-12, "none");
  // (N, C, d) layout equals the flattened (N*d, C) one.
  Tensor l3 = randn({2, 5, 3}, kFloat64);
  Tensor t3 = randint(0, 5, {2, 3});
  expect_close(nn::cross_entropy(l3, t3), values(nn::cross_entropy(l3.permute({0, 2, 1}).reshape({6, 5}), t3.view({6}))),
               1e-12, 1e-12, "class dim 1");
  expect_error([&] { nn::cross_entropy(logits, tensor<int64_t>({5, 0, 0, 0, 0, 0})); }, {"[cross_entropy]", "[0, 5)"});
  expect_error([&] { nn::cross_entropy(logits, target.slice(0, 0, 3)); }, {"[cross_entropy]", "[6]", "[3]"});
  Tensor w = randn({4, 3}, kFloat64).requires_grad_();
  Tensor t4 = tensor<int64_t>({2, 0, 1, 2});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{nn::cross_entropy(v[0], t4, -100, 0.2)}; }, {w}));
  Tensor a = tensor<double>({1, 2}), b = tensor<double>({0, 4});
  expect_close(nn::mse_loss(a, b), {2.5}, 0, 0, "mse mean");
  expect_close(nn::mse_loss(a, b, "sum"), {5}, 0, 0, "mse sum");
}

TEST(Init, BoundsAndScales) {
  manual_seed(33);
  Tensor w = empty({200, 300});
  nn::init::xavier_uniform_(w);
  EXPECT_LE(amax(abs(w)).item<double>(), std::sqrt(6.0 / 500));
  nn::init::kaiming_normal_(w);
  EXPECT_NEAR(kiln::std(w).item<double>(), std::sqrt(2.0 / 300), 0.002);
  nn::init::zeros_(w);
  EXPECT_EQ(amax(abs(w)).item<double>(), 0.0);
  expect_error([] { nn::init::xavier_normal_(ones({3})); }, {"[xavier_normal_]", "2 dims"});
}

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return c;
}

TEST(GPT, OverfitsOneBatch) {
  manual_seed(34);
  nn::GPT model(tiny());
  Tensor x = randint(0, 32, {4, 16}), y = randint(0, 32, {4, 16});
  optim::AdamWOptions o;
  o.lr = 1e-2, o.weight_decay = 0;
  optim::AdamW opt(model.parameters(), o);
  double loss = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor l = nn::cross_entropy(model.forward(x).view({-1, 32}), y.view({-1}));
    opt.zero_grad();
    l.backward();
    opt.step();
    loss = l.item<double>();
  }
  EXPECT_LT(loss, 0.1);
}

TEST(GPT, CausalAndCheckpointRoundTripIsBitIdentical) {
  manual_seed(35);
  nn::GPT model(tiny());
  Tensor x = randint(0, 32, {2, 10});
  Tensor full = model.forward(x);
  // Causal: the first 6 positions do not depend on the later ones.
  Tensor prefix = model.forward(x.slice(1, 0, 6));
  expect_close(prefix, values(full.slice(1, 0, 6)), 1e-5, 1e-5, "causal prefix");
  const std::string path = ::testing::TempDir() + "/gpt.safetensors";
  io::save_safetensors(path, model.state_dict());
  nn::GPT other(tiny());
  other.load_state_dict(io::load_safetensors(path).tensors);
  EXPECT_EQ(values(other.forward(x)), values(full));
  Tensor g = model.generate(x.slice(0, 0, 1), 5, 0.0);
  EXPECT_EQ(g.sizes(), Shape({1, 15}));
  EXPECT_EQ(values(other.generate(x.slice(0, 0, 1), 5, 0.0)), values(g));  // greedy is deterministic
}

TEST(GPT, EmptyBatchesAndSequences) {
  nn::GPTConfig c;
  c.n_layer = 1, c.block_size = 16, c.n_embd = 32, c.n_head = 2;
  nn::GPT g(c);
  EXPECT_EQ(g.forward(zeros({0, 4}, kInt64)).sizes(), Shape({0, 4, 256}));
  EXPECT_EQ(g.forward(zeros({2, 0}, kInt64)).sizes(), Shape({2, 0, 256}));
  EXPECT_EQ(g.generate(zeros({0, 4}, kInt64), 3).sizes(), Shape({0, 7}));
  EXPECT_EQ(g.generate(zeros({0, 4}, kInt64), 3, 1.0, 0, false).sizes(), Shape({0, 7}));
}

TEST(GPT, ConfigsThatCannotBuildAreErrors) {
  auto with = [](auto set) {
    nn::GPTConfig c;
    c.n_layer = 1, c.block_size = 8, c.n_embd = 16, c.n_head = 2;
    set(c);
    return c;
  };
  expect_error([&] { nn::GPT(with([](auto& c) { c.n_head = 0; })); }, {"[GPT]", "n_head", "0"});
  expect_error([&] { nn::GPT(with([](auto& c) { c.n_layer = -1; })); }, {"[GPT]", "n_layer", "-1"});
  expect_error([&] { nn::GPT(with([](auto& c) { c.n_embd = 0; })); }, {"[GPT]", "n_embd"});
  expect_error([&] { nn::GPT(with([](auto& c) { c.block_size = 0; })); }, {"[GPT]", "block_size"});
  expect_error([&] { nn::GPT(with([](auto& c) { c.vocab_size = 0; })); }, {"[GPT]", "vocab_size"});
  expect_error([&] { nn::GPT(with([](auto& c) { c.n_embd = 15; })); }, {"[GPT]", "multiple of n_head"});
  expect_error([&] { nn::GPT(with([](auto& c) { c.dropout = 1.5; })); }, {"[GPT]", "dropout"});
}

TEST(GPT, GenerationWithTheKVCacheGivesTheSameTokens) {
  manual_seed(36);
  nn::GPT model(tiny());
  model.eval();
  Tensor prompt = randint(0, 32, {2, 4});
  // Greedy in float32 (the flash-decoding kernel), past the 16-token context.
  EXPECT_EQ(values(model.generate(prompt, 20, 0.0, 0, true)), values(model.generate(prompt, 20, 0.0, 0, false)));
  // Sampling in float64 with the same seed.
  model.to(kFloat64);
  manual_seed(7);
  Tensor a = model.generate(prompt, 20, 1.0, 5, true);
  manual_seed(7);
  Tensor b = model.generate(prompt, 20, 1.0, 5, false);
  EXPECT_EQ(values(a), values(b));
  // The cached logits equal the full forward's, position by position.
  nn::KVCache cache;
  Tensor x = randint(0, 32, {1, 10});
  Tensor first = model.forward_cached(x.slice(1, 0, 6), cache);
  Tensor rest = model.forward_cached(x.slice(1, 6), cache);
  EXPECT_EQ(cache.len, 10);
  expect_close(cat({first, rest}, 1), values(model.forward(x)), 1e-10, 1e-10, "cached logits");
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

// Two linear layers with a non-persistent buffer, for the tree and hooks.
class TwoLayers : public nn::UnaryModule {
 public:
  TwoLayers() {
    register_module("first", first.get());
    register_module("rest", rest.get());
    register_buffer("calls", &calls, false);
    rest->push_back(std::make_shared<nn::ReLU>());
    rest->push_back(second);
  }
  Tensor forward(const Tensor& x) override { return (*rest)((*first)(x)); }
  std::shared_ptr<nn::Linear> first = std::make_shared<nn::Linear>(4, 3), second = std::make_shared<nn::Linear>(3, 2);
  std::shared_ptr<nn::Sequential> rest = std::make_shared<nn::Sequential>();
  Tensor calls = zeros({1});
};

TEST(ModuleTree, ChildrenModulesApplyAndNonPersistentBuffers) {
  manual_seed(50);
  TwoLayers m;
  std::vector<std::string> names;
  for (auto& [n, mod] : m.named_modules()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"", "first", "rest", "rest.0", "rest.1"}));
  EXPECT_EQ(m.children().size(), 2u);
  EXPECT_EQ(m.named_children()[1].first, "rest");
  EXPECT_EQ(m.modules().size(), 5u);
  // apply: children's subtrees first, then the module itself.
  std::vector<nn::Module*> order;
  int linears = 0;
  m.apply([&](nn::Module& mod) {
    order.push_back(&mod);
    if (auto* l = dynamic_cast<nn::Linear*>(&mod)) nn::init::zeros_(l->weight), ++linears;
  });
  EXPECT_EQ(linears, 2);
  EXPECT_EQ(order.back(), &m);
  EXPECT_EQ(amax(abs(m.second->weight)).item<double>(), 0.0);
  // The non-persistent buffer is a buffer, converted with the module, but not in the state dict.
  EXPECT_EQ(m.named_buffers().size(), 1u);
  EXPECT_FALSE(m.state_dict().count("calls"));
  m.load_state_dict(m.state_dict());  // strict: "calls" is neither missing nor expected
  m.to(kFloat64);
  EXPECT_EQ(m.calls.dtype(), kFloat64);
}

TEST(ModuleTree, ForwardHooksRunInOrderReplaceAndRemove) {
  manual_seed(51);
  TwoLayers m;
  const Tensor x = randn({5, 4});
  const Tensor plain = m(x);
  std::vector<std::string> log;
  auto pre = m.register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
    log.push_back("pre");
    return in * 2.0;  // replaces the input
  });
  Tensor seen_input;
  auto post = m.register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor&) {
    log.push_back("post");
    seen_input = in;
    return Tensor();  // leaves the output
  });
  // A hook on a child inside the Sequential: the Sequential calls it through operator().
  auto child = m.second->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) {
    log.push_back("child");
    return out + 1.0;
  });
  const Tensor hooked = m(x);
  EXPECT_EQ(log, (std::vector<std::string>{"pre", "child", "post"}));
  EXPECT_EQ(values(seen_input), values(x * 2.0));  // the forward hook sees the input the pre-hook made
  pre.remove(), child.remove();
  pre.remove();  // twice is harmless
  expect_close(m(x), values(plain), 0, 0, "hooks removed");
  EXPECT_EQ(log.size(), 4u);  // only "post" ran again
  post.remove();
  (void)hooked;
}

TEST(ModuleTree, ShapeLayersContainersAndParameterHolders) {
  const Tensor x = randn({2, 3, 4});
  EXPECT_EQ(nn::Flatten()(x).sizes(), (Shape{2, 12}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).sizes(), (Shape{6, 4}));
  EXPECT_EQ(nn::Unflatten(2, {2, 2})(x).sizes(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(nn::Unflatten(-2, {-1, 2})(x.transpose(1, 2)).sizes(), (Shape{2, 2, 2, 3}));
  expect_close(nn::Unflatten(1, {3, 1})(x.transpose(0, 2)), values(x.transpose(0, 2)), 0, 0, "non-contiguous");
  expect_error([&] { (void)nn::Unflatten(1, {2, 2})(x); }, {"Unflatten", "[2, 2]", "size 3"});
  expect_error([&] { (void)nn::Unflatten(3, {1})(x); }, {"Unflatten", "dim 3"});
  EXPECT_EQ(values(nn::Identity()(x)), values(x));
  EXPECT_EQ(values(nn::Functional([](const Tensor& t) { return t * 3.0; })(x)), values(x * 3.0));
  nn::Sequential seq;
  seq.push_back(std::make_shared<nn::Flatten>());
  seq.push_back(std::make_shared<nn::Linear>(12, 5));
  seq.push_back(std::make_shared<nn::Functional>([](const Tensor& t) { return relu(t); }));
  EXPECT_EQ(seq(x).sizes(), (Shape{2, 5}));

  nn::ModuleDict<nn::UnaryModule> heads;
  heads.insert("a", std::make_shared<nn::Linear>(4, 2));
  heads.insert("b", std::make_shared<nn::Identity>());
  EXPECT_TRUE(heads.contains("a"));
  EXPECT_EQ(heads["a"](x).sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(heads.named_parameters()[0].first, "a.weight");
  expect_error([&] { heads.insert("a", std::make_shared<nn::Identity>()); }, {"ModuleDict", "'a'"});
  expect_error([&] { (void)heads["c"]; }, {"ModuleDict", "'c'"});
  expect_error([&] { heads.insert("x.y", std::make_shared<nn::Identity>()); }, {"ModuleDict", "'x.y'"});

  nn::ParameterList list;
  for (int i = 0; i < 20; ++i) list.push_back(full({2}, static_cast<double>(i)));  // addresses stay valid as it grows
  EXPECT_EQ(list.parameters().size(), 20u);
  EXPECT_TRUE(list[19].requires_grad());
  EXPECT_EQ(list.state_dict().at("7").sum().item<double>(), 14.0);
  nn::ParameterDict dict;
  dict.insert("scale", ones({3}));
  dict.insert("shift", zeros({3}));
  EXPECT_EQ(dict.named_parameters()[1].first, "shift");
  EXPECT_TRUE(dict["scale"].requires_grad());
  dict.to(kFloat64);
  EXPECT_EQ(dict["shift"].dtype(), kFloat64);
  expect_error([&] { dict.insert("scale", ones({1})); }, {"ParameterDict", "'scale'"});
}

TEST(ModuleTree, FullBackwardHooksSeeAndReplaceGradients) {
  manual_seed(52);
  nn::Linear lin(4, 3);
  const Tensor x = randn({5, 4}).requires_grad_();
  const Tensor w_out = randn({5, 3});
  // Without hooks, for reference.
  (lin(x) * w_out).sum().backward();
  const Tensor plain_x_grad = x.grad().clone(), plain_w_grad = lin.weight.grad().clone();
  x.set_grad({}), lin.zero_grad();
  std::vector<std::string> log;
  Tensor seen_grad_input, seen_grad_output;
  auto pre = lin.register_full_backward_pre_hook([&](nn::Module&, const Tensor& g) {
    log.push_back("pre");
    return g * 2.0;  // the output's gradient doubled for everything below
  });
  auto hook = lin.register_full_backward_hook([&](nn::Module&, const Tensor& gi, const Tensor& go) {
    log.push_back("hook");
    seen_grad_input = gi, seen_grad_output = go;
    return gi.defined() ? gi + 1.0 : Tensor();  // the input's gradient replaced
  });
  (lin(x) * w_out).sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"pre", "hook"}));
  expect_close(seen_grad_output, values(w_out * 2.0), 0, 0, "grad_output after the pre-hook");
  expect_close(seen_grad_input, values(plain_x_grad * 2.0), 1e-6, 1e-6, "grad_input");
  expect_close(x.grad(), values(plain_x_grad * 2.0 + 1.0), 1e-6, 1e-6, "the replaced grad_input reaches x");
  expect_close(lin.weight.grad(), values(plain_w_grad * 2.0), 1e-6, 1e-6, "parameters see the pre-hook's gradient");
  // An input that needs no gradient: the hook still runs, grad_input undefined.
  log.clear();
  (lin(x.detach()) * w_out).sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"pre", "hook"}));
  EXPECT_FALSE(seen_grad_input.defined());
  // Removed: no more calls; under no_grad: none either.
  pre.remove(), hook.remove();
  log.clear();
  (lin(x) * w_out).sum().backward();
  EXPECT_TRUE(log.empty());
}

// A user module with value semantics through KILN_MODULE.
class TinyNetImpl : public nn::UnaryModule {
 public:
  TinyNetImpl(int64_t in, int64_t out) : fc(in, out) { register_module("fc", &fc); }
  Tensor forward(const Tensor& x) override { return relu(fc(x)); }
  nn::Linear fc;
};
KILN_MODULE(TinyNet);

class HoldsTinyNet : public nn::Module {
 public:
  HoldsTinyNet() { register_module("net", net); }
  TinyNet net{3, 2};
};

TEST(ModuleTree, ModuleHolderHasValueSemantics) {
  manual_seed(53);
  TinyNet a(3, 2);
  TinyNet b = a;  // shares the module
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->parameters().size(), 2u);
  const Tensor x = randn({4, 3});
  expect_close(a(x), values(relu(linear(x, a->fc.weight, a->fc.bias))), 0, 0, "called as the module");
  HoldsTinyNet holder;
  EXPECT_TRUE(holder.state_dict().count("net.fc.weight"));
  nn::ModuleHolder<nn::MultiheadAttention> mha(4, 2);  // a module called through forward
  EXPECT_EQ(std::get<0>(mha(randn({3, 1, 4}), randn({3, 1, 4}), randn({3, 1, 4}))).sizes(), (Shape{3, 1, 4}));
  TinyNet empty(nullptr);
  EXPECT_TRUE(empty.is_empty());
  expect_error([&] { empty->parameters(); }, {"[ModuleHolder]", "empty"});
}

}  // namespace
}  // namespace kiln::test
