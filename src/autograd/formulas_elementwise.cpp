// Backward formulas of the elementwise ops, written with ordinary ops.
// Each returns one gradient per input (undefined where none is needed);
// broadcasting is undone with sum_to.
#include <cmath>

#include "autograd/graph.h"
#include "kiln/ops.h"

namespace kiln::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Ctx = BackwardContext;

const Tensor& g0(const Ctx& c) { return c.grads[0]; }
const Tensor& x0(const Ctx& c) { return c.inputs[0]; }
const Tensor& y0(const Ctx& c) { return c.outputs[0]; }
Tensor to_input(const Ctx& c, size_t i, const Tensor& g) { return sum_to(g, c.input_meta[i].sizes); }

// A unary op's single input gradient.
Grads unary(const Ctx&, const Tensor& gx) { return {gx}; }

// maximum/minimum: the gradient goes to the larger (smaller) input, split
// evenly on ties; as in PyTorch an input loses it only by comparing smaller
// (larger), so a NaN on either side gives both inputs the gradient.
template <bool kMax>
Grads extremum_backward(const Ctx& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor zero = zeros_like(g0(c));
  const Tensor shared = where(eq(a, b), g0(c) * 0.5, g0(c));
  const Tensor a_loses = kMax ? lt(a, b) : gt(a, b), b_loses = kMax ? gt(a, b) : lt(a, b);
  return {to_input(c, 0, where(a_loses, zero, shared)), to_input(c, 1, where(b_loses, zero, shared))};
}

const struct Register {
  Register() {
    register_backward("neg", [](const Ctx& c) { return unary(c, neg(g0(c))); }, kSaveNone);
    register_backward("abs", [](const Ctx& c) { return unary(c, g0(c) * sign(x0(c))); }, kSaveInputs);
    register_backward("exp", [](const Ctx& c) { return unary(c, g0(c) * y0(c)); }, kSaveOutputs);
    register_backward("expm1", [](const Ctx& c) { return unary(c, g0(c) * (y0(c) + 1)); }, kSaveOutputs);
    register_backward("log", [](const Ctx& c) { return unary(c, g0(c) / x0(c)); }, kSaveInputs);
    register_backward("log1p", [](const Ctx& c) { return unary(c, g0(c) / (x0(c) + 1)); }, kSaveInputs);
    register_backward("sqrt", [](const Ctx& c) { return unary(c, g0(c) / (y0(c) * 2)); }, kSaveOutputs);
    register_backward("rsqrt", [](const Ctx& c) { return unary(c, g0(c) * y0(c) * y0(c) * y0(c) * -0.5); },
                      kSaveOutputs);
    register_backward("reciprocal", [](const Ctx& c) { return unary(c, -g0(c) * y0(c) * y0(c)); }, kSaveOutputs);
    register_backward("sin", [](const Ctx& c) { return unary(c, g0(c) * cos(x0(c))); }, kSaveInputs);
    register_backward("cos", [](const Ctx& c) { return unary(c, -g0(c) * sin(x0(c))); }, kSaveInputs);
    register_backward("tanh", [](const Ctx& c) { return unary(c, g0(c) * (1 - y0(c) * y0(c))); }, kSaveOutputs);
    register_backward("sigmoid", [](const Ctx& c) { return unary(c, g0(c) * y0(c) * (1 - y0(c))); }, kSaveOutputs);
    register_backward("relu", [](const Ctx& c) { return unary(c, threshold_backward(g0(c), y0(c), 0.0)); },
                      kSaveOutputs);
    register_backward("gelu", [](const Ctx& c) { return unary(c, gelu_backward(g0(c), x0(c), "none")); },
                      kSaveInputs);
    register_backward("gelu_tanh", [](const Ctx& c) { return unary(c, gelu_backward(g0(c), x0(c), "tanh")); },
                      kSaveInputs);
    // Their own gradients, for second derivatives (create_graph):
    // gelu_backward(a, x) = a gelu'(x) is linear in a; in x it is a gelu''(x),
    // with gelu''(x) = phi(x) (2 - x^2) for the erf form, and for the tanh
    // form (t = tanh(u), u = k (x + c x^3)) (1 - t^2) (u' + x (u'' - 2 t u'^2) / 2).
    register_backward("gelu_backward", [](const Ctx& c) -> Grads {
      const Tensor &a = c.inputs[0], &x = c.inputs[1];
      const Tensor pdf = exp(square(x) * -0.5) * 0.3989422804014327;
      return {to_input(c, 0, gelu_backward(g0(c), x, "none")), to_input(c, 1, g0(c) * a * pdf * (2.0 - square(x)))};
    }, kSaveInputs);
    register_backward("gelu_tanh_backward", [](const Ctx& c) -> Grads {
      const Tensor &a = c.inputs[0], &x = c.inputs[1];
      const double k = std::sqrt(2.0 / M_PI), cubic = 0.044715;
      const Tensor t = tanh((x + square(x) * x * cubic) * k);
      const Tensor du = (square(x) * (3 * cubic) + 1.0) * k, d2u = x * (6 * k * cubic);
      const Tensor second = (1.0 - square(t)) * (du + x * 0.5 * (d2u - t * square(du) * 2.0));
      return {to_input(c, 0, gelu_backward(g0(c), x, "tanh")), to_input(c, 1, g0(c) * a * second)};
    }, kSaveInputs);
    register_backward("silu", [](const Ctx& c) {
      const Tensor s = sigmoid(x0(c));
      return unary(c, g0(c) * s * (x0(c) * (1 - s) + 1));
    }, kSaveInputs);
    // The activations, as PyTorch's derivatives.yaml: at a kink the
    // gradient is the left side's (x > 0 and min < x < max strictly).
    register_backward("leaky_relu", [](const Ctx& c) {
      const Tensor& x = x0(c);
      return unary(c, where(gt(x, wrapped_scalar(0.0)), g0(c), g0(c) * c.attrs.get_double("negative_slope")));
    }, kSaveInputs);
    register_backward("elu", [](const Ctx& c) {
      const Tensor& x = x0(c);
      return unary(c, where(gt(x, wrapped_scalar(0.0)), g0(c), g0(c) * exp(x) * c.attrs.get_double("alpha")));
    }, kSaveInputs);
    register_backward("softplus", [](const Ctx& c) {
      const Tensor z = x0(c) * c.attrs.get_double("beta");
      return unary(c, where(gt(z, wrapped_scalar(c.attrs.get_double("threshold"))), g0(c), g0(c) * sigmoid(z)));
    }, kSaveInputs);
    register_backward("hardtanh", [](const Ctx& c) {
      const Tensor& x = x0(c);
      const Tensor inside = logical_and(gt(x, wrapped_scalar(c.attrs.get_double("min_val"))),
                                        lt(x, wrapped_scalar(c.attrs.get_double("max_val"))));
      return unary(c, g0(c) * inside.to(x.dtype()));
    }, kSaveInputs);
    register_backward("hardsigmoid", [](const Ctx& c) {
      const Tensor& x = x0(c);
      const Tensor inside = logical_and(gt(x, wrapped_scalar(-3.0)), lt(x, wrapped_scalar(3.0)));
      return unary(c, g0(c) * inside.to(x.dtype()) / 6.0);
    }, kSaveInputs);
    register_backward("hardswish", [](const Ctx& c) {
      const Tensor& x = x0(c);
      const Tensor middle = where(le(x, wrapped_scalar(3.0)), g0(c) * (x / 3.0 + 0.5), g0(c));
      return unary(c, where(lt(x, wrapped_scalar(-3.0)), zeros_like(g0(c)), middle));
    }, kSaveInputs);
    register_backward("mish", [](const Ctx& c) {
      const Tensor& x = x0(c);
      const Tensor t = tanh(softplus(x));
      return unary(c, g0(c) * (t + x * (1 - t * t) * sigmoid(x)));
    }, kSaveInputs);
    register_backward("erf", [](const Ctx& c) {
      return unary(c, g0(c) * exp(-(x0(c) * x0(c))) * (2 / std::sqrt(M_PI)));
    }, kSaveInputs);
    for (const char* flat : {"sign", "floor", "ceil", "round"})
      register_backward(flat, [](const Ctx& c) { return unary(c, zeros_like(g0(c))); }, kSaveNone);
    register_backward("square", [](const Ctx& c) { return unary(c, g0(c) * x0(c) * 2); }, kSaveInputs);
    register_backward("clamp", [](const Ctx& c) {
      const Tensor& x = x0(c);
      const Tensor inside = logical_and(ge(x, wrapped_scalar(c.attrs.get_double("min"))),
                                        le(x, wrapped_scalar(c.attrs.get_double("max"))));
      return unary(c, g0(c) * inside.to(x.dtype()));
    }, kSaveInputs);

    register_backward("add", [](const Ctx& c) -> Grads {
      return {to_input(c, 0, g0(c)), to_input(c, 1, g0(c) * c.attrs.get_double("alpha"))};
    }, kSaveNone);
    register_backward("sub", [](const Ctx& c) -> Grads {
      return {to_input(c, 0, g0(c)), to_input(c, 1, g0(c) * -c.attrs.get_double("alpha"))};
    }, kSaveNone);
    register_backward("mul", [](const Ctx& c) -> Grads {
      return {c.needs_input_grad[0] ? to_input(c, 0, g0(c) * c.inputs[1]) : Tensor(),
              c.needs_input_grad[1] ? to_input(c, 1, g0(c) * c.inputs[0]) : Tensor()};
    }, kSaveInputs);
    register_backward("div", [](const Ctx& c) -> Grads {
      const Tensor& a = c.inputs[0];
      const Tensor& b = c.inputs[1];
      return {c.needs_input_grad[0] ? to_input(c, 0, g0(c) / b) : Tensor(),
              c.needs_input_grad[1] ? to_input(c, 1, -g0(c) * a / (b * b)) : Tensor()};
    }, kSaveInputs);
    register_backward("pow", [](const Ctx& c) -> Grads {
      const Tensor& a = c.inputs[0];
      const Tensor& b = c.inputs[1];
      Tensor ga, gb;
      if (c.needs_input_grad[0]) {
        // b * a^(b-1), with 0 where b == 0 (PyTorch's convention at a == 0).
        const Tensor d = where(eq(b, wrapped_scalar(0)), zeros_like(a * b), b * pow(a, b - 1));
        ga = to_input(c, 0, g0(c) * d);
      }
      if (c.needs_input_grad[1]) {
        const Tensor la = where(logical_and(eq(a, wrapped_scalar(0)), ge(b, wrapped_scalar(0))), zeros_like(a * b),
                                c.outputs[0] * log(a));
        gb = to_input(c, 1, g0(c) * la);
      }
      return {ga, gb};
    }, kSaveBoth);
    register_backward("maximum", extremum_backward<true>, kSaveInputs);
    register_backward("minimum", extremum_backward<false>, kSaveInputs);
    register_backward("fmod", [](const Ctx& c) -> Grads {
      const Tensor q = (c.inputs[0] - c.outputs[0]) / c.inputs[1];  // trunc(a / b), exactly
      return {to_input(c, 0, g0(c)), to_input(c, 1, -g0(c) * q)};
    }, kSaveBoth);
    register_backward("where", [](const Ctx& c) -> Grads {
      const Tensor& cond = c.inputs[0];
      const Tensor z = zeros_like(g0(c));
      return {Tensor(), to_input(c, 1, where(cond, g0(c), z)), to_input(c, 2, where(cond, z, g0(c)))};
    }, kSaveInputs);
    register_backward("_to_copy", [](const Ctx& c) -> Grads {
      // Back to the input's dtype and device.
      return {g0(c).to(*c.input_meta[0].device, c.input_meta[0].dtype)};
    },
                      kSaveNone);
    for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                             "logical_not", "full", "arange", "linspace", "eye", "rand", "randint", "multinomial",
                             "one_hot", "all", "any", "detach"})
      register_nondifferentiable(name);
  }
} register_formulas;

}  // namespace
}  // namespace kiln::autograd
