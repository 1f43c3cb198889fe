// The random program generator and the eager-versus-compiled comparison of
// the differential tester (see random_program.h).
#include "compile/random_program.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

const char* const kUnary[] = {"neg",  "abs", "exp", "tanh",    "sigmoid", "relu", "gelu",  "gelu_tanh", "silu",
                              "sin",  "cos", "square", "erf",  "log",     "sqrt", "rsqrt", "reciprocal"};
const char* const kBinary[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
const char* const kReduce[] = {"sum", "mean", "amax"};
const char* const kScalar[] = {"add", "mul", "sub", "rdiv"};
const char* const kInPlace[] = {"mul_", "add_"};
constexpr int kUnaryCommon = 13;  // the ones before log, sqrt, rsqrt, reciprocal (NaN and inf makers)

Tensor unary(int op, const Tensor& x) {
  switch (op) {
    case 0: return neg(x);
    case 1: return abs(x);
    case 2: return exp(x);
    case 3: return tanh(x);
    case 4: return sigmoid(x);
    case 5: return relu(x);
    case 6: return gelu(x);
    case 7: return gelu(x, "tanh");
    case 8: return silu(x);
    // Arguments bounded: sin and cos of 1e30 amplify a one-ulp difference of
    // their argument (exp computed by another polynomial) into any value.
    case 9: return sin(clamp(x, -1e3, 1e3));
    case 10: return cos(clamp(x, -1e3, 1e3));
    case 11: return square(x);
    case 12: return erf(x);
    case 13: return log(x);
    case 14: return sqrt(x);
    case 15: return rsqrt(x);
    default: return reciprocal(x);
  }
}

Tensor binary(int op, const Tensor& a, const Tensor& b, double alpha) {
  switch (op) {
    case 0: return add(a, b, alpha);
    case 1: return sub(a, b, alpha);
    case 2: return a * b;
    case 3: return a / b;
    case 4: return maximum(a, b);
    default: return minimum(a, b);
  }
}

// A symbol's size in table t; symbols past kSymbols are products of two others.
struct Sizes {
  const Program& p;
  int table;
  int64_t of(int sym) const {
    if (sym < kSymbols) return p.sizes[table][sym];
    const auto [a, b] = p.products[static_cast<size_t>(sym - kSymbols)];
    return of(a) * of(b);
  }
  Shape shape(const SymShape& s) const {
    Shape out;
    for (int x : s) out.push_back(of(x));
    return out;
  }
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed * 0x9E3779B97F4A7C15ull + 1) {
    p_.seed = seed;
    p_.dynamic = chance(0.25);
    p_.backend = chance(0.75) ? "cpp" : "interpreter";
    static const int64_t kSizes[] = {2, 3, 4, 5, 7, 8, 16, 33};
    for (auto& table : p_.sizes) {
      table[0] = 1;
      for (int s = 1; s < kSymbols; ++s) table[s] = kSizes[pick(8)];
    }
  }

  Program run() {
    const int first_inputs = 1 + pick(3);
    for (int i = 0; i < first_inputs; ++i) new_input(random_shape());
    const int steps = 3 + pick(12);
    for (int s = 0; s < steps; ++s) {
      // A step whose values would exceed kMaxElements in either table (a
      // broadcast of two flattened dims: program 63552 needed 5 GB) is
      // taken back; programs without one are as before.
      const Program before = p_;
      const size_t values = shapes_.size();
      step();
      for (size_t v = values; v < shapes_.size(); ++v)
        if (largest_numel(shapes_[v]) > kMaxElements) {
          p_ = before;
          shapes_.resize(values);
          overlapping_.resize(values);
          break;
        }
    }
    // Outputs: the last value and up to two more, preferring late ones.
    const int n = static_cast<int>(shapes_.size());
    p_.outputs.push_back(n - 1);
    for (int k = pick(3); k > 0; --k) {
      const int v = std::max(0, n - 1 - pick(std::min(n, 6)));
      if (std::find(p_.outputs.begin(), p_.outputs.end(), v) == p_.outputs.end()) p_.outputs.push_back(v);
    }
    for (size_t i = 0; i < p_.outputs.size(); ++i) p_.loss_outputs.push_back(i == 0 || chance(0.5));
    return p_;
  }

 private:
  int pick(int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng_)); }
  bool chance(double q) { return std::uniform_real_distribution<double>(0, 1)(rng_) < q; }
  int sym() { return 1 + pick(kSymbols - 1); }
  static constexpr int64_t kMaxElements = int64_t{1} << 22;
  int64_t largest_numel(const SymShape& s) const {
    int64_t most = 0;
    for (int table = 0; table < 2; ++table) most = std::max(most, shape_numel(Sizes{p_, table}.shape(s)));
    return most;
  }
  SymShape random_shape() {
    SymShape s;
    for (int d = 1 + pick(3); d > 0; --d) s.push_back(chance(0.2) ? 0 : sym());
    return s;
  }
  // A value, recent ones more often.
  int operand() {
    const int n = static_cast<int>(shapes_.size());
    return chance(0.6) ? n - 1 - pick(std::min(n, 3)) : pick(n);
  }
  int add_value(Step s, SymShape shape, bool overlapping = false) {
    p_.steps.push_back(std::move(s));
    shapes_.push_back(std::move(shape));
    overlapping_.push_back(overlapping);
    return static_cast<int>(shapes_.size()) - 1;
  }
  int new_input(SymShape shape) {
    InputSpec in{shape, chance(0.5), pick(4), chance(0.2)};
    if (in.layout == 1 && shape.size() < 2) in.layout = 0;
    if (in.layout == 3 && std::find(shape.begin(), shape.end(), 0) == shape.end()) in.layout = 0;  // nothing to expand
    p_.inputs.push_back(in);
    Step s(StepKind::Input);
    s.op = static_cast<int>(p_.inputs.size()) - 1;
    return add_value(s, shape, in.layout == 3);
  }
  static bool broadcastable(const SymShape& a, const SymShape& b) {
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      const int x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
      if (x != y && x != 0 && y != 0) return false;
    }
    return true;
  }
  static SymShape broadcast(const SymShape& a, const SymShape& b) {
    SymShape out(std::max(a.size(), b.size()), 0);
    for (size_t i = 0; i < out.size(); ++i) {
      const int x = i < a.size() ? a[a.size() - 1 - i] : 0, y = i < b.size() ? b[b.size() - 1 - i] : 0;
      out[out.size() - 1 - i] = x != 0 ? x : y;
    }
    return out;
  }
  // A partner for a that broadcasts with it: a value of the program, or a
  // new input shaped like a with some dims 1 or dropped.
  int partner(int a, bool to_a_shape) {
    std::vector<int> fits;
    for (int v = 0; v < static_cast<int>(shapes_.size()); ++v) {
      if (!broadcastable(shapes_[a], shapes_[v])) continue;
      if (to_a_shape && broadcast(shapes_[a], shapes_[v]) != shapes_[a]) continue;
      fits.push_back(v);
    }
    if (!fits.empty() && chance(0.7)) return fits[pick(static_cast<int>(fits.size()))];
    SymShape s = shapes_[a];
    if (!s.empty() && chance(0.3)) s.erase(s.begin(), s.begin() + pick(static_cast<int>(s.size())));
    for (int& d : s)
      if (chance(0.3)) d = 0;
    if (!to_a_shape && chance(0.2)) s.insert(s.begin(), sym());
    return new_input(s);
  }

  void step() {
    const int kind = pick(100);
    Step s(StepKind::Unary);
    s.a = operand();
    const SymShape sa = shapes_[s.a];  // a copy: new inputs grow shapes_
    const int rank = static_cast<int>(sa.size());
    if (kind < 22) {
      s.kind = StepKind::Unary;
      s.op = chance(0.9) ? pick(kUnaryCommon) : kUnaryCommon + pick(4);
      add_value(s, sa);
    } else if (kind < 42) {
      s.kind = StepKind::Binary;
      s.op = pick(6);
      s.scalar = s.op < 2 ? (chance(0.7) ? 1.0 : -0.5) : 1.0;
      // Not a / a or a - a: their gradients cancel exactly in exact math,
      // leaving rounding noise amplified by 1 / a that no two evaluation
      // orders share.
      do s.b = partner(s.a, false);
      while (s.b == s.a && (s.op == 1 || s.op == 3));
      if (chance(0.5)) std::swap(s.a, s.b);
      add_value(s, broadcast(shapes_[s.a], shapes_[s.b]));
    } else if (kind < 50) {
      s.kind = StepKind::Scalar;
      s.op = pick(4);
      s.scalar = chance(0.5) ? 2.0 : -0.75;
      add_value(s, sa);
    } else if (kind < 58 && rank >= 1) {
      s.kind = StepKind::Reduce;
      s.op = pick(3);
      s.dim = chance(0.5) ? -1 : pick(rank);
      s.keepdim = chance(0.5);
      SymShape out = sa;
      const int d = s.dim < 0 ? rank - 1 : s.dim;
      if (s.keepdim) out[d] = 0;
      else out.erase(out.begin() + d);
      add_value(s, out);
    } else if (kind < 62 && rank >= 2) {
      s.kind = StepKind::Transpose;
      s.dim = pick(rank - 1);
      SymShape out = sa;
      std::swap(out[s.dim], out[rank - 1]);
      add_value(s, out, overlapping_[s.a]);
    } else if (kind < 65 && rank < 4) {
      s.kind = StepKind::Unsqueeze;
      s.dim = pick(rank + 1);
      SymShape out = sa;
      out.insert(out.begin() + s.dim, 0);
      add_value(s, out, overlapping_[s.a]);
    } else if (kind < 68 && rank >= 1) {
      s.kind = StepKind::Narrow;  // the first element along dim: a size-1 view
      s.dim = pick(rank);
      SymShape out = sa;
      out[s.dim] = 0;
      add_value(s, out, overlapping_[s.a]);
    } else if (kind < 71 && std::find(sa.begin(), sa.end(), 0) != sa.end()) {
      s.kind = StepKind::Expand;
      s.shape = sa;
      for (int& d : s.shape)
        if (d == 0 && chance(0.7)) d = sym();
      add_value(s, s.shape, true);
    } else if (kind < 75 && rank >= 2) {
      s.kind = StepKind::Reshape;  // flatten the last two dims
      auto& products = p_.products;
      products.emplace_back(sa[rank - 2], sa[rank - 1]);
      s.shape = SymShape(sa.begin(), sa.end() - 2);
      s.shape.push_back(kSymbols + static_cast<int>(products.size()) - 1);
      if (sa[rank - 2] == 0) s.shape.back() = sa[rank - 1];  // 1 * n is n
      else if (sa[rank - 1] == 0) s.shape.back() = sa[rank - 2];
      add_value(s, s.shape);
    } else if (kind < 82 && rank >= 1) {
      s.kind = StepKind::Matmul;
      const int n = chance(0.2) ? 0 : sym();
      s.b = new_input({sa.back(), n});
      SymShape out(sa.begin(), sa.end() - 1);
      out.push_back(n);
      const int mm = add_value(s, out);
      if (chance(0.6)) {  // a linear layer's bias add, which the backend may fold into the GEMM
        Step bias(StepKind::Binary);
        bias.op = 0;
        bias.scalar = 1.0;
        bias.a = mm;
        bias.b = -1;
        for (int v = 0; v < static_cast<int>(shapes_.size()); ++v)
          if (shapes_[v] == SymShape{n} && chance(0.5)) bias.b = v;
        if (bias.b < 0) bias.b = new_input({n});
        if (chance(0.3)) {
          Step scaled(StepKind::Scalar);
          scaled.op = 1;
          scaled.scalar = 2.0;
          scaled.a = bias.b;
          bias.b = add_value(scaled, {n});
        }
        add_value(bias, out);
      }
    } else if (kind < 86 && rank >= 1 && sa.back() != 0) {
      s.kind = StepKind::LayerNorm;
      s.op = pick(2);  // layer_norm, rms_norm
      auto param = [&]() {
        if (chance(0.3)) return -1;
        for (int v = 0; v < static_cast<int>(shapes_.size()); ++v)
          if (shapes_[v] == SymShape{sa.back()} && chance(0.4)) return v;
        return new_input({sa.back()});
      };
      s.b = param();
      if (s.op == 0 && s.b >= 0) s.c = param();
      add_value(s, shapes_[s.a]);
    } else if (kind < 89 && rank >= 1) {
      s.kind = StepKind::Softmax;
      s.dim = chance(0.7) ? -1 : pick(rank);
      add_value(s, sa);
    } else if (kind < 95) {
      s.kind = StepKind::InPlace;  // under no_grad
      std::vector<int> targets;
      for (int v = 0; v < static_cast<int>(shapes_.size()); ++v)
        if (!overlapping_[v]) targets.push_back(v);
      if (targets.empty()) return;
      s.a = targets[pick(static_cast<int>(targets.size()))];
      s.op = pick(2);
      s.scalar = chance(0.5) ? 3.0 : -0.5;
      if (s.op == 1) s.b = partner(s.a, true);
      add_value(s, shapes_[s.a]);
    } else if (kind < 97) {
      s.kind = StepKind::Detach;
      add_value(s, sa, overlapping_[s.a]);
    } else if (kind < 99) {
      s.kind = StepKind::Break;
      add_value(s, sa, overlapping_[s.a]);
    } else {
      s.kind = StepKind::Item;
      add_value(s, sa);
    }
  }

  std::mt19937_64 rng_;
  Program p_;
  std::vector<SymShape> shapes_;
  std::vector<bool> overlapping_;  // views whose elements may share memory (expanded): never written
};

// The program's function of its inputs (the same code runs eagerly and
// under kiln::compile).
std::vector<Tensor> evaluate(const Program& p, int table, const std::vector<Tensor>& args) {
  const Sizes sizes{p, table};
  std::vector<Tensor> v;
  for (const Step& s : p.steps) {
    const Tensor& a = s.a >= 0 ? v[s.a] : Tensor();
    switch (s.kind) {
      case StepKind::Unary: v.push_back(unary(s.op, a)); break;
      case StepKind::Binary: v.push_back(binary(s.op, a, v[s.b], s.scalar)); break;
      case StepKind::Scalar:
        v.push_back(s.op == 0 ? a + s.scalar : s.op == 1 ? a * s.scalar : s.op == 2 ? a - s.scalar : s.scalar / a);
        break;
      case StepKind::Reduce:
        v.push_back(s.op == 0   ? sum(a, {s.dim}, s.keepdim)
                    : s.op == 1 ? mean(a, {s.dim}, s.keepdim)
                                : amax(a, {s.dim}, s.keepdim));
        break;
      case StepKind::Transpose: v.push_back(a.transpose(s.dim, -1)); break;
      case StepKind::Unsqueeze: v.push_back(a.unsqueeze(s.dim)); break;
      case StepKind::Narrow: v.push_back(a.narrow(s.dim, 0, 1)); break;
      case StepKind::Expand: v.push_back(a.expand(sizes.shape(s.shape))); break;
      case StepKind::Reshape: {
        Shape to(a.sizes().begin(), a.sizes().end() - 2);
        to.push_back(-1);
        v.push_back(a.reshape(to));
        break;
      }
      case StepKind::Matmul: v.push_back(matmul(a, v[s.b])); break;
      case StepKind::LayerNorm: {
        const Tensor w = s.b >= 0 ? v[s.b] : Tensor(), b = s.c >= 0 ? v[s.c] : Tensor();
        v.push_back(s.op == 0 ? layer_norm(a, {a.size(-1)}, w, b) : rms_norm(a, {a.size(-1)}, w));
        break;
      }
      case StepKind::Softmax: v.push_back(softmax(a, s.dim)); break;
      case StepKind::InPlace: {
        NoGradGuard g;
        if (s.op == 0) a.mul_(s.scalar);
        else a.add_(v[s.b], s.scalar);
        v.push_back(a);
        break;
      }
      case StepKind::Detach: v.push_back(a.detach()); break;
      case StepKind::Break:
        compiler::graph_break();
        v.push_back(a);
        break;
      case StepKind::Item: {
        const float x = a.sum().item<float>();
        v.push_back(a + (std::isfinite(x) ? 0.5 : -0.5));
        break;
      }
      case StepKind::Input: v.push_back(args[static_cast<size_t>(s.op)]); break;
    }
  }
  std::vector<Tensor> out;
  for (int o : p.outputs) out.push_back(v[o]);
  return out;
}

// The program's inputs at size table `table`, filled from `data_seed`: the
// same seed gives the same values and layouts (each run gets its own).
std::vector<Tensor> make_inputs(const Program& p, int table, uint64_t data_seed) {
  const Sizes sizes{p, table};
  std::mt19937_64 rng(data_seed);
  manual_seed(data_seed);
  std::vector<Tensor> args;
  for (const InputSpec& in : p.inputs) {
    const Shape shape = sizes.shape(in.shape);
    Shape stored = shape;
    if (in.layout == 1) std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
    if (in.layout == 2 && !stored.empty()) stored.back() *= 2;
    if (in.layout == 3)
      for (size_t d = 0; d < stored.size(); ++d) stored[d] = in.shape[d] == 0 ? 1 : stored[d];
    Tensor base = randn(stored);
    if (in.special && base.numel() > 0) {
      static const float kSpecial[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -3e38f, 1e-40f, 88.0f, -100.0f};
      float* x = base.data_ptr<float>();
      for (int k = 0; k < 1 + base.numel() / 4; ++k)
        x[std::uniform_int_distribution<int64_t>(0, base.numel() - 1)(rng)] = kSpecial[rng() % 10];
    }
    Tensor t = base;
    if (in.layout == 1) t = base.transpose(-1, -2);
    if (in.layout == 2 && !shape.empty()) t = base.slice(-1, 0, std::nullopt, 2);
    if (in.layout == 3) t = base.expand(shape);
    if (in.requires_grad) t.requires_grad_();
    args.push_back(t);
  }
  return args;
}

struct Outcome {
  std::string error;  // what the run threw, if it did
  std::vector<Tensor> outputs, inputs_after, grads;
  std::string backward_error;
};

// Runs fn on fresh inputs, then differentiates a weighted sum of the
// outputs p.loss_outputs marks with respect to the inputs that require grad.
template <class Fn>
Outcome observe(const Program& p, int table, uint64_t data_seed, Fn&& fn, bool float64 = false) {
  Outcome o;
  std::vector<Tensor> args = make_inputs(p, table, data_seed);
  if (float64)  // the same values in float64: the reference of a disagreement
    for (Tensor& a : args) {
      const bool g = a.requires_grad();
      a = a.detach().to(kFloat64);
      if (g) a.requires_grad_();
    }
  try {
    o.outputs = fn(args);
  } catch (const Error& e) {
    o.error = e.what();
    return o;
  }
  for (const Tensor& a : args) o.inputs_after.push_back(a.detach().clone());
  std::vector<Tensor> wrt;
  for (const Tensor& a : args)
    if (a.requires_grad()) wrt.push_back(a);
  manual_seed(data_seed + 7);
  Tensor loss;
  for (size_t i = 0; i < o.outputs.size(); ++i) {
    const Tensor& out = o.outputs[i];
    const Tensor w = randn(out.sizes());  // drawn for every output, so both runs draw alike
    if (!p.loss_outputs[i] || !out.requires_grad()) continue;
    const Tensor term = (out * w).sum();
    loss = loss.defined() ? loss + term : term;
  }
  if (!loss.defined() || wrt.empty()) return o;
  try {
    o.grads = autograd::grad({loss}, wrt, {}, false, /*allow_unused=*/true);
  } catch (const Error& e) {
    o.backward_error = e.what();
  }
  return o;
}

// Whether the inputs of a run hold a finite value of magnitude >= 1e38.
bool has_near_max(const Program& p, int table, uint64_t data_seed) {
  for (const Tensor& t : make_inputs(p, table, data_seed))
    for (double x : values(t))
      if (std::isfinite(x) && std::fabs(x) >= 1e38) return true;
  return false;
}

// observe() with the scalar kernels: every sum in another order (see agree).
template <class Fn>
Outcome observe_with_scalar_kernels(const Program& p, int table, uint64_t data_seed, Fn&& fn) {
  struct Restore {
    Capability was;
    ~Restore() { set_cpu_capability(was); }
  } restore{cpu_capability()};
  set_cpu_capability(Capability::Scalar);
  return observe(p, table, data_seed, fn);
}

// Eager and compiled float32 results agree within the difference of their
// rounding (fused loops evaluate the same math in another order). Where
// they do not, the float64 run decides: compiled must then be about as
// close to it as eager (a sum that cancels to rounding noise, such as a
// layer_norm's gradient along a constant shift, differs between any two
// evaluation orders).
// alt: eager again with the scalar kernels (another order of every sum).
// An element the two eager orders disagree on is not determined in float32
// (a row sum that overflows to inf in one order and NaN in another, a
// quotient of rounding noise): compiled is then one more order, and agrees
// where it matches either.
bool agree(const Tensor& got, const Tensor& want, const Tensor* ref, std::string* why, const Tensor* alt = nullptr) {
  if (got.defined() != want.defined()) return *why = got.defined() ? "defined, eager's undefined" : "undefined, eager's defined", false;
  if (!want.defined()) return true;
  if (got.sizes() != want.sizes()) return *why = "shape " + shape_str(got.sizes()) + ", eager's " + shape_str(want.sizes()), false;
  if (got.dtype() != want.dtype()) return *why = "another dtype", false;
  if (got.requires_grad() != want.requires_grad())
    return *why = std::string("requires_grad ") + (got.requires_grad() ? "true" : "false") + ", eager's the opposite", false;
  const auto g = values(got), w = values(want);
  const auto r = ref && ref->defined() && ref->sizes() == want.sizes() ? values(*ref) : std::vector<double>();
  double scale = 0;
  for (double x : w)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  auto beyond_float = [](double x) { return std::fabs(x) > std::numeric_limits<float>::max(); };
  // Eager broke down in float32 somewhere: an element it gives as inf or NaN
  // where the float64 run is finite (an intermediate overflowed, say a row
  // sum of -3e38 and -3e38 next to +inf), past a plain overflow of the result.
  // Which elements break down then depends on the order of the sums, so
  // compiled may break down at others; where it does not, float64 judges.
  bool eager_broke_down = false;
  for (size_t i = 0; i < r.size() && i < w.size(); ++i)
    eager_broke_down = eager_broke_down || (std::isfinite(r[i]) && !std::isfinite(w[i]) &&
                                            !(beyond_float(r[i]) && std::isinf(w[i]) && (w[i] > 0) == (r[i] > 0)));
  // Eager's own float32 error against float64 at its worst element: the
  // noise of this tensor's sums (a gradient summed over a broadcast of terms
  // near 1e10 is exact to about 1e5 in any order, seed 111704), which
  // compiled, one more order, may show at another element.
  double eager_noise = 0;
  for (size_t i = 0; i < r.size() && i < w.size(); ++i)
    if (std::isfinite(r[i]) && std::isfinite(w[i])) eager_noise = std::max(eager_noise, std::fabs(w[i] - r[i]));
  const auto a = alt && alt->defined() && alt->sizes() == want.sizes() ? values(*alt) : std::vector<double>();
  auto same = [&](double x, double y) {  // x within float32 rounding of y
    return std::isnan(y) ? std::isnan(x) : std::isinf(y) ? x == y : std::fabs(x - y) <= 1e-4 * scale + 2e-3 * std::fabs(y) + 1e-5;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = same(g[i], w[i]);
    if (!ok && !r.empty() && std::isfinite(r[i]) && std::isfinite(w[i]))
      ok = std::fabs(g[i] - r[i]) <= 4 * std::max(std::fabs(w[i] - r[i]), eager_noise) + 1e-3 * scale + 1e-4;
    // Overflow depends on the order of a sum (-3e38 + -3e38 + inf is NaN in
    // one order, inf in another): a special value float64 agrees with is fine.
    // An infinite exact result is NaN in float32 where a partial sum overflowed
    // the other way first (inf + (-3e38 + -3e38)): which one does depends on
    // the loop's order.
    if (!ok && !r.empty())
      ok = (std::isnan(r[i]) && std::isnan(g[i])) || (beyond_float(r[i]) && std::isinf(g[i]) && (g[i] > 0) == (r[i] > 0)) ||
           (std::isinf(r[i]) && std::isnan(g[i]));
    if (!ok && eager_broke_down && std::isfinite(r[i]))
      ok = !std::isfinite(g[i]) || std::fabs(g[i] - r[i]) <= 2e-3 * std::fabs(r[i]) + 1e-3 * scale + 1e-4;
    if (!ok && !a.empty()) ok = same(g[i], a[i]) || !same(w[i], a[i]);
    if (!ok) {
      std::ostringstream os;
      os << "element " << i << " is " << g[i] << ", eager's " << w[i];
      if (!r.empty()) os << " (float64: " << r[i] << ")";
      if (!a.empty()) os << " (eager, scalar kernels: " << a[i] << ")";
      *why = os.str();
      return false;
    }
  }
  return true;
}

// ref: the float64 run; alt: eager with the scalar kernels; each made on
// first need.
// near_max: an input holds a finite value near float32's largest (the
// special -3e38), so a sum's partial sums overflow in some orders and not in
// others (-3e38 + -3e38 + inf: NaN or inf), and maximum/minimum then pick
// sides by that; the forward's differences show at the outputs (judged
// above), the gradients' do not (not compared by value, see below).
void compare(const Outcome& got, const Outcome& want, const std::function<const Outcome&()>& ref,
             const std::function<const Outcome&()>& alt, bool near_max, const std::string& call,
             std::vector<std::string>& diffs) {
  auto differ = [&](const std::string& what) { diffs.push_back(call + ": " + what); };
  if (got.error.empty() != want.error.empty()) {
    differ(got.error.empty() ? "eager threw (" + want.error + "), compiled did not" : "compiled threw: " + got.error);
    return;
  }
  std::string why;
  auto check_all = [&](const std::vector<Tensor>& g, const std::vector<Tensor>& w,
                       std::vector<Tensor> Outcome::*which, const std::string& what) {
    for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
      if (agree(g[i], w[i], nullptr, &why)) continue;
      const std::vector<Tensor>& r = ref().*which;
      if (agree(g[i], w[i], i < r.size() ? &r[i] : nullptr, &why)) continue;
      const std::vector<Tensor>& a = alt().*which;
      if (!agree(g[i], w[i], i < r.size() ? &r[i] : nullptr, &why, i < a.size() ? &a[i] : nullptr))
        differ(what + " " + std::to_string(i) + ": " + why);
    }
  };
  check_all(got.outputs, want.outputs, &Outcome::outputs, "output");
  check_all(got.inputs_after, want.inputs_after, &Outcome::inputs_after, "input (after the call)");
  // A write inside the graph to a tensor made inside it is computed
  // functionally, so the compiled backward reads the value before the write
  // where eager's raises the in-place error (torch.compile functionalizes the
  // same way). Not a difference the other way round.
  const bool compiled_functionalized = got.backward_error.empty() &&
                                       want.backward_error.find("modified by an inplace operation") != std::string::npos;
  if (compiled_functionalized) return;
  if (got.backward_error.empty() != want.backward_error.empty()) {
    differ(got.backward_error.empty() ? "eager's backward threw (" + want.backward_error + "), compiled's did not"
                                      : "compiled backward threw: " + got.backward_error);
    return;
  }
  // Gradients of a forward pass whose float32 values broke down, eager's or
  // compiled's (an output inf or NaN where float64's is finite, or NaN where
  // float64's is inf: an intermediate overflowed), depend on where each order
  // overflowed: beyond their definedness and shapes they are not compared.
  auto broke_down = [&](const std::vector<Tensor>& outputs) {
    const Outcome& r = ref();
    for (size_t i = 0; i < outputs.size() && i < r.outputs.size(); ++i) {
      if (!outputs[i].defined() || !r.outputs[i].defined() || r.outputs[i].sizes() != outputs[i].sizes()) continue;
      const auto w = values(outputs[i]), f = values(r.outputs[i]);
      for (size_t k = 0; k < w.size(); ++k)
        if ((std::isfinite(f[k]) && std::fabs(f[k]) <= std::numeric_limits<float>::max() && !std::isfinite(w[k])) ||
            (std::isnan(w[k]) && !std::isnan(f[k])))
          return true;
    }
    return false;
  };
  auto forward_broke_down = [&] { return broke_down(want.outputs) || broke_down(got.outputs); };
  std::vector<std::string> grad_diffs;
  std::swap(diffs, grad_diffs);
  check_all(got.grads, want.grads, &Outcome::grads, "gradient");
  std::swap(diffs, grad_diffs);
  bool only_values = true;
  for (const std::string& d : grad_diffs) only_values = only_values && d.find(": element ") != std::string::npos;
  if (!grad_diffs.empty() && !(only_values && (near_max || forward_broke_down())))
    diffs.insert(diffs.end(), grad_diffs.begin(), grad_diffs.end());
  if (got.grads.size() != want.grads.size()) differ("another number of gradients");
}

}  // namespace

Program random_program(uint64_t seed) { return Generator(seed).run(); }

std::vector<std::string> differences(const Program& p) {
  std::vector<std::string> diffs;
  CompileOptions options;
  options.backend = p.backend;
  int table = 0;
  auto fn = [&p, &table](const std::vector<Tensor>& args) { return evaluate(p, table, args); };
  auto compiled = compile(fn, options);
  for (int call = 0; call < 2; ++call) {
    const uint64_t data = p.seed * 1000 + static_cast<uint64_t>(call);
    const int entries = compiled.cache_entries(), recompiles = compiled.recompiles();
    const int64_t runs = compiler::detail::compiler_runs();
    const Outcome want = observe(p, 0, data, fn);
    const Outcome got = observe(p, 0, data, compiled);
    std::optional<Outcome> ref, alt;
    compare(got, want, [&]() -> const Outcome& { return ref ? *ref : ref.emplace(observe(p, 0, data, fn, true)); },
            [&]() -> const Outcome& { return alt ? *alt : alt.emplace(observe_with_scalar_kernels(p, 0, data, fn)); },
            has_near_max(p, 0, data), "call " + std::to_string(call + 1), diffs);
    if (call == 1 && (compiled.cache_entries() != entries || compiled.recompiles() != recompiles ||
                      compiler::detail::compiler_runs() != runs))
      diffs.push_back("call 2 (identical shapes) compiled again: " + std::to_string(compiled.cache_entries() - entries) +
                      " new graphs, " + std::to_string(compiled.recompiles() - recompiles) + " recompiles");
  }
  if (p.dynamic) {
    // The two tables, then the first with one symbol changed three times:
    // the second and third of those compile and fit the sizes in attributes
    // (Note [Sizes in attributes]), the fourth reuses that plan. The
    // program's second table holds the sizes of each call.
    options.dynamic = true;
    Program q = p;
    auto fn_q = [&q](const std::vector<Tensor>& args) { return evaluate(q, 1, args); };
    auto dynamic = compile(fn_q, options);
    const int k = 1 + static_cast<int>(p.seed % (kSymbols - 1));
    const int64_t a = p.sizes[0][k], b = p.sizes[1][k];
    std::vector<std::array<int64_t, kSymbols>> tables(2);
    std::copy(p.sizes[0], p.sizes[0] + kSymbols, tables[0].begin());
    std::copy(p.sizes[1], p.sizes[1] + kSymbols, tables[1].begin());
    // Within the tables' own range: a program's largest value grows with
    // the product of its sizes (a + 2b made one need a terabyte).
    const int64_t lo = std::min(a, b), hi = std::max(a, b);
    for (const int64_t v : {std::max<int64_t>(2, hi - 1), std::max<int64_t>(2, lo + 1), std::max<int64_t>(2, (lo + hi + 1) / 2)}) {
      tables.push_back(tables[0]);
      tables.back()[k] = v;
    }
    for (size_t call = 0; call < tables.size(); ++call) {
      std::copy(tables[call].begin(), tables[call].end(), q.sizes[1]);
      const uint64_t data = p.seed * 1000 + 10 + call;
      const Outcome want = observe(q, 1, data, fn_q);
      const Outcome got = observe(q, 1, data, dynamic);
      std::optional<Outcome> ref, alt;
      compare(got, want,
              [&]() -> const Outcome& { return ref ? *ref : ref.emplace(observe(q, 1, data, fn_q, true)); },
              [&]() -> const Outcome& {
                return alt ? *alt : alt.emplace(observe_with_scalar_kernels(q, 1, data, fn_q));
              },
              has_near_max(q, 1, data), "dynamic=true, sizes " + std::to_string(call + 1), diffs);
    }
  }
  return diffs;
}

std::string Program::to_string() const {
  static const char* const kKinds[] = {"input", "unary", "binary", "scalar", "reduce", "transpose", "unsqueeze", "narrow",
                                       "expand", "reshape", "matmul", "norm", "softmax", "inplace", "detach", "break", "item"};
  std::ostringstream os;
  os << "program " << seed << " (" << backend << (dynamic ? ", dynamic" : "") << "), sizes";
  for (int s = 0; s < kSymbols; ++s) os << " d" << s << "=" << sizes[0][s] << "/" << sizes[1][s];
  os << "\n";
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    os << "  v" << i << " = " << kKinds[static_cast<int>(s.kind)];
    switch (s.kind) {
      case StepKind::Input: {
        const InputSpec& in = inputs[static_cast<size_t>(s.op)];
        os << " [";
        for (int d : in.shape) os << "d" << d << ",";
        os << "] layout " << in.layout << (in.requires_grad ? " requires_grad" : "") << (in.special ? " special" : "");
        break;
      }
      case StepKind::Unary: os << " " << kUnary[s.op]; break;
      case StepKind::Binary: os << " " << kBinary[s.op] << " alpha " << s.scalar; break;
      case StepKind::Scalar: os << " " << kScalar[s.op] << " " << s.scalar; break;
      case StepKind::Reduce: os << " " << kReduce[s.op] << " dim " << s.dim << (s.keepdim ? " keepdim" : ""); break;
      case StepKind::InPlace: os << " " << kInPlace[s.op] << " " << s.scalar; break;
      case StepKind::LayerNorm: os << (s.op == 0 ? " layer_norm" : " rms_norm"); break;
      default: os << " dim " << s.dim; break;
    }
    for (int x : {s.a, s.b, s.c})
      if (x >= 0) os << " v" << x;
    if (!s.shape.empty()) {
      os << " to [";
      for (int d : s.shape) os << "d" << d << ",";
      os << "]";
    }
    os << "\n";
  }
  os << "  outputs";
  for (size_t i = 0; i < outputs.size(); ++i) os << " v" << outputs[i] << (loss_outputs[i] ? "*" : "");
  os << " (* in the loss)\n";
  return os.str();
}

}  // namespace kiln::test
