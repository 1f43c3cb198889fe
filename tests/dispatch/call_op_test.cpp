// call_op: every public op called by name gives what its C++ function gives
// (same values bit for bit, dtype, shape), on random inputs with special
// values, broadcast and non-contiguous operands; binding errors name the op
// and what did not fit.
#include <cmath>
#include <cstring>
#include <set>

#include "kiln/call_op.h"
#include "kiln/nn.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using Results = std::vector<Tensor>;

struct Case {
  std::string op;  // with the overload, as registered
  std::vector<IValue> args;
  KwArgs kwargs;
  std::function<Results()> direct;
  bool random = false;  // reseed before each call
};

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < w.size(); ++i)
    if (!(std::isnan(g[i]) && std::isnan(w[i]))) {
      ASSERT_EQ(std::memcmp(&g[i], &w[i], sizeof(double)), 0) << what << ": element " << i << " " << g[i] << " vs " << w[i];
    }
}

// A float32 (3, 4) tensor with +-0, +-inf and NaN among random values.
Tensor specials() {
  Tensor x = randn({3, 4}) * 3;
  float* p = x.data_ptr<float>();
  p[0] = 0.0f, p[1] = -0.0f, p[2] = INFINITY, p[3] = -INFINITY, p[5] = NAN, p[7] = 3e38f;
  return x;
}

// A dtype result as a tensor, to compare like the others.
Tensor dtype_code(DType d) { return scalar_tensor(static_cast<int64_t>(d)); }

std::vector<Case> cases() {
  const Tensor x = specials();
  const Tensor xt = randn({4, 3}).t();  // non-contiguous (3, 4)
  const Tensor row = randn({4});        // broadcasts against (3, 4)
  const Tensor pos = rand({3, 4}) + 0.5;
  const Tensor idx = randint(0, 3, {2, 4});
  const Tensor mask = rand({3, 4}) > 0.5;
  const Tensor m34 = randn({3, 4}), m45 = randn({4, 5});
  const Tensor b234 = randn({2, 3, 4}), b245 = randn({2, 4, 5});
  std::vector<Case> c;
  auto one = [](Tensor t) { return Results{std::move(t)}; };
  auto two = [](std::tuple<Tensor, Tensor> t) { return Results{std::get<0>(t), std::get<1>(t)}; };

  using Unary = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Unary>> unary = {
      {"neg", &neg},     {"abs", &abs},       {"sign", &sign},         {"exp", &exp},     {"expm1", &expm1},
      {"log", &log},     {"log1p", &log1p},   {"sqrt", &sqrt},         {"rsqrt", &rsqrt}, {"reciprocal", &reciprocal},
      {"sin", &sin},     {"cos", &cos},       {"tanh", &tanh},         {"sigmoid", &sigmoid}, {"relu", &relu},
      {"silu", &silu},   {"erf", &erf},       {"floor", &floor},       {"ceil", &ceil},   {"round", &round},
      {"square", &square}, {"logical_not", &logical_not}, {"hardsigmoid", &hardsigmoid},
      {"hardswish", &hardswish}, {"mish", &mish}, {"log2", &log2}, {"log10", &log10}, {"exp2", &exp2},
      {"trunc", &trunc}, {"frac", &frac}, {"log_sigmoid", &log_sigmoid}, {"selu", &selu}, {"isnan", &isnan},
      {"isinf", &isinf}, {"isfinite", &isfinite}, {"tan", &tan}, {"asin", &asin}, {"acos", &acos},
      {"atan", &atan}, {"sinh", &sinh}, {"cosh", &cosh}, {"asinh", &asinh}, {"acosh", &acosh}, {"atanh", &atanh}};
  for (const auto& [name, fn] : unary) {
    const auto f = fn;  // a copy: clang 14 cannot capture a structured binding
    c.push_back({name, {x}, {}, [=] { return one(f(x)); }});
    c.push_back({name, {xt}, {}, [=] { return one(f(xt)); }});
  }
  c.push_back({"gelu", {x}, {{"approximate", std::string("tanh")}}, [=] { return one(gelu(x, "tanh")); }});
  c.push_back({"gelu_backward", {m34, x}, {}, [=] { return one(gelu_backward(m34, x)); }});
  c.push_back({"threshold_backward", {m34, x, 0.5}, {}, [=] { return one(threshold_backward(m34, x, 0.5)); }});
  c.push_back({"clamp", {x, IValue(), 0.5}, {}, [=] { return one(clamp(x, std::nullopt, 0.5)); }});
  c.push_back({"leaky_relu", {x, 0.2}, {}, [=] { return one(leaky_relu(x, 0.2)); }});
  c.push_back({"clamp.Tensor", {m34, row}, {}, [=] { return one(clamp(m34, row, Tensor())); }});
  c.push_back({"sgn", {xt}, {}, [=] { return one(sgn(xt)); }});
  c.push_back({"leaky_relu", {xt}, {}, [=] { return one(leaky_relu(xt)); }});
  c.push_back({"elu", {x}, {{"alpha", 0.5}}, [=] { return one(elu(x, 0.5)); }});
  c.push_back({"softplus", {x, 2.0}, {{"threshold", 3.0}}, [=] { return one(softplus(x, 2.0, 3.0)); }});
  c.push_back({"hardtanh", {xt, -0.5}, {}, [=] { return one(hardtanh(xt, -0.5)); }});

  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Binary>> binary = {
      {"mul.Tensor", &mul},   {"div.Tensor", &div},   {"maximum", &maximum},         {"minimum", &minimum},
      {"fmod.Tensor", &fmod}, {"eq.Tensor", &eq},     {"ne.Tensor", &ne},            {"lt.Tensor", &lt},
      {"le.Tensor", &le},     {"gt.Tensor", &gt},     {"ge.Tensor", &ge},            {"logical_and", &logical_and},
      {"logical_or", &logical_or}, {"logical_xor", &logical_xor}, {"matmul", &matmul}, {"mm", &mm},
      {"hypot", &hypot}, {"copysign.Tensor", &copysign}, {"remainder.Tensor", &remainder},
      {"floor_divide", &floor_divide}, {"atan2", &atan2}};
  for (const auto& [name, fn] : binary) {
    const auto f = fn;  // a copy: clang 14 cannot capture a structured binding
    const bool gemm = std::string(name) == "matmul" || std::string(name) == "mm";
    const Tensor b = gemm ? m45 : row;
    c.push_back({name, {xt, b}, {}, [=] { return one(f(xt, b)); }});
  }
  c.push_back({"bmm", {b234, b245}, {}, [=] { return one(bmm(b234, b245)); }});
  c.push_back({"add.Tensor", {x, row}, {{"alpha", int64_t{2}}}, [=] { return one(add(x, row, 2)); }});
  c.push_back({"sub.Tensor", {xt, row}, {{"alpha", 0.5}}, [=] { return one(sub(xt, row, 0.5)); }});
  c.push_back({"add.Scalar", {x, int64_t{3}}, {}, [=] { return one(x + 3); }});
  c.push_back({"sub.Scalar", {x, 1.5}, {}, [=] { return one(x - 1.5); }});
  c.push_back({"mul.Scalar", {x, 2.5}, {}, [=] { return one(x * 2.5); }});
  c.push_back({"div.Scalar", {x, int64_t{7}}, {}, [=] { return one(x / 7); }});
  c.push_back({"pow.Tensor_Tensor", {pos, row}, {}, [=] { return one(pow(pos, row)); }});
  c.push_back({"pow.Tensor_Scalar", {x, 3.0}, {}, [=] { return one(pow(x, 3.0)); }});
  c.push_back({"lt.Scalar", {x, 0.25}, {}, [=] { return one(x < 0.25); }});
  c.push_back({"gt.Scalar", {x, int64_t{0}}, {}, [=] { return one(x > 0); }});
  c.push_back({"where.self", {mask, x, row}, {}, [=] { return one(where(mask, x, row)); }});
  c.push_back({"masked_fill.Scalar", {x, mask, -1.5}, {}, [=] { return one(masked_fill(x, mask, -1.5)); }});
  c.push_back({"lerp.Tensor", {x, m34, pos}, {}, [=] { return one(lerp(x, m34, pos)); }});
  c.push_back({"logaddexp", {x, row}, {}, [=] { return one(logaddexp(x, row)); }});
  c.push_back({"nan_to_num", {x}, {{"posinf", 1.0}}, [=] { return one(nan_to_num(x, 0.0, 1.0)); }});
  c.push_back({"lerp.Scalar", {x, m34, 0.25}, {}, [=] { return one(lerp(x, m34, 0.25)); }});
  const Tensor ints = randint(0, 5, {4});
  c.push_back({"result_type.Tensor", {ints, x.to(kFloat16)}, {}, [=] { return Results{dtype_code(result_type(ints, x.to(kFloat16)))}; }});
  c.push_back({"broadcast_to", {row, Shape{2, 4}}, {}, [=] { return one(broadcast_to(row, {2, 4})); }});

  c.push_back({"sum", {xt, Shape{1}}, {{"dtype", kFloat64}}, [=] { return one(sum(xt, {1}, false, kFloat64)); }});
  c.push_back({"mean", {m34, Shape{0}, true}, {}, [=] { return one(mean(m34, {0}, true)); }});
  c.push_back({"prod", {pos}, {}, [=] { return one(prod(pos)); }});
  c.push_back({"amax", {x, Shape{1}}, {}, [=] { return one(amax(x, {1})); }});
  c.push_back({"amin", {xt, Shape{0}}, {}, [=] { return one(amin(xt, {0})); }});
  c.push_back({"all", {mask, Shape{1}}, {}, [=] { return one(all(mask, {1})); }});
  c.push_back({"any", {mask}, {}, [=] { return one(any(mask)); }});
  c.push_back({"var", {m34, Shape{1}}, {{"correction", int64_t{0}}}, [=] { return one(var(m34, {1}, 0)); }});
  c.push_back({"std", {xt}, {{"keepdim", true}}, [=] { return one(kiln::std(xt, {}, 1, true)); }});
  c.push_back({"logsumexp", {m34, Shape{1}}, {}, [=] { return one(logsumexp(m34, {1})); }});
  c.push_back({"norm", {m34, 1.0, Shape{0}}, {}, [=] { return one(norm(m34, 1.0, {0})); }});
  c.push_back({"max", {m34}, {}, [=] { return one(max(m34)); }});
  c.push_back({"min", {xt}, {}, [=] { return one(min(xt)); }});
  c.push_back({"max.dim", {m34, int64_t{1}}, {}, [=] { return two(max(m34, 1)); }});
  c.push_back({"min.dim", {xt, int64_t{0}, true}, {}, [=] { return two(min(xt, 0, true)); }});
  c.push_back({"argmax", {m34}, {{"dim", int64_t{1}}}, [=] { return one(argmax(m34, 1)); }});
  c.push_back({"argmin", {xt}, {}, [=] { return one(argmin(xt)); }});
  c.push_back({"cumsum", {xt, int64_t{1}}, {}, [=] { return one(cumsum(xt, 1)); }});
  c.push_back({"cumsum_backward", {m34, int64_t{0}}, {}, [=] { return one(cumsum_backward(m34, 0)); }});

  const Tensor w = randn({5, 4}), bias = randn({5});
  c.push_back({"linear", {xt, w, bias}, {}, [=] { return one(linear(xt, w, bias)); }});
  c.push_back({"linear", {xt, w}, {}, [=] { return one(linear(xt, w)); }});
  c.push_back({"softmax.int", {m34, int64_t{-1}}, {}, [=] { return one(softmax(m34, -1)); }});
  c.push_back({"log_softmax.int", {xt, int64_t{0}}, {}, [=] { return one(log_softmax(xt, 0)); }});
  c.push_back({"layer_norm", {xt, Shape{4}, row}, {{"eps", 1e-3}}, [=] { return one(layer_norm(xt, {4}, row, {}, 1e-3)); }});
  c.push_back({"rms_norm", {m34, Shape{4}}, {}, [=] { return one(rms_norm(m34, {4})); }});
  c.push_back({"embedding", {m34, idx}, {}, [=] { return one(embedding(m34, idx)); }});
  c.push_back({"one_hot", {idx}, {{"num_classes", int64_t{5}}}, [=] { return one(one_hot(idx, 5)); }});
  c.push_back({"pad", {xt, Shape{1, 2}, std::string("reflect")}, {}, [=] { return one(pad(xt, {1, 2}, "reflect")); }});
  c.push_back({"pad", {x, Shape{0, 1, 2, 0}}, {{"value", -1.0}}, [=] { return one(pad(x, {0, 1, 2, 0}, "constant", -1.0)); }});

  c.push_back({"cat", {std::vector<Tensor>{x, xt}, int64_t{1}}, {}, [=] { return one(cat({x, xt}, 1)); }});
  c.push_back({"stack", {std::vector<Tensor>{x, xt}}, {}, [=] { return one(stack({x, xt})); }});
  c.push_back({"split.Tensor", {m34, int64_t{3}, int64_t{1}}, {}, [=] { return split(m34, 3, 1); }});
  c.push_back({"split_with_sizes", {m34, Shape{1, 2}}, {}, [=] { return split(m34, Shape{1, 2}); }});
  c.push_back({"chunk", {xt, int64_t{2}, int64_t{1}}, {}, [=] { return chunk(xt, 2, 1); }});
  c.push_back({"gather", {m34, int64_t{0}, idx}, {}, [=] { return one(gather(m34, 0, idx)); }});
  const Tensor src = randn({2, 4});
  c.push_back({"scatter.src", {m34, int64_t{0}, idx, src}, {}, [=] { return one(scatter(m34, 0, idx, src)); }});
  c.push_back({"scatter_add", {m34, int64_t{0}, idx, src}, {}, [=] { return one(scatter_add(m34, 0, idx, src)); }});
  const Tensor rows = randint(0, 3, {5});
  c.push_back({"index_select", {xt, int64_t{0}, rows}, {}, [=] { return one(index_select(xt, 0, rows)); }});
  c.push_back({"slice_backward", {src, Shape{5, 4}, int64_t{0}, int64_t{1}, int64_t{5}, int64_t{2}}, {},
               [=] { return one(slice_backward(src, {5, 4}, 0, 1, 5, 2)); }});
  c.push_back({"select_backward", {row, Shape{3, 4}, int64_t{0}, int64_t{2}}, {},
               [=] { return one(select_backward(row, {3, 4}, 0, 2)); }});
  c.push_back({"tril", {xt, int64_t{1}}, {}, [=] { return one(tril(xt, 1)); }});
  c.push_back({"triu", {x}, {}, [=] { return one(triu(x)); }});
  c.push_back({"topk", {m34, int64_t{2}}, {{"largest", false}}, [=] { return two(topk(m34, 2, -1, false)); }});
  c.push_back({"sort", {xt, int64_t{0}, true}, {}, [=] { return two(sort(xt, 0, true)); }});
  c.push_back({"argsort", {m34}, {{"descending", true}}, [=] { return one(argsort(m34, -1, true)); }});

  c.push_back({"zeros", {Shape{2, 3}}, {{"dtype", kInt32}}, [] { return Results{zeros({2, 3}, kInt32)}; }});
  c.push_back({"ones", {Shape{4}}, {}, [] { return Results{ones({4})}; }});
  c.push_back({"full", {Shape{2}, 2.5}, {{"dtype", kFloat64}}, [] { return Results{full({2}, 2.5, kFloat64)}; }});
  c.push_back({"full", {Shape{2}, int64_t{7}}, {}, [] { return Results{full({2}, 7)}; }});
  c.push_back({"zeros_like", {xt}, {}, [=] { return one(zeros_like(xt)); }});
  c.push_back({"ones_like", {idx}, {}, [=] { return one(ones_like(idx)); }});
  c.push_back({"full_like", {x, -2.0}, {}, [=] { return one(full_like(x, -2.0)); }});
  c.push_back({"arange", {int64_t{5}}, {}, [] { return Results{arange(5)}; }});
  c.push_back({"arange.start_step", {1.0, int64_t{3}, 0.5}, {}, [] { return Results{arange(1.0, 3, 0.5)}; }});
  c.push_back({"linspace", {0.0, 1.0, int64_t{5}}, {{"dtype", kFloat64}}, [] { return Results{linspace(0, 1, 5, kFloat64)}; }});
  c.push_back({"eye", {int64_t{2}, int64_t{3}}, {}, [] { return Results{eye(2, 3)}; }});
  c.push_back({"scalar_tensor", {1.5}, {}, [] { return Results{scalar_tensor(1.5)}; }});
  c.push_back({"rand", {Shape{3, 2}}, {}, [] { return Results{rand({3, 2})}; }, true});
  c.push_back({"randn", {Shape{5}}, {{"dtype", kFloat64}}, [] { return Results{randn({5}, kFloat64)}; }, true});
  c.push_back({"randint.low", {int64_t{-3}, int64_t{9}, Shape{6}}, {}, [] { return Results{randint(-3, 9, {6})}; }, true});
  c.push_back({"multinomial", {pos, int64_t{2}}, {}, [=] { return one(multinomial(pos, 2)); }, true});
  c.push_back({"randperm", {int64_t{7}}, {{"dtype", kInt32}}, [] { return Results{randperm(7, kInt32)}; }, true});
  c.push_back({"flip", {xt, Shape{0}}, {}, [=] { return one(flip(xt, {0})); }});
  c.push_back({"roll", {xt, Shape{2}}, {{"dims", Shape{1}}}, [=] { return one(roll(xt, {2}, {1})); }});
  c.push_back({"repeat", {xt, Shape{2, 1, 2}}, {}, [=] { return one(repeat(xt, {2, 1, 2})); }});
  c.push_back({"tile", {xt, Shape{2}}, {}, [=] { return one(tile(xt, {2})); }});
  const Tensor repeats = tensor<int64_t>({2, 0, 1});
  c.push_back({"repeat_interleave.Tensor", {repeats}, {{"output_size", int64_t{3}}}, [=] {
                 return one(repeat_interleave(repeats, std::optional<int64_t>{3}));
               }});
  c.push_back({"repeat_interleave.self_Tensor", {xt, repeats, int64_t{0}}, {}, [=] {
                 return one(repeat_interleave(xt, repeats, 0));
               }});
  c.push_back({"repeat_interleave.self_int", {xt, int64_t{2}}, {{"dim", int64_t{-1}}}, [=] {
                 return one(repeat_interleave(xt, 2, -1));
               }});
  c.push_back({"movedim.intlist", {xt, Shape{0}, Shape{1}}, {}, [=] { return one(movedim(xt, {0}, {1})); }});
  const Tensor pick = randint(0, 4, {3, 2}), row5 = m45.select(0, 0);
  c.push_back({"take_along_dim", {m34, pick}, {{"dim", int64_t{1}}}, [=] { return one(take_along_dim(m34, pick, 1)); }});
  const Tensor at = tensor(std::vector<int64_t>{2, 0});
  c.push_back({"index_add", {m34, int64_t{1}, at, m34.narrow(1, 0, 2)}, {{"alpha", 2.0}},
               [=] { return one(index_add(m34, 1, at, m34.narrow(1, 0, 2), 2.0)); }});
  c.push_back({"index_copy", {m34, int64_t{0}, at, m34.narrow(0, 1, 2)}, {},
               [=] { return one(index_copy(m34, 0, at, m34.narrow(0, 1, 2))); }});
  c.push_back({"index_fill.int_Scalar", {m34, int64_t{-1}, at, -1.5}, {}, [=] { return one(index_fill(m34, -1, at, -1.5)); }});
  const Tensor counts = randint(0, 5, {9}), positive = gt(m34, wrapped_scalar(0.0));
  c.push_back({"nonzero", {positive}, {}, [=] { return one(nonzero(positive)); }});
  c.push_back({"masked_select", {m34, positive}, {}, [=] { return one(masked_select(m34, positive)); }});
  c.push_back({"bincount", {counts}, {{"minlength", int64_t{7}}}, [=] { return one(bincount(counts, {}, 7)); }});
  c.push_back({"histc", {m34, int64_t{4}}, {{"min", -1.0}, {"max", int64_t{1}}}, [=] { return one(histc(m34, 4, -1, 1)); }});
  c.push_back({"median.dim", {m34, int64_t{1}}, {{"keepdim", true}}, [=] { return two(median(m34, 1, true)); }});
  c.push_back({"median", {m34}, {}, [=] { return one(median(m34)); }});
  c.push_back({"cumprod", {m34, int64_t{1}}, {}, [=] { return one(cumprod(m34, 1)); }});
  c.push_back({"cummax", {m34, int64_t{0}}, {}, [=] { return two(cummax(m34, 0)); }});
  c.push_back({"cummin", {m34}, {{"dim", int64_t{-1}}}, [=] { return two(cummin(m34, -1)); }});
  c.push_back({"logcumsumexp", {m34, int64_t{1}}, {}, [=] { return one(logcumsumexp(m34, 1)); }});
  const Tensor sorted34 = std::get<0>(sort(m34, 1));
  c.push_back({"searchsorted", {sorted34, m34}, {{"right", true}}, [=] { return one(searchsorted(sorted34, m34, false, true)); }});
  c.push_back({"bucketize", {m34, sorted34.select(0, 0)}, {{"out_int32", true}},
               [=] { return one(bucketize(m34, sorted34.select(0, 0), true)); }});
  const Tensor to_rows = randint(0, 3, {2, 4});
  c.push_back({"scatter_reduce.two", {m34, int64_t{0}, to_rows, m45.narrow(0, 0, 2).narrow(1, 0, 4), std::string("mean")},
               {{"include_self", false}},
               [=] { return one(scatter_reduce(m34, 0, to_rows, m45.narrow(0, 0, 2).narrow(1, 0, 4), "mean", false)); }});
  c.push_back({"scatter.reduce", {m34, int64_t{0}, to_rows, m34.narrow(0, 0, 2)}, {{"reduce", std::string("multiply")}},
               [=] { return one(scatter(m34, 0, to_rows, m34.narrow(0, 0, 2), "multiply")); }});
  const Tensor rows2 = tensor(std::vector<int64_t>{2, 0});
  c.push_back({"index_put", {m34, std::vector<Tensor>{rows2}, m34.narrow(0, 0, 2)}, {{"accumulate", true}},
               [=] { return one(index_put(m34, {rows2}, m34.narrow(0, 0, 2), true)); }});
  c.push_back({"masked_scatter", {m34, positive, m45}, {}, [=] { return one(masked_scatter(m34, positive, m45)); }});
  c.push_back({"einsum", {std::string("ij,jk->ik"), std::vector<Tensor>{m34, m45}}, {},
               [=] { return one(einsum("ij,jk->ik", {m34, m45})); }});
  auto three = [](std::tuple<Tensor, Tensor, Tensor> t) { return Results{std::get<0>(t), std::get<1>(t), std::get<2>(t)}; };
  c.push_back({"unique", {counts}, {}, [=] { return three(unique(counts)); }});
  c.push_back({"unique_consecutive", {counts}, {}, [=] { return three(unique_consecutive(counts)); }});
  c.push_back({"kthvalue", {m34, int64_t{2}}, {{"dim", int64_t{0}}}, [=] { return two(kthvalue(m34, 2, 0)); }});
  c.push_back({"mode", {m34}, {{"keepdim", true}}, [=] { return two(mode(m34, -1, true)); }});
  const Tensor qs = tensor(std::vector<double>{0.1, 0.5}).to(kFloat32);
  c.push_back({"quantile", {m34, qs, int64_t{1}}, {{"interpolation", std::string("midpoint")}},
               [=] { return one(quantile(m34, qs, 1, false, "midpoint")); }});
  c.push_back({"quantile.scalar", {m34, 0.3}, {{"keepdim", true}}, [=] { return one(quantile(m34, 0.3, std::nullopt, true)); }});
  c.push_back({"var_mean", {m34, Shape{1}}, {{"correction", int64_t{0}}}, [=] { return two(var_mean(m34, {1}, 0)); }});
  c.push_back({"std_mean", {m34}, {{"keepdim", true}}, [=] { return two(std_mean(m34, {}, 1, true)); }});
  const Tensor img = randn({1, 4, 2, 3});
  c.push_back({"pixel_shuffle", {img, int64_t{2}}, {}, [=] { return one(pixel_shuffle(img, 2)); }});
  c.push_back({"pixel_unshuffle", {img, int64_t{1}}, {}, [=] { return one(pixel_unshuffle(img, 1)); }});
  c.push_back({"diag_embed", {m34}, {{"offset", int64_t{-1}}}, [=] { return one(diag_embed(m34, -1)); }});
  c.push_back({"diag", {m34, int64_t{1}}, {}, [=] { return one(diag(m34, 1)); }});
  const Tensor v3 = randn({4, 3});
  const Tensor w3 = randn({3});
  c.push_back({"linalg_cross", {v3, w3}, {}, [=] { return one(cross(v3, w3)); }});
  c.push_back({"cdist", {m34, m45.t()}, {{"p", 1.0}}, [=] { return one(cdist(m34, m45.t(), 1.0)); }});
  c.push_back({"diagonal", {m34}, {{"offset", int64_t{1}}}, [=] { return one(diagonal(m34, 1)); }});
  c.push_back({"meshgrid.indexing", {std::vector<Tensor>{arange(3), arange(2)}}, {{"indexing", std::string("xy")}},
               [] { return Results(meshgrid({arange(3), arange(2)}, "xy")); }});
  c.push_back({"outer", {arange(3.0), arange(2.0)}, {}, [=] { return one(outer(arange(3.0), arange(2.0))); }});
  c.push_back({"dot", {arange(3.0), arange(3.0)}, {}, [=] { return one(dot(arange(3.0), arange(3.0))); }});
  c.push_back({"vdot", {arange(3.0), arange(3.0)}, {}, [=] { return one(vdot(arange(3.0), arange(3.0))); }});
  c.push_back({"addmm", {row5, m34, m45}, {{"beta", 0.5}}, [=] { return one(addmm(row5, m34, m45, 0.5)); }});
  c.push_back({"addbmm", {row5, m34.unsqueeze(0), m45.unsqueeze(0)}, {}, [=] { return one(addbmm(row5, m34.unsqueeze(0), m45.unsqueeze(0))); }});
  c.push_back({"baddbmm", {row5, m34.unsqueeze(0), m45.unsqueeze(0)}, {{"alpha", 2.0}},
               [=] { return one(baddbmm(row5, m34.unsqueeze(0), m45.unsqueeze(0), 1, 2)); }});
  c.push_back({"tensordot", {m34, m45, Shape{1}, Shape{0}}, {}, [=] { return one(tensordot(m34, m45, {1}, {0})); }});
  c.push_back({"kron", {m34, xt}, {}, [=] { return one(kron(m34, xt)); }});
  const Tensor sq = randn({2, 3, 3}) + 3 * eye(3), rhs = randn({2, 3, 2}), spd3 = matmul(sq, sq.transpose(-1, -2));
  c.push_back({"linalg_inv", {sq}, {}, [=] { return one(linalg::inv(sq)); }});
  c.push_back({"linalg_solve", {sq, rhs.transpose(-1, -2)}, {{"left", false}},
               [=] { return one(linalg::solve(sq, rhs.transpose(-1, -2), false)); }});
  c.push_back({"linalg_det", {sq}, {}, [=] { return one(linalg::det(sq)); }});
  c.push_back({"linalg_slogdet", {sq}, {}, [=] { return two(linalg::slogdet(sq)); }});
  c.push_back({"linalg_cholesky", {spd3}, {{"upper", true}}, [=] { return one(linalg::cholesky(spd3, true)); }});
  c.push_back({"linalg_qr", {m34, std::string("complete")}, {}, [=] { return two(linalg::qr(m34, "complete")); }});
  c.push_back({"linalg_eigh", {spd3}, {{"UPLO", std::string("U")}}, [=] { return two(linalg::eigh(spd3, "U")); }});
  c.push_back({"linalg_eigvalsh", {spd3}, {}, [=] { return one(linalg::eigvalsh(spd3)); }});
  c.push_back({"linalg_svd", {m34}, {{"full_matrices", false}}, [=] { return three(linalg::svd(m34, false)); }});
  c.push_back({"linalg_svdvals", {m34}, {}, [=] { return one(linalg::svdvals(m34)); }});
  c.push_back({"linalg_vector_norm", {m34, 3.0}, {{"dim", Shape{1}}}, [=] { return one(linalg::vector_norm(m34, 3, {1})); }});
  c.push_back({"linalg_matrix_norm", {sq, -1.0}, {}, [=] { return one(linalg::matrix_norm(sq, -1.0)); }});
  c.push_back({"linalg_matrix_norm.str_ord", {sq}, {{"ord", std::string("nuc")}},
               [=] { return one(linalg::matrix_norm(sq, "nuc")); }});
  c.push_back({"linalg_norm", {sq}, {{"dim", Shape{0, 2}}}, [=] { return one(linalg::norm(sq, std::nullopt, Shape{0, 2})); }});
  c.push_back({"linalg_norm.ord_str", {m34, std::string("fro")}, {}, [=] { return one(linalg::norm(m34, "fro")); }});
  // Meta outputs compare by metadata (expect_same reads no values of an empty list).
  c.push_back({"empty", {Shape{0, 3}}, {}, [] { return Results{empty({0, 3})}; }});
  c.push_back({"empty_strided", {Shape{2, 0}, Shape{1, 2}}, {}, [] { return Results{empty_strided({2, 0}, {1, 2})}; }});
  c.push_back({"empty_like", {empty({0, 2}, kInt64)}, {}, [] { return Results{empty({0, 2}, kInt64)}; }});

  c.push_back({"view", {m34, Shape{2, 6}}, {}, [=] { return one(m34.view({2, 6})); }});
  c.push_back({"reshape", {xt, Shape{-1}}, {}, [=] { return one(xt.reshape({-1})); }});
  c.push_back({"permute", {b234, Shape{2, 0, 1}}, {}, [=] { return one(b234.permute({2, 0, 1})); }});
  c.push_back({"transpose.int", {b234, int64_t{0}, int64_t{2}}, {}, [=] { return one(b234.transpose(0, 2)); }});
  c.push_back({"t", {xt}, {}, [=] { return one(xt.t()); }});
  c.push_back({"expand", {row, Shape{3, 4}}, {}, [=] { return one(row.expand({3, 4})); }});
  c.push_back({"slice.Tensor", {m34, int64_t{1}}, {{"start", int64_t{1}}, {"step", int64_t{2}}},
               [=] { return one(m34.slice(1, 1, std::nullopt, 2)); }});
  c.push_back({"narrow", {xt, int64_t{1}, int64_t{1}, int64_t{2}}, {}, [=] { return one(xt.narrow(1, 1, 2)); }});
  c.push_back({"select.int", {b234, int64_t{1}, int64_t{-1}}, {}, [=] { return one(b234.select(1, -1)); }});
  const Tensor ones_dims = randn({1, 3, 1});
  c.push_back({"squeeze", {ones_dims}, {}, [=] { return one(ones_dims.squeeze()); }});
  c.push_back({"squeeze.dim", {ones_dims, int64_t{2}}, {}, [=] { return one(ones_dims.squeeze(2)); }});
  c.push_back({"unsqueeze", {xt, int64_t{1}}, {}, [=] { return one(xt.unsqueeze(1)); }});
  c.push_back({"flatten.using_ints", {b234, int64_t{1}}, {}, [=] { return one(b234.flatten(1)); }});
  c.push_back({"unfold", {row, int64_t{0}, int64_t{2}, int64_t{1}}, {}, [=] { return one(row.unfold(0, 2, 1)); }});
  c.push_back({"as_strided", {m34, Shape{2, 2}, Shape{1, 4}}, {{"storage_offset", int64_t{1}}},
               [=] { return one(m34.as_strided({2, 2}, {1, 4}, 1)); }});
  c.push_back({"contiguous", {xt}, {}, [=] { return one(xt.contiguous()); }});
  c.push_back({"clone", {x}, {}, [=] { return one(x.clone()); }});
  c.push_back({"detach", {x}, {}, [=] { return one(x.detach()); }});
  c.push_back({"to.dtype", {x, kFloat16}, {}, [=] { return one(x.to(kFloat16)); }});
  c.push_back({"to.device", {x, Device(kCPU), kInt32}, {}, [=] { return one(x.to(kCPU, kInt32)); }});

  // In-place ops: each side writes its own clone.
  auto in_place = [&](const char* name, std::vector<IValue> rest, KwArgs kw, std::function<void(const Tensor&)> f,
                      const Tensor& base) {
    const Tensor mine = base.clone(), theirs = base.clone();
    rest.insert(rest.begin(), mine);
    c.push_back({name, rest, kw, [=] {
                   f(theirs);
                   return Results{theirs};
                 }});
  };
  in_place("copy_", {xt}, {}, [=](const Tensor& t) { t.copy_(xt); }, m34);
  in_place("fill_.Scalar", {2.5}, {}, [](const Tensor& t) { t.fill_(2.5); }, m34);
  in_place("zero_", {}, {}, [](const Tensor& t) { t.zero_(); }, x);
  in_place("add_.Tensor", {row}, {{"alpha", -1.0}}, [=](const Tensor& t) { t.add_(row, -1.0); }, x);
  in_place("add_.Scalar", {int64_t{2}}, {}, [](const Tensor& t) { t.add_(2); }, x);
  in_place("sub_.Tensor", {xt}, {}, [=](const Tensor& t) { t.sub_(xt); }, x);
  in_place("mul_.Tensor", {row}, {}, [=](const Tensor& t) { t.mul_(row); }, x);
  in_place("mul_.Scalar", {0.5}, {}, [](const Tensor& t) { t.mul_(0.5); }, x);
  in_place("div_.Tensor", {pos}, {}, [=](const Tensor& t) { t.div_(pos); }, x);
  in_place("div_.Scalar", {int64_t{3}}, {}, [](const Tensor& t) { t.div_(3); }, x);
  in_place("clamp_", {-1.0, 1.0}, {}, [](const Tensor& t) { t.clamp_(-1.0, 1.0); }, x);
  in_place("masked_fill_.Scalar", {mask, int64_t{4}}, {}, [=](const Tensor& t) { t.masked_fill_(mask, 4); }, x);
  in_place("neg_", {}, {}, [](const Tensor& t) { t.neg_(); }, x);
  in_place("exp_", {}, {}, [](const Tensor& t) { t.exp_(); }, x);
  in_place("relu_", {}, {}, [](const Tensor& t) { t.relu_(); }, x);

  const Tensor target = randint(0, 4, {3});
  c.push_back({"glu", {m34}, {{"dim", int64_t{1}}}, [=] { return one(nn::glu(m34, 1)); }});
  const Tensor slopes = rand({3});
  c.push_back({"prelu", {m34.t(), slopes}, {}, [=] { return one(nn::prelu(m34.t(), slopes)); }});
  c.push_back({"normalize", {m34}, {{"p", 3.0}, {"dim", int64_t{0}}}, [=] { return one(nn::normalize(m34, 3.0, 0)); }});
  c.push_back({"cosine_similarity", {m34, xt}, {}, [=] { return one(nn::cosine_similarity(m34, xt)); }});
  c.push_back({"pairwise_distance", {m34, xt}, {{"keepdim", true}},
               [=] { return one(nn::pairwise_distance(m34, xt, 2.0, 1e-6, true)); }});
  c.push_back({"dropout", {m34, 0.5, true}, {}, [=] { return one(nn::dropout(m34, 0.5, true)); }, true});
  const Tensor chans = randn({2, 3, 4}), vol = randn({1, 2, 3, 2, 2});
  c.push_back({"dropout1d", {chans}, {{"p", 0.4}}, [=] { return one(nn::dropout1d(chans, 0.4)); }, true});
  c.push_back({"dropout2d", {img}, {}, [=] { return one(nn::dropout2d(img)); }, true});
  c.push_back({"dropout3d", {vol, 0.3}, {}, [=] { return one(nn::dropout3d(vol, 0.3)); }, true});
  c.push_back({"alpha_dropout", {m34, 0.5, true}, {}, [=] { return one(nn::alpha_dropout(m34, 0.5, true)); }, true});
  c.push_back({"feature_alpha_dropout", {chans, 0.5, true}, {},
               [=] { return one(nn::feature_alpha_dropout(chans, 0.5, true)); }, true});
  c.push_back({"cross_entropy", {m34, target}, {{"label_smoothing", 0.1}},
               [=] { return one(nn::cross_entropy(m34, target, -100, 0.1)); }});
  c.push_back({"mse_loss", {xt, m34}, {{"reduction", std::string("sum")}}, [=] { return one(nn::mse_loss(xt, m34, "sum")); }});
  const Tensor w4 = rand({4}) + 0.5, probs = softmax(m34, 1), unit = rand({3, 4});
  c.push_back({"cross_entropy", {m34, probs, w4}, {}, [=] { return one(nn::cross_entropy(m34, probs, w4)); }});
  c.push_back({"nll_loss", {log_softmax(m34, 1), target, w4}, {{"ignore_index", int64_t{1}}},
               [=] { return one(nn::nll_loss(log_softmax(m34, 1), target, w4, 1)); }});
  c.push_back({"binary_cross_entropy", {unit, probs}, {}, [=] { return one(nn::binary_cross_entropy(unit, probs)); }});
  c.push_back({"binary_cross_entropy_with_logits", {m34, probs}, {{"pos_weight", w4}},
               [=] { return one(nn::binary_cross_entropy_with_logits(m34, probs, Tensor(), w4)); }});
  c.push_back({"l1_loss", {m34, unit}, {}, [=] { return one(nn::l1_loss(m34, unit)); }});
  c.push_back({"smooth_l1_loss", {m34, unit}, {{"beta", 0.5}}, [=] { return one(nn::smooth_l1_loss(m34, unit, "mean", 0.5)); }});
  c.push_back({"huber_loss", {m34, unit}, {{"delta", 0.5}}, [=] { return one(nn::huber_loss(m34, unit, "mean", 0.5)); }});
  c.push_back({"kl_div", {log_softmax(m34, 1), probs}, {{"reduction", std::string("batchmean")}},
               [=] { return one(nn::kl_div(log_softmax(m34, 1), probs, "batchmean")); }});
  c.push_back({"margin_ranking_loss", {m34, unit, sign(m34)}, {}, [=] { return one(nn::margin_ranking_loss(m34, unit, sign(m34))); }});
  const Tensor img2 = randn({1, 2, 4, 5});
  c.push_back({"im2col", {img2, Shape{2, 2}}, {{"stride", int64_t{2}}, {"padding", Shape{1, 0}}},
               [=] { return one(nn::unfold(img2, {2, 2}, {1, 1}, {1, 0}, {2, 2})); }});
  const Tensor cols2 = randn({1, 8, 12});
  c.push_back({"col2im", {cols2, Shape{4, 5}, Shape{2, 2}}, {},
               [=] { return one(nn::fold(cols2, {4, 5}, {2, 2})); }});
  c.push_back({"interpolate", {img2, Shape{3, 7}}, {{"mode", std::string("bilinear")}, {"align_corners", true}},
               [=] { return one(nn::interpolate(img2, Shape{3, 7}, {}, "bilinear", true)); }});
  const Tensor ctc_lp = log_softmax(randn({5, 2, 4}), 2), ctc_targets = tensor<int64_t>({1, 2, 3});
  const Tensor ctc_in = tensor<int64_t>({5, 4}), ctc_tl = tensor<int64_t>({2, 1});
  c.push_back({"ctc_loss", {ctc_lp, ctc_targets, ctc_in, ctc_tl}, {{"reduction", std::string("sum")}},
               [=] { return one(nn::ctc_loss(ctc_lp, ctc_targets, ctc_in, ctc_tl, 0, "sum")); }});
  const Tensor sig1 = randn({1, 2, 7}), k1 = randn({3, 2, 3}), img3 = randn({1, 2, 4, 5}), k2 = randn({4, 1, 3, 2});
  const Tensor vol3 = randn({1, 1, 3, 4, 4}), k3 = randn({2, 1, 2, 2, 2}), kt = randn({2, 3, 2, 2});
  c.push_back({"conv1d", {sig1, k1}, {{"stride", Shape{2}}}, [=] { return one(nn::conv1d(sig1, k1, {}, {2})); }});
  c.push_back({"conv2d", {img3, k2, randn({4}).fill_(0.5)}, {{"padding", int64_t{1}}, {"groups", int64_t{2}}},
               [=] { return one(nn::conv2d(img3, k2, full({4}, 0.5), {1}, {1}, {1}, 2)); }});
  c.push_back({"conv3d", {vol3, k3}, {{"dilation", Shape{1, 2, 1}}}, [=] { return one(nn::conv3d(vol3, k3, {}, {1}, {0}, {1, 2, 1})); }});
  c.push_back({"conv1d.padding", {sig1, k1}, {{"padding", std::string("same")}},
               [=] { return one(nn::conv1d(sig1, k1, {}, {1}, nn::Padding::Same)); }});
  c.push_back({"conv2d.padding", {img3, k2}, {{"padding", std::string("valid")}, {"groups", int64_t{2}}},
               [=] { return one(nn::conv2d(img3, k2, {}, {1}, nn::Padding::Valid, {1}, 2)); }});
  c.push_back({"conv3d.padding", {vol3, k3}, {{"padding", std::string("same")}},
               [=] { return one(nn::conv3d(vol3, k3, {}, {1}, nn::Padding::Same)); }});
  c.push_back({"conv_transpose1d", {sig1, k1.transpose(0, 1).contiguous()}, {{"stride", Shape{2}}},
               [=] { return one(nn::conv_transpose1d(sig1, k1.transpose(0, 1).contiguous(), {}, {2})); }});
  c.push_back({"conv_transpose2d.input", {img3, kt}, {{"stride", int64_t{2}}, {"output_padding", int64_t{1}}},
               [=] { return one(nn::conv_transpose2d(img3, kt, {}, {2}, {0}, {1})); }});
  c.push_back({"conv_transpose3d.input", {vol3, k3.transpose(0, 1)}, {{"padding", int64_t{1}}},
               [=] { return one(nn::conv_transpose3d(vol3, k3.transpose(0, 1), {}, {1}, {1})); }});
  const Tensor pool_in = randn({1, 2, 6, 7}), ch2 = rand({2}) + 0.5;
  c.push_back({"max_pool1d", {sig1, Shape{3}}, {{"stride", Shape{2}}}, [=] { return one(nn::max_pool1d(sig1, {3}, {2})); }});
  c.push_back({"max_pool2d", {pool_in, Shape{3, 2}}, {{"padding", Shape{1}}, {"ceil_mode", true}},
               [=] { return one(nn::max_pool2d(pool_in, {3, 2}, {}, {1}, {1}, true)); }});
  c.push_back({"max_pool3d", {vol3, Shape{2}}, {}, [=] { return one(nn::max_pool3d(vol3, {2})); }});
  c.push_back({"max_pool1d_with_indices", {sig1, Shape{2}}, {}, [=] { return two(nn::max_pool1d_with_indices(sig1, {2})); }});
  c.push_back({"max_pool2d_with_indices", {pool_in, Shape{2}}, {{"dilation", Shape{2}}},
               [=] { return two(nn::max_pool2d_with_indices(pool_in, {2}, {}, {0}, {2})); }});
  c.push_back({"avg_pool1d", {sig1, Shape{2}}, {{"padding", Shape{1}}}, [=] { return one(nn::avg_pool1d(sig1, {2}, {}, {1})); }});
  c.push_back({"avg_pool2d", {pool_in, Shape{3}}, {{"padding", Shape{1}}, {"count_include_pad", false}},
               [=] { return one(nn::avg_pool2d(pool_in, {3}, {}, {1}, false, false)); }});
  c.push_back({"avg_pool3d", {vol3, Shape{2}}, {{"divisor_override", int64_t{3}}},
               [=] { return one(nn::avg_pool3d(vol3, {2}, {}, {0}, false, true, 3)); }});
  c.push_back({"adaptive_avg_pool1d", {sig1, Shape{3}}, {}, [=] { return one(nn::adaptive_avg_pool1d(sig1, {3})); }});
  c.push_back({"adaptive_avg_pool2d", {pool_in, Shape{4, 3}}, {}, [=] { return one(nn::adaptive_avg_pool2d(pool_in, {4, 3})); }});
  c.push_back({"adaptive_max_pool2d", {pool_in, Shape{2}}, {}, [=] { return two(nn::adaptive_max_pool2d(pool_in, {2})); }});
  c.push_back({"batch_norm", {pool_in, ch2, ch2 + 1.0, ch2, ch2}, {{"eps", 0.01}},
               [=] { return one(nn::batch_norm(pool_in, ch2, ch2 + 1.0, ch2, ch2, false, 0.1, 0.01)); }});
  c.push_back({"group_norm", {pool_in, int64_t{1}}, {{"weight", ch2}}, [=] { return one(nn::group_norm(pool_in, 1, ch2)); }});
  c.push_back({"instance_norm", {pool_in}, {{"bias", ch2}}, [=] { return one(nn::instance_norm(pool_in, {}, {}, {}, ch2)); }});
  const Tensor pm1 = tensor<int64_t>({1, -1, 1});
  c.push_back({"cosine_embedding_loss", {m34, unit, pm1}, {{"margin", 0.1}},
               [=] { return one(nn::cosine_embedding_loss(m34, unit, pm1, 0.1)); }});
  return c;
}

TEST(CallOp, EveryPublicOpByNameGivesWhatItsFunctionGives) {
  manual_seed(11);
  std::set<std::string> called;
  for (const Case& c : cases()) {
    ASSERT_NE(find_public_op(c.op), nullptr) << c.op;
    called.insert(c.op);
    if (c.random) manual_seed(99);
    const std::vector<IValue> got = call_op(c.op, c.args, c.kwargs);
    if (c.random) manual_seed(99);
    const Results want = c.direct();
    std::vector<Tensor> flat;
    for (const IValue& v : got) {
      if (const auto* t = std::get_if<Tensor>(&v)) flat.push_back(*t);
      else if (const auto* l = std::get_if<std::vector<Tensor>>(&v)) flat.insert(flat.end(), l->begin(), l->end());
      else if (const auto* d = std::get_if<DType>(&v)) flat.push_back(dtype_code(*d));
    }
    ASSERT_EQ(flat.size(), want.size()) << c.op;
    for (size_t i = 0; i < want.size(); ++i) expect_same(flat[i], want[i], c.op + " output " + std::to_string(i));
  }
  for (const PublicOp* op : public_ops()) EXPECT_TRUE(called.count(op->name)) << op->name << " is not tested by name";
}

TEST(CallOp, ANameWithoutItsOverloadPicksTheOverloadTheArgumentsFit) {
  const Tensor x = randn({2, 3}), y = randn({3});
  expect_same(std::get<Tensor>(call_op("pow", {x, int64_t{2}})[0]), pow(x, 2), "pow.Tensor_Scalar");
  expect_same(std::get<Tensor>(call_op("pow", {x.abs(), y})[0]), pow(x.abs(), y), "pow.Tensor_Tensor");
  expect_same(std::get<Tensor>(call_op("add", {x, y})[0]), add(x, y), "add.Tensor");
  EXPECT_EQ(call_op("max", {x})[0].index(), IValue(x).index());
  EXPECT_EQ(call_op("max", {x, int64_t{1}}).size(), 2u);
  EXPECT_EQ(std::get<DType>(call_op("result_type", {x, y.to(kFloat64)})[0]), kFloat64);
  EXPECT_TRUE(std::get<Tensor>(call_op("zeros", {Shape{2}}, {{"device", Device(kMeta)}})[0]).is_meta());
}

TEST(CallOp, ACallByNameRecordsGradientsAsTheFunctionDoes) {
  const Tensor a = randn({3, 4}, kFloat64).requires_grad_(), b = randn({4, 2}, kFloat64).requires_grad_();
  const Tensor out = std::get<Tensor>(call_op("matmul", {a, b})[0]);
  std::get<Tensor>(call_op("sum", {std::get<Tensor>(call_op("tanh", {out})[0])})[0]).backward();
  const Tensor ga = a.grad(), gb = b.grad();
  a.set_grad({}), b.set_grad({});
  tanh(matmul(a, b)).sum().backward();
  expect_same(ga, a.grad(), "grad a");
  expect_same(gb, b.grad(), "grad b");
}

TEST(CallOp, BindingErrorsNameTheOpAndWhatDidNotFit) {
  const Tensor x = randn({2});
  expect_error([&] { call_op("nope", {x}); }, {"[call_op]", "no public op is named 'nope'"});
  expect_error([&] { call_op("gelu", {x}, {{"approx", std::string("tanh")}}); },
               {"[call_op]", "'gelu'", "unexpected keyword argument 'approx'"});
  expect_error([&] { call_op("relu", {x, x}); }, {"relu", "at most 1 positional arguments but 2 were given"});
  expect_error([&] { call_op("softmax", {x}); }, {"softmax.int", "missing the argument 'dim' (int)"});
  expect_error([&] { call_op("cumsum", {x, 1.5}); }, {"cumsum", "argument 'dim' must be int, not float"});
  expect_error([&] { call_op("gelu", {x}, {{"self", x}}); }, {"multiple values for argument 'self'"});
  expect_error([&] { call_op("pow", {x, std::string("two")}); },
               {"no overload of 'pow'", "pow.Tensor_Scalar: argument 'exponent' must be Scalar, not str",
                "pow.Tensor_Tensor: argument 'exponent' must be Tensor, not str"});
  expect_error([&] { call_op("add.Nope", {x, x}); }, {"no public op is named 'add.Nope'"});
  // The front end's own checks still run.
  expect_error([&] { call_op("mm", {randn({2, 3}), randn({2, 3})}); }, {"[mm]"});
  expect_error([&] { register_public_op("relu(Tensor self) -> Tensor", find_public_op("relu")->fn); }, {"registered twice"});
}

}  // namespace
}  // namespace kiln::test
