// The dispatcher: one entry point that a mode can intercept for every op.
#include <set>

#include "autograd/graph.h"
#include "kiln/attention.h"
#include "kiln/distributed.h"
#include "kiln/quantization.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Records every op it sees and lets it run.
class RecordingMode : public DispatchMode {
 public:
  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    seen.insert(op.name);
    calls.push_back(op.name);
    return dispatch(op, in, attrs, out);
  }
  std::set<std::string> seen;
  std::vector<std::string> calls;
};

// Exercises every public op once.
void run_every_op() {
  Tensor x = randn({4, 6}), y = rand({4, 6}), i = randint(0, 4, {4, 6});
  Tensor idx = randint(0, 4, {3});
  for (auto f : {neg, abs, sign, exp, expm1, sqrt, rsqrt, reciprocal, sin, cos, tanh, sigmoid, relu, silu, erf, floor,
                 ceil, round, square, logical_not, log, log1p, hardsigmoid, hardswish, mish})
    f(y + 1);
  leaky_relu(x), elu(x), softplus(x), hardtanh(x);
  gelu(x), gelu(x, "tanh"), clamp(x, 0, 1), gelu_backward(x, y), gelu_backward(x, y, "tanh");
  threshold_backward(x, y, 0.5);
  add(x, y), sub(x, y), mul(x, y), div(x, y), pow(y, x), maximum(x, y), minimum(x, y), fmod(x, y);
  hypot(x, y), logaddexp(x, y), copysign(x, y), remainder(x, y + 1), floor_divide(x, y + 1);
  log2(y + 1), log10(y + 1), exp2(x), trunc(x), frac(x), logsigmoid(x), selu(x);
  tan(x), asin(y), acos(y), atan(x), sinh(x), cosh(x), asinh(x), acosh(y + 1), atanh(y * 0.5), atan2(x, y);
  eq(x, y), ne(x, y), lt(x, y), le(x, y), gt(x, y), ge(x, y), logical_and(x, y), logical_or(x, y), logical_xor(x, y);
  where(x > 0, x, y), masked_fill(x, x > 0, 0);
  sum(x), prod(x), amax(x), amin(x), all(x), any(x), max(x, 1), min(x, 0, true), cumsum(x, 0);
  cummax(x, 1), cummin(x, 0), logcumsumexp(x, 1), searchsorted(std::get<0>(sort(x)), y);
  scatter_reduce(x, 1, i, y, "amax");
  cumprod(randn({3}).requires_grad_(), 0).sum().backward();  // cumprod_backward
  {  // ctc_loss and its backward
    const Tensor lp = randn({4, 1, 3}).requires_grad_();
    nn::ctc_loss(lp, tensor<int64_t>({1, 2}).reshape({1, 2}), tensor<int64_t>({4}), tensor<int64_t>({2})).backward();
  }
  {  // the spatial ops with kernels (convolution, max_pool, batch_norm) and their backwards
    const Tensor img = randn({2, 3, 6, 6}).requires_grad_(), w = randn({4, 3, 3, 3}).requires_grad_();
    nn::batch_norm(nn::max_pool2d(nn::conv2d(img, w, randn({4}).requires_grad_()), {2}), {}, {}, ones({4}).requires_grad_(),
                   zeros({4}).requires_grad_(), true)
        .sum()
        .backward();
  }
  {  // the int8 ops
    quant::matmul_u8s8(ones({2, 3}, kUInt8), ones({4, 3}, kInt8));
    quant::linear_dynamic(x, quant::quantize_weight(y), {});
    quant::conv2d_int8(randn({1, 2, 4, 4}), quant::quantize_weight(randn({3, 2, 3, 3})), {}, {3, 3}, {1, 1}, {1, 1},
                       {1, 1}, 0.05, 128);
  }
  {  // the fused Adam step (the optimizer issues it only with no mode active)
    const Tensor p = randn({5}), m = zeros({5}), v = zeros({5});
    dispatch(*find_op("_fused_adam_"), std::vector<Tensor>{p, randn({5}), m, v},
             Attrs{{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0},
                   {"decoupled", true}, {"bias_correction1", 0.1}, {"bias_correction2", 0.001}},
             std::vector<Tensor>{p, m, v});
  }
  {  // linalg's LAPACK ops
    const Tensor a = randn({3, 3}) + 3 * eye(3), s = matmul(a, a.t());
    linalg::inv(a), linalg::solve(a, y.narrow(0, 0, 3)), linalg::det(a), linalg::slogdet(a), linalg::cholesky(s);
    linalg::qr(x), linalg::eigh(s), linalg::svd(x);
  }
  mm(x, y.t()), dispatch(*find_op("bmm_bias"), std::vector<Tensor>{x, y.t(), randn({4})}), softmax(x, 1), layer_norm(x, {6}), embedding(x, idx), one_hot(idx, 4);
  cat({x, y}), gather(x, 1, i), scatter(x, 1, i, y), index_select(x, 0, idx), tril(x), triu(x, 1), sort(x), multinomial(y, 2);
  x.view({24}).permute({0}), x.expand({2, 4, 6}), x.slice(0, 1), x.select(0, 1), slice_backward(x.slice(0, 1, 3), x.sizes(), 0, 1, 3, 1),
      select_backward(x.select(1, 2), x.sizes(), 1, 2), x.unsqueeze(0).squeeze(),
      x.unfold(1, 2, 2), x.as_strided({2}, {1}), diagonal(x), x.detach(), x.sum().t(), linspace(0, 1, 3), eye(3), x.clone();
  x.unsqueeze(0).squeeze(0), arange(3);
  const Tensor q = randn({1, 2, 5, 4}).requires_grad_();
  flex_attention(q, randn({1, 2, 5, 4}), randn({1, 2, 5, 4}), NoScoreMod{}, create_block_mask(CausalMask{}, 1, 1, 5, 5, 4))
      .out.sum()
      .backward();  // flex_attention_backward
  {  // the collectives (c10d::...), on a group of this one process
    distributed::ProcessGroup& pg = distributed::init_process_group("symm");
    Tensor t = randn({3}), g = empty({3});
    pg.all_reduce(t), pg.broadcast(t, 0), pg.all_gather(g, t), pg.reduce_scatter(g, t), pg.all_to_all_v(g, t, {3}, {3});
    pg.barrier();
    EXPECT_THROW(pg.send(t, 0), Error);  // to itself: the op is seen, then its kernel refuses
    EXPECT_THROW(pg.recv(t, 0), Error);
    distributed::destroy_process_group();
  }
}

TEST(Dispatcher, AModeInterceptsEveryRegisteredOp) {
  RecordingMode mode;
  {
    ModeGuard guard(&mode);
    run_every_op();
  }
  for (const OpDef* op : all_ops()) EXPECT_TRUE(mode.seen.count(op->name)) << "op never intercepted: " << op->name;
  // Outside the guard nothing is recorded.
  const size_t n = mode.calls.size();
  add(ones({2}), ones({2}));
  EXPECT_EQ(mode.calls.size(), n);
}

// Replaces every add with a subtraction: proves the mode, not the kernel, decides.
class SwapAddMode : public DispatchMode {
 public:
  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    if (op.name == "add") return {sub(in[0], in[1])};
    return dispatch(op, in, attrs, out);
  }
};

TEST(Dispatcher, ModesNestAndTheInnermostSeesOpsFirst) {
  RecordingMode outer;
  SwapAddMode inner;
  Tensor r;
  {
    ModeGuard g1(&outer);
    ModeGuard g2(&inner);
    r = add(full({2}, 5.0), full({2}, 3.0));
  }
  expect_close(r, {2, 2}, 0, 0, "add became sub");
  // The outer mode saw the sub issued by the inner one, never the add.
  EXPECT_TRUE(outer.seen.count("sub"));
  EXPECT_FALSE(outer.seen.count("add"));
}

TEST(Dispatcher, EveryOpHasASchemaAndShapeFunction) {
  const auto ops = all_ops();
  EXPECT_GT(ops.size(), 70u);
  for (const OpDef* op : ops) {
    EXPECT_NE(op->shape, nullptr) << op->name;
    EXPECT_EQ(op->schema.rfind(op->name + "(", 0), 0u) << op->name << ": " << op->schema;
    if (op->kind == OpKind::Compute) {
      EXPECT_NE(op->kernels[0], nullptr) << op->name;
    }
  }
  EXPECT_NE(find_op("add"), nullptr);
  EXPECT_EQ(find_op("no_such_op"), nullptr);
  // Every CPU kernel registration names a declared op.
  EXPECT_EQ(registrations_without_op(), std::vector<std::string>{});
}

void double_it(const OpCall& c) { c.outputs[0].copy_(c.inputs[0] * 2.0); }
void triple_it(const OpCall& c) { c.outputs[0].copy_(c.inputs[0] * 3.0); }
std::vector<TensorMeta> same_shape(std::span<const Tensor> in, const Attrs&) { return {{in[0].sizes(), in[0].dtype()}}; }

// A device's kernel folder binds kernels by op name, before or after the
// op's declaration (static initialisation runs translation units in any order).
TEST(Dispatcher, KernelsBindToOpsInEitherOrder) {
  register_kernel("test_kernel_first", kCPU, double_it);
  EXPECT_EQ(registrations_without_op(), std::vector<std::string>{"test_kernel_first"});
  const OpDef& first = register_op(OpDef{"test_kernel_first", "test_kernel_first(Tensor self) -> Tensor", OpKind::Compute, same_shape});
  EXPECT_EQ(registrations_without_op(), std::vector<std::string>{});
  const OpDef& second = register_op(OpDef{"test_op_first", "test_op_first(Tensor self) -> Tensor", OpKind::Compute, same_shape});
  // Declared without gradients, as every op must declare (Autograd.EveryOpHasABackwardEntry).
  autograd::register_nondifferentiable("test_kernel_first");
  autograd::register_nondifferentiable("test_op_first");
  const Tensor x = randn({3, 5});
  expect_error([&] { dispatch1(second, {x}); }, {"[test_op_first]", "has no kernel for device cpu"});
  register_kernel("test_op_first", kCPU, triple_it);
  expect_close(dispatch1(first, {x}), values(x * 2.0), 0, 0, "kernel bound before the op");
  expect_close(dispatch1(second, {x}), values(x * 3.0), 0, 0, "kernel bound after the op");
  expect_error([] { register_kernel("test_op_first", kCPU, double_it); },
               {"[register_kernel]", "test_op_first", "two kernels for device cpu"});
}

TEST(Dispatcher, ShapeFunctionAloneGivesOutputMetadata) {
  const OpDef* op = find_op("matmul");
  ASSERT_NE(op, nullptr);
  Tensor a = empty({2, 3, 4}), b = empty({2, 4, 5});
  const Tensor in[] = {a, b};
  auto metas = op->shape(std::span<const Tensor>(in), Attrs{});
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0].sizes, Shape({2, 3, 5}));
  EXPECT_EQ(metas[0].dtype, kFloat32);
}

TEST(Dispatcher, OutTensorsAreChecked) {
  const OpDef* op = find_op("add");
  Tensor a = ones({3}), wrong = empty({4});
  const Tensor in[] = {a, a};
  const Tensor out[] = {wrong};
  expect_error([&] { dispatch(*op, in, {}, out); }, {"[add]", "out= tensor has shape [4]", "[3]"});
  const Tensor out2[] = {empty({3}, kFloat64)};
  expect_error([&] { dispatch(*op, in, {}, out2); }, {"[add]", "dtype float64", "float32"});
}

}  // namespace
}  // namespace kiln::test
