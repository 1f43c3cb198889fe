// flex_attention as a dispatcher op (Note [flex_attention as an op]) and
// the autograd glue of the calls that do not go through it.
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/detail/attention_backward.h"

namespace kiln::attention_detail {

// Note [flex_attention's output layout]
// As in PyTorch, the output follows q's layout: for q a (B, H, L, E) view
// of (B, L, H, E) memory (the heads of a fused QKV projection) the op's
// output is (B, L, H, Ev), handed out as its (B, H, L, Ev) transpose, so
// that `out.transpose(1, 2).reshape({B, L, H * Ev})` is a view, not a copy.
// The backward formula reads out and its gradient through the same
// transpose. With L == 1 or H == 1 both layouts are the same memory.
inline bool rows_hold_heads(const Tensor& q) { return q.stride(2) > q.stride(1); }

// An empty (B, H, L, Ev) output in q's layout; sets s.o_st to match.
inline Tensor empty_output(const Tensor& q, Shapes& s, DType dt) {
  const Tensor out = rows_hold_heads(q) ? empty({s.B, s.L, s.Hq, s.Ev}, dt).transpose(1, 2) : empty({s.B, s.Hq, s.L, s.Ev}, dt);
  s.o_st = row_strides(out);
  return out;
}

// Decoding over a bfloat16 K/V cache, without gradients: the cache is read
// as stored instead of converted to float32 first (half the bytes).
template <class ScoreMod, class MaskMod>
FlexOutput decode_bf16(const Tensor& q, const Tensor& k, const Tensor& v, Shapes s, const BlockMask<MaskMod>& m,
                       const ScoreMod& score_mod, const FlexOptions& opt) {
  NoGradGuard no_grad;
  const Tensor qc = as_compute<float>(q), kc = k.contiguous(), vc = v.contiguous();
  Tensor out = empty_output(q, s, kFloat32), lse = empty({s.B, s.Hq, s.L}, kFloat32);
  forward_decode(qc.data_ptr<float>(), kc.data_ptr<BFloat16>(), vc.data_ptr<BFloat16>(), out.data_ptr<float>(),
                 lse.data_ptr<float>(), s, m, score_mod, decode_partitions(s, m, opt.kv_partitions));
  return {out.to(q.dtype()), opt.return_lse ? lse : Tensor{}};
}

// Note [flex_attention as an op]
// With stateless mods (empty types: NoScoreMod, CausalMask, capture-less
// lambdas; nothing learned) and q, k, v at the compute dtype, flex_attention
// is the dispatcher op "flex_attention" (out, lse), whose backward formula
// calls "flex_attention_backward". So kiln::compile records it as one graph
// node (no graph break), its compiled backward calls the backward kernel,
// and eager autograd goes through the same formula. The mods are template
// parameters: each pair registers its two kernels once per process and the
// op names them by number (attr "kernel"); the block mask travels as the
// op's int32 inputs and its sizes as attrs (src/attention/flex_op.cpp).
using FlexOpKernel = void (*)(const OpCall&);
int64_t register_flex_kernels(FlexOpKernel forward, FlexOpKernel backward);
// {out, lse}, both at q's dtype, through the dispatcher.
std::vector<Tensor> call_flex_op(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m,
                                 int64_t kernel, const FlexOptions& opt);
// The block mask (op inputs from `first` on, sizes from attrs) and options of an op call.
void mask_from_op(const OpCall& c, size_t first, BlockMaskData& m);
FlexOptions options_from_op(const Attrs& a);

template <class ScoreMod, class MaskMod>
constexpr bool kStatelessMods = std::is_empty_v<ScoreMod> && std::is_empty_v<MaskMod> &&
                                std::is_default_constructible_v<ScoreMod> &&
                                std::is_default_constructible_v<MaskMod> && !LearnsTensors<ScoreMod>;

// An operand the tiled kernels can read in place (rows with a contiguous
// last dim, as the heads of a fused QKV projection are), else a copy.
inline Tensor rows_in_place(const Tensor& t) { return t.dim() == 4 && t.stride(3) == 1 ? t : t.contiguous(); }

// inputs q, k, v, block mask; outputs out (Note [flex_attention's output layout]), lse.
template <class T, class ScoreMod, class MaskMod>
void op_forward_typed(const OpCall& c) {
  BlockMask<MaskMod> m{MaskMod{}};
  mask_from_op(c, 3, m);
  const FlexOptions opt = options_from_op(c.attrs);
  const Tensor out_bhle = rows_hold_heads(c.inputs[0]) ? c.outputs[0].transpose(1, 2) : c.outputs[0];
  T* out = c.outputs[0].data_ptr<T>();
  T* lse = c.outputs[1].data_ptr<T>();
  Shapes s = check_inputs(c.inputs[0], c.inputs[1], c.inputs[2], m, opt);  // sizes only
  if (c.outputs[0].numel() == 0) return;  // an empty batch, head or query set: nothing to do
  if (s.S == 0) {  // no keys: every row attends to nothing, as a fully masked row
    c.outputs[0].zero_();
    c.outputs[1].fill_(-std::numeric_limits<double>::infinity());
    return;
  }
  s.o_st = row_strides(out_bhle);
  if constexpr (std::is_same_v<T, float>) {
    // Only decoding needs contiguous operands; the tiled kernel reads rows
    // in place (below), so the copies are made only once decoding is chosen.
    if (decode_eligible(s, m, opt.kv_partitions)) {
      const Tensor q = c.inputs[0].contiguous(), k = c.inputs[1].contiguous(), v = c.inputs[2].contiguous();
      forward_decode(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out, lse, s, m, ScoreMod{},
                     decode_partitions(s, m, opt.kv_partitions));
      return;
    }
  }
  const Tensor q = rows_in_place(c.inputs[0]), k = rows_in_place(c.inputs[1]), v = rows_in_place(c.inputs[2]);
  s.q_st = row_strides(q), s.k_st = row_strides(k), s.v_st = row_strides(v);
  forward<T>(q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), out, lse, s, m, ScoreMod{});
}

// inputs q, k, v, out, lse, grad of out, block mask; outputs dq, dk, dv.
template <class T, class ScoreMod, class MaskMod>
void op_backward_typed(const OpCall& c) {
  BlockMask<MaskMod> m{MaskMod{}};
  mask_from_op(c, 6, m);
  const FlexOptions opt = options_from_op(c.attrs);
  std::vector<Tensor> in;
  for (size_t i = 0; i < 6; ++i) in.push_back(i == 4 ? c.inputs[i].contiguous() : rows_in_place(c.inputs[i]));
  Shapes s = check_inputs(in[0], in[1], in[2], m, opt);
  if (in[0].numel() == 0 || s.S == 0) {  // nothing attended: no gradient flows
    for (const Tensor& g : c.outputs) g.zero_();
    return;
  }
  s.q_st = row_strides(in[0]), s.k_st = row_strides(in[1]), s.v_st = row_strides(in[2]);
  s.o_st = row_strides(in[3]), s.do_st = row_strides(in[5]);
  // The outputs are (B, L, H, E): the gradients of head views of a (B, L,
  // H * E) projection, written where that projection's gradient needs them
  // (every element: backward() zeroes what no block reaches).
  const Tensor dq = c.outputs[0].transpose(1, 2);
  // k and v broadcast over the batch: their gradients are summed over it.
  const bool per_batch = s.Bkv != s.B;
  const Tensor dk = per_batch ? empty({s.B, s.Hkv, s.S, s.E}, dtype_of<T>::value) : c.outputs[1].transpose(1, 2);
  const Tensor dv = per_batch ? empty({s.B, s.Hkv, s.S, s.Ev}, dtype_of<T>::value) : c.outputs[2].transpose(1, 2);
  s.dq_st = row_strides(dq), s.dk_st = row_strides(dk), s.dv_st = row_strides(dv);
  backward<T>(in[0].data_ptr<T>(), in[1].data_ptr<T>(), in[2].data_ptr<T>(), in[3].data_ptr<T>(), in[4].data_ptr<T>(),
              in[5].data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(), dv.data_ptr<T>(), s, m, ScoreMod{}, nullptr);
  if (per_batch)
    c.outputs[1].copy_(dk.sum({0}, true).transpose(1, 2)), c.outputs[2].copy_(dv.sum({0}, true).transpose(1, 2));
}

template <class ScoreMod, class MaskMod>
void op_forward(const OpCall& c) {
  if (c.inputs[0].dtype() == kFloat64) op_forward_typed<double, ScoreMod, MaskMod>(c);
  else op_forward_typed<float, ScoreMod, MaskMod>(c);
}
template <class ScoreMod, class MaskMod>
void op_backward(const OpCall& c) {
  if (c.inputs[0].dtype() == kFloat64) op_backward_typed<double, ScoreMod, MaskMod>(c);
  else op_backward_typed<float, ScoreMod, MaskMod>(c);
}

// The CapturedTensors a score_mod reads at the corners of the (b, h, q_idx,
// kv_idx) space (Note [Tensors a score_mod captures]). A read of a tensor
// that requires grad which became a plain number before meeting the score
// is refused here: its gradient would be lost.
template <class T, class ScoreMod>
std::vector<Tensor> captured_tensors(const ScoreMod& score_mod, const Shapes& s) {
  CaptureTape tape;
  TapeScope scope(&tape);
  std::vector<Tensor> found;
  for (int corner = 0; corner < 16; ++corner) {
    const int64_t b = corner & 1 ? s.B - 1 : 0, h = corner & 2 ? s.Hq - 1 : 0;
    const int64_t qi = corner & 4 ? s.L - 1 : 0, kv = corner & 8 ? s.S - 1 : 0;
    tape.start(-1);
    (void)score_mod(Dual<T>(T(0), T(1)), b, h, qi, kv);
    for (size_t k = 0; k < tape.reads.size(); ++k) {
      const Tensor& t = *tape.reads[k].source;
      check(tape.met[k] || !t.requires_grad(), "flex_attention", "the score_mod used a read of a CapturedTensor ",
            shape_text(t.sizes()), " that requires grad as a plain number before it met the score (arithmetic "
            "with a float constant? write double constants), so its gradient would be lost");
      if (std::none_of(found.begin(), found.end(), [&](const Tensor& f) { return f.impl() == t.impl(); }))
        found.push_back(t);
    }
  }
  return found;
}

template <class T, class ScoreMod, class MaskMod>
FlexOutput run(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreMod& score_mod,
               const BlockMask<MaskMod>& m, const FlexOptions& opt) {
  Shapes s = check_inputs(q, k, v, m, opt);
  std::vector<Tensor> learned;
  if constexpr (LearnsTensors<ScoreMod>) {
    learned = score_mod.learned();
  } else if constexpr (!std::is_empty_v<ScoreMod>) {
    // A mod with state may read CapturedTensors: differentiate the ones
    // that require grad (Note [Tensors a score_mod captures]).
    if (is_grad_enabled() && s.B * s.Hq * s.L * s.S > 0) {
      std::vector<Tensor> found = captured_tensors<T>(score_mod, s);
      if (std::any_of(found.begin(), found.end(), [](const Tensor& t) { return t.requires_grad(); }))
        return run<T>(q, k, v, CapturedScoreMod<ScoreMod>{score_mod, std::move(found)}, m, opt);
    }
  }
  const bool learns = std::any_of(learned.begin(), learned.end(), [](const Tensor& t) { return t.requires_grad(); });
  if constexpr (kStatelessMods<ScoreMod, MaskMod>) {
    if (q.dtype() == dtype_of<T>::value && k.dtype() == q.dtype() && v.dtype() == q.dtype()) {
      static const int64_t kernel =
          register_flex_kernels(&op_forward<ScoreMod, MaskMod>, &op_backward<ScoreMod, MaskMod>);
      const std::vector<Tensor> r = call_flex_op(q, k, v, m, kernel, opt);
      Tensor lse_out;
      if (opt.return_lse) {
        NoGradGuard no_grad;
        lse_out = r[1].detach().to(kFloat32);
      }
      return {r[0], lse_out};
    }
  }
  if (s.B * s.Hq * s.L == 0 || s.S == 0) {
    // (The op above handles these itself.) No rows, or no keys (each row then attends to nothing: out 0, lse -inf,
    // as a fully masked row). The kernels assume at least one of each.
    return {zeros({s.B, s.Hq, s.L, s.Ev}, q.options()),
            opt.return_lse ? full({s.B, s.Hq, s.L}, -std::numeric_limits<double>::infinity(), TensorOptions(kFloat32).device(q.device())) : Tensor{}};
  }
  if constexpr (std::is_same_v<T, float>) {
    const bool records = is_grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad() || learns);
    if (!records && k.dtype() == kBFloat16 && decode_eligible(s, m, opt.kv_partitions))
      return decode_bf16(q, k, v, s, m, score_mod, opt);
  }
  Tensor qc, kc, vc;
  {
    NoGradGuard no_grad;
    qc = as_compute<T>(q), kc = as_compute<T>(k), vc = as_compute<T>(v);
  }
  Tensor out = empty_output(q, s, dtype_of<T>::value);
  // The backward pass needs lse at the compute precision; callers get float32.
  Tensor lse = empty({s.B, s.Hq, s.L}, dtype_of<T>::value);
  bool decoded = false;
  if constexpr (std::is_same_v<T, float>) {
    if (decode_eligible(s, m, opt.kv_partitions)) {
      forward_decode(qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(), out.data_ptr<float>(),
                     lse.data_ptr<float>(), s, m, score_mod, decode_partitions(s, m, opt.kv_partitions));
      decoded = true;
    }
  }
  if (!decoded)
    forward<T>(qc.data_ptr<T>(), kc.data_ptr<T>(), vc.data_ptr<T>(), out.data_ptr<T>(), lse.data_ptr<T>(), s, m,
               score_mod);
  Tensor result;
  {
    NoGradGuard no_grad;
    result = out.to(q.dtype());
  }
  // The closure keeps the compute-dtype copies; `saved_out` is an alias
  // without history, so the graph holds no cycle through the result.
  const Tensor saved_out = out.detach();
  const DType dq_t = q.dtype(), dk_t = k.dtype(), dv_t = v.dtype();
  std::vector<Tensor> inputs = {q, k, v};
  if (learns) inputs.insert(inputs.end(), learned.begin(), learned.end());
  std::vector<Shape> learned_sizes;
  std::vector<DType> learned_dtypes;
  for (const Tensor& t : learned) learned_sizes.push_back(t.sizes()), learned_dtypes.push_back(t.dtype());
  autograd::record_function("flex_attention", inputs, {result},
                            [=](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
                              NoGradGuard no_grad;
                              const Tensor go = as_compute<T>(grads[0]);
                              Tensor dq = empty(qc.sizes(), dtype_of<T>::value),
                                     dk = empty({s.B, s.Hkv, s.S, s.E}, dtype_of<T>::value),
                                     dv = empty({s.B, s.Hkv, s.S, s.Ev}, dtype_of<T>::value);
                              std::vector<std::vector<double>> dlearned;
                              for (const Shape& sz : learned_sizes)
                                dlearned.emplace_back(
                                    static_cast<size_t>(std::accumulate(sz.begin(), sz.end(), int64_t{1}, std::multiplies<>())),
                                    0.0);
                              backward<T>(qc.data_ptr<T>(), kc.data_ptr<T>(), vc.data_ptr<T>(), saved_out.data_ptr<T>(),
                                          lse.data_ptr<T>(), go.data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(),
                                          dv.data_ptr<T>(), s, m, score_mod, learns ? &dlearned : nullptr);
                              if constexpr (LearnsAtScore<ScoreMod>)
                                check(!score_mod.missed->load(), "flex_attention",
                                      "the score_mod read a CapturedTensor that requires grad which it did not read "
                                      "at any corner of the (b, h, q_idx, kv_idx) space, or used a read as a plain "
                                      "number before it met the score: its gradient cannot be computed");
                              if (s.Bkv != s.B) dk = dk.sum({0}, true), dv = dv.sum({0}, true);
                              std::vector<Tensor> out_grads = {dq.to(dq_t), dk.to(dk_t), dv.to(dv_t)};
                              if (learns)
                                for (size_t t = 0; t < dlearned.size(); ++t) {
                                  Tensor g = empty(learned_sizes[t], kFloat64);
                                  std::copy(dlearned[t].begin(), dlearned[t].end(), g.data_ptr<double>());
                                  out_grads.push_back(g.to(learned_dtypes[t]));
                                }
                              return out_grads;
                            });
  Tensor lse_out;
  if (opt.return_lse) {
    NoGradGuard no_grad;
    lse_out = lse.to(kFloat32);
  }
  return {result, lse_out};
}

}  // namespace kiln::attention_detail
