// nn::ctc_loss (Graves' connectionist temporal classification): the op
// gives -log p(target | log_probs) per sample (kernels in
// src/kernels/cpu/ctc_kernels.cpp); the reductions are ordinary ops.
// Its backward is the exact derivative with respect to log_probs. PyTorch's
// adds exp(log_probs) grad, a term that log_softmax's backward removes: the
// two agree on the gradient that reaches the logits before a log_softmax.
#include "kiln/error.h"
#include "kiln/nn.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::BackwardContext;
using Grads = std::vector<Tensor>;

std::vector<TensorMeta> per_sample(std::span<const Tensor> in, const Attrs&) {
  return ops::one_output({in[0].size(1)}, in[0].dtype());
}

const OpDef& kCtcBackward = register_op(ops::with_backward(
    OpDef{"ctc_loss_backward",
          "ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor "
          "target_lengths, int blank, bool zero_infinity) -> Tensor",
          OpKind::Compute,
          [](std::span<const Tensor> in, const Attrs&) { return ops::one_output(in[1].sizes(), in[1].dtype()); }},
    &autograd::kNotDifferentiable));

constexpr autograd::BackwardDef kCtcGrad{
    [](const BackwardContext& c) -> Grads {
      const Tensor g =
          ops::call(kCtcBackward, {c.grads[0], c.inputs[0], c.inputs[1], c.inputs[2], c.inputs[3]},
                    {{"blank", c.attrs.get_int("blank")}, {"zero_infinity", c.attrs.get_bool("zero_infinity")}});
      return {g, Tensor(), Tensor(), Tensor()};
    },
    autograd::kSaveInputs};
const OpDef& kCtc = register_op(ops::with_backward(
    OpDef{"ctc_loss",
          "ctc_loss(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, int blank, bool "
          "zero_infinity) -> Tensor",
          OpKind::Compute, per_sample},
    &kCtcGrad));

std::vector<int64_t> host_ints(const Tensor& t, const char* what, int64_t n) {
  check(!is_floating(t.dtype()) && t.dtype() != kBool && t.dim() <= 1, "ctc_loss", "expected ", what,
        " as a 1-D integer tensor but got ", t.dtype(), " of shape ", shape_text(t.sizes()));
  const Tensor flat = t.reshape({-1}).to(kInt64).contiguous();
  check(flat.numel() == n, "ctc_loss", "expected ", what, " of ", n, " entries (one per batch sample) but got ",
        flat.numel());
  return std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + n);
}

}  // namespace

namespace nn {

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, const std::string& reduction, bool zero_infinity) {
  const char* op = "ctc_loss";
  check(log_probs.dtype() == kFloat32 || log_probs.dtype() == kFloat64, op,
        "expected log_probs of float32 or float64 but got ", log_probs.dtype());
  check(log_probs.dim() == 3 || log_probs.dim() == 2, op,
        "expected log_probs of shape (T, N, C) or, unbatched, (T, C) but got ", shape_text(log_probs.sizes()));
  check(reduction == "none" || reduction == "mean" || reduction == "sum", op,
        "expected reduction 'none', 'mean' or 'sum' but got '", reduction, "'");
  const bool batched = log_probs.dim() == 3;
  const Tensor lp = batched ? log_probs : log_probs.unsqueeze(1);
  const int64_t T = lp.size(0), N = lp.size(1), C = lp.size(2);
  check(blank >= 0 && blank < C, op, "expected blank in [0, ", C, ") but got ", blank);
  const std::vector<int64_t> in_len = host_ints(input_lengths, "input_lengths", N);
  const std::vector<int64_t> tg_len = host_ints(target_lengths, "target_lengths", N);
  check(!is_floating(targets.dtype()) && targets.dtype() != kBool, op, "expected integer targets but got ",
        targets.dtype());
  // Targets padded to (N, S), or concatenated (sum of target_lengths).
  const bool concatenated = batched ? targets.dim() == 1 : false;
  check(concatenated || targets.dim() == (batched ? 2 : 1), op, "expected targets of shape (N, S) or concatenated (",
        "sum of target_lengths) but got ", shape_text(targets.sizes()));
  int64_t total = 0, longest = 0;
  for (int64_t n = 0; n < N; ++n) {
    const size_t k = static_cast<size_t>(n);
    check(in_len[k] >= 0 && in_len[k] <= T, op, "expected input_lengths in [0, ", T, "] but got ", in_len[k],
          " for sample ", n);
    check(tg_len[k] >= 0, op, "expected non-negative target_lengths but got ", tg_len[k], " for sample ", n);
    total += tg_len[k];
    longest = std::max(longest, tg_len[k]);
  }
  Tensor padded = batched ? targets.to(kInt64) : targets.to(kInt64).unsqueeze(0);
  if (concatenated) {
    check(targets.size(0) >= total, op, "expected at least ", total, " concatenated targets (the sum of ",
          "target_lengths) but got ", targets.size(0));
    std::vector<int64_t> rows(static_cast<size_t>(N * longest), blank);
    const std::vector<int64_t> flat = host_ints(targets.narrow(0, 0, total), "targets", total);
    for (int64_t n = 0, at = 0; n < N; at += tg_len[static_cast<size_t>(n)], ++n)
      std::copy(flat.begin() + at, flat.begin() + at + tg_len[static_cast<size_t>(n)], rows.begin() + n * longest);
    padded = tensor(rows).reshape({N, longest});
  } else {
    check(padded.size(0) == N && padded.size(1) >= longest, op, "expected padded targets of shape (", N,
          ", >= ", longest, ") but got ", shape_text(targets.sizes()));
  }
  padded = padded.contiguous();
  const int64_t width = padded.size(1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < tg_len[static_cast<size_t>(n)]; ++i) {
      const int64_t label = padded.data_ptr<int64_t>()[n * width + i];
      check(label >= 0 && label < C && label != blank, op, "expected target labels in [0, ", C, ") other than blank (",
            blank, ") but sample ", n, " has ", label, " at position ", i);
    }
  const Tensor lengths_in = tensor(in_len), lengths_tg = tensor(tg_len);
  const Tensor nll =
      ops::call(kCtc, {lp, padded, lengths_in, lengths_tg}, {{"blank", blank}, {"zero_infinity", zero_infinity}});
  const Tensor losses = batched ? nll : nll.squeeze(0);
  if (reduction == "none") return losses;
  if (reduction == "sum") return sum(losses);
  // mean: each loss divided by its target length (at least 1), then the batch mean.
  return mean(nll / clamp(lengths_tg, 1, std::nullopt).to(nll.dtype()));
}

}  // namespace nn

namespace {
const bool registered = [] {
  ops::def<&nn::ctc_loss>(
      "ctc_loss(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, int blank=0, str "
      "reduction='mean', bool zero_infinity=False) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
