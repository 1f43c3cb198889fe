// softmax, log_softmax, layer_norm and rms_norm against float64 references.
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

// Applies fn to every line of x along dim (row-major output order).
std::vector<double> ref_lines(const Tensor& x, int64_t dim, const std::function<std::vector<double>(std::vector<double>)>& fn) {
  const auto v = values(x);
  std::vector<double> out(v.size());
  const Shape& s = x.sizes();
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= s[d];
  const int64_t n = s[dim], outer = x.numel() / std::max<int64_t>(n * inner, 1);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<double> line;
      for (int64_t r = 0; r < n; ++r) line.push_back(v[(o * n + r) * inner + i]);
      auto res = fn(line);
      for (int64_t r = 0; r < n; ++r) out[(o * n + r) * inner + i] = res[r];
    }
  return out;
}

std::vector<double> ref_softmax(std::vector<double> v, bool log) {
  double m = -INFINITY, s = 0;
  for (double x : v) m = std::max(m, x);
  for (double x : v) s += std::exp(x - m);
  for (double& x : v) x = log ? x - m - std::log(s) : std::exp(x - m) / s;
  return v;
}

TEST(NN, SoftmaxAndLogSoftmaxEveryDimLayoutDType) {
  manual_seed(10);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    for (Layout l : all_layouts()) {
      Tensor x = make_input({3, 4, 37}, l, dt, 3.0);
      for (int64_t dim : {0, 1, 2}) {
        for (bool log : {false, true}) {
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          const Tol t = tol_for(dt);
          expect_close(y, ref_lines(x, dim, [&](auto v) { return ref_softmax(v, log); }), t.rtol, t.atol * 5,
                       std::string(log ? "log_softmax " : "softmax ") + dtype_name(dt) + " " + layout_name(l));
        }
      }
    }
  }
}

TEST(NN, SoftmaxOfLargeAndMaskedRows) {
  Tensor x = tensor<float>({1000, 1001, -INFINITY, -INFINITY}, {1, 4});
  expect_close(softmax(x, 1), ref_softmax({1000, 1001, -INFINITY, -INFINITY}, false), 1e-6, 1e-7, "large logits");
  Tensor masked = full({2, 3}, -INFINITY);
  EXPECT_TRUE(std::isnan(softmax(masked, 1).sum().item<float>()));  // PyTorch gives NaN too
}

// A float32 row spanning at most 87 takes the exponential with one scaling
// (Note [Softmax's exponential]); a wider one the general form. Long rows (a
// vector body and a tail), both kinds against float64 within a few float
// ulps, and against each other where they differ only in an element whose
// share rounds to nothing in the sum.
TEST(NN, SoftmaxNarrowAndWideRowsAgreeWithFloat64) {
  manual_seed(12);
  const int64_t n = 1031;
  for (bool log : {false, true}) {
    // Logits on a grid of 2^-10 below 64: x - max is exact, so the error
    // measured is the exponential's and the sum's, not the subtraction's
    // (which scales with |x - max|). The sum of 1031 terms in one float
    // accumulator (the scalar target) is good to a few 1e-6.
    Tensor narrow = round(randn({5, n}) * (6.0 * 1024)) / 1024.0;
    Tensor wide = narrow.clone();
    const auto row_max = values(std::get<0>(max(narrow, 1)));
    for (int64_t r = 0; r < 5; ++r) {
      narrow.select(0, r).narrow(0, 7, 1).fill_(row_max[r] - 86.5);  // e^-86.5 is normal; exact on the grid
      wide.select(0, r).narrow(0, 7, 1).fill_(row_max[r] - 200.0);   // span > 87; e^-200 is 0
    }
    const Tensor a = log ? log_softmax(narrow, 1) : softmax(narrow, 1);
    const Tensor b = log ? log_softmax(wide, 1) : softmax(wide, 1);
    const char* what = log ? "log_softmax" : "softmax";
    expect_close(a, ref_lines(narrow, 1, [&](auto v) { return ref_softmax(v, log); }), 5e-6, log ? 5e-6 : 1e-45,
                 std::string(what) + " narrow rows");
    expect_close(b, ref_lines(wide, 1, [&](auto v) { return ref_softmax(v, log); }), 5e-6, log ? 5e-6 : 1e-45,
                 std::string(what) + " wide rows");
    // Every column but the 7th: the same within an ulp, computed by the two forms.
    Tensor keep = ones({n}, kBool);
    keep.narrow(0, 7, 1).fill_(0.0);
    expect_close(masked_select(b, keep), values(masked_select(a, keep)), 2.4e-7, 0, std::string(what) + " forms");
  }
  // A NaN anywhere in a row makes its every output NaN, in both forms.
  Tensor x = tensor<float>({1, 2, NAN, 4, 1, -300, NAN, 0}, {2, 4});
  for (double v : values(softmax(x, 1))) EXPECT_TRUE(std::isnan(v));
  for (double v : values(log_softmax(x, 1))) EXPECT_TRUE(std::isnan(v));
}

TEST(NN, LayerNormAndRmsNorm) {
  manual_seed(11);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    for (Layout l : all_layouts()) {
      Tensor x = make_input({4, 3, 37}, l, dt, 2.0);
      Tensor w = randn({37}).to(dt), b = randn({37}).to(dt);
      const auto wv = values(w), bv = values(b);
      auto ln = [&](std::vector<double> v, bool affine, bool rms) {
        double m = 0, s = 0;
        for (double x : v) m += x;
        m = rms ? 0 : m / v.size();
        for (double x : v) s += (x - m) * (x - m);
        const double eps = rms ? (dt == kFloat64 ? 2.220446049250313e-16 : dt == kBFloat16 ? 0.0078125 : 1.1920929e-07) : 1e-5;
        const double rs = 1 / std::sqrt(s / v.size() + eps);
        for (size_t i = 0; i < v.size(); ++i) v[i] = (v[i] - m) * rs * (affine ? wv[i] : 1) + (affine && !rms ? bv[i] : 0);
        return v;
      };
      const Tol t = tol_for(dt);
      const double rt = dt == kFloat32 ? 1e-4 : t.rtol, at = dt == kFloat32 ? 1e-4 : t.atol * 3;
      expect_close(layer_norm(x, {37}, w, b), ref_lines(x, 2, [&](auto v) { return ln(v, true, false); }), rt, at,
                   std::string("layer_norm ") + dtype_name(dt) + " " + layout_name(l));
      expect_close(layer_norm(x, {37}), ref_lines(x, 2, [&](auto v) { return ln(v, false, false); }), rt, at,
                   "layer_norm without affine");
      expect_close(rms_norm(x, {37}, w), ref_lines(x, 2, [&](auto v) { return ln(v, true, true); }), rt, at,
                   std::string("rms_norm ") + dtype_name(dt));
    }
  }
  // Normalising over two trailing dims.
  Tensor x = randn({2, 3, 5});
  Tensor y = layer_norm(x, {3, 5});
  EXPECT_NEAR(values(y.sum({1, 2}))[0], 0.0, 1e-5);
  EXPECT_NEAR(values(var(y, {1, 2}, 0))[1], 1.0, 1e-4);
}

}  // namespace
}  // namespace kiln::test
