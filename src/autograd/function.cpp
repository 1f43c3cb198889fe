// autograd::Function<T>'s recording: a FunctionNode (record_function) whose
// backward calls T::backward with the context forward filled.
#include "kiln/autograd_function.h"

#include <algorithm>

#include "autograd/graph.h"
#include "kiln/error.h"

namespace kiln::autograd {

struct AutogradContext::Saved {
  SavedTensor tensor;
};

void AutogradContext::save_for_backward(std::vector<Tensor> tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) {
    // A tensor forward traced (inside kiln::compile) gets its value first.
    if (t.defined()) kiln::detail::on_concrete_value(t.impl(), "save_for_backward", SourceLocation());
    saved_.push_back(std::make_shared<Saved>(Saved{t.defined() ? save(t) : SavedTensor{}}));
  }
}

std::vector<Tensor> AutogradContext::get_saved_variables() const {
  std::vector<Tensor> out;
  for (const auto& s : saved_) out.push_back(s->tensor.unpack("autograd::Function"));
  return out;
}

void FunctionRecorder::before(AutogradContext& ctx, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) {
    if (t.defined()) kiln::detail::on_concrete_value(t.impl(), "autograd::Function", SourceLocation());
    ctx.needs_input_grad_.push_back(is_grad_enabled() && t.defined() && t.requires_grad());
  }
}

void FunctionRecorder::after(const std::shared_ptr<AutogradContext>& ctx, const std::string& name,
                             const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, Backward backward) {
  auto listed = [](const std::vector<Tensor>& list, const Tensor& t) {
    return std::any_of(list.begin(), list.end(), [&](const Tensor& x) { return x.is_same(t); });
  };
  for (const Tensor& d : ctx->dirty_)
    check(!(is_grad_enabled() && d.requires_grad() && d.is_leaf()), name.c_str(),
          "a leaf tensor that requires grad was modified in place by forward (mark_dirty)");
  // Outputs forward returned that are inputs (not marked dirty) are views
  // of them in PyTorch's terms: they keep the input's history.
  std::vector<Tensor> differentiable;
  for (const Tensor& o : outputs) {
    if (!o.defined()) continue;
    kiln::detail::on_concrete_value(o.impl(), "autograd::Function", SourceLocation());
    if (listed(ctx->non_differentiable_, o) || !is_floating(o.dtype())) continue;
    if (listed(inputs, o) && !listed(ctx->dirty_, o)) continue;
    differentiable.push_back(o);
  }
  const size_t n_inputs = inputs.size();
  record_function(name, inputs, differentiable,
                  [ctx, backward, n_inputs, name](const std::vector<Tensor>& grads) {
                    std::vector<Tensor> g = backward(ctx.get(), grads);
                    check(g.size() == n_inputs, name.c_str(), "backward returned ", g.size(),
                          " gradients; forward took ", n_inputs, " tensors");
                    return g;
                  });
}

}  // namespace kiln::autograd
