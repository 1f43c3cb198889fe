// Autograd: grad mode guards, the functional grad() and gradcheck. The
// recording itself is a dispatcher mode (src/autograd/mode.cpp): ops know
// nothing about it. Each op's backward formula is part of its declaration
// (OpDef::backward, kiln/dispatch.h), written with ordinary ops.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <functional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Scoped: no history is recorded inside (PyTorch's torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Scoped: grad mode set to `enabled` (PyTorch's torch::AutoGradMode).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~AutoGradMode() { set_grad_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {

// Accumulates the gradients of sum(tensors[i] * grad_tensors[i]) into the
// leaves' .grad in one pass (torch.autograd.backward); a missing or
// undefined grad_tensors[i] is 1 for a one-element tensor.
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              bool retain_graph = false);

// Gradients of sum(outputs[i] * grad_outputs[i]) with respect to inputs,
// returned instead of accumulated into .grad. An input the outputs do not
// depend on gets an undefined tensor when allow_unused, else an error.
// create_graph: the gradients carry history of their own (gradient
// penalties, Hessian-vector products), and the graph is retained.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false, bool create_graph = false);

// Makes `outputs` (computed outside the dispatcher, e.g. by a templated
// kernel) differentiable: backward(grads of outputs) must return one
// gradient per input (undefined where none). Capture saved values detached.
// materialize_grads = false (PyTorch's ctx.set_materialize_grads(False)):
// the gradient of an output no gradient flowed to arrives undefined instead
// of as zeros.
void record_function(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                     std::function<std::vector<Tensor>(const std::vector<Tensor>&)> backward,
                     bool materialize_grads = true);

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

// Compares analytical gradients of fn (float64 inputs that require grad)
// with central differences, for every output element and input element.
// Throws kiln::Error describing the first mismatch; returns true otherwise.
bool gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, GradcheckOptions options = {});

// gradcheck of the first-order gradients (of the outputs weighted by fixed
// random tensors) with respect to the inputs: second derivatives, through
// create_graph (PyTorch's gradgradcheck).
bool gradgradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                   const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace autograd
}  // namespace kiln

KILN_API_END
