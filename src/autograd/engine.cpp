// The backward pass: walks the graph from the roots in dependency order,
// summing the gradients that reach each node, and accumulates into leaves.
// Also the Tensor methods of autograd and autograd::grad.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/graph.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln {
namespace autograd {
namespace {

// Tensor without history sharing t's storage and version counter.
Tensor alias_without_history(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->autograd.reset();
  impl->wrapped_number = false;
  return Tensor(std::move(impl));
}

// Accumulates into a leaf's .grad (after the leaf's hooks), or into a
// capture slot when autograd::grad asked for that leaf.
struct AccumulateGrad final : Node {
  std::weak_ptr<TensorImpl> leaf;
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    auto impl = leaf.lock();
    if (!impl) return {};
    Tensor g = std::move(grads[0]);
    AutogradMeta& m = *impl->autograd;
    for (auto& hook : m.hooks) {
      Tensor r = hook(g);
      if (r.defined()) g = r;
    }
    if (!m.grad.defined()) {
      // As PyTorch: a gradient nothing else holds (no other tensor or view
      // shares its memory; it may itself be a view of a dead temporary, as
      // a transpose's gradient is) becomes .grad itself instead of a copy.
      const bool sole = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 && g.is_contiguous() &&
                        !g.requires_grad() && g.sizes() == impl->sizes;
      m.grad = sole ? g : g.clone();
    }
    else m.grad.add_(g);
    for (auto& hook : m.post_accumulate_hooks) hook(Tensor(impl));
    return {};
  }
};

// The graph-walking core: grads flow from (root node, output_nr) pairs. When
// `capture` is non-empty, gradients arriving at those edges are stored there
// instead of being passed on (autograd::grad), and leaves are left alone.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph,
                  const std::vector<Edge>* capture, std::vector<Tensor>* captured, bool create_graph = false) {
  // With create_graph the formulas' ops are recorded: the gradients get
  // history of their own (saved values are unpacked with theirs, OpNode).
  const AutoGradMode grad_mode(create_graph);
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> stack, all;
  std::unordered_set<Node*> seen;

  auto add_grad = [&](Node* n, uint32_t slot, const Tensor& g) {
    auto& buf = buffers[n];
    if (buf.size() < n->output_meta.size()) buf.resize(std::max<size_t>(n->output_meta.size(), 1));
    if (buf.size() <= slot) buf.resize(slot + 1);
    buf[slot] = buf[slot].defined() ? add(buf[slot], g) : g;
  };

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    check(r.requires_grad(), "backward", "element ", i, " of tensors does not require grad and does not have a grad_fn");
    std::shared_ptr<Node> fn = r.impl()->autograd->grad_fn ? r.impl()->autograd->grad_fn : grad_accumulator(r);
    if (seen.insert(fn.get()).second) stack.push_back(fn), all.push_back(fn);
  }
  // Count, for every reachable node, how many edges point at it.
  for (size_t i = 0; i < all.size(); ++i)
    for (const Edge& e : all[i]->next_edges) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) all.push_back(e.fn);
    }
  for (size_t i = 0; i < roots.size(); ++i) {
    const AutogradMeta& m = *roots[i].impl()->autograd;
    Node* fn = m.grad_fn ? m.grad_fn.get() : grad_accumulator(roots[i]).get();
    add_grad(fn, m.grad_fn ? m.output_nr : 0, root_grads[i]);
  }
  std::vector<std::shared_ptr<Node>> ready;
  for (auto& n : stack)
    if (deps[n.get()] == 0) ready.push_back(n);
  while (!ready.empty()) {
    std::shared_ptr<Node> n = ready.back();
    ready.pop_back();
    std::vector<Tensor> grads = std::move(buffers[n.get()]);
    buffers.erase(n.get());
    grads.resize(std::max<size_t>(n->output_meta.size(), grads.size()));
    // Note [Gradients that do not flow]
    // A node reached only through edges that carried no gradient (an input
    // of a compiled graph that only dead code read, an output nothing
    // differentiable came from) is skipped as PyTorch skips it: its inputs
    // get no gradient (a leaf's .grad stays undefined, autograd::grad with
    // allow_unused gives an undefined tensor) rather than zeros.
    const bool reached = std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!reached) break;
      if (!grads[i].defined() && i < n->output_meta.size() && n->materialize_grads) {
        const auto& m = n->output_meta[i];
        const TensorOptions options = TensorOptions(m.dtype).device(m.device);
        // An integer output (max_pool's indices) never has a gradient to
        // read: one zero broadcast to its shape stands for it, not a buffer
        // of zeros (5 MB a step in the Fashion-MNIST CNN).
        grads[i] = is_floating(m.dtype) ? zeros(m.sizes, options) : zeros({}, options).expand(m.sizes);
      }
      if (!grads[i].defined()) continue;
      if (i < n->output_hooks.size())
        for (auto& hook : n->output_hooks[i]) {
          Tensor r = hook(grads[i]);
          if (r.defined()) grads[i] = r;
        }
    }
    const bool is_leaf_node = n->next_edges.empty() && n->name() == "AccumulateGrad";
    if (is_leaf_node && capture) continue;
    std::vector<Tensor> gin = reached ? n->apply(std::move(grads)) : std::vector<Tensor>(n->next_edges.size());
    if (!retain_graph) n->release_saved();
    for (size_t k = 0; k < n->next_edges.size() && k < gin.size(); ++k) {
      const Edge& e = n->next_edges[k];
      if (!e.fn) continue;
      bool captured_here = false;
      if (capture)
        for (size_t c = 0; c < capture->size(); ++c)
          if ((*capture)[c].fn == e.fn && (*capture)[c].input_nr == e.input_nr && gin[k].defined()) {
            (*captured)[c] = (*captured)[c].defined() ? add((*captured)[c], gin[k]) : gin[k];
            captured_here = true;
          }
      if (gin[k].defined() && !captured_here) add_grad(e.fn.get(), e.input_nr, gin[k]);
      if (--deps[e.fn.get()] == 0) ready.push_back(e.fn);
    }
  }
}

std::vector<Tensor> default_root_grads(const std::vector<Tensor>& roots, const std::vector<Tensor>& given) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (i < given.size() && given[i].defined()) {
      check(given[i].sizes() == roots[i].sizes(), "backward", "gradient has shape ", shape_text(given[i].sizes()),
            " but the output has shape ", shape_text(roots[i].sizes()));
      out.push_back(given[i].to(roots[i].dtype()));
    } else {
      check(roots[i].numel() == 1, "backward", "grad can be implicitly created only for outputs with one element, ",
            "but the output has shape ", shape_text(roots[i].sizes()));
      out.push_back(ones_like(roots[i]));
    }
  }
  return out;
}

// The node of record_function: a user backward over captured state.
// Note [Backwards that run outside autograd]
// A record_function backward (a kernel's, a compiled graph's) computes its
// gradients without recording them. Under create_graph those gradients would
// look constant, and a gradient penalty built on them would silently lose
// its second-order terms. As PyTorch's once_differentiable functions do,
// they get a node that raises when a second backward reaches it.
struct NotDifferentiableTwice final : Node {
  std::string fn_name;
  std::string name() const override { return fn_name + "_backward_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>) override {
    fail("backward", "the backward of '", fn_name, "' computes its gradients outside autograd (a kernel or a ",
         "compiled graph), so they cannot be differentiated again (create_graph=true); compute this part's ",
         "higher-order gradients eagerly, with differentiable ops");
  }
};

struct FunctionNode final : Node {
  std::string fn_name;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> backward;
  std::vector<bool> needs_grad;
  std::string name() const override { return fn_name + "_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    check(static_cast<bool>(backward), "backward", "trying to backward through ", fn_name,
          " a second time; specify retain_graph=true on the first backward");
    std::vector<Tensor> gin = backward(grads);
    check(gin.size() == needs_grad.size(), "backward", fn_name, " returned ", gin.size(), " gradients for ",
          needs_grad.size(), " inputs");
    std::vector<Tensor> res;
    for (size_t i = 0; i < gin.size(); ++i)
      if (needs_grad[i]) res.push_back(gin[i]);
    if (is_grad_enabled()) guard_second_backward(res);
    return res;
  }

 private:
  // Under create_graph: gradients without history get a node that raises
  // (Note [Backwards that run outside autograd]).
  void guard_second_backward(std::vector<Tensor>& res) const {
    std::shared_ptr<NotDifferentiableTwice> guard;
    for (Tensor& g : res) {
      if (!g.defined() || !is_floating(g.dtype()) || g.requires_grad()) continue;
      if (!guard) {
        guard = std::make_shared<NotDifferentiableTwice>();
        guard->fn_name = fn_name;
        guard->next_edges = next_edges;
      }
      const auto nr = static_cast<uint32_t>(guard->output_meta.size());
      guard->output_meta.emplace_back(g.sizes(), g.dtype(), Shape{}, 0, g.device());
      guard->output_hooks.emplace_back();
      g = alias_with_history(g, guard, nr);
    }
  }
  void release_saved() override { backward = nullptr; }
};

}  // namespace

void record_function(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                     std::function<std::vector<Tensor>(const std::vector<Tensor>&)> backward, bool materialize_grads) {
  if (!is_grad_enabled()) return;
  bool any = false;
  for (const Tensor& t : inputs) any = any || t.requires_grad();
  if (!any) return;
  auto node = std::make_shared<FunctionNode>();
  node->fn_name = name;
  node->backward = std::move(backward);
  node->materialize_grads = materialize_grads;
  for (const Tensor& t : inputs) {
    const bool g = t.requires_grad();
    node->needs_grad.push_back(g);
    if (!g) continue;
    const AutogradMeta& m = *t.impl()->autograd;
    node->next_edges.push_back(m.grad_fn ? Edge{m.grad_fn, m.output_nr} : Edge{grad_accumulator(t), 0});
  }
  node->output_hooks.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    node->output_meta.emplace_back(outputs[i].sizes(), outputs[i].dtype(), Shape{}, 0, outputs[i].device());
    if (!is_floating(outputs[i].dtype())) continue;
    AutogradMeta& m = meta(outputs[i]);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(i);
  }
}

Tensor SavedTensor::unpack(const std::string& op) const {
  if (!tensor.defined()) return tensor;
  check(tensor.version() == version, "backward",
        "one of the variables needed for gradient computation has been modified by an inplace operation: [",
        tensor.dtype(), " ", shape_text(tensor.sizes()), "] is at version ", tensor.version(), "; expected version ",
        version, " instead (saved by ", op, ")");
  return tensor;
}

SavedTensor save(const Tensor& t, bool keep_history) {
  if (!keep_history || !t.requires_grad()) return SavedTensor{alias_without_history(t), t.version()};
  // A leaf is kept itself (its history is never rebased: in-place ops on it
  // are refused under grad mode); a non-leaf as an alias holding the
  // history it has now, which a later in-place op on t does not change.
  if (t.is_leaf()) return SavedTensor{t, t.version()};
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->autograd = std::make_shared<AutogradMeta>();
  impl->autograd->requires_grad = true;
  impl->autograd->grad_fn = t.impl()->autograd->grad_fn;
  impl->autograd->output_nr = t.impl()->autograd->output_nr;
  impl->wrapped_number = false;
  return SavedTensor{Tensor(std::move(impl)), t.version()};
}

AutogradMeta& meta(const Tensor& t) {
  if (!t.impl()->autograd) t.impl()->autograd = std::make_shared<AutogradMeta>();
  return *t.impl()->autograd;
}

Tensor alias_with_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr) {
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->autograd = std::make_shared<AutogradMeta>();
  impl->autograd->requires_grad = true;
  impl->autograd->grad_fn = std::move(fn);
  impl->autograd->output_nr = output_nr;
  return Tensor(std::move(impl));
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = meta(leaf);
  if (!m.accumulator) {
    auto acc = std::make_shared<AccumulateGrad>();
    acc->leaf = leaf.impl_ptr();
    acc->output_meta.emplace_back(leaf.sizes(), leaf.dtype(), Shape{}, 0, leaf.device());
    m.accumulator = acc;
  }
  return m.accumulator;
}

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors, bool retain_graph) {
  run_backward(tensors, default_root_grads(tensors, grad_tensors), retain_graph, nullptr, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused,
                         bool create_graph) {
  // Inside kiln::compile, traced outputs are computed first (a graph break).
  for (const Tensor& out : outputs) detail::on_concrete_value(out.impl(), "autograd::grad", SourceLocation());
  std::vector<Edge> capture;
  for (const Tensor& in : inputs) {
    check(in.requires_grad(), "grad", "one of the inputs does not require grad");
    const AutogradMeta& m = *in.impl()->autograd;
    capture.push_back(m.grad_fn ? Edge{m.grad_fn, m.output_nr} : Edge{grad_accumulator(in), 0});
  }
  std::vector<Tensor> captured(inputs.size());
  run_backward(outputs, default_root_grads(outputs, grad_outputs), retain_graph || create_graph, &capture, &captured,
               create_graph);
  for (size_t i = 0; i < captured.size(); ++i)
    check(allow_unused || captured[i].defined(), "grad",
          "one of the differentiated tensors appears to not have been used in the graph; set allow_unused=true");
  return captured;
}

}  // namespace autograd

// ---- Tensor methods

bool Tensor::requires_grad() const { return impl()->autograd && impl()->autograd->requires_grad; }

const Tensor& Tensor::requires_grad_(bool r) const {
  check(!r || is_floating(dtype()), "requires_grad_", "only floating point tensors can require gradients, got ",
        dtype());
  check(is_leaf() || r, "requires_grad_", "you can only change requires_grad flags of leaf variables");
  autograd::meta(*this).requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return impl()->autograd ? impl()->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) const { autograd::meta(*this).grad = g; }

bool Tensor::is_leaf() const { return !impl()->autograd || !impl()->autograd->grad_fn; }

std::string Tensor::grad_fn_name() const { return is_leaf() ? "" : impl()->autograd->grad_fn->name(); }

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  if (detail::traced_backward_hook) [[unlikely]] {
    if (!create_graph && detail::traced_backward_hook(*this, gradient)) return;
    detail::on_concrete_value(impl(), "backward()", SourceLocation());  // computes the graph first
  }
  autograd::run_backward({*this}, autograd::default_root_grads({*this}, {gradient}), retain_graph || create_graph,
                         nullptr, nullptr, create_graph);
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  check(requires_grad(), "register_hook", "cannot register a hook on a tensor that doesn't require gradient");
  AutogradMeta& m = *impl()->autograd;
  if (!m.grad_fn) {
    m.hooks.push_back(std::move(hook));
    return;
  }
  auto& hooks = m.grad_fn->output_hooks;
  if (hooks.size() <= m.output_nr) hooks.resize(m.output_nr + 1);
  hooks[m.output_nr].push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  check(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook",
        "expects a leaf tensor that requires grad (a parameter); got ", requires_grad() ? "a non-leaf" : "one that does not require grad");
  autograd::meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace kiln
