// flex_attention as dispatcher ops (Note [flex_attention as an op] in
// kiln/detail/attention_op.h): the ops' shape functions, kernels (the mods'
// own, from the "mods" attribute) and backward formula.
#include "kiln/attention.h"

namespace kiln::attention_detail {
namespace {

const FlexMods& mods_of(const Attrs& a) { return *static_cast<const FlexMods*>(a.get_opaque("mods").object.get()); }

void check_ranks(std::span<const Tensor> in, const char* op) {
  check(in[0].dim() == 4 && in[1].dim() == 4 && in[2].dim() == 4, op, "expected 4-D q, k, v (B, H, L, E) but got ",
        shape_text(in[0].sizes()), ", ", shape_text(in[1].sizes()), ", ", shape_text(in[2].sizes()));
}
DType compute_dtype(const Tensor& q) { return q.dtype() == kFloat64 ? kFloat64 : kFloat32; }

// out at q's dtype and layout (Note [flex_attention's output layout]); lse (B, H, L) at the compute dtype.
std::vector<TensorMeta> forward_shape(std::span<const Tensor> in, const Attrs&) {
  check_ranks(in, "flex_attention");
  const Tensor &q = in[0], &v = in[2];
  Shape out = {q.size(0), q.size(1), q.size(2), v.size(3)};
  if (rows_hold_heads(q)) std::swap(out[1], out[2]);
  return {{std::move(out), q.dtype()}, {{q.size(0), q.size(1), q.size(2)}, compute_dtype(q)}};
}
// dq, dk, dv in (B, L, H, E) layout at their inputs' dtypes (the formula
// hands out their (B, H, L, E) transposes), then one gradient per learned tensor.
std::vector<TensorMeta> backward_shape(std::span<const Tensor> in, const Attrs&) {
  check_ranks(in, "flex_attention_backward");
  std::vector<TensorMeta> out;
  for (int i = 0; i < 3; ++i) out.push_back({{in[i].size(0), in[i].size(2), in[i].size(1), in[i].size(3)}, in[i].dtype()});
  for (size_t i = kBackwardLearnedFrom; i < in.size(); ++i) out.push_back({in[i].sizes(), in[i].dtype()});
  return out;
}

const OpDef& kFlexBackward = register_op(
    OpDef{"flex_attention_backward",
          "flex_attention_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor grad_out, Tensor[9] "
          "block_mask, Tensor[] learned, ...) -> (Tensor, Tensor, Tensor, Tensor[])",
          OpKind::Compute,
          backward_shape,
          {[](const OpCall& c) { mods_of(c.attrs).backward(c); }},
          &autograd::kNotDifferentiable});

// Only out carries a gradient: flex_attention hands lse out detached.
constexpr autograd::BackwardDef kFlexGrad{
    [](const autograd::BackwardContext& c) -> std::vector<Tensor> {
      const bool t = rows_hold_heads(c.inputs[0]);
      std::vector<Tensor> in = {c.inputs[0],  c.inputs[1],
                                c.inputs[2],  t ? c.outputs[0].transpose(1, 2) : c.outputs[0],
                                c.outputs[1], t ? c.grads[0].transpose(1, 2) : c.grads[0]};
      in.insert(in.end(), c.inputs.begin() + 3, c.inputs.end());
      const std::vector<Tensor> g = dispatch(kFlexBackward, in, c.attrs);
      // dq, dk, dv; none for the mask; the learned tensors'.
      std::vector<Tensor> grads = {g[0].transpose(1, 2), g[1].transpose(1, 2), g[2].transpose(1, 2)};
      grads.resize(kForwardLearnedFrom);
      grads.insert(grads.end(), g.begin() + 3, g.end());
      return grads;
    },
    autograd::kSaveBoth};
const OpDef& kFlex = register_op(OpDef{
    "flex_attention",
    "flex_attention(Tensor q, Tensor k, Tensor v, Tensor[9] block_mask, Tensor[] learned, Any mods, int B, int H, "
    "int q_len, int kv_len, int block_size, bool has_scale, float scale, bool enable_gqa, int kv_partitions) -> "
    "(Tensor, Tensor)",
    OpKind::Compute,
    forward_shape,
    {[](const OpCall& c) { mods_of(c.attrs).forward(c); }},
    &kFlexGrad});

}  // namespace

std::vector<Tensor> call_flex_op(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMaskData& m,
                                 const std::vector<Tensor>& learned, OpaqueAttr mods, const FlexOptions& opt) {
  std::vector<Tensor> in = {q,
                            k,
                            v,
                            m.kv_num_blocks,
                            m.kv_indices,
                            m.full_kv_num_blocks,
                            m.full_kv_indices,
                            m.q_num_blocks,
                            m.q_indices,
                            m.full_q_num_blocks,
                            m.full_q_indices,
                            m.partial_bits.defined() ? m.partial_bits : empty({0}, TensorOptions(kInt64).device(q.device()))};
  in.insert(in.end(), learned.begin(), learned.end());
  Attrs attrs = mask_size_attrs(m);
  attrs.set("mods", std::move(mods));
  attrs.set("has_scale", opt.scale.has_value());
  attrs.set("scale", opt.scale.value_or(0.0));
  attrs.set("enable_gqa", opt.enable_gqa);
  attrs.set("kv_partitions", opt.kv_partitions);
  std::vector<Tensor> r = dispatch(kFlex, in, attrs);
  if (rows_hold_heads(q)) r[0] = r[0].transpose(1, 2);
  return r;
}

void mask_from_op(const OpCall& c, size_t first, BlockMaskData& m) {
  check(c.inputs.size() >= first + kMaskTensors, "flex_attention", "expected at least ", first + kMaskTensors,
        " inputs but got ", c.inputs.size());
  read_mask_sizes(c.attrs, m);
  Tensor* lists[kMaskTensors] = {&m.kv_num_blocks, &m.kv_indices, &m.full_kv_num_blocks, &m.full_kv_indices,
                                 &m.q_num_blocks,  &m.q_indices,  &m.full_q_num_blocks,  &m.full_q_indices,
                                 &m.partial_bits};
  for (size_t i = 0; i < kMaskTensors; ++i) *lists[i] = c.inputs[first + i].contiguous();
}

FlexOptions options_from_op(const Attrs& a) {
  FlexOptions o;
  if (a.get_bool("has_scale")) o.scale = a.get_double("scale");
  o.enable_gqa = a.get_bool("enable_gqa");
  o.kv_partitions = a.get_int("kv_partitions");
  return o;
}

}  // namespace kiln::attention_detail
