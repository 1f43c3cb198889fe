// Every public function of ops.h and tensor.h (factories, views, in-place
// methods) under its public name and PyTorch's schema, for call_op, except
// the ops whose declaration registers them beside it (hypot, logaddexp in
// elementwise.cpp: the way for new ops). The
// boxed forms call the C++ functions themselves, so a call by name takes
// the same front end. Overload names follow PyTorch's (add.Tensor,
// add.Scalar, pow.Tensor_Scalar).
#include "kiln/ops.h"
#include "ops/boxing.h"

namespace kiln {
namespace {

using ops::def;
using Opt = std::optional<DType>;
using OptDevice = std::optional<Device>;

TensorOptions options(Opt dtype, OptDevice device) { return TensorOptions(dtype).device(device); }

void elementwise() {
  def<&neg>("neg(Tensor self) -> Tensor");
  def<&abs>("abs(Tensor self) -> Tensor");
  def<&sign>("sign(Tensor self) -> Tensor");
  def<&exp>("exp(Tensor self) -> Tensor");
  def<&expm1>("expm1(Tensor self) -> Tensor");
  def<&log>("log(Tensor self) -> Tensor");
  def<&log1p>("log1p(Tensor self) -> Tensor");
  def<&sqrt>("sqrt(Tensor self) -> Tensor");
  def<&rsqrt>("rsqrt(Tensor self) -> Tensor");
  def<&reciprocal>("reciprocal(Tensor self) -> Tensor");
  def<&sin>("sin(Tensor self) -> Tensor");
  def<&cos>("cos(Tensor self) -> Tensor");
  def<&tanh>("tanh(Tensor self) -> Tensor");
  def<&sigmoid>("sigmoid(Tensor self) -> Tensor");
  def<&relu>("relu(Tensor self) -> Tensor");
  def<&silu>("silu(Tensor self) -> Tensor");
  def<&leaky_relu>("leaky_relu(Tensor self, float negative_slope=0.01) -> Tensor");
  def<&elu>("elu(Tensor self, float alpha=1) -> Tensor");
  def<&softplus>("softplus(Tensor self, float beta=1, float threshold=20) -> Tensor");
  def<&hardtanh>("hardtanh(Tensor self, float min_val=-1, float max_val=1) -> Tensor");
  def<&hardsigmoid>("hardsigmoid(Tensor self) -> Tensor");
  def<&hardswish>("hardswish(Tensor self) -> Tensor");
  def<&mish>("mish(Tensor self) -> Tensor");
  def<&erf>("erf(Tensor self) -> Tensor");
  def<&floor>("floor(Tensor self) -> Tensor");
  def<&ceil>("ceil(Tensor self) -> Tensor");
  def<&round>("round(Tensor self) -> Tensor");
  def<&square>("square(Tensor self) -> Tensor");
  def<&logical_not>("logical_not(Tensor self) -> Tensor");
  def<&gelu>("gelu(Tensor self, *, str approximate='none') -> Tensor");
  def<&gelu_backward>("gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor");
  def<&threshold_backward>("threshold_backward(Tensor grad_output, Tensor self, float threshold) -> Tensor");
  def<static_cast<Tensor (*)(const Tensor&, std::optional<Scalar>, std::optional<Scalar>)>(&clamp)>(
      "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor");

  def<&add>("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  def<&sub>("sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  def<&mul>("mul.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&div>("div.Tensor(Tensor self, Tensor other) -> Tensor");
  def<[](const Tensor& a, Scalar b) { return a + b; }>("add.Scalar(Tensor self, Scalar other) -> Tensor");
  def<[](const Tensor& a, Scalar b) { return a - b; }>("sub.Scalar(Tensor self, Scalar other) -> Tensor");
  def<[](const Tensor& a, Scalar b) { return a * b; }>("mul.Scalar(Tensor self, Scalar other) -> Tensor");
  def<[](const Tensor& a, Scalar b) { return a / b; }>("div.Scalar(Tensor self, Scalar other) -> Tensor");
  def<[](const Tensor& a, const Tensor& b) { return pow(a, b); }>(
      "pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor");
  def<[](const Tensor& a, Scalar e) { return pow(a, e); }>("pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor");
  def<&maximum>("maximum(Tensor self, Tensor other) -> Tensor");
  def<&minimum>("minimum(Tensor self, Tensor other) -> Tensor");
  def<&fmod>("fmod.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&eq>("eq.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&ne>("ne.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&lt>("lt.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&le>("le.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&gt>("gt.Tensor(Tensor self, Tensor other) -> Tensor");
  def<&ge>("ge.Tensor(Tensor self, Tensor other) -> Tensor");
  def<[](const Tensor& a, Scalar b) { return a < b; }>("lt.Scalar(Tensor self, Scalar other) -> Tensor");
  def<[](const Tensor& a, Scalar b) { return (a > b); }>("gt.Scalar(Tensor self, Scalar other) -> Tensor");
  def<&logical_and>("logical_and(Tensor self, Tensor other) -> Tensor");
  def<&logical_or>("logical_or(Tensor self, Tensor other) -> Tensor");
  def<&logical_xor>("logical_xor(Tensor self, Tensor other) -> Tensor");
  def<&where>("where.self(Tensor condition, Tensor self, Tensor other) -> Tensor");
  def<&masked_fill>("masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor");
  def<[](const Tensor& s, const Tensor& e, const Tensor& w) { return lerp(s, e, w); }>(
      "lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor");
  def<[](const Tensor& s, const Tensor& e, Scalar w) { return lerp(s, e, w); }>(
      "lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor");
  def<[](const Tensor& a, const Tensor& b) { return result_type(a, b); }>(
      "result_type.Tensor(Tensor tensor, Tensor other) -> ScalarType");
  def<&broadcast_to>("broadcast_to(Tensor(a) self, int[] size) -> Tensor(a)");
}

void reductions() {
  def<&sum>("sum(Tensor self, int[] dim=[], bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  def<&mean>("mean(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  def<&prod>("prod(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  def<&amax>("amax(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  def<&amin>("amin(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  def<&all>("all(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  def<&any>("any(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  def<&var>("var(Tensor self, int[] dim=[], *, int correction=1, bool keepdim=False) -> Tensor");
  def<&std>("std(Tensor self, int[] dim=[], *, int correction=1, bool keepdim=False) -> Tensor");
  def<&logsumexp>("logsumexp(Tensor self, int[] dim, bool keepdim=False) -> Tensor");
  def<&norm>("norm(Tensor self, float p=2, int[] dim=[], bool keepdim=False) -> Tensor");
  def<[](const Tensor& x) { return max(x); }>("max(Tensor self) -> Tensor");
  def<[](const Tensor& x) { return min(x); }>("min(Tensor self) -> Tensor");
  def<[](const Tensor& x, int64_t dim, bool keepdim) { return max(x, dim, keepdim); }>(
      "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  def<[](const Tensor& x, int64_t dim, bool keepdim) { return min(x, dim, keepdim); }>(
      "min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  def<&argmax>("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  def<&argmin>("argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  def<&cumsum>("cumsum(Tensor self, int dim) -> Tensor");
  def<&cumsum_backward>("cumsum_backward(Tensor grad, int dim) -> Tensor");
}

void linear_algebra_and_nn() {
  def<&mm>("mm(Tensor self, Tensor mat2) -> Tensor");
  def<&bmm>("bmm(Tensor self, Tensor mat2) -> Tensor");
  def<&matmul>("matmul(Tensor self, Tensor other) -> Tensor");
  def<&linear>("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  def<&softmax>("softmax.int(Tensor self, int dim) -> Tensor");
  def<&log_softmax>("log_softmax.int(Tensor self, int dim) -> Tensor");
  def<&layer_norm>(
      "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor");
  def<&rms_norm>("rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor");
  def<&embedding>(
      "embedding(Tensor weight, Tensor indices, int? padding_idx=None, float? max_norm=None, float norm_type=2.0) -> "
      "Tensor");
  def<&one_hot>("one_hot(Tensor self, int num_classes=-1) -> Tensor");
  def<&pad>("pad(Tensor self, int[] pad, str mode='constant', float? value=None) -> Tensor");
}

void indexing() {
  def<&cat>("cat(Tensor[] tensors, int dim=0) -> Tensor");
  def<&stack>("stack(Tensor[] tensors, int dim=0) -> Tensor");
  def<[](const Tensor& x, int64_t size, int64_t dim) { return split(x, size, dim); }>(
      "split.Tensor(Tensor(a) self, int split_size, int dim=0) -> Tensor(a)[]");
  def<[](const Tensor& x, Shape sizes, int64_t dim) { return split(x, sizes, dim); }>(
      "split_with_sizes(Tensor(a) self, int[] split_sizes, int dim=0) -> Tensor(a)[]");
  def<&chunk>("chunk(Tensor(a) self, int chunks, int dim=0) -> Tensor(a)[]");
  def<&gather>("gather(Tensor self, int dim, Tensor index) -> Tensor");
  def<static_cast<Tensor (*)(const Tensor&, int64_t, const Tensor&, const Tensor&)>(&scatter)>(
      "scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  def<&scatter_add>("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  def<&index_select>("index_select(Tensor self, int dim, Tensor index) -> Tensor");
  def<&slice_backward>(
      "slice_backward(Tensor grad_output, int[] input_sizes, int dim, int start, int end, int step) -> Tensor");
  def<&select_backward>("select_backward(Tensor grad_output, int[] input_sizes, int dim, int index) -> Tensor");
  def<&tril>("tril(Tensor self, int diagonal=0) -> Tensor");
  def<&triu>("triu(Tensor self, int diagonal=0) -> Tensor");
  def<&topk>("topk(Tensor self, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)");
  def<&sort>("sort(Tensor self, int dim=-1, bool descending=False, *, bool stable=True) -> (Tensor values, Tensor indices)");
  def<&argsort>("argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor");
}

void factories() {
  constexpr const char* kOptions = "*, ScalarType? dtype=None, Device? device=None) -> Tensor";
  auto with_options = [&](std::string head) { return head + kOptions; };
  def<[](Shape s, Opt t, OptDevice d) { return empty(std::move(s), options(t, d)); }>(with_options("empty(int[] size, "));
  def<[](Shape s, Shape st, Opt t, OptDevice d) { return empty_strided(std::move(s), std::move(st), options(t, d)); }>(
      with_options("empty_strided(int[] size, int[] stride, "));
  def<[](Shape s, Opt t, OptDevice d) { return zeros(std::move(s), options(t, d)); }>(with_options("zeros(int[] size, "));
  def<[](Shape s, Opt t, OptDevice d) { return ones(std::move(s), options(t, d)); }>(with_options("ones(int[] size, "));
  def<[](Shape s, Scalar v, Opt t, OptDevice d) { return full(std::move(s), v, options(t, d)); }>(
      with_options("full(int[] size, Scalar fill_value, "));
  def<&empty_like>("empty_like(Tensor self) -> Tensor");
  def<&zeros_like>("zeros_like(Tensor self) -> Tensor");
  def<&ones_like>("ones_like(Tensor self) -> Tensor");
  def<&full_like>("full_like(Tensor self, Scalar fill_value) -> Tensor");
  def<[](Scalar end, Opt t, OptDevice d) { return arange(end, options(t, d)); }>(with_options("arange(Scalar end, "));
  def<[](Scalar start, Scalar end, Scalar step, Opt t, OptDevice d) { return arange(start, end, step, options(t, d)); }>(
      with_options("arange.start_step(Scalar start, Scalar end, Scalar step=1, "));
  def<[](double start, double end, int64_t steps, Opt t, OptDevice d) {
    return linspace(start, end, steps, options(t, d));
  }>(with_options("linspace(float start, float end, int steps, "));
  def<[](int64_t n, std::optional<int64_t> m, Opt t, OptDevice d) { return eye(n, m, options(t, d)); }>(
      with_options("eye(int n, int? m=None, "));
  def<[](Scalar v, Opt t, OptDevice d) { return scalar_tensor(v, options(t, d)); }>(with_options("scalar_tensor(Scalar s, "));
  def<[](Shape s, Opt t, OptDevice d) { return rand(std::move(s), options(t, d)); }>(with_options("rand(int[] size, "));
  def<[](Shape s, Opt t, OptDevice d) { return randn(std::move(s), options(t, d)); }>(with_options("randn(int[] size, "));
  def<[](int64_t low, int64_t high, Shape s, Opt t, OptDevice d) { return randint(low, high, std::move(s), options(t, d)); }>(
      with_options("randint.low(int low, int high, int[] size, "));
  def<&multinomial>("multinomial(Tensor self, int num_samples, bool replacement=False) -> Tensor");
  def<[](int64_t n, Opt t, OptDevice d) { return randperm(n, options(t, d)); }>(with_options("randperm(int n, "));
}

void tensor_methods() {
  def<[](const Tensor& x, Shape s) { return x.view(std::move(s)); }>("view(Tensor(a) self, int[] size) -> Tensor(a)");
  def<[](const Tensor& x, Shape s) { return x.reshape(std::move(s)); }>("reshape(Tensor(a) self, int[] shape) -> Tensor(a)");
  def<[](const Tensor& x, Shape d) { return x.permute(std::move(d)); }>("permute(Tensor(a) self, int[] dims) -> Tensor(a)");
  def<[](const Tensor& x, int64_t a, int64_t b) { return x.transpose(a, b); }>(
      "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)");
  def<[](const Tensor& x) { return x.t(); }>("t(Tensor(a) self) -> Tensor(a)");
  def<[](const Tensor& x, Shape s) { return x.expand(std::move(s)); }>("expand(Tensor(a) self, int[] size) -> Tensor(a)");
  def<[](const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
    return x.slice(dim, start, end, step);
  }>("slice.Tensor(Tensor(a) self, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor(a)");
  def<[](const Tensor& x, int64_t dim, int64_t start, int64_t length) { return x.narrow(dim, start, length); }>(
      "narrow(Tensor(a) self, int dim, int start, int length) -> Tensor(a)");
  def<[](const Tensor& x, int64_t dim, int64_t index) { return x.select(dim, index); }>(
      "select.int(Tensor(a) self, int dim, int index) -> Tensor(a)");
  def<[](const Tensor& x) { return x.squeeze(); }>("squeeze(Tensor(a) self) -> Tensor(a)");
  def<[](const Tensor& x, int64_t dim) { return x.squeeze(dim); }>("squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)");
  def<[](const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }>("unsqueeze(Tensor(a) self, int dim) -> Tensor(a)");
  def<[](const Tensor& x, int64_t s, int64_t e) { return x.flatten(s, e); }>(
      "flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)");
  def<[](const Tensor& x, int64_t dim, int64_t size, int64_t step) { return x.unfold(dim, size, step); }>(
      "unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)");
  def<[](const Tensor& x, Shape s, Shape st, std::optional<int64_t> off) { return x.as_strided(std::move(s), std::move(st), off); }>(
      "as_strided(Tensor(a) self, int[] size, int[] stride, int? storage_offset=None) -> Tensor(a)");
  def<[](const Tensor& x) { return x.contiguous(); }>("contiguous(Tensor(a) self) -> Tensor(a)");
  def<[](const Tensor& x) { return x.clone(); }>("clone(Tensor self) -> Tensor");
  def<[](const Tensor& x) { return x.detach(); }>("detach(Tensor(a) self) -> Tensor(a)");
  def<[](const Tensor& x, DType t) { return x.to(t); }>("to.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)");
  def<[](const Tensor& x, Device d, Opt t) { return x.to(d, t.value_or(x.dtype())); }>(
      "to.device(Tensor(a) self, Device device, ScalarType? dtype=None) -> Tensor(a)");

  // In place: each returns self, as in PyTorch.
  def<[](const Tensor& x, const Tensor& src) { return x.copy_(src); }>("copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)");
  def<[](const Tensor& x, Scalar v) { return x.fill_(v); }>("fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)");
  def<[](const Tensor& x) { return x.zero_(); }>("zero_(Tensor(a!) self) -> Tensor(a!)");
  def<[](const Tensor& x, const Tensor& o, Scalar alpha) { return x.add_(o, alpha); }>(
      "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
  def<[](const Tensor& x, Scalar o) { return x.add_(o); }>("add_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)");
  def<[](const Tensor& x, const Tensor& o, Scalar alpha) { return x.sub_(o, alpha); }>(
      "sub_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
  def<[](const Tensor& x, const Tensor& o) { return x.mul_(o); }>("mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  def<[](const Tensor& x, Scalar o) { return x.mul_(o); }>("mul_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)");
  def<[](const Tensor& x, const Tensor& o) { return x.div_(o); }>("div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  def<[](const Tensor& x, Scalar o) { return x.div_(o); }>("div_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)");
  def<[](const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) { return x.clamp_(lo, hi); }>(
      "clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)");
  def<[](const Tensor& x, const Tensor& mask, Scalar v) { return x.masked_fill_(mask, v); }>(
      "masked_fill_.Scalar(Tensor(a!) self, Tensor mask, Scalar value) -> Tensor(a!)");
  def<[](const Tensor& x) { return x.neg_(); }>("neg_(Tensor(a!) self) -> Tensor(a!)");
  def<[](const Tensor& x) { return x.exp_(); }>("exp_(Tensor(a!) self) -> Tensor(a!)");
  def<[](const Tensor& x) { return x.relu_(); }>("relu_(Tensor(a!) self) -> Tensor(a!)");
}

const bool registered = [] {
  elementwise();
  reductions();
  linear_algebra_and_nn();
  indexing();
  factories();
  tensor_methods();
  return true;
}();

}  // namespace
}  // namespace kiln
