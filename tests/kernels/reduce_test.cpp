// Reductions over sets of dims, keepdim, layouts and dtypes, against
// float64 references computed here.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

using Fold = std::function<double(const std::vector<double>&)>;

// Reference: group the values of x by the kept-dims index and fold each group.
std::vector<double> ref_reduce(const Tensor& x, const Shape& dims_in, const Fold& fold) {
  Shape dims = dims_in;
  if (dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  for (auto& d : dims) d = d < 0 ? d + x.dim() : d;
  Shape kept;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(x.size(d));
  std::vector<std::vector<double>> groups(static_cast<size_t>(shape_numel(kept)));
  const auto v = values(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto idx = unravel(i, x.sizes());
    int64_t g = 0;
    for (int64_t d = 0, k = 0; d < x.dim(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) g = g * kept[k++] + idx[d];
    groups[g].push_back(v[i]);
  }
  std::vector<double> out;
  for (auto& grp : groups) out.push_back(fold(grp));
  return out;
}

double fsum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double fmean(const std::vector<double>& v) { return fsum(v) / static_cast<double>(v.size()); }
double fvar(const std::vector<double>& v, int64_t correction) {
  const double m = fmean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(static_cast<int64_t>(v.size()) - correction);
}

struct ReduceCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Shape&, bool)> op;
  Fold ref;
};

std::vector<ReduceCase> cases() {
  return {
      {"sum", [](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }, fsum},
      {"mean", [](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); }, fmean},
      {"prod", [](const Tensor& x, const Shape& d, bool k) { return prod(x, d, k); },
       [](const std::vector<double>& v) {
         double p = 1;
         for (double x : v) p *= x;
         return p;
       }},
      {"amax", [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); },
       [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }},
      {"amin", [](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); },
       [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }},
      {"var", [](const Tensor& x, const Shape& d, bool k) { return var(x, d, 1, k); },
       [](const std::vector<double>& v) { return fvar(v, 1); }},
      {"var_biased", [](const Tensor& x, const Shape& d, bool k) { return var(x, d, 0, k); },
       [](const std::vector<double>& v) { return fvar(v, 0); }},
      {"std", [](const Tensor& x, const Shape& d, bool k) { return kiln::std(x, d, 1, k); },
       [](const std::vector<double>& v) { return std::sqrt(fvar(v, 1)); }},
      {"logsumexp", [](const Tensor& x, const Shape& d, bool k) { return logsumexp(x, d, k); },
       [](const std::vector<double>& v) {
         double m = *std::max_element(v.begin(), v.end()), s = 0;
         for (double x : v) s += std::exp(x - m);
         return m + std::log(s);
       }},
      {"norm2", [](const Tensor& x, const Shape& d, bool k) { return norm(x, 2, d, k); },
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += x * x;
         return std::sqrt(s);
       }},
      {"norm3", [](const Tensor& x, const Shape& d, bool k) { return norm(x, 3, d, k); },
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += std::pow(std::fabs(x), 3);
         return std::cbrt(s);
       }},
  };
}

const std::vector<Shape> kDimSets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}};

TEST(Reduce, DimSetsLayoutsAndDTypes) {
  manual_seed(4);
  for (const auto& c : cases()) {
    for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
      for (Layout l : all_layouts()) {
        Tensor x = make_input({3, 5, 37}, l, dt, 1.0);
        if (std::string(c.name) == "prod") x = (x * 0.1 + 1.0).to(dt);  // keep the product in range
        for (const Shape& dims : kDimSets) {
          for (bool keepdim : {false, true}) {
            Tensor y = c.op(x, dims, keepdim);
            ASSERT_EQ(y.dtype(), dt) << c.name;
            Shape expect;
            for (int64_t d = 0; d < 3; ++d) {
              bool r = dims.empty();
              for (int64_t rd : dims) r = r || (rd + 3) % 3 == d;
              if (!r) expect.push_back(x.size(d));
              else if (keepdim) expect.push_back(1);
            }
            ASSERT_EQ(y.sizes(), expect) << c.name;
            Tol t = tol_for(dt);
            if (dt == kFloat32) t = {1e-4, 1e-5};
            if (dt == kBFloat16) t = {4e-2, 3e-2};  // composites round at every step
            expect_close(y, ref_reduce(x, dims, c.ref), t.rtol, t.atol,
                         std::string(c.name) + " " + dtype_name(dt) + " " + layout_name(l) + " dims " +
                             std::to_string(dims.size()));
          }
        }
      }
    }
  }
}

TEST(Reduce, LongRowSplitsAcrossThreadsDeterministically) {
  manual_seed(5);
  Tensor x = rand({1 << 20});
  const double want = fsum(values(x));
  set_num_threads(1);
  const float one = sum(x).item<float>();
  set_num_threads(2);
  const float two = sum(x).item<float>();
  EXPECT_EQ(one, two);
  EXPECT_NEAR(one, want, 1e-5 * want);
}

TEST(Reduce, IntegerAndBoolReductions) {
  Tensor i = tensor<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(i).dtype(), kInt64);
  expect_close(sum(i, {0}), {5, 7, 9}, 0, 0, "int sum");
  expect_close(prod(i, {1}), {6, 120}, 0, 0, "int prod");
  expect_close(amax(i, {1}), {3, 6}, 0, 0, "int amax");
  Tensor b = tensor<bool>({true, false, true, true}, {2, 2});
  expect_close(all(b, {1}), {0, 1}, 0, 0, "all");
  expect_close(any(b, {0}), {1, 1}, 0, 0, "any");
  expect_close(sum(b), {3}, 0, 0, "sum of bool counts");
  EXPECT_EQ(sum(i, {}, false, kFloat64).dtype(), kFloat64);
}

TEST(Reduce, ZeroSizeAndZeroDim) {
  Tensor e = zeros({0, 4});
  expect_close(sum(e, {0}), {0, 0, 0, 0}, 0, 0, "sum over an empty dim");
  expect_close(prod(e, {0}), {1, 1, 1, 1}, 0, 0, "prod over an empty dim");
  EXPECT_EQ(sum(e, {1}).sizes(), Shape({0}));
  Tensor s = scalar_tensor(3.5);
  expect_close(sum(s), {3.5}, 0, 0, "sum of a 0-dim tensor");
  expect_close(amax(s), {3.5}, 0, 0, "amax of a 0-dim tensor");
  EXPECT_TRUE(std::isnan(mean(e).item<double>()));
  expect_error([&] { amax(e, {0}); }, {"[amax]", "zero-size"});
}

TEST(Reduce, MaxMinArgmaxWithIndices) {
  manual_seed(6);
  for (Layout l : all_layouts()) {
    Tensor x = make_input({4, 7, 5}, l, kFloat32);
    for (int64_t dim : {0, 1, 2, -1}) {
      auto [v, idx] = max(x, dim);
      auto [vn, idn] = min(x, dim, true);
      const int64_t d = (dim + 3) % 3;
      const auto vals = values(x);
      const auto gotv = values(v), goti = values(idx), gotvn = values(vn), gotin = values(idn);
      Shape out;
      for (int64_t k = 0; k < 3; ++k)
        if (k != d) out.push_back(x.size(k));
      for (int64_t o = 0; o < shape_numel(out); ++o) {
        auto oi = unravel(o, out);
        double best = -INFINITY, worst = INFINITY;
        int64_t bi = 0, wi = 0;
        for (int64_t r = 0; r < x.size(d); ++r) {
          std::vector<int64_t> full = oi;
          full.insert(full.begin() + d, r);
          int64_t flat = 0;
          for (int64_t k = 0; k < 3; ++k) flat = flat * x.size(k) + full[k];
          if (vals[flat] > best) best = vals[flat], bi = r;
          if (vals[flat] < worst) worst = vals[flat], wi = r;
        }
        EXPECT_EQ(gotv[o], best);
        EXPECT_EQ(goti[o], bi);
        EXPECT_EQ(gotvn[o], worst);
        EXPECT_EQ(gotin[o], wi);
      }
      EXPECT_EQ(values(argmax(x, dim)), goti);
      EXPECT_EQ(values(argmin(x, dim)), values(idn.squeeze(d)));
    }
  }
  Tensor t = tensor<float>({3, 9, 9, 1});
  EXPECT_EQ(argmax(t).item<int64_t>(), 1);  // first occurrence
  EXPECT_EQ(argmin(t).item<int64_t>(), 3);
  EXPECT_EQ(max(t).item<float>(), 9);
  Tensor n = tensor<float>({1, NAN, 3});
  EXPECT_TRUE(std::isnan(max(n).item<float>()));
  EXPECT_EQ(argmax(n).item<int64_t>(), 1);
  // A NaN anywhere in a row long enough for the SIMD loop, before and after larger values.
  for (int64_t at = 0; at < 40; ++at) {
    Tensor row = arange(0.0, 40.0).to(kFloat32);
    row.select(0, at).fill_(NAN);
    EXPECT_TRUE(std::isnan(max(row).item<float>())) << "NaN at " << at;
  }
}

TEST(Reduce, Cumsum) {
  for (Layout l : all_layouts()) {
    Tensor x = make_input({3, 6}, l, kFloat64);
    for (int64_t dim : {0, 1}) {
      Tensor y = cumsum(x, dim);
      const auto v = values(x);
      std::vector<double> want(v.size());
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          const double prev = dim == 0 ? (i ? want[(i - 1) * 6 + j] : 0) : (j ? want[i * 6 + j - 1] : 0);
          want[i * 6 + j] = prev + v[i * 6 + j];
        }
      expect_close(y, want, 1e-12, 1e-12, "cumsum");
    }
  }
  EXPECT_EQ(cumsum(tensor<int32_t>({1, 2}), 0).dtype(), kInt64);
}

}  // namespace
}  // namespace kiln::test
