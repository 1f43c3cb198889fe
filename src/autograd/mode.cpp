// Note [Autograd is a mode]
// Recording is the process-wide dispatcher mode: every op call passes
// through on_op below, which runs the op and, when grad mode is on and an
// input requires grad, adds an OpNode to the graph with edges to the inputs'
// nodes. In-place and out= calls are recorded as the functional op followed
// by a copy into the destination, whose history is then rebased onto the
// new node (so a.add_(b) differentiates like a = a + b).
#include <mutex>
#include <map>

#include "autograd/graph.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

thread_local bool grad_enabled = true;

struct OpNode final : Node, std::enable_shared_from_this<OpNode> {
  const OpDef* op = nullptr;
  autograd::BackwardFn fn = nullptr;
  Attrs attrs;
  std::vector<autograd::SavedTensor> saved_inputs, saved_outputs;
  std::vector<TensorMeta> input_meta;
  std::vector<bool> needs_grad;
  bool released = false;

  std::string name() const override { return op->name + "_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    check(!released, "backward", "trying to backward through the graph a second time (or directly access saved "
          "tensors after they have already been freed); specify retain_graph=true on the first backward");
    // Note [Saved values the formula does not read]
    // Every input is saved (a formula may read any), where PyTorch saves
    // those the gradients wanted read: a product's factor whose own
    // gradient is not needed may be written in place after the op. A saved
    // value written since is handed to the formula undefined; only if the
    // formula then fails (it read it) is the write an error.
    const autograd::SavedTensor* stale = nullptr;
    auto unpack = [&](const autograd::SavedTensor& s) {
      if (!s.stale()) return s.unpack(op->name);
      stale = &s;
      return Tensor();
    };
    std::vector<Tensor> in, out;
    for (const auto& s : saved_inputs) in.push_back(unpack(s));
    for (size_t i = 0; i < saved_outputs.size(); ++i) {
      out.push_back(unpack(saved_outputs[i]));
      // Saved without history (it would point back at this node: a cycle);
      // under create_graph an alias gets this node as its grad_fn again.
      if (is_grad_enabled() && out.back().defined() && is_floating(out.back().dtype()))
        out.back() = autograd::alias_with_history(out.back(), shared_from_this(), static_cast<uint32_t>(i));
    }
    autograd::BackwardContext ctx{in, out, input_meta, attrs, grads, needs_grad};
    std::vector<Tensor> gin;
    try {
      gin = fn(ctx);
    } catch (const Error&) {
      if (stale) stale->unpack(op->name);  // raises the in-place error, the cause
      throw;
    }
    check(gin.size() == needs_grad.size(), "backward", "formula of '", op->name, "' returned ", gin.size(),
          " gradients for ", needs_grad.size(), " inputs");
    // Keep only the inputs that have edges, in order.
    std::vector<Tensor> res;
    for (size_t i = 0; i < gin.size(); ++i)
      if (needs_grad[i]) res.push_back(gin[i]);
    return res;
  }
  void release_saved() override {
    saved_inputs.clear();
    saved_outputs.clear();
    released = true;
  }
};

bool wants_grad(const Tensor& t) { return t.defined() && t.impl()->autograd && t.impl()->autograd->requires_grad; }

// Note [Writing into views]
// An in-place op on a view v of a base b (v = b[0]; v.mul_(2)) is recorded
// as PyTorch's CopySlices: the op's functional result r gets its node as
// usual, then b's history becomes a CopySlices node whose backward splits
// b's gradient into the part outside v's elements (to b's old history) and
// the part at them (to r), and v's history becomes a view of the new b. The
// view's place in b comes from their layouts (b contiguous; other bases,
// and a base that is a leaf requiring grad, are refused). Views of b taken
// before the write keep their old history, which is right unless they
// overlap the written elements (PyTorch would regenerate it).
struct CopySlices final : Node {
  Shape base_sizes, view_sizes, view_strides;
  int64_t view_offset = 0;  // in elements, from the base's first element
  DType dtype = kFloat32;
  bool base_has_history = false;
  std::string name() const override { return "CopySlices"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor g = grads[0].contiguous().clone();
    const Tensor region = g.as_strided(view_sizes, view_strides, g.storage_offset() + view_offset);
    Tensor for_result = region.clone();
    {
      NoGradGuard no_grad;  // g is this backward's own buffer
      region.zero_();
    }
    std::vector<Tensor> out;
    if (base_has_history) out.push_back(g);
    out.push_back(for_result);
    return out;
  }
};

// The backward of a view of a rebased base: the view's gradient placed in
// zeros of the base's shape.
struct ViewOfBase final : Node {
  Shape base_sizes, view_sizes, view_strides;
  int64_t view_offset = 0;
  DType dtype = kFloat32;
  std::string name() const override { return "AsStridedBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor z = zeros(base_sizes, TensorOptions(dtype).device(grads[0].device()));
    const Tensor region = z.as_strided(view_sizes, view_strides, view_offset);
    {
      NoGradGuard no_grad;
      region.copy_(grads[0]);
    }
    return {z};
  }
};

// The base whose history a write into view o rebases; undefined when o is
// not a view or nothing holds its base any more (o's own history is then
// simply the op's, as for a tensor that is no view).
Tensor live_base(const Tensor& o) {
  if (!o.impl()->is_view) return Tensor();
  return Tensor(o.impl()->view_base.lock());
}

// Whether a write into o's base can be recorded (before anything is written).
void check_view_write(const Tensor& base, const char* op) {
  check(!(base.requires_grad() && base.is_leaf()), op,
        "a view of a leaf tensor that requires grad is being used in an in-place operation");
  check(base.is_contiguous(), op, "in-place operations on views of a non-contiguous base (shape ",
        shape_text(base.sizes()), ", stride ", shape_text(base.strides()), ") are not differentiable yet");
}

// Rebases view o's base after r (the functional result) was copied into o.
void rebase_base_of(const Tensor& o, const Tensor& base, const Tensor& r) {
  auto node = std::make_shared<CopySlices>();
  node->base_sizes = base.sizes();
  node->view_sizes = o.sizes();
  node->view_strides = o.strides();
  node->view_offset = o.storage_offset() - base.storage_offset();
  node->dtype = base.dtype();
  node->base_has_history = base.requires_grad();
  node->output_meta.emplace_back(base.sizes(), base.dtype(), Shape{}, 0, base.device());
  node->output_hooks.resize(1);
  if (node->base_has_history) {
    const AutogradMeta& m = *base.impl()->autograd;
    node->next_edges.push_back(m.grad_fn ? autograd::Edge{m.grad_fn, m.output_nr} : autograd::Edge{autograd::grad_accumulator(base), 0});
  }
  const AutogradMeta& rm = *r.impl()->autograd;
  node->next_edges.push_back(autograd::Edge{rm.grad_fn, rm.output_nr});
  AutogradMeta& bm = autograd::meta(base);
  bm.requires_grad = true;
  bm.grad_fn = node;
  bm.output_nr = 0;
  auto view_node = std::make_shared<ViewOfBase>();
  view_node->base_sizes = node->base_sizes;
  view_node->view_sizes = node->view_sizes;
  view_node->view_strides = node->view_strides;
  view_node->view_offset = node->view_offset;
  view_node->dtype = node->dtype;
  view_node->output_meta.emplace_back(o.sizes(), o.dtype(), Shape{}, 0, o.device());
  view_node->output_hooks.resize(1);
  view_node->next_edges.push_back(autograd::Edge{node, 0});
  AutogradMeta& vm = autograd::meta(o);
  vm.requires_grad = true;
  vm.grad_fn = view_node;
  vm.output_nr = 0;
}

class AutogradMode final : public DispatchMode {
 public:
  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    for (const Tensor& o : out)
      check(!(grad_enabled && wants_grad(o) && o.is_leaf()), op.name.c_str(),
            "a leaf tensor that requires grad is being used in an in-place operation");
    bool any = false;
    for (const Tensor& t : in) any = any || wants_grad(t);
    if (!grad_enabled || !any) return dispatch(op, in, attrs, out);
    const autograd::BackwardDef* def = op.backward;
    check(def != nullptr, op.name.c_str(), "has no backward formula registered (autograd cannot record it)");
    if (!def->fn) return dispatch(op, in, attrs, out);  // integer or index outputs

    if (!out.empty()) return record_in_place(op, in, attrs, out);
    std::vector<Tensor> results = dispatch(op, in, attrs, {});
    record(op, *def, in, in, attrs, results);
    return results;
  }

 private:
  // `in` gives the graph edges; `values` what is saved for the formula (they
  // differ only for in-place ops, whose destination is saved as a copy).
  static void record(const OpDef& op, const autograd::BackwardDef& def, std::span<const Tensor> in,
                     std::span<const Tensor> values, const Attrs& attrs, std::vector<Tensor>& results) {
    auto node = std::make_shared<OpNode>();
    node->op = &op;
    node->fn = def.fn;
    node->attrs = attrs;
    for (size_t k = 0; k < in.size(); ++k) {
      const Tensor& t = in[k];
      node->input_meta.emplace_back(t.sizes(), t.dtype(), t.strides(), t.storage_offset(), t.device());
      const bool g = wants_grad(t);
      node->needs_grad.push_back(g);
      if (g) {
        const AutogradMeta& m = *t.impl()->autograd;
        node->next_edges.push_back(m.grad_fn ? autograd::Edge{m.grad_fn, m.output_nr}
                                             : autograd::Edge{autograd::grad_accumulator(t), 0});
      }
      if (def.save & autograd::kSaveInputs) node->saved_inputs.push_back(autograd::save(values[k], /*keep_history=*/true));
    }
    node->output_hooks.resize(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      Tensor& r = results[i];
      node->output_meta.emplace_back(r.sizes(), r.dtype(), Shape{}, 0, r.device());
      if (def.save & autograd::kSaveOutputs) node->saved_outputs.push_back(autograd::save(r));
      if (!is_floating(r.dtype())) continue;
      // Views share the TensorImpl-level meta of nothing: each output gets its own.
      r.impl()->autograd = std::make_shared<AutogradMeta>();
      r.impl()->autograd->requires_grad = true;
      r.impl()->autograd->grad_fn = node;
      r.impl()->autograd->output_nr = static_cast<uint32_t>(i);
    }
  }

  static std::vector<Tensor> record_in_place(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                                             std::span<const Tensor> out) {

    std::vector<Tensor> bases;
    for (const Tensor& o : out) {
      bases.push_back(live_base(o));
      if (bases.back().defined()) check_view_write(bases.back(), op.name.c_str());
    }
    // Inputs that are the destination are cloned first: the node must keep
    // their old values, which the copy below overwrites.
    std::vector<Tensor> values(in.begin(), in.end());
    for (Tensor& t : values)
      for (const Tensor& o : out)
        if (t.impl()->storage == o.impl()->storage) t = t.clone();
    std::vector<Tensor> results = dispatch(op, values, attrs, {});
    record(op, *op.backward, in, values, attrs, results);
    for (size_t i = 0; i < out.size(); ++i) {
      {
        NoGradGuard no_grad;
        out[i].copy_(results[i]);
      }
      if (bases[i].defined() && results[i].impl()->autograd) {  // Note [Writing into views]
        rebase_base_of(out[i], bases[i], results[i]);
        continue;
      }
      if (results[i].impl()->autograd) {
        auto& m = autograd::meta(out[i]);
        m.requires_grad = true;
        m.grad_fn = results[i].impl()->autograd->grad_fn;
        m.output_nr = results[i].impl()->autograd->output_nr;
      }
    }
    return std::vector<Tensor>(out.begin(), out.end());
  }
};

struct InstallMode {
  InstallMode() { set_global_mode(&mode); }
  AutogradMode mode;
} install_mode;

// Storage for the formulas; each op holds a pointer to its own (OpDef::backward).
struct Registry {
  std::mutex mu;
  std::map<std::string, autograd::BackwardDef> defs;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

namespace autograd {

void register_backward(const std::string& op, BackwardFn fn, uint8_t save) {
  std::lock_guard<std::mutex> lock(registry().mu);
  BackwardDef& def = registry().defs[op];  // a node of a map: its address stays
  def = BackwardDef{fn, save};
  set_backward(op, &def);
}

void register_nondifferentiable(const std::string& op) { register_backward(op, nullptr, kSaveNone); }

}  // namespace autograd
}  // namespace kiln
