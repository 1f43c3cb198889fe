// Statistics read from sorted values: median, mode, kthvalue, quantile (PyTorch's
// rules for NaN: median and quantile give NaN for a row holding one,
// kthvalue counts NaN as the largest); var_mean and std_mean. Composites of
// sort, gather and arithmetic, so autograd and compile come with them.
#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The values and indices at per-row positions `pos` (keepdim shape, int64)
// of x's rows already sorted along d, shaped as x's reduction along d.
std::tuple<Tensor, Tensor> pick_sorted_at(const Tensor& sorted, const Tensor& order, const Tensor& x, int64_t d,
                                          const Tensor& pos, bool keepdim) {
  Tensor v = gather(sorted, d, pos), i = gather(order, d, pos);
  if (x.dim() == 0) return {v.reshape({}), i.reshape({})};
  if (!keepdim) v = v.squeeze(d), i = i.squeeze(d);
  return {v, i};
}

// The same of x's rows sorted ascending along d (NaN last, as PyTorch's sort).
std::tuple<Tensor, Tensor> pick_sorted(const Tensor& x, int64_t d, const Tensor& pos, bool keepdim) {
  const auto [sorted, order] = sort(ops::at_least_1d(x), d);
  return pick_sorted_at(sorted, order, x, d, pos, keepdim);
}

// x's shape with dim d of size 1 (a 0-d x as one element).
Shape row_shape(const Tensor& x, int64_t d) {
  Shape s = ops::at_least_1d(x).sizes();
  s[static_cast<size_t>(d)] = 1;
  return s;
}

}  // namespace

std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "median");
  const int64_t n = ops::at_least_1d(x).size(d);
  check(n > 0, "median", "cannot compute the median of the empty dim ", d, " of shape ", shape_text(x.sizes()));
  // The lower median, or the first NaN of a row holding one (sorted last).
  const Tensor nans = sum(isnan(ops::at_least_1d(x)).to(kInt64), {d}, true);
  const Tensor pos = where(gt(nans, wrapped_scalar(0)), n - nans, full(row_shape(x, d), (n - 1) / 2, kInt64));
  return pick_sorted(x, d, pos, keepdim);
}

Tensor median(const Tensor& x) {
  check(x.numel() > 0, "median", "cannot compute the median of an empty tensor");
  return std::get<0>(median(x.reshape({-1}), 0, false));
}

// The most frequent value of each row (ties: the smallest) and where it
// occurs (its last place, as PyTorch's CPU kernel reports the last of the
// sorted run): runs of equal values in the stably sorted row, each run's
// length at its end, the first longest. NaNs are each a run of their own.
std::tuple<Tensor, Tensor> mode(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "mode");
  const Tensor row = ops::at_least_1d(x);
  const int64_t n = row.size(d);
  check(n > 0, "mode", "cannot compute the mode of the empty dim ", d, " of shape ", shape_text(x.sizes()));
  const auto [sorted, order] = sort(row, d, false, true);
  const Tensor differs = ne(sorted.narrow(d, 1, n - 1), sorted.narrow(d, 0, n - 1));
  const Tensor first = ones(row_shape(x, d), kBool);
  const Tensor starts = cat({first, differs}, d), ends = cat({differs, first}, d);
  Shape pos_view(static_cast<size_t>(row.dim()), 1);
  pos_view[static_cast<size_t>(d)] = n;
  const Tensor pos = arange(n).reshape(pos_view).expand(row.sizes());
  const Tensor run_start = std::get<0>(cummax(where(starts, pos, zeros_like(pos)), d));
  const Tensor length_at_end = where(ends, pos - run_start + 1, zeros_like(pos));
  const Tensor best = argmax(length_at_end, d, true);
  return pick_sorted_at(sorted, order, x, d, best, keepdim);
}

std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  const int64_t d = ops::wrap_dim(dim, x.dim(), "kthvalue");
  const int64_t n = ops::at_least_1d(x).size(d);
  check(k >= 1 && k <= n, "kthvalue", "k (", k, ") is out of range for dim ", d, " of size ", n, " (shape ",
        shape_text(x.sizes()), ")");
  return pick_sorted(x, d, full(row_shape(x, d), k - 1, kInt64), keepdim);
}

Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                const std::string& interpolation) {
  const char* op = "quantile";
  check(is_floating(x.dtype()), op, "expected a floating point input but got ", x.dtype());
  check(q.dim() <= 1 && is_floating(q.dtype()), op, "expected q a 0-d or 1-d floating tensor but got ", q.dtype(),
        " of shape ", shape_text(q.sizes()));
  check(interpolation == "linear" || interpolation == "lower" || interpolation == "higher" ||
            interpolation == "midpoint" || interpolation == "nearest",
        op, "interpolation must be one of linear, lower, higher, midpoint or nearest but got '", interpolation, "'");
  const std::vector<double> qs = [&] {
    std::vector<double> v;
    const Tensor qc = q.to(kFloat64).contiguous();
    for (int64_t i = 0; i < qc.numel(); ++i) v.push_back(qc.data_ptr<double>()[i]);
    return v;
  }();
  for (double v : qs) check(v >= 0 && v <= 1, op, "q values must be in [0, 1] but got ", v);
  // Without dim: over all elements (keepdim keeps every dim as 1).
  const Tensor in = dim ? ops::at_least_1d(x) : x.reshape({-1});
  const int64_t d = dim ? ops::wrap_dim(*dim, x.dim(), op) : 0;
  const int64_t n = in.size(d);
  check(n > 0, op, "cannot compute a quantile of an empty dim (shape ", shape_text(x.sizes()), ")");
  const Tensor sorted = std::get<0>(sort(in, d));
  const Tensor has_nan = any(isnan(in), {d}, true);
  std::vector<Tensor> per_q;
  for (double v : qs) {
    const double pos = v * static_cast<double>(n - 1);
    const auto lo = static_cast<int64_t>(std::floor(pos)), hi = static_cast<int64_t>(std::ceil(pos));
    const Tensor a = sorted.narrow(d, lo, 1), b = sorted.narrow(d, hi, 1);
    Tensor r;
    if (interpolation == "linear") r = lerp(a, b, pos - static_cast<double>(lo));
    else if (interpolation == "lower") r = a;
    else if (interpolation == "higher") r = b;
    else if (interpolation == "midpoint") r = lerp(a, b, 0.5);
    else r = std::nearbyint(pos) == static_cast<double>(lo) ? a : b;  // round half to even, as torch.round
    r = where(has_nan, wrapped_scalar(kNaN), r);
    if (keepdim) {
      if (!dim) r = r.reshape(Shape(static_cast<size_t>(x.dim()), 1));
    } else {
      r = r.squeeze(d);
    }
    per_q.push_back(r);
  }
  return q.dim() == 0 ? per_q[0] : stack(per_q, 0);
}

Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim, const std::string& interpolation) {
  return quantile(x, full({}, q, kFloat64), dim, keepdim, interpolation);
}

std::tuple<Tensor, Tensor> var_mean(const Tensor& x, Shape dims, int64_t correction, bool keepdim) {
  return {var(x, dims, correction, keepdim), mean(x, dims, keepdim)};
}
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, Shape dims, int64_t correction, bool keepdim) {
  return {std(x, dims, correction, keepdim), mean(x, dims, keepdim)};
}

namespace {
const bool registered = [] {
  ops::def<static_cast<std::tuple<Tensor, Tensor> (*)(const Tensor&, int64_t, bool)>(&median)>(
      "median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  ops::def<static_cast<Tensor (*)(const Tensor&)>(&median)>("median(Tensor self) -> Tensor");
  ops::def<&mode>("mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)");
  ops::def<&kthvalue>(
      "kthvalue(Tensor self, int k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)");
  ops::def<static_cast<Tensor (*)(const Tensor&, const Tensor&, std::optional<int64_t>, bool, const std::string&)>(
      &quantile)>("quantile(Tensor self, Tensor q, int? dim=None, bool keepdim=False, *, str interpolation='linear') -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, double, std::optional<int64_t>, bool, const std::string&)>(&quantile)>(
      "quantile.scalar(Tensor self, float q, int? dim=None, bool keepdim=False, *, str interpolation='linear') -> Tensor");
  ops::def<&var_mean>(
      "var_mean(Tensor self, int[] dim=[], *, int correction=1, bool keepdim=False) -> (Tensor, Tensor)");
  ops::def<&std_mean>(
      "std_mean(Tensor self, int[] dim=[], *, int correction=1, bool keepdim=False) -> (Tensor, Tensor)");
  return true;
}();
}  // namespace

}  // namespace kiln
