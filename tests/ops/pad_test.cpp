// pad against a float64 reference written from PyTorch's definition of each
// mode, on random shapes (odd sizes, non-contiguous inputs, several dims
// padded, negative constant padding), its gradients and its errors.
#include <random>

#include "test_util.h"

namespace kiln::test {
namespace {

// The input index output position p of a dim of size n reads, or -1 for
// the constant value.
int64_t source(int64_t p, int64_t n, int64_t before, const std::string& mode) {
  int64_t i = p - before;
  if (mode == "constant") return i >= 0 && i < n ? i : -1;
  if (mode == "reflect") {
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return i;
  }
  if (mode == "replicate") return std::clamp<int64_t>(i, 0, n - 1);
  return ((i % n) + n) % n;  // circular
}

std::vector<double> reference(const Tensor& x, const Shape& pad, const std::string& mode, double value) {
  const std::vector<double> in = values(x.contiguous());
  Shape out_sizes = x.sizes();
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const size_t d = x.sizes().size() - 1 - k;
    out_sizes[d] += pad[2 * k] + pad[2 * k + 1];
  }
  std::vector<double> out(static_cast<size_t>(shape_numel(out_sizes)));
  const Shape in_strides = contiguous_strides(x.sizes());
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    const std::vector<int64_t> idx = unravel(flat, out_sizes);
    int64_t offset = 0;
    bool constant = false;
    for (size_t d = 0; d < idx.size(); ++d) {
      const size_t k = idx.size() - 1 - d;  // pad pair of this dim, if any
      const int64_t before = k < pad.size() / 2 ? pad[2 * k] : 0;
      const int64_t i = source(idx[d], x.size(static_cast<int64_t>(d)), before, k < pad.size() / 2 ? mode : "constant");
      if (i < 0) constant = true;
      else offset += i * in_strides[d];
    }
    out[static_cast<size_t>(flat)] = constant ? value : in[static_cast<size_t>(offset)];
  }
  return out;
}

TEST(Pad, EveryModeMatchesItsDefinitionOnRandomShapes) {
  std::mt19937 rng(17);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  for (const std::string mode : {"constant", "reflect", "replicate", "circular"}) {
    for (int trial = 0; trial < 25; ++trial) {
      const int64_t dims = pick(1, 4);
      Shape s;
      for (int64_t d = 0; d < dims; ++d) s.push_back(pick(2, 6));
      Tensor x = randn(s, kFloat64);
      if (trial % 3 == 0 && dims >= 2) x = randn({s[1], s[0]}, kFloat64).t();  // non-contiguous
      const int64_t padded = pick(1, x.dim());
      Shape p;
      for (int64_t k = 0; k < padded; ++k) {
        const int64_t n = x.size(x.dim() - 1 - k);
        const int64_t most = mode == "reflect" ? n - 1 : mode == "circular" ? n : 3;
        p.push_back(pick(mode == "constant" ? -1 : 0, static_cast<int>(most)));
        p.push_back(pick(0, static_cast<int>(most)));
      }
      const double value = mode == "constant" ? 2.5 : 0.0;
      const Tensor got = mode == "constant" ? pad(x, p, mode, value) : pad(x, p, mode);
      expect_close(got, reference(x, p, mode, value), 0, 0, mode + " pad " + shape_str(p) + " of " + shape_str(x.sizes()));
    }
  }
}

TEST(Pad, GradientsOfEveryMode) {
  for (const std::string mode : {"constant", "reflect", "replicate", "circular"}) {
    const Tensor x = randn({2, 3, 4}, kFloat64).requires_grad_();
    EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{pad(in[0], {2, 1, 1, 2}, mode)}; },
                                    {x}))
        << mode;
  }
}

TEST(Pad, BadPaddingIsRefusedByName) {
  const Tensor x = randn({2, 3});
  expect_error([&] { pad(x, {1}); }, {"[pad]", "even number", "[1]"});
  expect_error([&] { pad(x, {1, 1, 1, 1, 1, 1}); }, {"[pad]", "2-d input"});
  expect_error([&] { pad(x, {3, 0}, "reflect"); }, {"[pad]", "reflect padding (3, 0)", "size 3"});
  expect_error([&] { pad(x, {4, 0}, "circular"); }, {"[pad]", "circular padding (4, 0)"});
  expect_error([&] { pad(x, {-1, 0}, "replicate"); }, {"[pad]", "no negative padding"});
  expect_error([&] { pad(x, {1, 1}, "wrap"); }, {"[pad]", "'wrap'"});
  expect_error([&] { pad(x, {1, 1}, "reflect", 1.0); }, {"[pad]", "only for mode 'constant'"});
  expect_error([&] { pad(x, {-2, -2}); }, {"[pad]", "removes more than the 3 elements"});
  EXPECT_EQ(pad(randn({2, 3}, kMeta), {1, 2, 3, 4}).sizes(), Shape({9, 6}));  // shapes on meta
}

}  // namespace
}  // namespace kiln::test
