// flex_attention as a dispatcher op (Note [flex_attention as an op]): the
// kernels its mods instantiate and the front end that calls it.
// Internal to kiln/attention.h, whose templates instantiate it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <iterator>
#include <new>
#include <string>
#include <typeinfo>

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

// Note [flex_attention as an op]
// Every flex_attention call is the dispatcher op "flex_attention" (out,
// lse), whose backward formula calls "flex_attention_backward", so eager
// autograd, kiln::compile's tracer (one graph node, no graph break) and the
// profiler all see it. Its inputs are q, k, v (one float dtype: the kernels
// compute in float64 for float64, else in float32), the block mask's
// int tensors, and the tensors the score_mod learns (learned(), or the
// CapturedTensors it reads that require grad), whose gradients the backward
// op returns after dq, dk, dv. The mods travel as the op's "mods" attribute
// (an OpaqueAttr): a FlexMods holding copies of the score and mask mods and
// the kernels their types instantiate. Its key is the mods' types and
// bytes: the same bytes read the same memory (a CapturedTensor holds its
// tensor, whose current values it reads), so a compiled graph may run a
// later call's op with an earlier call's mods.
struct FlexMods {
  virtual ~FlexMods() = default;
  virtual void forward(const OpCall& c) const = 0;
  virtual void backward(const OpCall& c) const = 0;
};
// {out, lse}: out at q's dtype and layout, lse at the compute dtype.
std::vector<Tensor> call_flex_op(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m,
                                 const std::vector<Tensor>& learned, OpaqueAttr mods, const FlexOptions& opt);
// A block mask's sizes (B, H, q_len, kv_len, block_size) as op attributes, and back.
Attrs mask_size_attrs(const BlockMaskData& m);
void read_mask_sizes(const Attrs& a, BlockMaskData& m);
// The block mask (op inputs from `first` on, sizes from attrs) and options of an op call.
void mask_from_op(const OpCall& c, size_t first, BlockMaskData& m);
FlexOptions options_from_op(const Attrs& a);
// The op inputs before the learned tensors: forward q, k, v and the mask; backward also out, lse, grad_out.
inline constexpr size_t kMaskTensors = 9;
inline constexpr size_t kForwardLearnedFrom = 3 + kMaskTensors, kBackwardLearnedFrom = 6 + kMaskTensors;

// An operand at the compute dtype T the tiled kernels can read in place
// (rows with a contiguous last dim, as the heads of a fused QKV projection
// are), else a contiguous copy at T.
template <class T>
Tensor rows_at(const Tensor& t) {
  return t.dtype() == dtype_of<T>::value && t.dim() == 4 && t.stride(3) == 1 ? t : t.to(dtype_of<T>::value).contiguous();
}
// `out` itself when it has dtype T, else a T tensor of its sizes whose
// values `finish` copies into it after the kernel wrote them.
template <class T>
Tensor written_at(const Tensor& out) {
  return out.dtype() == dtype_of<T>::value ? out : empty(out.sizes(), dtype_of<T>::value);
}
inline void finish(const Tensor& out, const Tensor& written) {
  if (!written.is_same(out)) out.copy_(written);
}

template <class ScoreMod, class MaskMod>
struct FlexModsOf final : FlexMods {
  FlexModsOf(ScoreMod s, MaskMod m, std::vector<Tensor> captured_)
      : score_mod(std::move(s)), mask_mod(std::move(m)), captured(std::move(captured_)) {}
  ScoreMod score_mod;
  MaskMod mask_mod;
  // The CapturedTensors that require grad the score_mod read when probed
  // (Note [Tensors a score_mod captures]); their gradients are learned at
  // each score through CapturedScoreMod.
  std::vector<Tensor> captured;

  void forward(const OpCall& c) const override {
    if (c.inputs[0].dtype() == kFloat64) forward_typed<double>(c);
    else forward_typed<float>(c);
  }
  void backward(const OpCall& c) const override {
    if (c.inputs[0].dtype() == kFloat64) backward_typed<double>(c);
    else backward_typed<float>(c);
  }

 private:
  // inputs q, k, v, block mask, learned; outputs out (Note [flex_attention's output layout]), lse.
  template <class T>
  void forward_typed(const OpCall& c) const {
    BlockMask<MaskMod> m{mask_mod};
    mask_from_op(c, 3, m);
    const FlexOptions opt = options_from_op(c.attrs);
    Shapes s = check_inputs(c.inputs[0], c.inputs[1], c.inputs[2], m, opt);  // sizes only
    if (c.outputs[0].numel() == 0) return;  // an empty batch, head or query set: nothing to do
    if (s.S == 0) {  // no keys: every row attends to nothing, as a fully masked row
      c.outputs[0].zero_();
      c.outputs[1].fill_(-std::numeric_limits<double>::infinity());
      return;
    }
    const Tensor out = written_at<T>(c.outputs[0]);
    const Tensor out_bhle = rows_hold_heads(c.inputs[0]) ? out.transpose(1, 2) : out;
    s.o_st = row_strides(out_bhle);
    T* o = out.data_ptr<T>();
    T* lse = c.outputs[1].data_ptr<T>();
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      // Only decoding needs contiguous operands; the tiled kernel reads rows
      // in place, so the copies are made only once decoding is chosen. A
      // bfloat16 K/V cache is read as stored (half the bytes).
      if (decode_eligible(s, m, opt.kv_partitions)) {
        const Tensor q = c.inputs[0].to(kFloat32).contiguous();
        const int64_t parts = decode_partitions(s, m, opt.kv_partitions);
        if (c.inputs[1].dtype() == kBFloat16 && c.inputs[2].dtype() == kBFloat16) {
          const Tensor k = c.inputs[1].contiguous(), v = c.inputs[2].contiguous();
          forward_decode(q.data_ptr<float>(), k.data_ptr<BFloat16>(), v.data_ptr<BFloat16>(), o, lse, s, m,
                         score_mod, parts);
        } else {
          const Tensor k = c.inputs[1].to(kFloat32).contiguous(), v = c.inputs[2].to(kFloat32).contiguous();
          forward_decode(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), o, lse, s, m, score_mod,
                         parts);
        }
        done = true;
      }
    }
    if (!done) {
      const Tensor q = rows_at<T>(c.inputs[0]), k = rows_at<T>(c.inputs[1]), v = rows_at<T>(c.inputs[2]);
      s.q_st = row_strides(q), s.k_st = row_strides(k), s.v_st = row_strides(v);
      attention_detail::forward<T>(q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), o, lse, s, m, score_mod);
    }
    finish(c.outputs[0], out);
  }

  // inputs q, k, v, out, lse, grad of out, block mask, learned; outputs dq,
  // dk, dv, then the learned tensors' gradients.
  template <class T>
  void backward_typed(const OpCall& c) const {
    BlockMask<MaskMod> m{mask_mod};
    mask_from_op(c, 6, m);
    const FlexOptions opt = options_from_op(c.attrs);
    std::vector<Tensor> in;
    for (size_t i = 0; i < 6; ++i) in.push_back(i == 4 ? c.inputs[i].to(dtype_of<T>::value).contiguous() : rows_at<T>(c.inputs[i]));
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
    const Tensor dq = written_at<T>(c.outputs[0]);
    // k and v broadcast over the batch: their gradients are summed over it.
    const bool per_batch = s.Bkv != s.B;
    const Tensor dk = per_batch ? empty({s.B, s.S, s.Hkv, s.E}, dtype_of<T>::value) : written_at<T>(c.outputs[1]);
    const Tensor dv = per_batch ? empty({s.B, s.S, s.Hkv, s.Ev}, dtype_of<T>::value) : written_at<T>(c.outputs[2]);
    const Tensor dq_h = dq.transpose(1, 2), dk_h = dk.transpose(1, 2), dv_h = dv.transpose(1, 2);
    s.dq_st = row_strides(dq_h), s.dk_st = row_strides(dk_h), s.dv_st = row_strides(dv_h);
    // The learned tensors' gradients, float64 laid out as each (contiguous).
    const size_t n_learned = c.outputs.size() - 3;
    std::vector<std::vector<double>> dlearned;
    for (size_t t = 0; t < n_learned; ++t) dlearned.emplace_back(static_cast<size_t>(c.outputs[3 + t].numel()), 0.0);
    auto run = [&](const auto& mod) {
      attention_detail::backward<T>(in[0].data_ptr<T>(), in[1].data_ptr<T>(), in[2].data_ptr<T>(), in[3].data_ptr<T>(),
                  in[4].data_ptr<T>(), in[5].data_ptr<T>(), dq_h.data_ptr<T>(), dk_h.data_ptr<T>(),
                  dv_h.data_ptr<T>(), s, m, mod, n_learned ? &dlearned : nullptr);
    };
    bool learned_at_scores = false;
    if constexpr (!LearnsTensors<ScoreMod> && !std::is_empty_v<ScoreMod>) {
      if (!captured.empty()) {
        const CapturedScoreMod<ScoreMod> learning{score_mod, captured};
        run(learning);
        check(!learning.missed->load(), "flex_attention",
              "the score_mod read a CapturedTensor that requires grad which it did not read at any corner of the "
              "(b, h, q_idx, kv_idx) space, or used a read as a plain number before it met the score: its gradient "
              "cannot be computed");
        learned_at_scores = true;
      }
    }
    if (!learned_at_scores) run(score_mod);
    finish(c.outputs[0], dq);
    if (per_batch) {
      c.outputs[1].copy_(dk.sum({0}, true)), c.outputs[2].copy_(dv.sum({0}, true));
    } else {
      finish(c.outputs[1], dk), finish(c.outputs[2], dv);
    }
    for (size_t t = 0; t < n_learned; ++t) {
      const Tensor g = empty(c.outputs[3 + t].sizes(), kFloat64);
      std::copy(dlearned[t].begin(), dlearned[t].end(), g.data_ptr<double>());
      c.outputs[3 + t].copy_(g);
    }
  }
};

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
      check(tape.met[k] || !t.requires_grad() || !is_grad_enabled(), "flex_attention", "the score_mod used a read of a CapturedTensor ",
            shape_text(t.sizes()), " that requires grad as a plain number before it met the score (arithmetic "
            "with a float constant? write double constants), so its gradient would be lost");
      if (std::none_of(found.begin(), found.end(), [&](const Tensor& f) { return f.impl() == t.impl(); }))
        found.push_back(t);
    }
  }
  return found;
}

// An X built in zeroed memory, so that padding inside it reads as 0 (a
// member-by-member copy leaves padding alone): equal mods, equal keys.
template <class X, class... A>
std::shared_ptr<const X> make_zeroed(A&&... args) {
  constexpr std::align_val_t align{alignof(X)};
  void* mem = ::operator new(sizeof(X), align);
  std::memset(mem, 0, sizeof(X));
  X* x;
  try {
    x = new (mem) X(std::forward<A>(args)...);
  } catch (...) {
    ::operator delete(mem, align);
    throw;
  }
  return std::shared_ptr<const X>(x, [](const X* p) {
    p->~X();
    ::operator delete(const_cast<X*>(p), std::align_val_t{alignof(X)});
  });
}

// The bytes of a mod as hex, for the op's key (Note [flex_attention as an op]).
template <class M>
void append_bytes(std::string& key, const M& mod) {
  key += typeid(M).name();
  if constexpr (!std::is_empty_v<M>) {
    unsigned char bytes[sizeof(M)];
    std::memcpy(bytes, static_cast<const void*>(&mod), sizeof(M));
    key += ':';
    for (unsigned char b : bytes) key += "0123456789abcdef"[b >> 4], key += "0123456789abcdef"[b & 15];
  }
  key += ';';
}

// An OpaqueAttr holding `held`, keyed by the bytes of `parts`, members of
// held: memory they point to stays theirs while a compiled graph holds them.
template <class X, class... Parts>
OpaqueAttr keyed(std::shared_ptr<const X> held, const Parts&... parts) {
  std::string key;
  (append_bytes(key, parts), ...);
  return {std::move(held), std::move(key)};
}

template <class T, class ScoreMod, class MaskMod>
FlexOutput run(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreMod& score_mod,
               const BlockMask<MaskMod>& m, const FlexOptions& opt) {
  Shapes s = check_inputs(q, k, v, m, opt);
  // The tensors the score_mod reads: those it learns (learned()) or the
  // CapturedTensors the corner probe finds (Note [Tensors a score_mod
  // captures]). The kernels read them through the mods, so a tensor
  // kiln::compile has not computed yet is computed first; the probe runs
  // only where that or a gradient needs it.
  std::vector<Tensor> read;
  if constexpr (LearnsTensors<ScoreMod>) {
    read = score_mod.learned();
  } else if constexpr (!std::is_empty_v<ScoreMod>) {
    if ((is_grad_enabled() || kiln::detail::concrete_value_hook) && s.B * s.Hq * s.L * s.S > 0 &&
        q.device().type() != DeviceType::Meta)
      read = captured_tensors<T>(score_mod, s);
  }
  for (const Tensor& t : read)
    kiln::detail::on_concrete_value(t.impl(), "flex_attention's score_mod reads a tensor", SourceLocation());
  // The op's learned inputs: every learned() tensor when one requires grad
  // (the backward kernel fills their gradients together), or the captured
  // tensors that require grad.
  auto requires_grad = [](const Tensor& t) { return t.requires_grad(); };
  std::vector<Tensor> learned, captured;
  if (is_grad_enabled()) {
    if constexpr (LearnsTensors<ScoreMod>) {
      if (std::any_of(read.begin(), read.end(), requires_grad)) learned = read;
    } else {
      std::copy_if(read.begin(), read.end(), std::back_inserter(captured), requires_grad);
      learned = captured;
    }
  }
  auto held = make_zeroed<FlexModsOf<ScoreMod, MaskMod>>(score_mod, m.mask_mod, std::move(captured));
  OpaqueAttr mods = keyed(held, held->score_mod, held->mask_mod);
  const std::vector<Tensor> r = call_flex_op(q, k, v, m, learned, std::move(mods), opt);
  Tensor lse_out;
  if (opt.return_lse) {
    NoGradGuard no_grad;
    lse_out = r[1].detach().to(kFloat32);
  }
  return {r[0], lse_out};
}

}  // namespace kiln::attention_detail

KILN_API_END
