// Note [Autograd is a mode]
// Recording is the process-wide dispatcher mode: every op call passes
// through on_op below, which runs the op and, when grad mode is on and an
// input requires grad, adds an OpNode to the graph with edges to the inputs'
// nodes. In-place and out= calls are recorded as the functional op followed
// by a copy into the destination, whose history is then rebased onto the
// new node (so a.add_(b) differentiates like a = a + b).
#include <mutex>
#include <unordered_map>

#include "autograd/graph.h"
#include "kiln/error.h"

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
    std::vector<Tensor> in, out;
    for (const auto& s : saved_inputs) in.push_back(s.unpack(op->name));
    for (size_t i = 0; i < saved_outputs.size(); ++i) {
      out.push_back(saved_outputs[i].unpack(op->name));
      // Saved without history (it would point back at this node: a cycle);
      // under create_graph an alias gets this node as its grad_fn again.
      if (is_grad_enabled() && out.back().defined() && is_floating(out.back().dtype())) {
        auto impl = std::make_shared<TensorImpl>(*out.back().impl());
        impl->autograd = std::make_shared<AutogradMeta>();
        impl->autograd->requires_grad = true;
        impl->autograd->grad_fn = shared_from_this();
        impl->autograd->output_nr = static_cast<uint32_t>(i);
        out.back() = Tensor(std::move(impl));
      }
    }
    autograd::BackwardContext ctx{in, out, input_meta, attrs, grads, needs_grad};
    std::vector<Tensor> gin = fn(ctx);
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
    const autograd::BackwardDef* def = autograd::find_backward(op.name);
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
      node->input_meta.emplace_back(t.sizes(), t.dtype(), t.strides(), t.storage_offset());
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
      node->output_meta.emplace_back(r.sizes(), r.dtype());
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
    for (const Tensor& o : out) {
      // Recording it would need the base's history rewritten too (PyTorch's
      // CopySlices); refuse rather than give the base a wrong gradient.
      check(!o.impl()->is_view, op.name.c_str(),
            "in-place operations on views are not differentiable yet; use the out-of-place op instead");
    }
    // Inputs that are the destination are cloned first: the node must keep
    // their old values, which the copy below overwrites.
    std::vector<Tensor> values(in.begin(), in.end());
    for (Tensor& t : values)
      for (const Tensor& o : out)
        if (t.impl()->storage == o.impl()->storage) t = t.clone();
    std::vector<Tensor> results = dispatch(op, values, attrs, {});
    record(op, *autograd::find_backward(op.name), in, values, attrs, results);
    for (size_t i = 0; i < out.size(); ++i) {
      {
        NoGradGuard no_grad;
        out[i].copy_(results[i]);
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

struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, autograd::BackwardDef> defs;
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
  registry().defs[op] = BackwardDef{fn, save};
}

void register_nondifferentiable(const std::string& op) { register_backward(op, nullptr, kSaveNone); }

const BackwardDef* find_backward(const std::string& op) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().defs.find(op);
  return it == registry().defs.end() ? nullptr : &it->second;
}

}  // namespace autograd
}  // namespace kiln
