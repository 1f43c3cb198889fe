// pad (torch.nn.functional.pad): a composite of views, cat and
// index_select, so autograd, kiln::compile and every device get it from
// those ops. `pad` lists (before, after) pairs from the last dim backwards.
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace kiln {
namespace {

// The input index each output position of one dim reads, for the modes
// that read the input (reflect, replicate, circular).
std::vector<int64_t> source_positions(int64_t n, int64_t before, int64_t after, const std::string& mode) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(n + before + after));
  for (int64_t p = -before; p < n + after; ++p) {
    int64_t i = p;
    if (mode == "reflect") {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else if (mode == "replicate") {
      i = i < 0 ? 0 : (i >= n ? n - 1 : i);
    } else {  // circular
      i = ((i % n) + n) % n;
    }
    idx.push_back(i);
  }
  return idx;
}

}  // namespace

Tensor pad(const Tensor& x, const Shape& pad, const std::string& mode, std::optional<double> value) {
  check(pad.size() % 2 == 0 && static_cast<int64_t>(pad.size()) <= 2 * x.dim(), "pad", "expected an even number of ",
        "padding sizes, at most 2 per dim of the ", x.dim(), "-d input, but got ", ops::shape_text(pad));
  check(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular", "pad",
        "mode must be 'constant', 'reflect', 'replicate' or 'circular', not '", mode, "'");
  check(mode == "constant" || !value.has_value(), "pad", "a padding value is only for mode 'constant'");
  Tensor out = x;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
    const int64_t before = pad[2 * k], after = pad[2 * k + 1], n = out.size(d);
    if (mode == "constant") {
      // Negative sizes crop, as in PyTorch.
      const int64_t cut_before = before < 0 ? -before : 0, cut_after = after < 0 ? -after : 0;
      check(n - cut_before - cut_after >= 0, "pad", "negative padding ", ops::shape_text(pad), " removes more than the ",
            n, " elements of dim ", d);
      out = out.narrow(d, cut_before, n - cut_before - cut_after);
      std::vector<Tensor> parts;
      Shape side = out.sizes();
      if (before > 0) {
        side[d] = before;
        parts.push_back(full(side, value.value_or(0.0), out.options()));
      }
      parts.push_back(out);
      if (after > 0) {
        side[d] = after;
        parts.push_back(full(side, value.value_or(0.0), out.options()));
      }
      if (parts.size() > 1) out = cat(parts, d);
      continue;
    }
    check(before >= 0 && after >= 0, "pad", "mode '", mode, "' takes no negative padding, but got ", ops::shape_text(pad));
    check(n > 0, "pad", "mode '", mode, "' cannot pad dim ", d, " of size 0");
    if (mode == "reflect")
      check(before < n && after < n, "pad", "reflect padding (", before, ", ", after, ") must be below the size ", n,
            " of dim ", d);
    if (mode == "circular")
      check(before <= n && after <= n, "pad", "circular padding (", before, ", ", after,
            ") must be at most the size ", n, " of dim ", d);
    if (before == 0 && after == 0) continue;
    const std::vector<int64_t> idx = source_positions(n, before, after, mode);
    out = index_select(out, d, tensor(idx).to(out.device()));
  }
  return out;
}

}  // namespace kiln
