// Devices: names, allocators per device type, the meta device (shapes
// without data) and moving tensors and models between devices.
#include <chrono>
#include <random>
#include <sstream>

#include "kiln/gpt.h"
#include "kiln/optim.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Device, NamesParseAndPrintAsInPyTorch) {
  EXPECT_EQ(Device("cpu"), Device(kCPU));
  EXPECT_EQ(Device("cpu:0"), Device(kCPU));
  EXPECT_EQ(Device("meta"), Device(kMeta));
  EXPECT_EQ(Device(kMeta).str(), "meta");
  EXPECT_EQ(Device(kCPU).str(), "cpu");
  EXPECT_NE(Device(kCPU), Device(kMeta));
  EXPECT_TRUE(Device("meta").is_meta());
  expect_error([] { Device("cuda"); }, {"[Device]", "'cuda'", "cpu, meta"});
  expect_error([] { Device("cpu:x"); }, {"[Device]", "'cpu:x'", "index"});
  expect_error([] { Device("cpu:1"); }, {"[Device]", "only device 0", "'cpu:1'"});
}

TEST(Device, FactoriesTakeTheDeviceFromOptionsOrTheDefault) {
  EXPECT_EQ(zeros({2, 3}).device(), Device(kCPU));
  const Tensor m = zeros({2, 3}, kMeta);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.sizes(), Shape({2, 3}));
  EXPECT_EQ(m.strides(), Shape({3, 1}));
  EXPECT_EQ(m.dtype(), kFloat32);
  const Tensor r = randn({4}, TensorOptions().dtype(kFloat64).device(kMeta));
  EXPECT_TRUE(r.is_meta());
  EXPECT_EQ(r.dtype(), kFloat64);
  EXPECT_EQ(full({2}, 7).dtype(), kInt64);
  EXPECT_EQ(arange(5, kMeta).dtype(), kInt64);
  {
    const DefaultDeviceGuard meta(kMeta);
    EXPECT_TRUE(empty({3}).is_meta());
    EXPECT_TRUE(ones({3}, kInt32).is_meta());
    EXPECT_TRUE(eye(3).is_meta());
    EXPECT_TRUE(linspace(0, 1, 5).is_meta());
    EXPECT_EQ(empty({3}, kCPU).device(), Device(kCPU));
    // Kernels run with their own device as the default: a CPU op computes
    // inside the guard.
    expect_close(softmax(tensor<float>({1, 2, 3}), 0) * 3, std::vector<double>{0.270092, 0.734185, 1.995723}, 1e-5, 0,
                 "cpu op under a meta default");
  }
  EXPECT_EQ(empty({3}).device(), Device(kCPU));
  EXPECT_EQ(zeros_like(zeros({2}, kMeta)).device(), Device(kMeta));
  EXPECT_EQ(empty_like(zeros({2}, kMeta)).device(), Device(kMeta));
}

TEST(Device, RandomFactoriesOnMetaDrawNoCounters) {
  manual_seed(5);
  const Tensor a = randn({3});
  manual_seed(5);
  (void)randn({1000}, kMeta);
  expect_close(randn({3}), values(a), 0, 0, "the CPU stream is where it was");
}

// The meta result of each op has the CPU result's sizes, strides and dtype,
// on random shapes with broadcast, non-contiguous and zero-size inputs.
TEST(Device, MetaOpsGiveTheShapesOfCpuOps) {
  std::mt19937 rng(41);
  auto int_in = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  using Op = std::function<Tensor(const std::vector<Tensor>&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"add broadcast", [](const auto& t) { return t[0] + t[1].slice(-1, 0, 1); }},
      {"mul scalar", [](const auto& t) { return t[0] * 2.5; }},
      {"matmul", [](const auto& t) { return matmul(t[0], t[1].transpose(-1, -2)); }},
      {"sum", [](const auto& t) { return t[0].sum({-1}, true); }},
      {"mean", [](const auto& t) { return t[0].mean({0}); }},
      {"softmax", [](const auto& t) { return softmax(t[0], -1); }},
      {"transpose view", [](const auto& t) { return t[0].transpose(0, 1); }},
      {"slice", [](const auto& t) { return t[0].slice(1, 0, std::nullopt, 2); }},
      {"contiguous of a view", [](const auto& t) { return t[0].transpose(0, 1).contiguous(); }},
      {"layer_norm", [](const auto& t) { return layer_norm(t[0], {t[0].size(-1)}); }},
      {"gelu", [](const auto& t) { return gelu(t[0], "tanh"); }},
      {"argmax", [](const auto& t) { return t[0].argmax(-1); }},
      {"cat", [](const auto& t) { return cat({t[0], t[1]}, 0); }},
      {"where", [](const auto& t) { return where(t[0] > 0, t[0], t[1]); }},
      {"to float64", [](const auto& t) { return t[0].to(kFloat64); }},
  };
  for (int trial = 0; trial < 40; ++trial) {
    const Shape s = {int_in(0, 4), int_in(1, 7), int_in(1, 9)};
    Tensor a = randn(s), b = randn(s);
    if (trial % 3 == 1) a = randn({s[1], s[0], s[2]}).transpose(0, 1);  // non-contiguous
    for (const auto& [name, op] : ops) {
      const Tensor want = op({a, b});
      // (to(kMeta) copies into a contiguous layout, as to(dtype) does.)
      auto on_meta = [](const Tensor& t) { return empty_strided(t.sizes(), t.strides(), TensorOptions(t.dtype()).device(kMeta)); };
      const Tensor got = op({on_meta(a), on_meta(b)});
      const std::string what = std::string(name) + " on " + shape_str(s);
      EXPECT_TRUE(got.is_meta()) << what;
      EXPECT_EQ(got.sizes(), want.sizes()) << what;
      EXPECT_EQ(got.dtype(), want.dtype()) << what;
      for (int64_t d = 0; d < want.dim() && want.numel() > 0; ++d)  // a size-1 dim's stride is never used
        if (want.size(d) > 1) {
          EXPECT_EQ(got.stride(d), want.stride(d)) << what << " dim " << d;
        }
    }
  }
}

TEST(Device, MetaTensorsHaveNoDataAndMixedDevicesAreRefused) {
  const Tensor m = ones({2, 3}, kMeta);
  expect_error([&] { (void)m.data_ptr<float>(); }, {"[data_ptr]", "meta device", "[2, 3]", "no data"});
  expect_error([&] { (void)m.sum().item<float>(); }, {"[item]", "meta device", "no data"});
  expect_error([&] { (void)m.to(kCPU); }, {"[to]", "from the meta device to cpu", "[2, 3]"});
  expect_error([&] { zeros({2, 3}).copy_(m); }, {"[_to_copy]", "cannot compute a tensor on cpu", "meta"});
  expect_error([&] { (void)(m + zeros({2, 3})); },
               {"[add]", "expected all tensors to be on the same device", "meta, cpu"});
  expect_error([&] { (void)matmul(zeros({3, 2}), m); }, {"same device", "cpu, meta"});
  // 0-dim CPU tensors (C++ numbers, scalar_tensor) go with any device, as in PyTorch.
  EXPECT_TRUE((m + scalar_tensor(2.0)).is_meta());
  EXPECT_TRUE((m * 3).is_meta());
  // Into meta, a copy checks shapes only; in-place ops keep the version count.
  const Tensor d = empty({2, 3}, kMeta);
  const uint64_t v = d.version();
  d.copy_(randn({2, 3}));
  d.mul_(2);
  EXPECT_EQ(d.version(), v + 2);
  expect_error([&] { d.copy_(randn({4})); }, {"[copy_]", "[4]", "[2, 3]"});
  std::ostringstream os;
  os << m << " " << arange(3, kMeta);
  EXPECT_EQ(os.str(), "tensor(..., device='meta', size=(2, 3)) tensor(..., device='meta', size=(3,))");
}

TEST(Device, ToMovesValuesAndGradientsFlowBack) {
  const Tensor x = randn({3, 4});
  EXPECT_TRUE(x.to(kCPU).is_same(x));
  const Tensor m = x.to(Device("meta"), kFloat64);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.dtype(), kFloat64);
  EXPECT_EQ(m.sizes(), x.sizes());
  // Gradients of a computation on meta are meta tensors of the inputs' shapes.
  const Tensor w = randn({4, 5}, kMeta).requires_grad_();
  const Tensor loss = relu(matmul(m.to(kFloat32), w)).sum();
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_meta());
  EXPECT_EQ(w.grad().sizes(), Shape({4, 5}));
}

// Counts the CPU allocator's live bytes while alive (and forwards to it).
class CountingAllocator final : public Allocator {
 public:
  CountingAllocator() : inner_(allocator_for(kCPU)) { register_allocator(kCPU, this); }
  ~CountingAllocator() override { register_allocator(kCPU, inner_); }
  void* allocate(size_t n) override {
    live += static_cast<int64_t>(n);
    peak = std::max(peak, live);
    ++allocations;
    return inner_->allocate(n);
  }
  void deallocate(void* p, size_t n) override {
    live -= static_cast<int64_t>(n);
    inner_->deallocate(p, n);
  }
  int64_t live = 0, peak = 0, allocations = 0;

 private:
  Allocator* inner_;
};

TEST(Device, AStorageReturnsItsMemoryToTheAllocatorItCameFrom) {
  Tensor kept;
  int64_t live_after_restore = 0;
  {
    CountingAllocator counting;
    kept = empty({1000});
    EXPECT_EQ(counting.live, 4000);
    (void)zeros({10}, kMeta);  // nothing from the CPU's allocator
    EXPECT_EQ(counting.live, 4000);
    {
      CountingAllocator inner;  // registered over `counting`, then removed
      Tensor t = empty({10});
      EXPECT_EQ(inner.live, 40);
    }
    kept = Tensor();
    live_after_restore = counting.live;
  }
  EXPECT_EQ(live_after_restore, 0);
}

nn::GPTConfig small_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 37, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 24;
  return c;
}

TEST(Device, AGptTrainingStepRunsOnMetaWithTheShapesOfTheCpuOne) {
  const nn::GPTConfig c = small_gpt();
  manual_seed(0);
  nn::GPT cpu_model(c);
  const DefaultDeviceGuard meta(kMeta);
  nn::GPT model(c);
  EXPECT_EQ(model.num_parameters(), cpu_model.num_parameters());
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_TRUE(p.is_meta()) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
  }
  optim::AdamW opt(model.parameters(), {});
  const Tensor idx = randint(0, c.vocab_size, {3, 11});
  const Tensor y = randint(0, c.vocab_size, {3, 11});
  for (int step = 0; step < 2; ++step) {
    const Tensor logits = model.forward(idx);
    EXPECT_EQ(logits.sizes(), Shape({3, 11, c.vocab_size}));
    const Tensor loss = nn::cross_entropy(logits.view({-1, c.vocab_size}), y.view({-1}));
    EXPECT_TRUE(loss.is_meta());
    EXPECT_EQ(loss.dim(), 0);
    loss.backward();
    for (const auto& [name, p] : model.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_TRUE(p.grad().is_meta()) << name;
      EXPECT_EQ(p.grad().sizes(), p.sizes()) << name;
    }
    opt.step();
    opt.zero_grad();
  }
}

TEST(Device, ATenBillionParameterGptBuildsOnMetaInUnderASecondAndWithoutMemory) {
  nn::GPTConfig c;
  c.vocab_size = 50304, c.block_size = 2048, c.n_layer = 50, c.n_head = 32, c.n_embd = 4096;
  CountingAllocator counting;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t params = 0;
  {
    const DefaultDeviceGuard meta(kMeta);
    nn::GPT model(c);
    params = model.num_parameters();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(params, int64_t{10'000'000'000});
  EXPECT_LT(seconds, 1.0);
  EXPECT_LT(counting.peak, int64_t{100} << 20) << "bytes of CPU memory at most while building";
}

TEST(Device, AModelBuiltOnMetaGetsMemoryWithToEmptyAndValuesFromAStateDict) {
  const nn::GPTConfig c = small_gpt();
  manual_seed(1);
  nn::GPT reference(c);
  nn::GPT model = [&] {
    const DefaultDeviceGuard meta(kMeta);
    return nn::GPT(c);
  }();
  model.to_empty(kCPU);
  for (const auto& [name, p] : model.named_parameters()) EXPECT_EQ(p.device(), Device(kCPU)) << name;
  model.load_state_dict(reference.state_dict());
  const Tensor idx = randint(0, c.vocab_size, {2, 9});
  NoGradGuard no_grad;
  expect_close(model.forward(idx), values(reference.forward(idx)), 0, 0, "same logits");
  // to(meta) keeps shapes, and the tie of the head to the token embedding.
  model.to(kMeta);
  for (const auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p.is_meta()) << name;
  EXPECT_EQ(model.num_parameters(), reference.num_parameters());
}

}  // namespace
}  // namespace kiln::test
