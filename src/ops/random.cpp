// Random factories and multinomial. Each call reserves a block of Philox
// counters from the default generator, so results depend only on the seed
// and the sequence of calls, never on the thread count.
#include <limits>
#include <mutex>

#include "kiln/runtime.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

std::mutex gen_mu;

OpDef random_def(const char* name, const char* schema) {
  return ops::with_backward(OpDef{name, schema, OpKind::Compute, ops::from_size_attrs}, &autograd::kNotDifferentiable);
}
const OpDef& kRand = register_op(random_def("rand", "rand(int[] size, int seed, int offset, bool normal, *, ScalarType dtype, Device device) -> Tensor"));
const OpDef& kRandint = register_op(random_def("randint", "randint(int low, int high, int[] size, int seed, int offset, *, ScalarType dtype, Device device) -> Tensor"));

std::vector<TensorMeta> multinomial_shape(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  s.back() = a.get_int("num_samples");
  return ops::one_output(s, kInt64);
}
const OpDef& kMultinomial = register_op(ops::with_backward(
    OpDef{"multinomial", "multinomial(Tensor self, int num_samples, bool replacement, int seed, int offset) -> Tensor",
          OpKind::Compute, multinomial_shape},
    &autograd::kNotDifferentiable));

// Seed and first counter for a call needing n counters.
Attrs draw(int64_t n, Generator& g) {
  std::lock_guard<std::mutex> lock(gen_mu);
  const uint64_t off = g.reserve(static_cast<uint64_t>(n));
  return Attrs{{"seed", static_cast<int64_t>(g.seed())}, {"offset", static_cast<int64_t>(off)}};
}

Tensor random_tensor(const OpDef& op, Shape sizes, DType dtype, Device device, Generator& g, Attrs a) {
  shape_nbytes(sizes, dtype, op.name.c_str());  // before any counters are drawn
  // Meta tensors have no values: they draw no counters, as in PyTorch, so
  // building a model on meta leaves the generator where it was.
  Attrs d = device.is_meta() ? Attrs{{"seed", int64_t{0}}, {"offset", int64_t{0}}} : draw(shape_numel(sizes), g);
  for (auto& [k, v] : d.items()) a.set(k, v);
  a.set("size", std::move(sizes));
  a.set("dtype", dtype);
  a.set("device", device);
  return dispatch1(op, std::span<const Tensor>(), a);
}

constexpr int64_t kStateBytes = 16;

// The largest m such that 0 .. m are all exact in `dtype`.
int64_t largest_exact_integer(DType dtype) {
  switch (dtype) {
    case DType::UInt8: return 255;
    case DType::Int8: return 127;
    case DType::Int16: return 32767;
    case DType::Int32: return std::numeric_limits<int32_t>::max();
    case DType::Float16: return 2048;
    case DType::BFloat16: return 256;
    case DType::Float32: return int64_t{1} << 24;
    case DType::Float64: return int64_t{1} << 53;
    default: return std::numeric_limits<int64_t>::max() - 1;
  }
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

Tensor Generator::get_state() const {
  Tensor t = empty({kStateBytes}, kUInt8);
  uint8_t* p = t.data_ptr<uint8_t>();
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<uint8_t>(seed_ >> (8 * i));
    p[8 + i] = static_cast<uint8_t>(offset_ >> (8 * i));
  }
  return t;
}

void Generator::set_state(const Tensor& state) {
  check(state.defined(), "Generator.set_state", "expected a state tensor but got an undefined tensor");
  check(state.dtype() == kUInt8 && state.dim() == 1 && state.numel() == kStateBytes && state.device().is_cpu(),
        "Generator.set_state", "expected a CPU uint8 tensor of shape [", kStateBytes,
        "] (the seed and the offset, as get_state gives) but got ", state.dtype(), " of shape ",
        ops::shape_text(state.sizes()), " on ", state.device());
  const Tensor c = state.contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  uint64_t seed = 0, offset = 0;
  for (int i = 0; i < 8; ++i) {
    seed |= static_cast<uint64_t>(p[i]) << (8 * i);
    offset |= static_cast<uint64_t>(p[8 + i]) << (8 * i);
  }
  seed_ = seed, offset_ = offset;
}

Tensor get_rng_state() {
  std::lock_guard<std::mutex> lock(gen_mu);
  return default_generator().get_state();
}

void set_rng_state(const Tensor& state) {
  std::lock_guard<std::mutex> lock(gen_mu);
  default_generator().set_state(state);
}

Tensor rand(Shape sizes, TensorOptions options) { return rand(std::move(sizes), default_generator(), options); }
Tensor randn(Shape sizes, TensorOptions options) { return randn(std::move(sizes), default_generator(), options); }
Tensor randint(int64_t low, int64_t high, Shape sizes, TensorOptions options) {
  return randint(low, high, std::move(sizes), default_generator(), options);
}
Tensor randperm(int64_t n, TensorOptions options) { return randperm(n, default_generator(), options); }

Tensor rand(Shape sizes, Generator& generator, TensorOptions options) {
  const DType dtype = options.dtype_or(kFloat32);
  check(is_floating(dtype), "rand", "expected a floating point dtype but got ", dtype);
  return random_tensor(kRand, std::move(sizes), dtype, options.device_or_default(), generator, {{"normal", false}});
}

Tensor randn(Shape sizes, Generator& generator, TensorOptions options) {
  const DType dtype = options.dtype_or(kFloat32);
  check(is_floating(dtype), "randn", "expected a floating point dtype but got ", dtype);
  return random_tensor(kRand, std::move(sizes), dtype, options.device_or_default(), generator, {{"normal", true}});
}

Tensor randint(int64_t low, int64_t high, Shape sizes, Generator& generator, TensorOptions options) {
  const DType dtype = options.dtype_or(kInt64);
  check(high > low, "randint", "expected low < high but got low=", low, " and high=", high);
  check(dtype != kBool, "randint", "bool is not a valid dtype for randint");
  return random_tensor(kRandint, std::move(sizes), dtype, options.device_or_default(), generator,
                       {{"low", low}, {"high", high}});
}

// An argsort of n random 62-bit keys: every permutation equally likely up to
// key collisions (probability about n^2 / 2^63, and a collision only keeps
// two indices in order), computed in parallel by the sort.
Tensor randperm(int64_t n, Generator& generator, TensorOptions options) {
  const DType dtype = options.dtype_or(kInt64);
  check(n >= 0, "randperm", "expected a non-negative n but got ", n);
  check(dtype != kBool, "randperm", "bool is not a valid dtype for randperm");
  check(n <= largest_exact_integer(dtype) + 1, "randperm", "n = ", n, " does not fit in ", dtype, " (values up to ",
        largest_exact_integer(dtype), ")");
  const Tensor keys = randint(0, int64_t{1} << 62, {n}, generator, TensorOptions().device(options.device_or_default()));
  const Tensor perm = argsort(keys);
  return dtype == kInt64 ? perm : perm.to(dtype);
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  check(probs.dim() == 1 || probs.dim() == 2, "multinomial", "expected a 1-D or 2-D probability tensor but got shape ",
        ops::shape_text(probs.sizes()));
  check(is_floating(probs.dtype()), "multinomial", "expected floating point probabilities but got ", probs.dtype());
  check(num_samples > 0, "multinomial", "cannot sample ", num_samples, " samples");
  check(probs.size(-1) > 0, "multinomial", "the probability tensor has no categories");
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  Attrs a = draw(rows * num_samples, default_generator());
  a.set("num_samples", num_samples);
  a.set("replacement", replacement);
  return dispatch1(kMultinomial, std::span<const Tensor>(&probs, 1), a);
}

// In-place fills: a draw of the tensor's shape and dtype written back.
namespace {
Generator& chosen(Generator* g) { return g ? *g : default_generator(); }
void check_floating_fill(const Tensor& t, const char* op) {
  check(is_floating(t.dtype()), op, "expected a floating point tensor but got ", t.dtype());
}
}  // namespace

const Tensor& Tensor::normal_(double mean, double std, Generator* generator, SourceLocation where) const {
  const detail::ApiCall call(where);
  check_floating_fill(*this, "normal_");
  check(std >= 0, "normal_", "expected std >= 0 but got ", std);
  const Tensor draw = randn(sizes(), chosen(generator), TensorOptions(kFloat64).device(device()));
  return copy_(draw * std + mean);
}
const Tensor& Tensor::uniform_(double from, double to, Generator* generator, SourceLocation where) const {
  const detail::ApiCall call(where);
  check_floating_fill(*this, "uniform_");
  check(from <= to, "uniform_", "expected from <= to but got from=", from, " to=", to);
  const Tensor draw = rand(sizes(), chosen(generator), TensorOptions(kFloat64).device(device()));
  return copy_(draw * (to - from) + from);
}
const Tensor& Tensor::bernoulli_(double p, Generator* generator, SourceLocation where) const {
  const detail::ApiCall call(where);
  check(p >= 0 && p <= 1, "bernoulli_", "expected 0 <= p <= 1 but got ", p);
  const Tensor draw = rand(sizes(), chosen(generator), TensorOptions(kFloat64).device(device()));
  return copy_(lt(draw, wrapped_scalar(p)));
}

}  // namespace kiln
