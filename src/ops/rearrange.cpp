// Ops that rearrange elements without arithmetic, composed of views,
// index_select, cat, expand and gather so autograd and compile come with
// them: flip, roll, repeat, tile, repeat_interleave, movedim, take_along_dim, meshgrid,
// pixel_shuffle / pixel_unshuffle, diag / diag_embed.
#include <algorithm>
#include <numeric>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"

namespace kiln {
namespace {

// dim in [-n, n) to [0, n), else an error naming op.
int64_t wrap(const char* op, int64_t dim, int64_t n) {
  check(dim >= -std::max<int64_t>(n, 1) && dim < std::max<int64_t>(n, 1), op, "dim ", dim, " is out of range for a ",
        n, "-d tensor");
  return dim < 0 ? dim + std::max<int64_t>(n, 1) : dim;
}

// Wrapped dims, each at most once.
Shape wrap_unique(const char* op, const Shape& dims, int64_t n) {
  Shape out;
  for (int64_t d : dims) {
    out.push_back(wrap(op, d, n));
    check(std::count(out.begin(), out.end(), out.back()) == 1, op, "dim ", d, " appears more than once in ",
          shape_text(dims));
  }
  return out;
}

}  // namespace

Tensor flip(const Tensor& x, const Shape& dims) {
  Tensor out = x;
  for (int64_t d : wrap_unique("flip", dims, x.dim())) {
    if (x.dim() == 0 || x.size(d) <= 1) continue;
    out = index_select(out, d, arange(x.size(d) - 1, -1, -1, kInt64));
  }
  return out.is_same(x) ? x.clone() : out;  // a new tensor, as PyTorch's, even when nothing moved
}

Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  check(!shifts.empty(), "roll", "expected at least one shift");
  if (dims.empty()) {  // the flattened tensor, shaped back
    check(shifts.size() == 1, "roll", "without dims expected one shift but got ", shape_text(shifts));
    return roll(x.flatten(), shifts, {0}).view(x.sizes());
  }
  check(shifts.size() == dims.size(), "roll", "shifts ", shape_text(shifts), " and dims ", shape_text(dims),
        " must have the same length");
  Tensor out = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap("roll", dims[i], x.dim()), n = x.dim() == 0 ? 1 : x.size(d);
    const int64_t s = n == 0 ? 0 : ((shifts[i] % n) + n) % n;
    if (s == 0 || x.dim() == 0) continue;
    out = cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  const int64_t k = static_cast<int64_t>(repeats.size());
  check(k >= x.dim(), "repeat", "repeats ", shape_text(repeats), " has fewer entries than the tensor's ", x.dim(),
        " dims");
  for (int64_t r : repeats) check(r >= 0, "repeat", "repeats must be non-negative but got ", shape_text(repeats));
  // Sizes with leading 1s, then (1, s) per dim expanded to (r, s) and merged.
  Shape sizes(static_cast<size_t>(k - x.dim()), 1);
  for (int64_t s : x.sizes()) sizes.push_back(s);
  Shape split, expanded, merged;
  for (int64_t i = 0; i < k; ++i) {
    split.insert(split.end(), {1, sizes[i]});
    expanded.insert(expanded.end(), {repeats[i], sizes[i]});
    merged.push_back(repeats[i] * sizes[i]);
  }
  return x.reshape(split).expand(expanded).reshape(merged);
}

Tensor tile(const Tensor& x, const Shape& dims) {
  Shape repeats(static_cast<size_t>(std::max<int64_t>(x.dim() - static_cast<int64_t>(dims.size()), 0)), 1);
  repeats.insert(repeats.end(), dims.begin(), dims.end());
  return repeat(x, repeats);
}

namespace {

// x along dim (x flattened without one; a 0-d x as one element), and that dim.
std::pair<Tensor, int64_t> interleave_input(const Tensor& x, std::optional<int64_t> dim) {
  if (!dim || x.dim() == 0) {
    if (dim) wrap("repeat_interleave", *dim, 0);
    return {x.reshape({x.numel()}), 0};
  }
  return {x, wrap("repeat_interleave", *dim, x.dim())};
}

void check_output_size(std::optional<int64_t> output_size, int64_t size) {
  check(!output_size || *output_size == size, "repeat_interleave", "output_size ", output_size.value_or(0),
        " is not the result's size ", size);
}

}  // namespace

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim,
                         std::optional<int64_t> output_size) {
  check(repeats >= 0, "repeat_interleave", "repeats must be non-negative but got ", repeats);
  const auto [input, d] = interleave_input(x, dim);
  check_output_size(output_size, input.size(d) * repeats);
  if (repeats == 1) return input.clone();  // a new tensor, as PyTorch's
  // (.., n, ..) as (.., n, 1, ..) expanded to (.., n, r, ..) and merged:
  // expand's backward sums the copies' gradients.
  Shape expanded = input.sizes(), merged = input.sizes();
  expanded.insert(expanded.begin() + d + 1, repeats);
  merged[static_cast<size_t>(d)] *= repeats;
  return input.unsqueeze(d + 1).expand(expanded).reshape(merged);
}

Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size) {
  check(repeats.dim() <= 1, "repeat_interleave", "expected repeats of 0 or 1 dims but got shape ",
        shape_text(repeats.sizes()));
  check(repeats.dtype() == kInt64 || repeats.dtype() == kInt32, "repeat_interleave",
        "expected repeats of dtype int64 or int32 but got ", repeats.dtype());
  const Tensor counts = repeats.to(kInt64).contiguous();
  const int64_t* c = counts.data_ptr<int64_t>();
  int64_t total = 0;
  for (int64_t i = 0; i < counts.numel(); ++i) {
    check(c[i] >= 0, "repeat_interleave", "repeats must be non-negative but entry ", i, " is ", c[i]);
    total += c[i];
  }
  check_output_size(output_size, total);
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(total));
  for (int64_t i = 0; i < counts.numel(); ++i) indices.insert(indices.end(), static_cast<size_t>(c[i]), i);
  return tensor(indices, {total});
}

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim,
                         std::optional<int64_t> output_size) {
  const auto [input, d] = interleave_input(x, dim);
  const int64_t n = input.size(d);
  check(repeats.dim() <= 1 && (repeats.numel() == n || repeats.numel() == 1), "repeat_interleave",
        "expected repeats of ", n, " entries (the size of dim ", d, " of ", shape_text(x.sizes()),
        ") or of one but got shape ", shape_text(repeats.sizes()));
  if (repeats.numel() == 1 && n != 1) {
    check(repeats.dtype() == kInt64 || repeats.dtype() == kInt32, "repeat_interleave",
          "expected repeats of dtype int64 or int32 but got ", repeats.dtype());
    return repeat_interleave(input, repeats.to(kInt64).item<int64_t>(), d, output_size);
  }
  // index_select's backward adds each copy's gradient into its slice.
  return index_select(input, d, repeat_interleave(repeats.reshape({n}), output_size));
}

Tensor movedim(const Tensor& x, const Shape& source, const Shape& destination) {
  check(source.size() == destination.size(), "movedim", "source ", shape_text(source), " and destination ",
        shape_text(destination), " must have the same length");
  const Shape src = wrap_unique("movedim", source, x.dim()), dst = wrap_unique("movedim", destination, x.dim());
  // The dims not moved keep their order in the places no moved dim takes.
  Shape perm(static_cast<size_t>(x.dim()), -1), rest;
  for (size_t i = 0; i < src.size(); ++i) perm[static_cast<size_t>(dst[i])] = src[i];
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(src.begin(), src.end(), d) == src.end()) rest.push_back(d);
  auto next = rest.begin();
  for (int64_t& p : perm)
    if (p < 0) p = *next++;
  return x.permute(perm);
}

Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim) {
  check(indices.dtype() == kInt64 || indices.dtype() == kInt32, "take_along_dim",
        "expected integer indices but got ", indices.dtype());
  if (!dim) return gather(x.flatten(), 0, indices.flatten().to(kInt64));
  check(x.dim() == indices.dim(), "take_along_dim", "x ", shape_text(x.sizes()), " and indices ",
        shape_text(indices.sizes()), " must have the same number of dims");
  const int64_t d = wrap("take_along_dim", *dim, x.dim());
  // Broadcast every dim but d, as PyTorch does.
  Shape xs = x.sizes(), is = indices.sizes();
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i == d) continue;
    check(xs[i] == is[i] || xs[i] == 1 || is[i] == 1, "take_along_dim", "x ", shape_text(x.sizes()), " and indices ",
          shape_text(indices.sizes()), " do not broadcast outside dim ", d);
    xs[i] = is[i] = std::max(xs[i], is[i]);
  }
  return gather(x.expand(xs), d, indices.expand(is).to(kInt64));
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  check(indexing == "ij" || indexing == "xy", "meshgrid", "indexing must be 'ij' or 'xy' but got '", indexing, "'");
  check(!tensors.empty(), "meshgrid", "expected at least one tensor");
  Shape grid;
  for (const Tensor& t : tensors) {
    check(t.dim() <= 1, "meshgrid", "expected 0-d or 1-d tensors but got shape ", shape_text(t.sizes()));
    grid.push_back(t.numel());
  }
  // "xy": the first two axes swapped (Cartesian indexing).
  const bool xy = indexing == "xy" && tensors.size() >= 2;
  if (xy) std::swap(grid[0], grid[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Shape view(grid.size(), 1);
    const size_t at = xy && i < 2 ? 1 - i : i;
    view[at] = tensors[i].numel();
    out.push_back(tensors[i].reshape(view).expand(grid));
  }
  return out;
}

// (..., C r^2, H, W) <-> (..., C, H r, W r): channel c r^2 + i r + j goes to pixel (h r + i, w r + j).
Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_shuffle";
  check(r > 0, op, "upscale_factor must be positive but got ", r);
  check(x.dim() >= 3 && x.size(-3) % (r * r) == 0, op, "expected (..., C * ", r * r, ", H, W) but got ",
        shape_text(x.sizes()));
  const int64_t n = x.dim(), c = x.size(-3) / (r * r), h = x.size(-2), w = x.size(-1);
  Shape lead(x.sizes().begin(), x.sizes().end() - 3), split = lead, out = lead;
  split.insert(split.end(), {c, r, r, h, w});
  out.insert(out.end(), {c, h * r, w * r});
  Shape perm;
  for (int64_t i = 0; i < n - 3; ++i) perm.push_back(i);
  const int64_t b = n - 3;
  perm.insert(perm.end(), {b, b + 3, b + 1, b + 4, b + 2});  // c, h, i, w, j
  return x.reshape(split).permute(perm).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_unshuffle";
  check(r > 0, op, "downscale_factor must be positive but got ", r);
  check(x.dim() >= 3 && x.size(-2) % r == 0 && x.size(-1) % r == 0, op, "expected (..., C, H, W) with H and W ",
        "multiples of ", r, " but got ", shape_text(x.sizes()));
  const int64_t n = x.dim(), c = x.size(-3), h = x.size(-2) / r, w = x.size(-1) / r;
  Shape lead(x.sizes().begin(), x.sizes().end() - 3), split = lead, out = lead;
  split.insert(split.end(), {c, h, r, w, r});
  out.insert(out.end(), {c * r * r, h, w});
  Shape perm;
  for (int64_t i = 0; i < n - 3; ++i) perm.push_back(i);
  const int64_t b = n - 3;
  perm.insert(perm.end(), {b, b + 2, b + 4, b + 1, b + 3});  // c, i, j, h, w
  return x.reshape(split).permute(perm).reshape(out);
}

// The last dim of x on the diagonal (offset) of new (dim1, dim2) planes of
// size n + |offset|, zeros elsewhere: a scatter into flattened planes.
Tensor diag_embed(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  const char* op = "diag_embed";
  check(x.dim() >= 1, op, "expected a tensor of at least 1 dim but got a 0-d one");
  const int64_t out_dims = x.dim() + 1;
  const int64_t d1 = wrap(op, dim1, out_dims), d2 = wrap(op, dim2, out_dims);
  check(d1 != d2, op, "dim1 and dim2 must differ but both are ", d1);
  const int64_t n = x.size(-1), m = n + std::abs(offset);
  const int64_t row0 = std::max<int64_t>(-offset, 0), col0 = std::max<int64_t>(offset, 0);
  Shape lead(x.sizes().begin(), x.sizes().end() - 1), flat = lead, planes = lead;
  flat.push_back(m * m);
  planes.insert(planes.end(), {m, m});
  const Tensor i = arange(n, TensorOptions(kInt64).device(x.device()));
  Shape idx_shape(lead.size(), 1);
  idx_shape.push_back(n);
  const Tensor pos = ((i + row0) * m + (i + col0)).reshape(idx_shape).expand(x.sizes());
  const Tensor out = scatter(zeros(flat, TensorOptions(x.dtype()).device(x.device())), -1, pos, x).reshape(planes);
  // The planes are the last two dims; move them to (d1, d2).
  return movedim(out, {out_dims - 2, out_dims - 1}, {d1, d2});
}

Tensor diag(const Tensor& x, int64_t diagonal_index) {
  check(x.dim() == 1 || x.dim() == 2, "diag", "expected a 1-d or 2-d tensor but got shape ", shape_text(x.sizes()));
  if (x.dim() == 1) return diag_embed(x, diagonal_index, 0, 1);
  return diagonal(x, diagonal_index).clone();
}

namespace {
const bool registered = [] {
  ops::def<&flip>("flip(Tensor self, int[] dims) -> Tensor");
  ops::def<&roll>("roll(Tensor self, int[] shifts, int[] dims=[]) -> Tensor");
  ops::def<&repeat>("repeat(Tensor self, int[] repeats) -> Tensor");
  ops::def<&tile>("tile(Tensor self, int[] dims) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, std::optional<int64_t>)>(&repeat_interleave)>(
      "repeat_interleave.Tensor(Tensor repeats, *, int? output_size=None) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, const Tensor&, std::optional<int64_t>, std::optional<int64_t>)>(
      &repeat_interleave)>(
      "repeat_interleave.self_Tensor(Tensor self, Tensor repeats, int? dim=None, *, int? output_size=None) -> Tensor");
  ops::def<static_cast<Tensor (*)(const Tensor&, int64_t, std::optional<int64_t>, std::optional<int64_t>)>(
      &repeat_interleave)>(
      "repeat_interleave.self_int(Tensor self, int repeats, int? dim=None, *, int? output_size=None) -> Tensor");
  ops::def<&movedim>("movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)");
  ops::def<&take_along_dim>("take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor");
  ops::def<&meshgrid>("meshgrid.indexing(Tensor[] tensors, *, str indexing) -> Tensor[]");
  ops::def<&pixel_shuffle>("pixel_shuffle(Tensor self, int upscale_factor) -> Tensor");
  ops::def<&pixel_unshuffle>("pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor");
  ops::def<&diag_embed>("diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor");
  ops::def<&diag>("diag(Tensor self, int diagonal=0) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
