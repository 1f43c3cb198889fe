// The losses of torch.nn.functional against float64 references computed
// here element by element, in every layout, empty and 0-dim; gradcheck for
// each; errors.
#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace kiln::test {
namespace {

using Pointwise = std::function<Tensor(const Tensor&, const Tensor&, const std::string&)>;
using Reference = std::function<double(double, double)>;

// loss(input, target, reduction) against ref per element, for "none", "sum"
// and "mean", over shapes and layouts; then gradcheck of both arguments.
void check_pointwise(const char* name, const Pointwise& loss, const Reference& ref, bool target_in_unit = false) {
  for (const Shape& shape : {Shape{5, 7}, Shape{3, 1}, Shape{}, Shape{0, 4}}) {
    for (Layout layout : all_layouts()) {
      const Tensor x = make_input(shape, layout, kFloat64, 2.0);
      Tensor t = make_input(shape, Layout::Transposed, kFloat64, 2.0);
      if (target_in_unit) t = sigmoid(t);
      const auto xv = values(x), tv = values(t);
      std::vector<double> want;
      double total = 0;
      for (size_t i = 0; i < xv.size(); ++i) total += want.emplace_back(ref(xv[i], tv[i]));
      const std::string what = std::string(name) + " " + layout_name(layout) + " dims " + std::to_string(shape.size()) +
                               (shape.empty() ? "" : " first " + std::to_string(shape[0]));
      expect_close(loss(x, t, "none"), want, 1e-12, 1e-12, what + " none");
      expect_close(loss(x, t, "sum"), {total}, 1e-12, 1e-12, what + " sum");
      if (!want.empty()) expect_close(loss(x, t, "mean"), {total / static_cast<double>(want.size())}, 1e-12, 1e-12, what + " mean");
      else EXPECT_TRUE(std::isnan(loss(x, t, "mean").item<double>())) << what;  // the mean of nothing, as PyTorch
    }
  }
  Tensor x = randn({3, 4}, kFloat64).requires_grad_(), t = randn({3, 4}, kFloat64);
  if (target_in_unit) t = sigmoid(t);
  t.requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{loss(v[0], v[1], "mean")}; },
                                  {x, t}))
      << name;
  expect_error([&] { (void)loss(x, t.slice(0, 0, 2), "mean"); }, {name, "[3, 4]", "[2, 4]"});
  expect_error([&] { (void)loss(x, t, "average"); }, {name, "'average'"});
}

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

TEST(Losses, PointwiseLossesMatchTheirDefinitions) {
  manual_seed(40);
  check_pointwise("l1_loss", [](auto& x, auto& t, auto& r) { return nn::l1_loss(x, t, r); },
                  [](double x, double t) { return std::fabs(x - t); });
  check_pointwise("smooth_l1_loss", [](auto& x, auto& t, auto& r) { return nn::smooth_l1_loss(x, t, r, 0.7); },
                  [](double x, double t) { const double d = std::fabs(x - t); return d < 0.7 ? 0.5 * d * d / 0.7 : d - 0.35; });
  check_pointwise("huber_loss", [](auto& x, auto& t, auto& r) { return nn::huber_loss(x, t, r, 1.5); },
                  [](double x, double t) { const double d = std::fabs(x - t); return d <= 1.5 ? 0.5 * d * d : 1.5 * (d - 0.75); });
  check_pointwise("kl_div", [](auto& x, auto& t, auto& r) { return nn::kl_div(x, t, r); },
                  [](double x, double t) { return t * (std::log(t) - x); }, true);
  check_pointwise("kl_div", [](auto& x, auto& t, auto& r) { return nn::kl_div(x, t, r, true); },
                  [](double x, double t) { return std::exp(t) * (t - x); });
  check_pointwise("binary_cross_entropy_with_logits",
                  [](auto& x, auto& t, auto& r) { return nn::binary_cross_entropy_with_logits(x, t, {}, {}, r); },
                  [](double x, double t) { return (1 - t) * x + softplus(-x); }, true);
  check_pointwise("binary_cross_entropy", [](auto& x, auto& t, auto& r) { return nn::binary_cross_entropy(sigmoid(x), t, {}, r); },
                  [](double x, double t) {
                    const double p = 1 / (1 + std::exp(-x));
                    return -(t * std::log(p) + (1 - t) * std::log1p(-p));
                  }, true);
  // smooth_l1 with beta 0 is l1.
  const Tensor a = randn({6}, kFloat64), b = randn({6}, kFloat64);
  expect_close(nn::smooth_l1_loss(a, b, "none", 0.0), values(abs(a - b)), 0, 0, "beta 0");
}

TEST(Losses, EdgesAndWeights) {
  // kl_div: a zero target contributes 0 (not 0 * log 0 = NaN); batchmean is the sum over the batch.
  const Tensor lp = log(tensor<double>({0.5, 0.25, 0.25, 0.1, 0.9, 1e-300}).view({2, 3}));
  const Tensor q = tensor<double>({0.0, 0.5, 0.5, 1.0, 0.0, 0.0}).view({2, 3});
  const double kl = 0.5 * (std::log(0.5) - std::log(0.25)) * 2 + (std::log(1.0) - std::log(0.1));
  expect_close(nn::kl_div(lp, q, "sum"), {kl}, 1e-12, 0, "kl sum");
  expect_close(nn::kl_div(lp, q, "batchmean"), {kl / 2}, 1e-12, 0, "kl batchmean");
  // binary_cross_entropy at probabilities 0 and 1: each log clamped at -100, a finite loss.
  const Tensor p = tensor<double>({0.0, 1.0, 0.0, 1.0}), t = tensor<double>({0.0, 1.0, 1.0, 0.0});
  expect_close(nn::binary_cross_entropy(p, t, {}, "none"), {0, 0, 100, 100}, 0, 0, "bce clamp");
  expect_error([&] { (void)nn::binary_cross_entropy(p * 2 - 0.5, t); }, {"binary_cross_entropy", "between 0 and 1"});
  // Weights, and pos_weight per class along the last dim; extreme logits stay finite.
  const Tensor x = tensor<double>({-800, 0.3, 800, 2}).view({2, 2}), y = tensor<double>({1, 0, 0, 1}).view({2, 2});
  const Tensor w = tensor<double>({2, 3}), pw = tensor<double>({4, 0.5});
  std::vector<double> want;
  const auto xv = values(x), yv = values(y);
  for (size_t i = 0; i < 4; ++i) {
    const double wi = i % 2 ? 3 : 2, pwi = i % 2 ? 0.5 : 4;
    want.push_back(wi * ((1 - yv[i]) * xv[i] + (1 + (pwi - 1) * yv[i]) * softplus(-xv[i])));
  }
  expect_close(nn::binary_cross_entropy_with_logits(x, y, w, pw, "none"), want, 1e-12, 0, "bce logits weights");
  // margin_ranking_loss: max(0, -y (x1 - x2) + margin).
  const Tensor x1 = tensor<double>({1, 2, 3}), x2 = tensor<double>({2, 2, 1}), yy = tensor<double>({1, -1, -1});
  expect_close(nn::margin_ranking_loss(x1, x2, yy, 0.5, "none"), {1.5, 0.5, 2.5}, 0, 0, "margin ranking");
  Tensor g1 = randn({5}, kFloat64).requires_grad_(), g2 = randn({5}, kFloat64).requires_grad_();
  const Tensor sgn = sign(randn({5}, kFloat64));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{nn::margin_ranking_loss(v[0], v[1], sgn, 0.1)}; }, {g1, g2}));
  // cosine_embedding_loss: 1 - cos for target 1, max(0, cos - margin) for -1, per row.
  manual_seed(44);
  const Tensor c1 = make_input({4, 5}, Layout::Transposed, kFloat64), c2 = make_input({4, 5}, Layout::Strided, kFloat64);
  const Tensor ct = tensor<int64_t>({1, -1, -1, 1});
  std::vector<double> want_cos;
  for (int64_t r = 0; r < 4; ++r) {
    double dot = 0, n1 = 0, n2 = 0;
    for (int64_t j = 0; j < 5; ++j) {
      const double a = at_broadcast(c1, {r, j}), b = at_broadcast(c2, {r, j});
      dot += a * b, n1 += a * a, n2 += b * b;
    }
    const double cs = dot / std::sqrt((n1 + 1e-12) * (n2 + 1e-12));
    want_cos.push_back(values(ct)[r] > 0 ? 1 - cs : std::max(0.0, cs - 0.2));
  }
  expect_close(nn::cosine_embedding_loss(c1, c2, ct, 0.2, "none"), want_cos, 1e-14, 1e-15, "cosine embedding");
  const double mean_cos = (want_cos[0] + want_cos[1] + want_cos[2] + want_cos[3]) / 4;
  EXPECT_NEAR(nn::cosine_embedding_loss(c1, c2, ct, 0.2).item<double>(), mean_cos, 1e-14);
  EXPECT_NEAR(nn::cosine_embedding_loss(c1.select(0, 0), c2.select(0, 0), full({}, 1.0), 0.2).item<double>(), want_cos[0],
              1e-14);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{nn::cosine_embedding_loss(v[0], v[1], ct, -0.5, "sum")}; },
      {randn({4, 3}, kFloat64).requires_grad_(), randn({4, 3}, kFloat64).requires_grad_()}));
  expect_error([&] { (void)nn::cosine_embedding_loss(c1, c2, ones({3})); }, {"cosine_embedding_loss", "[3]", "[4]"});
  expect_error([&] { (void)nn::cosine_embedding_loss(randn({2, 2, 2}), randn({2, 2, 2}), ones({2})); },
               {"cosine_embedding_loss", "1-D or 2-D"});
  expect_error([&] { (void)nn::huber_loss(x, y, "mean", 0); }, {"huber_loss", "delta", "0"});
  expect_error([&] { (void)nn::smooth_l1_loss(x, y, "mean", -1); }, {"smooth_l1_loss", "beta", "-1"});
}

// -w[t] logp[t] mixed with -(sum_c w[c] logp[c]) / C by the smoothing;
// mean divides by the summed w[t] of the targets not ignored.
std::vector<double> class_loss_ref(const Tensor& logits, const std::vector<int64_t>& target, const std::vector<double>& w,
                                   double smoothing, bool log_softmax_first, bool mean_red, int64_t ignore) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const auto lv = values(logits);
  std::vector<double> per;
  double total = 0, weights = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (target[static_cast<size_t>(i)] == ignore) {
      per.push_back(0);
      continue;
    }
    double lse = 0;
    if (log_softmax_first) {
      double m = -1e300, s = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, lv[i * C + c]);
      for (int64_t c = 0; c < C; ++c) s += std::exp(lv[i * C + c] - m);
      lse = m + std::log(s);
    }
    auto logp = [&](int64_t c) { return lv[i * C + c] - lse; };
    const int64_t t = target[static_cast<size_t>(i)];
    double smooth = 0;
    for (int64_t c = 0; c < C; ++c) smooth -= w[static_cast<size_t>(c)] * logp(c) / static_cast<double>(C);
    const double l = (1 - smoothing) * -w[static_cast<size_t>(t)] * logp(t) + smoothing * smooth;
    per.push_back(l);
    total += l;
    weights += w[static_cast<size_t>(t)];
  }
  return mean_red ? std::vector<double>{total / weights} : per;
}

TEST(Losses, CrossEntropyAndNllWithClassWeights) {
  manual_seed(41);
  const Tensor logits = make_input({7, 5}, Layout::Transposed, kFloat64, 3.0);
  const std::vector<int64_t> tv{4, 0, 2, 2, 1, 3, 0};
  const Tensor target = tensor<int64_t>(std::vector<int64_t>(tv));
  const Tensor w = rand({5}, kFloat64) + 0.2;
  const auto wv = values(w);
  const std::vector<double> ones(5, 1.0);
  for (double s : {0.0, 0.3}) {
    expect_close(nn::cross_entropy(logits, target, w, -100, s), class_loss_ref(logits, tv, wv, s, true, true, -100), 1e-12,
                 1e-12, "weighted mean");
    expect_close(nn::cross_entropy(logits, target, w, 2, s, "none"), class_loss_ref(logits, tv, wv, s, true, false, 2),
                 1e-12, 1e-12, "weighted none, ignore 2");
  }
  const Tensor logp = log_softmax(logits, 1);
  expect_close(nn::nll_loss(logp, target), class_loss_ref(logits, tv, ones, 0, true, true, -100), 1e-12, 1e-12, "nll");
  expect_close(nn::nll_loss(logp, target, w, 0), class_loss_ref(logits, tv, wv, 0, true, true, 0), 1e-12, 1e-12,
               "nll weighted, ignore 0");
  expect_close(nn::nll_loss(logits, target, w, -100, "sum"), {[&] {
                 double s = 0;
                 for (double v : class_loss_ref(logits, tv, wv, 0, false, false, -100)) s += v;
                 return s;
               }()},
               1e-12, 1e-12, "nll of raw scores, sum");
  // (N, C, d) nll equals the flattened form; every target ignored gives NaN.
  const Tensor l3 = log_softmax(randn({2, 5, 3}, kFloat64), 1);
  const Tensor t3 = randint(0, 5, {2, 3});
  expect_close(nn::nll_loss(l3, t3, w), values(nn::nll_loss(l3.permute({0, 2, 1}).reshape({6, 5}), t3.view({6}), w)), 1e-12,
               1e-12, "nll class dim 1");
  EXPECT_TRUE(std::isnan(nn::nll_loss(logp, full({7}, int64_t{3}), w, 3).item<double>()));
  Tensor x = randn({4, 3}, kFloat64).requires_grad_(), wg = (rand({3}, kFloat64) + 0.5).requires_grad_();
  const Tensor t4 = tensor<int64_t>({2, 0, 1, 2});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{nn::cross_entropy(v[0], t4, v[1], -100, 0.2)}; }, {x, wg}));
  expect_error([&] { (void)nn::cross_entropy(logits, target, ones_like(w).slice(0, 0, 4)); }, {"cross_entropy", "[5]", "[4]"});
  expect_error([&] { (void)nn::nll_loss(logp, target.slice(0, 0, 3)); }, {"nll_loss", "[7]", "[3]"});
  expect_error([&] { (void)nn::nll_loss(logp, full({7}, int64_t{5})); }, {"nll_loss", "[0, 5)"});
  expect_error([&] { (void)nn::nll_loss(logp, target.to(kFloat64)); }, {"nll_loss", "integer", "float64"});
}

TEST(Losses, CrossEntropyWithClassProbabilities) {
  manual_seed(42);
  const Tensor logits = randn({2, 4, 3}, kFloat64);  // (N, C, d)
  const Tensor probs = softmax(randn({2, 4, 3}, kFloat64), 1), w = rand({4}, kFloat64) + 0.5;
  const auto lv = values(logits), pv = values(probs), wv = values(w);
  for (double s : {0.0, 0.25}) {
    for (bool weighted : {false, true}) {
      std::vector<double> want;
      double total = 0;
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t d = 0; d < 3; ++d) {
          auto at = [&](const std::vector<double>& v, int64_t c) { return v[static_cast<size_t>((n * 4 + c) * 3 + d)]; };
          double m = -1e300, sum = 0, l = 0;
          for (int64_t c = 0; c < 4; ++c) m = std::max(m, at(lv, c));
          for (int64_t c = 0; c < 4; ++c) sum += std::exp(at(lv, c) - m);
          for (int64_t c = 0; c < 4; ++c)
            l -= (weighted ? wv[static_cast<size_t>(c)] : 1) * (at(pv, c) * (1 - s) + s / 4) * (at(lv, c) - m - std::log(sum));
          total += want.emplace_back(l);
        }
      const Tensor wt = weighted ? w : Tensor();
      expect_close(nn::cross_entropy(logits, probs, wt, -100, s, "none"), want, 1e-12, 1e-12, "probabilities none");
      expect_close(nn::cross_entropy(logits, probs, wt, -100, s), {total / 6}, 1e-12, 1e-12, "probabilities mean");
    }
  }
  Tensor x = randn({3, 4}, kFloat64).requires_grad_(), p = softmax(randn({3, 4}, kFloat64), 1).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{nn::cross_entropy(v[0], v[1], -1, 0.1)}; }, {x, p}));
  expect_error([&] { (void)nn::cross_entropy(logits, probs, Tensor(), 2); }, {"cross_entropy", "ignore_index", "2"});
}

}  // namespace
}  // namespace kiln::test
