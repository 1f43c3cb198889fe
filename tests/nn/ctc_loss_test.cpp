// ctc_loss against a brute-force reference: every path of C^T labels
// collapsed (repeats merged, blanks dropped) and the probabilities of those
// equal to the target summed, in float64. Padded and concatenated targets,
// repeated labels, empty targets, shorter input lengths, every reduction,
// unbatched and non-contiguous inputs; gradcheck; zero_infinity; errors.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// -log p(target) for one sample from log_probs values lp[t][c].
double brute_force_nll(const std::vector<std::vector<double>>& lp, const std::vector<int64_t>& target, int64_t blank) {
  const int64_t T = static_cast<int64_t>(lp.size()), C = T ? static_cast<int64_t>(lp[0].size()) : 0;
  if (T == 0) return target.empty() ? 0 : kInf;
  int64_t paths = 1;
  for (int64_t t = 0; t < T; ++t) paths *= C;
  double p = 0;
  for (int64_t code = 0; code < paths; ++code) {
    std::vector<int64_t> collapsed;
    double logp = 0;
    int64_t prev = -1, rest = code;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t c = rest % C;
      rest /= C;
      logp += lp[static_cast<size_t>(t)][static_cast<size_t>(c)];
      if (c != blank && c != prev) collapsed.push_back(c);
      prev = c;
    }
    if (collapsed == target) p += std::exp(logp);
  }
  return -std::log(p);
}

struct Batch {
  Tensor log_probs;  // (T, N, C)
  std::vector<std::vector<int64_t>> targets;
  std::vector<int64_t> input_lengths;
};

std::vector<double> reference_losses(const Batch& b, int64_t blank) {
  const Tensor lp = b.log_probs.to(kFloat64).contiguous();
  const int64_t N = lp.size(1), C = lp.size(2);
  const std::vector<double> v = values(lp);
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<std::vector<double>> rows;
    for (int64_t t = 0; t < b.input_lengths[static_cast<size_t>(n)]; ++t) {
      const auto* row = &v[static_cast<size_t>((t * N + n) * C)];
      rows.emplace_back(row, row + C);
    }
    out.push_back(brute_force_nll(rows, b.targets[static_cast<size_t>(n)], blank));
  }
  return out;
}

Tensor padded_targets(const Batch& b, int64_t width, int64_t fill) {
  std::vector<int64_t> v;
  for (const auto& t : b.targets) {
    for (int64_t i = 0; i < width; ++i) v.push_back(i < static_cast<int64_t>(t.size()) ? t[static_cast<size_t>(i)] : fill);
  }
  return tensor(v).reshape({static_cast<int64_t>(b.targets.size()), width});
}
Tensor concatenated_targets(const Batch& b) {
  std::vector<int64_t> v;
  for (const auto& t : b.targets) v.insert(v.end(), t.begin(), t.end());
  return tensor(v);
}
Tensor target_lengths(const Batch& b) {
  std::vector<int64_t> v;
  for (const auto& t : b.targets) v.push_back(static_cast<int64_t>(t.size()));
  return tensor(v);
}

Batch random_batch(DType dt, bool transposed, int64_t blank) {
  const int64_t T = 6, N = 5, C = 4;
  const Tensor logits = transposed ? randn({N, T, C}, kFloat64).transpose(0, 1) : randn({T, N, C}, kFloat64);
  Batch b{log_softmax(logits, 2).to(dt), {}, {6, 5, 6, 3, 6}};
  // Labels avoid the blank: repeated labels, an empty target, one as long as a short input allows.
  auto label = [&](int64_t i) { return (blank + 1 + i) % C; };
  b.targets = {{label(0), label(1)}, {label(2), label(2)}, {}, {label(1)}, {label(0), label(1), label(0)}};
  if (transposed) b.log_probs = b.log_probs.transpose(0, 1).contiguous().transpose(0, 1);
  return b;
}

TEST(CtcLoss, MatchesEveryAlignmentSummed) {
  manual_seed(5301);
  for (DType dt : {kFloat64, kFloat32})
    for (bool transposed : {false, true})
      for (int64_t blank : {0, 3}) {
        const Batch b = random_batch(dt, transposed, blank);
        const std::vector<double> want = reference_losses(b, blank);
        const Tol tol = dt == kFloat64 ? Tol{1e-11, 1e-11} : Tol{2e-5, 2e-5};
        const std::string what = std::string(transposed ? "strided " : "contiguous ") + "blank " + std::to_string(blank);
        const Tensor lengths = tensor(b.input_lengths), tl = target_lengths(b);
        const Tensor none = nn::ctc_loss(b.log_probs, padded_targets(b, 4, blank), lengths, tl, blank, "none");
        EXPECT_EQ(none.dtype(), dt);
        expect_close(none, want, tol.rtol, tol.atol, "padded " + what);
        expect_close(nn::ctc_loss(b.log_probs, concatenated_targets(b), lengths, tl, blank, "none"), want, tol.rtol,
                     tol.atol, "concatenated " + what);
        double sum = 0, mean = 0;
        for (size_t n = 0; n < want.size(); ++n) {
          sum += want[n];
          mean += want[n] / std::max<double>(1.0, static_cast<double>(b.targets[n].size())) / static_cast<double>(want.size());
        }
        EXPECT_NEAR(nn::ctc_loss(b.log_probs, padded_targets(b, 3, 1), lengths, tl, blank, "sum").item<double>(), sum,
                    tol.atol * 10);
        EXPECT_NEAR(nn::ctc_loss(b.log_probs, concatenated_targets(b), lengths, tl, blank).item<double>(), mean,
                    tol.atol * 10);
      }
  // Unbatched (T, C) with a 1-D target.
  const Batch b = random_batch(kFloat64, false, 0);
  const Tensor one = b.log_probs.select(1, 0);
  const Tensor loss = nn::ctc_loss(one, tensor(b.targets[0]), tensor(std::vector<int64_t>{6}),
                                   tensor(std::vector<int64_t>{2}), 0, "none");
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item<double>(), reference_losses(b, 0)[0], 1e-11);
}

TEST(CtcLoss, ImpossibleAlignmentsAndZeroInfinity) {
  manual_seed(5302);
  // "1 1" needs a blank between: 3 steps; 2 are too few.
  const Tensor lp = log_softmax(randn({2, 1, 3}, kFloat64), 2).requires_grad_();
  const Tensor target = tensor(std::vector<int64_t>{1, 1}).reshape({1, 2});
  const Tensor in_len = tensor(std::vector<int64_t>{2}), tg_len = tensor(std::vector<int64_t>{2});
  EXPECT_EQ(nn::ctc_loss(lp, target, in_len, tg_len, 0, "none").item<double>(), kInf);
  const Tensor zeroed = nn::ctc_loss(lp, target, in_len, tg_len, 0, "sum", true);
  EXPECT_EQ(zeroed.item<double>(), 0.0);
  zeroed.backward();
  for (double g : values(lp.grad())) EXPECT_EQ(g, 0.0);
  // Empty target and zero-length input: p = 1.
  EXPECT_EQ(nn::ctc_loss(lp, target, tensor(std::vector<int64_t>{0}), tensor(std::vector<int64_t>{0}), 0, "none")
                .item<double>(),
            0.0);
}

TEST(CtcLoss, Gradients) {
  manual_seed(5303);
  const Batch b = random_batch(kFloat64, false, 0);
  const Tensor lengths = tensor(b.input_lengths), tl = target_lengths(b), targets = padded_targets(b, 3, 0);
  // The exact derivative with respect to log_probs themselves (any values).
  const Tensor raw = randn({6, 5, 4}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{nn::ctc_loss(in[0], targets, lengths, tl, 0, "none")};
      },
      {raw}));
  // Through log_softmax, every reduction.
  for (const std::string reduction : {"mean", "sum"})
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{nn::ctc_loss(log_softmax(in[0], 2), targets, lengths, tl, 0, reduction)};
        },
        {raw}))
        << reduction;
  // Past a sample's input length the gradient is zero.
  const Tensor x = b.log_probs.clone().requires_grad_();
  nn::ctc_loss(x, targets, lengths, tl, 0, "sum").backward();
  for (double g : values(x.grad().select(0, 5).select(0, 1))) EXPECT_EQ(g, 0.0);
}

TEST(CtcLoss, Errors) {
  const Tensor lp = log_softmax(randn({4, 2, 3}), 2);
  const Tensor targets = tensor(std::vector<int64_t>{1, 2, 2, 1}).reshape({2, 2});
  const Tensor in_len = tensor(std::vector<int64_t>{4, 4}), tg_len = tensor(std::vector<int64_t>{2, 2});
  expect_error([&] { nn::ctc_loss(lp.to(kFloat16), targets, in_len, tg_len); }, {"[ctc_loss]", "float16"});
  expect_error([&] { nn::ctc_loss(randn({4}), targets, in_len, tg_len); }, {"[ctc_loss]", "(T, N, C)", "[4]"});
  expect_error([&] { nn::ctc_loss(lp, targets, in_len, tg_len, 3); }, {"[ctc_loss]", "blank in [0, 3)", "3"});
  expect_error([&] { nn::ctc_loss(lp, targets, tensor(std::vector<int64_t>{5, 4}), tg_len); },
               {"[ctc_loss]", "input_lengths in [0, 4]", "5"});
  expect_error([&] { nn::ctc_loss(lp, targets, tensor(std::vector<int64_t>{4}), tg_len); },
               {"[ctc_loss]", "input_lengths of 2 entries", "1"});
  expect_error([&] { nn::ctc_loss(lp, targets, in_len, tensor(std::vector<int64_t>{3, 2})); },
               {"[ctc_loss]", "padded targets of shape (2, >= 3)", "[2, 2]"});
  expect_error([&] { nn::ctc_loss(lp, tensor(std::vector<int64_t>{1, 0, 2, 1}).reshape({2, 2}), in_len, tg_len); },
               {"[ctc_loss]", "other than blank (0)", "sample 0 has 0 at position 1"});
  expect_error([&] { nn::ctc_loss(lp, tensor(std::vector<int64_t>{1, 3, 2, 1}).reshape({2, 2}), in_len, tg_len); },
               {"[ctc_loss]", "[0, 3)", "has 3"});
  expect_error([&] { nn::ctc_loss(lp, tensor(std::vector<int64_t>{1, 2, 2}), in_len, tg_len); },
               {"[ctc_loss]", "at least 4 concatenated targets", "3"});
  expect_error([&] { nn::ctc_loss(lp, targets.to(kFloat32), in_len, tg_len); }, {"[ctc_loss]", "integer targets"});
  expect_error([&] { nn::ctc_loss(lp, targets, in_len, tg_len, 0, "avg"); }, {"[ctc_loss]", "'avg'"});
}

}  // namespace
}  // namespace kiln::test
