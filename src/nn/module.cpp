// Module bookkeeping: the registry of parameters, buffers and children,
// dotted names, state_dict round trips and dtype conversion.
#include <algorithm>
#include <set>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/autograd_function.h"
#include "kiln/nn.h"

namespace kiln::nn {

// Calls f(dotted name, Tensor* slot, bool is_parameter, bool persistent)
// for every tensor.
template <class F>
void Module::visit(const std::string& prefix, F&& f) const {
  for (const auto& [n, p] : params_)
    if (p->defined()) f(prefix + n, p, true, true);
  for (const auto& [n, b] : buffers_)
    if (b->defined())
      f(prefix + n, b, false, std::find(non_persistent_.begin(), non_persistent_.end(), b) == non_persistent_.end());
  for (const auto& [n, c] : children_) c->visit(prefix + n + ".", f);
}

void Module::register_parameter(const std::string& name, Tensor* slot, bool requires_grad) {
  if (slot->defined() && requires_grad) slot->requires_grad_(true);
  params_.emplace_back(name, slot);
}
void Module::register_buffer(const std::string& name, Tensor* slot, bool persistent) {
  buffers_.emplace_back(name, slot);
  if (!persistent) non_persistent_.push_back(slot);
}
void Module::register_module(const std::string& name, Module* child) { children_.emplace_back(name, child); }

void Module::replace_module(const std::string& name, Module* child) {
  for (auto& [n, c] : children_)
    if (n == name) {
      c = child;
      return;
    }
  fail("Module", "no child module named '", name, "' to replace");
}

StateDict select_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : state)
    if (k.rfind(prefix, 0) == 0) out.emplace(k.substr(prefix.size()), v);
  return out;
}

StateDict add_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : state) out.emplace(prefix + k, v);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const auto& [n, c] : children_)
    for (auto& [sub, m] : c->named_modules()) out.emplace_back(sub.empty() ? n : n + "." + sub, m);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [n, c] : children_) c->apply(fn);
  fn(*this);
  return *this;
}

Tensor UnaryModule::operator()(const Tensor& x) {
  if (pre_hooks_.empty() && hooks_.empty() && backward_hooks_.empty() && backward_pre_hooks_.empty())
    return forward(x);
  Tensor input = x;
  for (const auto& [id, hook] : std::map<int64_t, ForwardPreHook>(pre_hooks_))  // a hook may remove hooks
    if (Tensor replaced = hook(*this, input); replaced.defined()) input = replaced;
  Tensor output = call_with_backward_hooks(input);
  for (const auto& [id, hook] : std::map<int64_t, ForwardHook>(hooks_))
    if (Tensor replaced = hook(*this, input, output); replaced.defined()) output = replaced;
  return output;
}

namespace {

// What the two identity nodes of one call share: the hooks as they were at
// the call, and the output's gradient once the backward pass reaches it.
struct BackwardHookState {
  Module* module;
  std::map<int64_t, UnaryModule::BackwardPreHook> pre_hooks;
  std::map<int64_t, UnaryModule::BackwardHook> hooks;
  bool input_needs_grad = false;
  Tensor grad_output;

  Tensor run_hooks(Tensor grad_input) const {
    for (const auto& [id, hook] : hooks)
      if (Tensor replaced = hook(*module, grad_input, grad_output); replaced.defined()) grad_input = replaced;
    return grad_input;
  }
};

std::shared_ptr<BackwardHookState> state_of(autograd::AutogradContext* ctx) {
  return std::any_cast<std::shared_ptr<BackwardHookState>>(ctx->saved_data.at("state"));
}

// Around the output: its gradient passes the pre-hooks and is kept for the
// hooks; when the input needs no gradient, the hooks run here (with an
// undefined grad_input), as PyTorch runs them.
struct OutputHookNode : autograd::Function<OutputHookNode> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& y, std::shared_ptr<BackwardHookState> st) {
    ctx->saved_data["state"] = std::move(st);
    return y.detach();
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    const auto st = state_of(ctx);
    Tensor g = grads[0];
    for (const auto& [id, hook] : st->pre_hooks)
      if (Tensor replaced = hook(*st->module, g); replaced.defined()) g = replaced;
    st->grad_output = g;
    if (!st->input_needs_grad) st->run_hooks(Tensor());
    return {g};
  }
};

// Around the input: the gradient reaching it is grad_input.
struct InputHookNode : autograd::Function<InputHookNode> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, std::shared_ptr<BackwardHookState> st) {
    ctx->saved_data["state"] = std::move(st);
    return x.detach();
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    return {state_of(ctx)->run_hooks(grads[0])};
  }
};

}  // namespace

Tensor UnaryModule::call_with_backward_hooks(const Tensor& input) {
  if ((backward_hooks_.empty() && backward_pre_hooks_.empty()) || !is_grad_enabled()) return forward(input);
  auto st = std::make_shared<BackwardHookState>(
      BackwardHookState{this, backward_pre_hooks_, backward_hooks_, input.requires_grad(), Tensor()});
  const Tensor x = st->input_needs_grad ? InputHookNode::apply(input, st) : input;
  const Tensor y = forward(x);
  return y.requires_grad() ? OutputHookNode::apply(y, st) : y;
}

RemovableHandle UnaryModule::register_full_backward_pre_hook(BackwardPreHook hook) {
  const int64_t id = next_hook_++;
  backward_pre_hooks_.emplace(id, std::move(hook));
  return RemovableHandle([this, id] { backward_pre_hooks_.erase(id); });
}

RemovableHandle UnaryModule::register_full_backward_hook(BackwardHook hook) {
  const int64_t id = next_hook_++;
  backward_hooks_.emplace(id, std::move(hook));
  return RemovableHandle([this, id] { backward_hooks_.erase(id); });
}

RemovableHandle UnaryModule::register_forward_pre_hook(ForwardPreHook hook) {
  const int64_t id = next_hook_++;
  pre_hooks_.emplace(id, std::move(hook));
  return RemovableHandle([this, id] { pre_hooks_.erase(id); });
}

RemovableHandle UnaryModule::register_forward_hook(ForwardHook hook) {
  const int64_t id = next_hook_++;
  hooks_.emplace(id, std::move(hook));
  return RemovableHandle([this, id] { hooks_.erase(id); });
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<TensorImpl*> seen;  // a tied weight is listed once
  visit("", [&](const std::string& n, Tensor* t, bool is_param, bool) {
    if (is_param && seen.insert(t->impl()).second) out.emplace_back(n, *t);
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit("", [&](const std::string& n, Tensor* t, bool is_param, bool) {
    if (!is_param) out.emplace_back(n, *t);
  });
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

StateDict Module::state_dict() const {
  StateDict out;
  std::set<TensorImpl*> seen;
  visit("", [&](const std::string& n, Tensor* t, bool, bool persistent) {
    if (persistent && seen.insert(t->impl()).second) out.emplace(n, t->detach());
  });
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  NoGradGuard no_grad;
  std::set<std::string> used;
  std::vector<std::string> missing, mismatched;
  std::set<TensorImpl*> seen;
  visit("", [&](const std::string& n, Tensor* t, bool, bool persistent) {
    if (!persistent) return;
    if (!seen.insert(t->impl()).second) {
      used.insert(n);  // tied: loaded through its first name
      return;
    }
    auto it = state.find(n);
    if (it == state.end()) {
      missing.push_back(n);
      return;
    }
    used.insert(n);
    if (it->second.sizes() != t->sizes()) {
      mismatched.push_back(n + " (checkpoint " + shape_str(it->second.sizes()) + ", model " + shape_str(t->sizes()) + ")");
      return;
    }
    t->copy_(it->second);
  });
  std::vector<std::string> unexpected;
  for (const auto& [k, v] : state)
    if (!used.count(k)) unexpected.push_back(k);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  check(mismatched.empty(), "load_state_dict", "size mismatch for ", join(mismatched));
  if (strict) {
    check(missing.empty(), "load_state_dict", "missing keys: ", join(missing));
    check(unexpected.empty(), "load_state_dict", "unexpected keys: ", join(unexpected));
  }
}

// Note [Converting in place]
// As PyTorch's `param.data = fn(param.data)`: the TensorImpl that every
// handle on a parameter shares (the module's, an optimizer's, a tied
// slot's) takes the converted data, so an optimizer built before the call
// goes on updating the module's tensors. Its autograd state (requires_grad,
// the gradient, converted too) stays. A view taken before keeps the old
// memory, as in PyTorch.
void Module::replace_tensors(const std::function<bool(const Tensor&)>& applies,
                             const std::function<Tensor(const Tensor&)>& make) {
  NoGradGuard no_grad;
  std::set<TensorImpl*> converted;  // tied tensors once
  visit("", [&](const std::string&, Tensor* t, bool, bool) {
    if (!t->defined() || converted.count(t->impl()) || !applies(*t)) return;
    converted.insert(t->impl());
    const Tensor c = make(*t);
    const Tensor grad = t->grad();
    TensorImpl& impl = *t->impl();
    const TensorImpl& from = *c.impl();
    impl.storage = from.storage;
    impl.sizes = from.sizes;
    impl.strides = from.strides;
    impl.storage_offset = from.storage_offset;
    impl.dtype = from.dtype;
    impl.device = from.device;
    impl.version->fetch_add(1);  // its values changed in place
    if (grad.defined()) t->set_grad(make(grad));
  });
}

void Module::to(DType dtype) {
  replace_tensors([](const Tensor& t) { return is_floating(t.dtype()); },
                  [dtype](const Tensor& t) { return t.to(dtype).clone(); });
}

void Module::to(Device device) {
  replace_tensors([device](const Tensor& t) { return t.device() != device; },
                  [device](const Tensor& t) { return t.to(device); });
}

void Module::to(MemoryFormat format) {
  const int64_t rank = format == MemoryFormat::ChannelsLast ? 4 : format == MemoryFormat::ChannelsLast3d ? 5 : -1;
  // Restrided exactly (not contiguous(format), which keeps a one-channel
  // weight that is dense in both formats as it is): its strides then say
  // channels-last to suggest_memory_format.
  replace_tensors([format, rank](const Tensor& t) { return (rank < 0 || t.dim() == rank) && t.suggest_memory_format() != format; },
                  [format](const Tensor& t) {
                    Tensor c = empty(t.sizes(), t.options(), format);
                    c.copy_(t);
                    return c;
                  });
}

void Module::to_empty(Device device) {
  replace_tensors([](const Tensor&) { return true; },
                  [device](const Tensor& t) { return empty(t.sizes(), TensorOptions(t.dtype()).device(device)); });
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.set_grad(Tensor());
}

}  // namespace kiln::nn
