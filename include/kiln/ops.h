// The op set as free functions, named as in PyTorch (torch::add, ...).
// Each lives in src/ops/ and reaches its kernel through the dispatcher.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// ---- type promotion
// PyTorch's result_type: tensors with dims outrank 0-dim tensors, which
// outrank wrapped numbers, unless a lower rank holds a higher category.
DType result_type(std::span<const Tensor> operands);
DType result_type(const Tensor& a, const Tensor& b);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");
Tensor broadcast_to(const Tensor& t, Shape shape);

// ---- unary
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor sgn(const Tensor& x);  // sign (real tensors)
Tensor exp(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");  // "none" (erf) or "tanh"
Tensor silu(const Tensor& x);
// torch.nn.functional's activations (float results; integer inputs promote).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor hardsigmoid(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor mish(const Tensor& x);
// grad * d gelu(x) / dx in one pass (the backward of gelu).
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");
// grad where self > threshold, else 0 (relu's gradient with self its output and threshold 0).
Tensor threshold_backward(const Tensor& grad, const Tensor& self, double threshold);
Tensor erf(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // half to even, as torch.round
Tensor square(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
// Bounds as tensors broadcast with x (undefined: none).
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);

// ---- binary (broadcasting)
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, Scalar weight);
Tensor logaddexp(const Tensor& a, const Tensor& b);  // log(e^a + e^b), without overflow
Tensor hypot(const Tensor& a, const Tensor& b);      // sqrt(a^2 + b^2), without overflow
Tensor log2(const Tensor& x);
// Trigonometric and hyperbolic (float32 computed through float64, rounded once).
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
Tensor atan2(const Tensor& a, const Tensor& b);  // the angle of the point (b, a), as torch.atan2(input=a, other=b)
Tensor log10(const Tensor& x);
Tensor exp2(const Tensor& x);
Tensor trunc(const Tensor& x);  // integers unchanged
Tensor frac(const Tensor& x);   // x - trunc(x)
Tensor log_sigmoid(const Tensor& x);                              // log(sigmoid(x)), stable
inline Tensor logsigmoid(const Tensor& x) { return log_sigmoid(x); }  // torch.nn.functional's name
Tensor selu(const Tensor& x);
Tensor copysign(const Tensor& a, const Tensor& b);  // |a| with b's sign (integers promote to float)
// Python's // and % (the quotient rounded down, the remainder in b's sign);
// integers stay integers, and integer division by zero is an error.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor isnan(const Tensor& x);     // bool
Tensor isinf(const Tensor& x);     // bool
Tensor isfinite(const Tensor& x);  // bool
// NaN -> nan, +inf -> posinf, -inf -> neginf (defaults: 0, the dtype's largest and lowest finite values).
Tensor nan_to_num(const Tensor& x, std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

// `out=` forms: write into an existing tensor of the result's shape and dtype.
Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& exp_out(Tensor& out, const Tensor& x);
Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
// Comparisons with a number on either side, as PyTorch's (t >= 0, 1 < t).
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(Scalar a, const Tensor& b);
Tensor operator>(Scalar a, const Tensor& b);
Tensor operator<=(Scalar a, const Tensor& b);
Tensor operator>=(Scalar a, const Tensor& b);
Tensor operator==(Scalar a, const Tensor& b);
Tensor operator!=(Scalar a, const Tensor& b);

// ---- reductions. An empty `dims` reduces over every dim.
Tensor sum(const Tensor& x, Shape dims = {}, bool keepdim = false, std::optional<DType> dtype = {});
Tensor mean(const Tensor& x, Shape dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, Shape dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, Shape dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, Shape dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, Shape dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, Shape dims = {}, bool keepdim = false);
// correction = 1 is the unbiased estimate (PyTorch's default), 0 the biased one.
Tensor var(const Tensor& x, Shape dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, Shape dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, Shape dims, bool keepdim = false);
Tensor norm(const Tensor& x, double p = 2.0, Shape dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);  // values, indices
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim);
// The gradient of cumsum: the sum of grad over positions >= i along dim, as
// one reversed scan (PyTorch's cumsum_backward), exact to rounding where
// total - cumsum + grad cancels.
Tensor cumsum_backward(const Tensor& grad, int64_t dim);
// Running products (integers give int64, wrapping on overflow as PyTorch's),
// running maxima / minima with the index each came from (a NaN takes over,
// a later NaN moves the index; ties take the later index, as PyTorch's CPU
// kernels), and log(cumsum(exp(x))) computed without overflow.
Tensor cumprod(const Tensor& x, int64_t dim);
std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);  // values, indices
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);
Tensor logcumsumexp(const Tensor& x, int64_t dim);

// ---- linear algebra (OpenBLAS)
// Einstein summation as torch.einsum: "ij,jk->ik", an implicit output (the
// subscripts used once, in ASCII order), "..." for broadcast dims, a repeated
// subscript in one term for a diagonal; size-1 dims broadcast.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});  // x @ weight^T + bias
// Products, as PyTorch's: a b^T of vectors; the dot product (one dtype);
// beta * input + alpha * (m1 @ m2), of batches (baddbmm) or their sum
// (addbmm), beta = 0 ignoring input; contraction of dims_a of a with dims_b
// of b (or a's last `dims` with b's first); the Kronecker product.
Tensor outer(const Tensor& a, const Tensor& b);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor vdot(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta = 1, double alpha = 1);
Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1, double alpha = 1);
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1, double alpha = 1);
Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b);
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
Tensor kron(const Tensor& a, const Tensor& b);
// a x b along dim (size 3; a and b broadcast), as torch.linalg.cross.
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1);
// The p-norm distance of every row of x1 (..., P, M) to every row of x2 (..., R, M): (..., P, R).
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);

// ---- neural-network functions
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor rms_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = {});
// Rows of weight by index. padding_idx: that row gets no gradient (negative
// counts from the end); max_norm: the rows looked up are first scaled in
// place, without history, to a norm_type-norm of at most max_norm (PyTorch's
// embedding_renorm_).
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = {},
                 std::optional<double> max_norm = {}, double norm_type = 2.0);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// torch.nn.functional.pad: `pad` holds (before, after) sizes for the last
// dims, last dim first; mode "constant" (with `value`, default 0; negative
// sizes crop), "reflect", "replicate" or "circular".
Tensor pad(const Tensor& x, const Shape& pad, const std::string& mode = "constant", std::optional<double> value = {});

// ---- joining, splitting, indexing
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const Shape& split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// src's elements reduced into the positions index sends them to: "sum",
// "prod", "mean", "amax" or "amin" (a NaN wins), with self's value as one
// more contributor unless include_self is false; positions nothing reaches
// keep self's value. scatter with reduce "add" or "multiply" (PyTorch's older form).
Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self = true);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// PyTorch's functional index updates along dim (index 0-d or 1-d, int64 or
// int32; source shaped as x with dim of the index's length, x's dtype):
// slice i of source added (times alpha) / copied to slice index[i] of x
// (repeated indices: index_add sums, index_copy keeps one); index_fill sets
// those slices to value.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1);
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, Scalar value);
// x[indices] = values, or += with accumulate (repeated indices then sum):
// one index tensor per dim (undefined: a full slice before the indexed
// dims, which must be adjacent; bool: a mask), broadcast together.
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);
// x with its positions where mask (broadcast to x) is true taken, in order,
// from source's leading elements.
Tensor masked_scatter(const Tensor& x, const Tensor& mask, const Tensor& source);
// The diagonal of each (dim1, dim2) plane, offset above (> 0) or below (< 0)
// the main one, as the last dim of a view.
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// The gradients of slice and select: zeros of input_sizes with grad where the view was.
Tensor slice_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t start, int64_t end,
                      int64_t step);
Tensor select_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t index);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = true);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// For each value, the index where it would be inserted into its row of
// sorted_sequence (1-D: one row for all; else rows sharing the values'
// leading dims) to keep it sorted: before equal entries, or after them when
// right (side "right"); sorter: the argsort of an unsorted sequence.
// bucketize(x, boundaries) is searchsorted(boundaries, x). Comparisons as
// PyTorch's: a NaN value goes after every boundary (NaN boundaries, as in
// PyTorch, give answers that depend on the search's path).
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false, bool right = false,
                    const std::optional<std::string>& side = {}, const Tensor& sorter = {});
Tensor bucketize(const Tensor& x, const Tensor& boundaries, bool out_int32 = false, bool right = false);
// The distinct values of x, sorted (each NaN distinct, last); for every
// element of x the index of its value among them (x's shape); how often each
// occurs. unique_consecutive merges only runs of equal neighbours, in order.
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x);
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x);
// Rearranging, as PyTorch's: reversed along dims; shifted cyclically along
// dims (all elements, flattened, without dims); repeated `repeats` times per
// dim (leading dims added); tile (repeat with fewer entries allowed); dims
// moved to new places (a view); gather along dim with the other dims
// broadcast (flattened without dim); coordinate grids ("ij" or "xy").
Tensor flip(const Tensor& x, const Shape& dims);
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});
Tensor repeat(const Tensor& x, const Shape& repeats);
Tensor tile(const Tensor& x, const Shape& dims);
// torch.repeat_interleave: each slice of x along dim repeated repeats times
// (an int, or one count per slice: a 1-d integer tensor of x.size(dim)
// entries, or of one for all), consecutively (repeat repeats the whole);
// without dim, of x flattened. output_size, when given, must be the
// result's size along dim. The form of counts alone gives the indices
// 0, 1, ... each repeated its count.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = {},
                         std::optional<int64_t> output_size = {});
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = {},
                         std::optional<int64_t> output_size = {});
Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size = {});
Tensor movedim(const Tensor& x, const Shape& source, const Shape& destination);
Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim = {});
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing = "ij");
// (..., C r^2, H, W) to (..., C, H r, W r) and back, as torch.pixel_shuffle / pixel_unshuffle.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// The last dim on the diagonal (offset) of new (dim1, dim2) planes; diag:
// a 1-d x on a matrix's diagonal, or a 2-d x's diagonal (a copy).
Tensor diag_embed(const Tensor& x, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);
Tensor diag(const Tensor& x, int64_t diagonal = 0);

// Order statistics along dim: the lower median (a row holding NaN: its
// first NaN), the k-th smallest (1-based; NaN counts as largest), each with
// its index; quantiles q in [0, 1] (a row holding NaN: NaN) with PyTorch's
// interpolation modes, over all elements without dim (q 1-d: a leading dim
// per q); variance or standard deviation with the mean.
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor median(const Tensor& x);
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
// The most frequent value along dim (ties: the smallest; each NaN counts
// once) and the last index where it occurs.
std::tuple<Tensor, Tensor> mode(const Tensor& x, int64_t dim = -1, bool keepdim = false);
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = {}, bool keepdim = false,
                const std::string& interpolation = "linear");
Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim = {}, bool keepdim = false,
                const std::string& interpolation = "linear");
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, Shape dims = {}, int64_t correction = 1, bool keepdim = false);
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, Shape dims = {}, int64_t correction = 1, bool keepdim = false);

// Results whose size depends on the values (each reads a count or a largest
// value, as PyTorch synchronises): the coordinates (n, dims) of the nonzero
// elements in row-major order; the elements where mask is true (x and mask
// broadcast), flattened; the count (or weight sum) of each non-negative
// integer, at least minlength bins; a histogram of `bins` equal bins over
// [min, max] (min == max: the data's range), values outside it ignored.
Tensor nonzero(const Tensor& x);
Tensor masked_select(const Tensor& x, const Tensor& mask);
Tensor bincount(const Tensor& x, const Tensor& weights = {}, int64_t minlength = 0);
Tensor histc(const Tensor& x, int64_t bins = 100, Scalar min = 0, Scalar max = 0);

// ---- random
class Generator;  // kiln/runtime.h
Tensor rand(Shape sizes, TensorOptions options = {});   // dtype float32 unless given
Tensor randn(Shape sizes, TensorOptions options = {});  // dtype float32 unless given
Tensor randint(int64_t low, int64_t high, Shape sizes, TensorOptions options = {});  // dtype int64 unless given
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);
// A random permutation of 0 .. n-1 (dtype int64 unless given).
Tensor randperm(int64_t n, TensorOptions options = {});
// The same drawing from `generator` instead of the default one (PyTorch's
// generator= argument), so a data loader's shuffling has a stream of its own.
Tensor rand(Shape sizes, Generator& generator, TensorOptions options = {});
Tensor randn(Shape sizes, Generator& generator, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, Shape sizes, Generator& generator, TensorOptions options = {});
Tensor randperm(int64_t n, Generator& generator, TensorOptions options = {});

}  // namespace kiln

KILN_API_END
