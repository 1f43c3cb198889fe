// Observers for static quantization (see kiln/quantization.h): min/max
// (per tensor, symmetric or affine, per channel) and a histogram with
// PyTorch's greedy range search.
#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "kiln/quantization.h"
#include "ops/op_util.h"
#include "ops/quantized_range.h"

namespace kiln::quant {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

// PyTorch's _calculate_qparams on min and max values (float64 tensors of one shape).
QParams qparams(const Tensor& min_val, const Tensor& max_val, DType dtype, bool symmetric) {
  const QuantRange q = quant_range(dtype, "observer");
  const Tensor zero = zeros_like(min_val);
  const Tensor lo = minimum(min_val, zero), hi = maximum(max_val, zero);
  if (symmetric) {
    const Tensor largest = maximum(neg(lo), hi);
    const Tensor scale = clamp(largest / (static_cast<double>(q.hi - q.lo) / 2), kEps, std::nullopt);
    return {scale, full(min_val.sizes(), dtype == kUInt8 ? 128.0 : 0.0, kInt64)};
  }
  const Tensor scale = clamp((hi - lo) / static_cast<double>(q.hi - q.lo), kEps, std::nullopt);
  const Tensor zp = clamp(static_cast<double>(q.lo) - round(lo / scale), static_cast<double>(q.lo),
                          static_cast<double>(q.hi));
  return {scale, zp.to(kInt64)};
}

void check_finite(const Tensor& x, const char* op) {
  check(is_floating(x.dtype()), op, "expected a floating point tensor but got ", x.dtype());
  if (x.numel()) check(sum(x.to(kFloat64) * 0).item<double>() == 0, op, "expected finite values (inf or NaN seen)");
}

}  // namespace

MinMaxObserver::MinMaxObserver(DType dtype, bool symmetric, QScheme scheme, int64_t ch_axis)
    : dtype_(dtype), symmetric_(symmetric), scheme_(scheme), axis_(ch_axis) {
  quant_range(dtype, "MinMaxObserver");
}

void MinMaxObserver::observe(const Tensor& input) {
  const char* op = "MinMaxObserver";
  check_finite(input, op);
  if (input.numel() == 0) return;
  const Tensor x = input.detach().to(kFloat64);
  Tensor lo, hi;
  if (scheme_ == QScheme::PerChannelAffine) {
    const int64_t a = ops::wrap_dim(axis_, x.dim(), op);
    const Tensor rows = movedim(x, {a}, {0}).reshape({x.size(a), -1});
    lo = amin(rows, {1}), hi = amax(rows, {1});
    if (min_.defined())
      check(min_.numel() == lo.numel(), op, "expected ", min_.numel(), " channels along axis ", a, " as before but got ",
            lo.numel());
  } else {
    lo = amin(x), hi = amax(x);
  }
  min_ = min_.defined() ? minimum(min_, lo) : lo;
  max_ = max_.defined() ? maximum(max_, hi) : hi;
}

QParams MinMaxObserver::calculate_qparams() const {
  check(min_.defined(), "MinMaxObserver", "calculate_qparams before any observed values");
  return qparams(min_, max_, dtype_, symmetric_);
}

HistogramObserver::HistogramObserver(DType dtype, int64_t bins) : dtype_(dtype) {
  quant_range(dtype, "HistogramObserver");
  check(bins >= 2, "HistogramObserver", "expected at least 2 bins but got ", bins);
  histogram_.assign(static_cast<size_t>(bins), 0.0);
}

void HistogramObserver::observe(const Tensor& input) {
  check_finite(input, "HistogramObserver");
  if (input.numel() == 0) return;
  const Tensor x = input.detach().to(kFloat64).contiguous();
  const double x_lo = amin(x).item<double>(), x_hi = amax(x).item<double>();
  const size_t bins = histogram_.size();
  auto bin_of = [&](double v, double lo, double hi) {
    if (hi <= lo) return size_t{0};
    return std::min(bins - 1, static_cast<size_t>((v - lo) / (hi - lo) * static_cast<double>(bins)));
  };
  if (seen_ && (x_lo < lo_ || x_hi > hi_)) {  // the range grows: each old bin's count moves to the new bin of its centre
    const double lo = std::min(lo_, x_lo), hi = std::max(hi_, x_hi), width = (hi_ - lo_) / static_cast<double>(bins);
    std::vector<double> moved(bins, 0.0);
    for (size_t b = 0; b < bins; ++b) moved[bin_of(lo_ + (static_cast<double>(b) + 0.5) * width, lo, hi)] += histogram_[b];
    histogram_ = std::move(moved), lo_ = lo, hi_ = hi;
  } else if (!seen_) {
    lo_ = x_lo, hi_ = x_hi, seen_ = true;
  }
  const double* v = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) histogram_[bin_of(v[i], lo_, hi_)] += 1;
}

std::pair<double, double> HistogramObserver::chosen_range() const {
  check(seen_, "HistogramObserver", "calculate_qparams before any observed values");
  const int64_t bins = static_cast<int64_t>(histogram_.size());
  const double width = (hi_ - lo_) / static_cast<double>(bins);
  if (width == 0) return {lo_, hi_};
  const QuantRange q = quant_range(dtype_, "HistogramObserver");
  const double levels = static_cast<double>(q.hi - q.lo);
  // The L2 error of quantizing to [start, end] bins: clipped mass by its
  // distance to the edge, plus rounding noise step^2 / 12 inside.
  auto error = [&](int64_t start, int64_t end) {
    const double a = lo_ + static_cast<double>(start) * width, b = lo_ + static_cast<double>(end + 1) * width;
    const double step = (b - a) / levels;
    double e = 0;
    for (int64_t i = 0; i < bins; ++i) {
      const double c = histogram_[static_cast<size_t>(i)], centre = lo_ + (static_cast<double>(i) + 0.5) * width;
      if (c == 0) continue;
      if (i < start) e += c * (a - centre) * (a - centre);
      else if (i > end) e += c * (centre - b) * (centre - b);
      else e += c * step * step / 12;
    }
    return e;
  };
  std::vector<double> cumulative(static_cast<size_t>(bins));
  double total = 0;
  for (int64_t i = 0; i < bins; ++i) cumulative[static_cast<size_t>(i)] = total += histogram_[static_cast<size_t>(i)];
  // PyTorch's search: move the lower or upper quantile by a small step,
  // take the side that drops more bins, stop when the error rises.
  const double stepsize = 1e-5;
  double alpha = 0, beta = 1, best = error(0, bins - 1);
  int64_t start = 0, end = bins - 1;
  while (alpha < beta) {
    const double next_alpha = alpha + stepsize, next_beta = beta - stepsize;
    int64_t l = start, r = end;
    while (l < end && cumulative[static_cast<size_t>(l)] < next_alpha * total) ++l;
    while (r > start && cumulative[static_cast<size_t>(r)] > next_beta * total) --r;
    int64_t next_start = start, next_end = end;
    if (l - start > end - r) next_start = l, alpha = next_alpha;
    else next_end = r, beta = next_beta;
    if (next_start == start && next_end == end) continue;
    const double e = error(next_start, next_end);
    if (e > best) break;
    best = e, start = next_start, end = next_end;
  }
  return {lo_ + static_cast<double>(start) * width, lo_ + static_cast<double>(end + 1) * width};
}

QParams HistogramObserver::calculate_qparams() const {
  const auto [lo, hi] = chosen_range();
  return qparams(scalar_tensor(lo, kFloat64), scalar_tensor(hi, kFloat64), dtype_, false);
}

}  // namespace kiln::quant
