// sort / topk along a dim, and multinomial sampling.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/philox.h"
#include "core/convert.h"
#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {

// Outputs the first k of each line in sorted order (k = line length for
// sort). NaN sorts as the largest value, as in PyTorch.
void sort_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& vals = c.outputs[0];
  const Tensor& idx = c.outputs[1];
  const int64_t dim = c.attrs.get_int("dim");
  const bool desc = c.attrs.get_bool("descending");
  const bool stable = c.attrs.get_bool("stable");
  const int64_t k = c.attrs.get_int("k");
  const int64_t n = x.size(dim), xs = x.stride(dim), vs = vals.stride(dim), is = idx.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<is_16bit_float<T>, float, T>;
    Tensor xl = view_of(x, vals.sizes(), x.strides(), x.storage_offset());
    for_each_line<3>({&vals, &idx, &xl}, dim, n, [&](const std::array<char*, 3>& b, int64_t) {
      const T* xp = reinterpret_cast<const T*>(b[2]);
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      auto key = [&](int64_t i) { return convert<C>(xp[i * xs]); };
      auto less = [&](int64_t a, int64_t bb) {
        const C va = key(a), vb = key(bb);
        const bool na = va != va, nb = vb != vb;
        if (desc) return na ? !nb : (!nb && va > vb);
        return nb ? !na : (!na && va < vb);
      };
      if (k < n && !stable) std::partial_sort(order.begin(), order.begin() + k, order.end(), less);
      else if (stable) std::stable_sort(order.begin(), order.end(), less);
      else std::sort(order.begin(), order.end(), less);
      for (int64_t i = 0; i < k; ++i) {
        reinterpret_cast<T*>(b[0])[i * vs] = xp[order[i] * xs];
        reinterpret_cast<int64_t*>(b[1])[i * is] = order[i];
      }
    });
  });
}

// probs (R, n) or (n,): draws num_samples category indices per row from the
// (unnormalised) weights, with or without replacement.
void multinomial_kernel(const OpCall& c) {
  const Tensor p = converted(c.inputs[0], kFloat64);
  const Tensor& out = c.outputs[0];
  const int64_t n = p.size(p.dim() - 1);
  const int64_t rows = p.dim() == 2 ? p.size(0) : 1;
  const int64_t draws = c.attrs.get_int("num_samples");
  const bool replacement = c.attrs.get_bool("replacement");
  const uint64_t seed = static_cast<uint64_t>(c.attrs.get_int("seed"));
  const uint64_t offset = static_cast<uint64_t>(c.attrs.get_int("offset"));
  const double* pp = p.data_ptr<double>();
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> w(pp + r * n, pp + (r + 1) * n);
    for (double v : w)
      if (!(v >= 0) || std::isinf(v)) fail("multinomial", "probabilities must be finite and non-negative");
    int64_t positive = std::count_if(w.begin(), w.end(), [](double v) { return v > 0; });
    if (positive == 0) fail("multinomial", "the probabilities of row ", r, " sum to zero");
    if (!replacement && draws > positive)
      fail("multinomial", "cannot draw ", draws, " samples without replacement from ", positive, " non-zero categories");
    for (int64_t s = 0; s < draws; ++s) {
      const auto bits = philox4x32(offset + static_cast<uint64_t>(r * draws + s), seed);
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      const double u = uniform53(bits[0], bits[1]) * total;
      double acc = 0;
      int64_t pick = n - 1;
      for (int64_t i = 0; i < n; ++i) {
        acc += w[i];
        if (u < acc && w[i] > 0) {
          pick = i;
          break;
        }
      }
      while (w[pick] <= 0) --pick;  // rounding at the top end
      o[r * draws + s] = pick;
      if (!replacement) w[pick] = 0;
    }
  }
}

}  // namespace kiln::cpu
