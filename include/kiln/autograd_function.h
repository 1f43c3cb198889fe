// autograd::Function<T>: custom differentiable ops as classes, as PyTorch's
// torch::autograd::Function. T has
//   static Tensor (or std::vector<Tensor>) forward(AutogradContext* ctx, Args...);
//   static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> grad_outputs);
// and is called as T::apply(args...). forward runs without recording
// history; backward returns one gradient per Tensor argument of forward, in
// order (undefined where none). A gradient of an output that nothing reached
// arrives as zeros. Inside kiln::compile the call is a graph break: the
// traced inputs are computed first, and the node is recorded on real
// tensors (its backward is user C++, which a graph cannot hold).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <any>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/tensor.h"

namespace kiln::autograd {

class AutogradContext {
 public:
  // Tensors backward needs; a later in-place change to one is reported
  // when backward reads it.
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> get_saved_variables() const;
  // Inputs forward modified in place (and returns): their history becomes
  // this function's.
  void mark_dirty(std::vector<Tensor> tensors) { dirty_ = std::move(tensors); }
  // Outputs that get no gradient (indices, masks).
  void mark_non_differentiable(std::vector<Tensor> tensors) { non_differentiable_ = std::move(tensors); }
  // Whether the Tensor argument i of forward needs a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  // Anything else backward needs (numbers, options).
  std::map<std::string, std::any> saved_data;

 private:
  template <class T>
  friend struct Function;
  friend struct FunctionRecorder;
  struct Saved;
  std::vector<std::shared_ptr<Saved>> saved_;
  std::vector<Tensor> dirty_, non_differentiable_;
  std::vector<bool> needs_input_grad_;
};

// The untemplated part of Function<T>::apply (src/autograd/function.cpp).
struct FunctionRecorder {
  using Backward = std::vector<Tensor> (*)(AutogradContext*, std::vector<Tensor>);
  // Before forward: computes traced inputs (a graph break inside
  // kiln::compile) and notes which inputs need a gradient.
  static void before(AutogradContext& ctx, const std::vector<Tensor>& inputs);
  // After forward: records the node that calls backward.
  static void after(const std::shared_ptr<AutogradContext>& ctx, const std::string& name,
                    const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, Backward backward);
};

template <class T>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    std::vector<Tensor> inputs;
    (collect(inputs, args), ...);
    auto ctx = std::make_shared<AutogradContext>();
    FunctionRecorder::before(*ctx, inputs);
    auto result = [&] {
      NoGradGuard no_grad;
      return T::forward(ctx.get(), std::forward<Args>(args)...);
    }();
    if constexpr (std::is_same_v<decltype(result), Tensor>) {
      FunctionRecorder::after(ctx, typeid(T).name(), inputs, {result}, &T::backward);
    } else {
      FunctionRecorder::after(ctx, typeid(T).name(), inputs, result, &T::backward);
    }
    return result;
  }

 private:
  static void collect(std::vector<Tensor>& out, const Tensor& t) { out.push_back(t); }
  static void collect(std::vector<Tensor>& out, const std::vector<Tensor>& ts) { out.insert(out.end(), ts.begin(), ts.end()); }
  template <class X>
  static void collect(std::vector<Tensor>&, const X&) {}
};

}  // namespace kiln::autograd

KILN_API_END
