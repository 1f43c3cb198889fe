// Random factories and multinomial. Each call reserves a block of Philox
// counters from the default generator, so results depend only on the seed
// and the sequence of calls, never on the thread count.
#include <mutex>

#include "kiln/runtime.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

std::mutex gen_mu;

OpDef random_def(const char* name, const char* schema) {
  return OpDef{name, schema, OpKind::Compute, ops::from_size_attrs};
}
const OpDef& kRand = register_op(random_def("rand", "rand(int[] size, int seed, int offset, bool normal, *, ScalarType dtype, Device device) -> Tensor"));
const OpDef& kRandint = register_op(random_def("randint", "randint(int low, int high, int[] size, int seed, int offset, *, ScalarType dtype, Device device) -> Tensor"));

std::vector<TensorMeta> multinomial_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  s.back() = a.get_int("num_samples");
  return ops::one_output(s, kInt64);
}
const OpDef& kMultinomial = register_op(OpDef{"multinomial", "multinomial(Tensor self, int num_samples, bool replacement, int seed, int offset) -> Tensor",
                                              OpKind::Compute, multinomial_shape});

// Seed and first counter for a call needing n counters.
Attrs draw(int64_t n) {
  std::lock_guard<std::mutex> lock(gen_mu);
  Generator& g = default_generator();
  const uint64_t off = g.reserve(static_cast<uint64_t>(n));
  return Attrs{{"seed", static_cast<int64_t>(g.seed())}, {"offset", static_cast<int64_t>(off)}};
}

Tensor random_tensor(const OpDef& op, Shape sizes, DType dtype, Device device, Attrs a) {
  shape_nbytes(sizes, dtype, op.name.c_str());  // before any counters are drawn
  // Meta tensors have no values: they draw no counters, as in PyTorch, so
  // building a model on meta leaves the generator where it was.
  Attrs d = device.is_meta() ? Attrs{{"seed", int64_t{0}}, {"offset", int64_t{0}}} : draw(shape_numel(sizes));
  for (auto& [k, v] : d.items()) a.set(k, v);
  a.set("size", std::move(sizes));
  a.set("dtype", dtype);
  a.set("device", device);
  return dispatch1(op, std::span<const Tensor>(), a);
}

}  // namespace

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(gen_mu);
  default_generator().manual_seed(seed);
}

Tensor rand(Shape sizes, TensorOptions options) {
  const DType dtype = options.dtype_or(kFloat32);
  check(is_floating(dtype), "rand", "expected a floating point dtype but got ", dtype);
  return random_tensor(kRand, std::move(sizes), dtype, options.device_or_default(), {{"normal", false}});
}

Tensor randn(Shape sizes, TensorOptions options) {
  const DType dtype = options.dtype_or(kFloat32);
  check(is_floating(dtype), "randn", "expected a floating point dtype but got ", dtype);
  return random_tensor(kRand, std::move(sizes), dtype, options.device_or_default(), {{"normal", true}});
}

Tensor randint(int64_t low, int64_t high, Shape sizes, TensorOptions options) {
  const DType dtype = options.dtype_or(kInt64);
  check(high > low, "randint", "expected low < high but got low=", low, " and high=", high);
  check(dtype != kBool, "randint", "bool is not a valid dtype for randint");
  return random_tensor(kRandint, std::move(sizes), dtype, options.device_or_default(), {{"low", low}, {"high", high}});
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  check(probs.dim() == 1 || probs.dim() == 2, "multinomial", "expected a 1-D or 2-D probability tensor but got shape ",
        ops::shape_text(probs.sizes()));
  check(is_floating(probs.dtype()), "multinomial", "expected floating point probabilities but got ", probs.dtype());
  check(num_samples > 0, "multinomial", "cannot sample ", num_samples, " samples");
  check(probs.size(-1) > 0, "multinomial", "the probability tensor has no categories");
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  Attrs a = draw(rows * num_samples);
  a.set("num_samples", num_samples);
  a.set("replacement", replacement);
  return dispatch1(kMultinomial, std::span<const Tensor>(&probs, 1), a);
}

}  // namespace kiln
