// Front ends of the elementwise ops: type promotion (PyTorch's result_type),
// broadcasting checks, then one dispatch. Kernels: kernels/cpu/elementwise_kernels.cpp.
#include <cmath>
#include <limits>

#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using ops::call;
using ops::call_out;
using Grads = std::vector<Tensor>;
using autograd::BackwardContext;

OpDef unary_def(const char* name) {
  return OpDef{name, std::string(name) + "(Tensor self) -> Tensor", OpKind::Compute, ops::pointwise_like_first};
}
OpDef binary_def(const char* name, ShapeFn shape = ops::broadcast_all) {
  return OpDef{name, std::string(name) + "(Tensor self, Tensor other) -> Tensor", OpKind::Compute, shape};
}

// Backward formulas of the ops declared here, written with ordinary ops as
// PyTorch's derivatives.yaml: one gradient per input (undefined where none
// is needed), broadcasting undone with sum_to.
using autograd::kNotDifferentiable;
using autograd::kSaveBoth;
using autograd::kSaveInputs;
using autograd::kSaveNone;
using autograd::kSaveOutputs;
using ops::with_backward;
using Ctx = BackwardContext;

const Tensor& g0(const Ctx& c) { return c.grads[0]; }
const Tensor& x0(const Ctx& c) { return c.inputs[0]; }
const Tensor& y0(const Ctx& c) { return c.outputs[0]; }
Tensor to_input(const Ctx& c, size_t i, const Tensor& g) { return ops::sum_to(g, c.input_meta[i].sizes); }

constexpr autograd::BackwardDef kNegGrad{[](const Ctx& c) -> Grads { return {neg(g0(c))}; }, kSaveNone};
constexpr autograd::BackwardDef kAbsGrad{[](const Ctx& c) -> Grads { return {g0(c) * sign(x0(c))}; }, kSaveInputs};
constexpr autograd::BackwardDef kExpGrad{[](const Ctx& c) -> Grads { return {g0(c) * y0(c)}; }, kSaveOutputs};
constexpr autograd::BackwardDef kExpm1Grad{[](const Ctx& c) -> Grads { return {g0(c) * (y0(c) + 1)}; }, kSaveOutputs};
constexpr autograd::BackwardDef kLogGrad{[](const Ctx& c) -> Grads { return {g0(c) / x0(c)}; }, kSaveInputs};
constexpr autograd::BackwardDef kLog1pGrad{[](const Ctx& c) -> Grads { return {g0(c) / (x0(c) + 1)}; }, kSaveInputs};
constexpr autograd::BackwardDef kSqrtGrad{[](const Ctx& c) -> Grads { return {g0(c) / (y0(c) * 2)}; }, kSaveOutputs};
constexpr autograd::BackwardDef kRsqrtGrad{[](const Ctx& c) -> Grads { return {g0(c) * y0(c) * y0(c) * y0(c) * -0.5}; },
                                           kSaveOutputs};
constexpr autograd::BackwardDef kReciprocalGrad{[](const Ctx& c) -> Grads { return {-g0(c) * y0(c) * y0(c)}; },
                                                kSaveOutputs};
constexpr autograd::BackwardDef kSinGrad{[](const Ctx& c) -> Grads { return {g0(c) * cos(x0(c))}; }, kSaveInputs};
constexpr autograd::BackwardDef kCosGrad{[](const Ctx& c) -> Grads { return {-g0(c) * sin(x0(c))}; }, kSaveInputs};
constexpr autograd::BackwardDef kTanhGrad{[](const Ctx& c) -> Grads { return {g0(c) * (1 - y0(c) * y0(c))}; },
                                          kSaveOutputs};
constexpr autograd::BackwardDef kSigmoidGrad{[](const Ctx& c) -> Grads { return {g0(c) * y0(c) * (1 - y0(c))}; },
                                             kSaveOutputs};
constexpr autograd::BackwardDef kReluGrad{[](const Ctx& c) -> Grads { return {threshold_backward(g0(c), y0(c), 0.0)}; },
                                          kSaveOutputs};
constexpr autograd::BackwardDef kGeluGrad{[](const Ctx& c) -> Grads { return {gelu_backward(g0(c), x0(c), "none")}; },
                                          kSaveInputs};
constexpr autograd::BackwardDef kGeluTanhGrad{
    [](const Ctx& c) -> Grads { return {gelu_backward(g0(c), x0(c), "tanh")}; }, kSaveInputs};
constexpr autograd::BackwardDef kSiluGrad{[](const Ctx& c) -> Grads {
                                            const Tensor s = sigmoid(x0(c));
                                            return {g0(c) * s * (x0(c) * (1 - s) + 1)};
                                          },
                                          kSaveInputs};
// The activations: at a kink the gradient is the left side's (x > 0 and
// min < x < max strictly).
constexpr autograd::BackwardDef kLeakyReluGrad{
    [](const Ctx& c) -> Grads {
      return {where(gt(x0(c), wrapped_scalar(0.0)), g0(c), g0(c) * c.attrs.get_double("negative_slope"))};
    },
    kSaveInputs};
constexpr autograd::BackwardDef kEluGrad{
    [](const Ctx& c) -> Grads {
      return {where(gt(x0(c), wrapped_scalar(0.0)), g0(c), g0(c) * exp(x0(c)) * c.attrs.get_double("alpha"))};
    },
    kSaveInputs};
constexpr autograd::BackwardDef kSoftplusGrad{
    [](const Ctx& c) -> Grads {
      const Tensor z = x0(c) * c.attrs.get_double("beta");
      return {where(gt(z, wrapped_scalar(c.attrs.get_double("threshold"))), g0(c), g0(c) * sigmoid(z))};
    },
    kSaveInputs};
// The gradient where lo < x < hi (inclusive: lo <= x <= hi), 0 elsewhere.
Tensor passed_between(const Ctx& c, double lo, double hi, bool inclusive) {
  const Tensor& x = x0(c);
  const Tensor above = inclusive ? ge(x, wrapped_scalar(lo)) : gt(x, wrapped_scalar(lo));
  const Tensor below = inclusive ? le(x, wrapped_scalar(hi)) : lt(x, wrapped_scalar(hi));
  return g0(c) * logical_and(above, below).to(x.dtype());
}
constexpr autograd::BackwardDef kHardtanhGrad{
    [](const Ctx& c) -> Grads {
      return {passed_between(c, c.attrs.get_double("min_val"), c.attrs.get_double("max_val"), false)};
    },
    kSaveInputs};
constexpr autograd::BackwardDef kHardsigmoidGrad{
    [](const Ctx& c) -> Grads { return {passed_between(c, -3.0, 3.0, false) / 6.0}; }, kSaveInputs};
constexpr autograd::BackwardDef kHardswishGrad{[](const Ctx& c) -> Grads {
                                                 const Tensor& x = x0(c);
                                                 const Tensor middle =
                                                     where(le(x, wrapped_scalar(3.0)), g0(c) * (x / 3.0 + 0.5), g0(c));
                                                 return {where(lt(x, wrapped_scalar(-3.0)), zeros_like(g0(c)), middle)};
                                               },
                                               kSaveInputs};
constexpr autograd::BackwardDef kMishGrad{[](const Ctx& c) -> Grads {
                                            const Tensor& x = x0(c);
                                            const Tensor t = tanh(softplus(x));
                                            return {g0(c) * (t + x * (1 - t * t) * sigmoid(x))};
                                          },
                                          kSaveInputs};
constexpr autograd::BackwardDef kErfGrad{
    [](const Ctx& c) -> Grads { return {g0(c) * exp(-(x0(c) * x0(c))) * (2 / std::sqrt(M_PI))}; }, kSaveInputs};
// sign, floor, ceil, round: flat almost everywhere.
constexpr autograd::BackwardDef kFlatGrad{[](const Ctx& c) -> Grads { return {zeros_like(g0(c))}; }, kSaveNone};
constexpr autograd::BackwardDef kSquareGrad{[](const Ctx& c) -> Grads { return {g0(c) * x0(c) * 2}; }, kSaveInputs};
constexpr autograd::BackwardDef kClampGrad{
    [](const Ctx& c) -> Grads {
      return {passed_between(c, c.attrs.get_double("min"), c.attrs.get_double("max"), true)};
    },
    kSaveInputs};

constexpr autograd::BackwardDef kAddGrad{
    [](const Ctx& c) -> Grads {
      return {to_input(c, 0, g0(c)), to_input(c, 1, g0(c) * c.attrs.get_double("alpha"))};
    },
    kSaveNone};
constexpr autograd::BackwardDef kSubGrad{
    [](const Ctx& c) -> Grads {
      return {to_input(c, 0, g0(c)), to_input(c, 1, g0(c) * -c.attrs.get_double("alpha"))};
    },
    kSaveNone};
constexpr autograd::BackwardDef kMulGrad{[](const Ctx& c) -> Grads {
                                           return {
                                               c.needs_input_grad[0] ? to_input(c, 0, g0(c) * c.inputs[1]) : Tensor(),
                                               c.needs_input_grad[1] ? to_input(c, 1, g0(c) * c.inputs[0]) : Tensor()};
                                         },
                                         kSaveInputs};
constexpr autograd::BackwardDef kDivGrad{[](const Ctx& c) -> Grads {
                                           const Tensor& a = c.inputs[0];
                                           const Tensor& b = c.inputs[1];
                                           return {
                                               c.needs_input_grad[0] ? to_input(c, 0, g0(c) / b) : Tensor(),
                                               c.needs_input_grad[1] ? to_input(c, 1, -g0(c) * a / (b * b)) : Tensor()};
                                         },
                                         kSaveInputs};
constexpr autograd::BackwardDef kPowGrad{
    [](const Ctx& c) -> Grads {
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
    },
    kSaveBoth};
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
constexpr autograd::BackwardDef kMaximumGrad{extremum_backward<true>, kSaveInputs};
constexpr autograd::BackwardDef kMinimumGrad{extremum_backward<false>, kSaveInputs};
constexpr autograd::BackwardDef kFmodGrad{[](const Ctx& c) -> Grads {
                                            const Tensor q =
                                                (c.inputs[0] - c.outputs[0]) / c.inputs[1];  // trunc(a / b), exactly
                                            return {to_input(c, 0, g0(c)), to_input(c, 1, -g0(c) * q)};
                                          },
                                          kSaveBoth};

const OpDef& kNeg = register_op(with_backward(unary_def("neg"), &kNegGrad));
const OpDef& kAbs = register_op(with_backward(unary_def("abs"), &kAbsGrad));
const OpDef& kSign = register_op(with_backward(unary_def("sign"), &kFlatGrad));
const OpDef& kExp = register_op(with_backward(unary_def("exp"), &kExpGrad));
const OpDef& kExpm1 = register_op(with_backward(unary_def("expm1"), &kExpm1Grad));
const OpDef& kLog = register_op(with_backward(unary_def("log"), &kLogGrad));
const OpDef& kLog1p = register_op(with_backward(unary_def("log1p"), &kLog1pGrad));
const OpDef& kSqrt = register_op(with_backward(unary_def("sqrt"), &kSqrtGrad));
const OpDef& kRsqrt = register_op(with_backward(unary_def("rsqrt"), &kRsqrtGrad));
const OpDef& kReciprocal = register_op(with_backward(unary_def("reciprocal"), &kReciprocalGrad));
const OpDef& kSin = register_op(with_backward(unary_def("sin"), &kSinGrad));
const OpDef& kCos = register_op(with_backward(unary_def("cos"), &kCosGrad));
const OpDef& kTanh = register_op(with_backward(unary_def("tanh"), &kTanhGrad));
const OpDef& kSigmoid = register_op(with_backward(unary_def("sigmoid"), &kSigmoidGrad));
const OpDef& kRelu = register_op(with_backward(unary_def("relu"), &kReluGrad));
const OpDef& kGelu = register_op(with_backward(unary_def("gelu"), &kGeluGrad));
const OpDef& kGeluTanh = register_op(with_backward(unary_def("gelu_tanh"), &kGeluTanhGrad));
const OpDef& kSilu = register_op(with_backward(unary_def("silu"), &kSiluGrad));
const OpDef& kErf = register_op(with_backward(unary_def("erf"), &kErfGrad));
const OpDef& kFloor = register_op(with_backward(unary_def("floor"), &kFlatGrad));
const OpDef& kCeil = register_op(with_backward(unary_def("ceil"), &kFlatGrad));
const OpDef& kRound = register_op(with_backward(unary_def("round"), &kFlatGrad));
const OpDef& kSquare = register_op(with_backward(unary_def("square"), &kSquareGrad));
const OpDef& kClamp = register_op(with_backward(
    OpDef{"clamp", "clamp(Tensor self, float min, float max) -> Tensor", OpKind::Compute, ops::pointwise_like_first},
    &kClampGrad));
// The activations with attributes, in torch.nn.functional's names and order.
const OpDef& kLeakyRelu =
    register_op(with_backward(OpDef{"leaky_relu", "leaky_relu(Tensor self, float negative_slope) -> Tensor",
                                    OpKind::Compute, ops::pointwise_like_first},
                              &kLeakyReluGrad));
const OpDef& kElu = register_op(with_backward(
    OpDef{"elu", "elu(Tensor self, float alpha) -> Tensor", OpKind::Compute, ops::pointwise_like_first}, &kEluGrad));
const OpDef& kSoftplus =
    register_op(with_backward(OpDef{"softplus", "softplus(Tensor self, float beta, float threshold) -> Tensor",
                                    OpKind::Compute, ops::pointwise_like_first},
                              &kSoftplusGrad));
const OpDef& kHardtanh =
    register_op(with_backward(OpDef{"hardtanh", "hardtanh(Tensor self, float min_val, float max_val) -> Tensor",
                                    OpKind::Compute, ops::pointwise_like_first},
                              &kHardtanhGrad));
const OpDef& kHardsigmoid = register_op(with_backward(unary_def("hardsigmoid"), &kHardsigmoidGrad));
const OpDef& kHardswish = register_op(with_backward(unary_def("hardswish"), &kHardswishGrad));
const OpDef& kMish = register_op(with_backward(unary_def("mish"), &kMishGrad));
const OpDef& kLogicalNot = register_op(
    with_backward(OpDef{"logical_not", "logical_not(Tensor self) -> Tensor", OpKind::Compute, ops::broadcast_to_bool},
                  &kNotDifferentiable));

const OpDef& kAdd = register_op(with_backward(
    OpDef{"add", "add(Tensor self, Tensor other, *, float alpha=1) -> Tensor", OpKind::Compute, ops::broadcast_all},
    &kAddGrad));
const OpDef& kSub = register_op(with_backward(
    OpDef{"sub", "sub(Tensor self, Tensor other, *, float alpha=1) -> Tensor", OpKind::Compute, ops::broadcast_all},
    &kSubGrad));
const OpDef& kMul = register_op(with_backward(binary_def("mul"), &kMulGrad));
const OpDef& kDiv = register_op(with_backward(binary_def("div"), &kDivGrad));
const OpDef& kPow = register_op(with_backward(binary_def("pow"), &kPowGrad));
const OpDef& kMaximum = register_op(with_backward(binary_def("maximum"), &kMaximumGrad));
const OpDef& kMinimum = register_op(with_backward(binary_def("minimum"), &kMinimumGrad));
const OpDef& kFmod = register_op(with_backward(binary_def("fmod"), &kFmodGrad));

// Ops declared with their backward (OpDef::backward) and their public
// binding for call_op beside them: with the functor in pointwise_math.h,
// the whole of such an op is this declaration, its front end below and its
// line in ops.h (docs/ARCHITECTURE.md, "Add an op").

// d hypot / da = a / hypot (NaN at the origin, as in PyTorch).
constexpr autograd::BackwardDef kHypotBackward{[](const BackwardContext& c) -> Grads {
  const Tensor& g = c.grads[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor& h = c.outputs[0];
  return {ops::sum_to(g * a / h, c.input_meta[0].sizes), ops::sum_to(g * b / h, c.input_meta[1].sizes)};
}, autograd::kSaveBoth};
const OpDef& kHypot = register_op(with_backward(binary_def("hypot"), &kHypotBackward));

// d logaddexp / da = 1 / (1 + e^(b - a)) (1/2 each at a == b).
constexpr autograd::BackwardDef kLogAddExpBackward{[](const BackwardContext& c) -> Grads {
  const Tensor& g = c.grads[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  return {ops::sum_to(g / (exp(b - a) + 1), c.input_meta[0].sizes),
          ops::sum_to(g / (exp(a - b) + 1), c.input_meta[1].sizes)};
}, autograd::kSaveInputs};
const OpDef& kLogAddExp = register_op(with_backward(binary_def("logaddexp"), &kLogAddExpBackward));

// Unary ops declared with their backward; the derivatives as PyTorch's
// derivatives.yaml.
constexpr autograd::BackwardDef kLog2Backward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] / (c.inputs[0] * M_LN2)}; }, kSaveInputs};
constexpr autograd::BackwardDef kLog10Backward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] / (c.inputs[0] * M_LN10)}; }, kSaveInputs};
constexpr autograd::BackwardDef kExp2Backward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * c.outputs[0] * M_LN2}; }, kSaveOutputs};
constexpr autograd::BackwardDef kTruncBackward{
    [](const BackwardContext& c) -> Grads { return {zeros_like(c.grads[0])}; }, kSaveNone};
constexpr autograd::BackwardDef kFracBackward{[](const BackwardContext& c) -> Grads { return {c.grads[0]}; },
                                              kSaveNone};
// d log(sigmoid(x)) / dx = 1 - sigmoid(x) = sigmoid(-x).
constexpr autograd::BackwardDef kLogSigmoidBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * sigmoid(neg(c.inputs[0]))}; }, kSaveInputs};
// selu' = scale for x > 0, else scale alpha e^x = y + scale alpha (the constants
// of pointwise_math.h's Selu).
constexpr double kSeluScale = 1.0507009873554804934193349852946, kSeluAlpha = 1.6732632423543772848170429916717;
constexpr autograd::BackwardDef kSeluBackward{[](const BackwardContext& c) -> Grads {
  const Tensor& g = c.grads[0];
  return {where(gt(c.inputs[0], wrapped_scalar(0.0)), g * kSeluScale, g * (c.outputs[0] + kSeluScale * kSeluAlpha))};
}, kSaveBoth};
// The trigonometric and hyperbolic family, derivatives as derivatives.yaml.
constexpr autograd::BackwardDef kTanBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * (square(c.outputs[0]) + 1.0)}; }, kSaveOutputs};
constexpr autograd::BackwardDef kAsinBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * rsqrt(1.0 - square(c.inputs[0]))}; }, kSaveInputs};
constexpr autograd::BackwardDef kAcosBackward{
    [](const BackwardContext& c) -> Grads { return {-c.grads[0] * rsqrt(1.0 - square(c.inputs[0]))}; }, kSaveInputs};
constexpr autograd::BackwardDef kAtanBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] / (square(c.inputs[0]) + 1.0)}; }, kSaveInputs};
constexpr autograd::BackwardDef kSinhBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * cosh(c.inputs[0])}; }, kSaveInputs};
constexpr autograd::BackwardDef kCoshBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * sinh(c.inputs[0])}; }, kSaveInputs};
constexpr autograd::BackwardDef kAsinhBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * rsqrt(square(c.inputs[0]) + 1.0)}; }, kSaveInputs};
constexpr autograd::BackwardDef kAcoshBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] * rsqrt(square(c.inputs[0]) - 1.0)}; }, kSaveInputs};
constexpr autograd::BackwardDef kAtanhBackward{
    [](const BackwardContext& c) -> Grads { return {c.grads[0] / (1.0 - square(c.inputs[0]))}; }, kSaveInputs};
const OpDef& kTan = register_op(with_backward(unary_def("tan"), &kTanBackward));
const OpDef& kAsin = register_op(with_backward(unary_def("asin"), &kAsinBackward));
const OpDef& kAcos = register_op(with_backward(unary_def("acos"), &kAcosBackward));
const OpDef& kAtan = register_op(with_backward(unary_def("atan"), &kAtanBackward));
const OpDef& kSinh = register_op(with_backward(unary_def("sinh"), &kSinhBackward));
const OpDef& kCosh = register_op(with_backward(unary_def("cosh"), &kCoshBackward));
const OpDef& kAsinh = register_op(with_backward(unary_def("asinh"), &kAsinhBackward));
const OpDef& kAcosh = register_op(with_backward(unary_def("acosh"), &kAcoshBackward));
const OpDef& kAtanh = register_op(with_backward(unary_def("atanh"), &kAtanhBackward));
const OpDef& kLog2 = register_op(with_backward(unary_def("log2"), &kLog2Backward));
const OpDef& kLog10 = register_op(with_backward(unary_def("log10"), &kLog10Backward));
const OpDef& kExp2 = register_op(with_backward(unary_def("exp2"), &kExp2Backward));
const OpDef& kTrunc = register_op(with_backward(unary_def("trunc"), &kTruncBackward));
const OpDef& kFrac = register_op(with_backward(unary_def("frac"), &kFracBackward));
const OpDef& kLogSigmoid = register_op(with_backward(unary_def("log_sigmoid"), &kLogSigmoidBackward));
const OpDef& kSelu = register_op(with_backward(unary_def("selu"), &kSeluBackward));

// copysign: d/da = sign flip where one happened (y / a), 0 at a = 0; b gets none.
constexpr autograd::BackwardDef kCopySignBackward{[](const BackwardContext& c) -> Grads {
  const Tensor& a = c.inputs[0];
  const Tensor ratio = where(eq(a, wrapped_scalar(0.0)), zeros_like(a), c.outputs[0] / a);
  return {ops::sum_to(c.grads[0] * ratio, c.input_meta[0].sizes), Tensor()};
}, kSaveBoth};
// remainder = a - floor(a / b) b: d/da = 1, d/db = -floor(a / b).
constexpr autograd::BackwardDef kRemainderBackward{
    [](const BackwardContext& c) -> Grads {
      const Tensor& g = c.grads[0];
      return {ops::sum_to(g, c.input_meta[0].sizes),
              ops::sum_to(-g * floor_divide(c.inputs[0], c.inputs[1]), c.input_meta[1].sizes)};
    },
    kSaveInputs};
// d atan2(a, b) = (b da - a db) / (a^2 + b^2).
constexpr autograd::BackwardDef kAtan2Backward{[](const BackwardContext& c) -> Grads {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor r = c.grads[0] / (square(a) + square(b));
  return {ops::sum_to(r * b, c.input_meta[0].sizes), ops::sum_to(-r * a, c.input_meta[1].sizes)};
}, kSaveInputs};
const OpDef& kAtan2 = register_op(with_backward(binary_def("atan2"), &kAtan2Backward));
const OpDef& kCopySign = register_op(with_backward(binary_def("copysign"), &kCopySignBackward));
const OpDef& kRemainder = register_op(with_backward(binary_def("remainder"), &kRemainderBackward));
const OpDef& kFloorDivide = register_op(with_backward(binary_def("floor_divide"), &kNotDifferentiable));

// gelu_backward(a, x) = a gelu'(x), for second derivatives (create_graph):
// linear in a; in x it is a gelu''(x), with gelu''(x) = phi(x) (2 - x^2)
// for the erf form, and for the tanh form (t = tanh(u), u = k (x + c x^3))
// (1 - t^2) (u' + x (u'' - 2 t u'^2) / 2).
constexpr autograd::BackwardDef kGeluBackwardGrad{
    [](const Ctx& c) -> Grads {
      const Tensor &a = c.inputs[0], &x = c.inputs[1];
      const Tensor pdf = exp(square(x) * -0.5) * 0.3989422804014327;
      return {to_input(c, 0, gelu_backward(g0(c), x, "none")), to_input(c, 1, g0(c) * a * pdf * (2.0 - square(x)))};
    },
    kSaveInputs};
constexpr autograd::BackwardDef kGeluTanhBackwardGrad{
    [](const Ctx& c) -> Grads {
      const Tensor &a = c.inputs[0], &x = c.inputs[1];
      const double k = std::sqrt(2.0 / M_PI), cubic = 0.044715;
      const Tensor t = tanh((x + square(x) * x * cubic) * k);
      const Tensor du = (square(x) * (3 * cubic) + 1.0) * k, d2u = x * (6 * k * cubic);
      const Tensor second = (1.0 - square(t)) * (du + x * 0.5 * (d2u - t * square(du) * 2.0));
      return {to_input(c, 0, gelu_backward(g0(c), x, "tanh")), to_input(c, 1, g0(c) * a * second)};
    },
    kSaveInputs};
const OpDef& kGeluBackward =
    register_op(with_backward(OpDef{"gelu_backward", "gelu_backward(Tensor grad_output, Tensor self) -> Tensor",
                                    OpKind::Compute, ops::broadcast_all},
                              &kGeluBackwardGrad));
const OpDef& kGeluTanhBackward = register_op(
    with_backward(OpDef{"gelu_tanh_backward", "gelu_tanh_backward(Tensor grad_output, Tensor self) -> Tensor",
                        OpKind::Compute, ops::broadcast_all},
                  &kGeluTanhBackwardGrad));
// Linear in grad_output (its gradient is the same threshold of the incoming
// one); piecewise constant in self (none).
constexpr autograd::BackwardDef kThresholdBackwardBackward{[](const BackwardContext& c) -> Grads {
  if (!c.needs_input_grad[0]) return {Tensor(), Tensor()};
  const Tensor g = threshold_backward(c.grads[0], c.inputs[1], c.attrs.get_double("threshold"));
  return {ops::sum_to(g, c.input_meta[0].sizes), Tensor()};
}, kSaveInputs};
const OpDef& kThresholdBackward = register_op(with_backward(
    OpDef{"threshold_backward", "threshold_backward(Tensor grad_output, Tensor self, float threshold) -> Tensor",
          OpKind::Compute, ops::broadcast_all},
    &kThresholdBackwardBackward));
// Comparisons and logic: bool results, no gradient.
OpDef boolean_def(const char* name) {
  return with_backward(binary_def(name, ops::broadcast_to_bool), &kNotDifferentiable);
}
const OpDef& kEq = register_op(boolean_def("eq"));
const OpDef& kNe = register_op(boolean_def("ne"));
const OpDef& kLt = register_op(boolean_def("lt"));
const OpDef& kLe = register_op(boolean_def("le"));
const OpDef& kGt = register_op(boolean_def("gt"));
const OpDef& kGe = register_op(boolean_def("ge"));
const OpDef& kAnd = register_op(boolean_def("logical_and"));
const OpDef& kOr = register_op(boolean_def("logical_or"));
const OpDef& kXor = register_op(boolean_def("logical_xor"));

std::vector<TensorMeta> where_shape(std::span<const Tensor> in, const Attrs& a) {
  auto m = ops::broadcast_all(in, a);
  m[0].dtype = in[1].dtype();
  return m;
}
// The condition gets no gradient; each branch where it is chosen.
constexpr autograd::BackwardDef kWhereGrad{
    [](const Ctx& c) -> Grads {
      const Tensor& cond = c.inputs[0];
      const Tensor z = zeros_like(g0(c));
      return {Tensor(), to_input(c, 1, where(cond, g0(c), z)), to_input(c, 2, where(cond, z, g0(c)))};
    },
    kSaveInputs};
const OpDef& kWhere = register_op(with_backward(
    OpDef{"where", "where(Tensor condition, Tensor self, Tensor other) -> Tensor", OpKind::Compute, where_shape},
    &kWhereGrad));

// Ops that always compute in floating point (exp of an int tensor is float32).
Tensor float_input(const Tensor& x) { return is_floating(x.dtype()) ? x : x.to(default_dtype()); }
Tensor unary_float(const OpDef& op, const Tensor& x) { return call(op, {float_input(x)}); }
// Ops that keep integer dtypes; bool has no arithmetic negation or magnitude.
Tensor unary_numeric(const OpDef& op, const Tensor& x) {
  check(x.dtype() != kBool, op.name.c_str(), "is not supported for bool tensors (got dtype bool)");
  return call(op, {x});
}

// PyTorch computes bool + bool as logical or and bool * bool as logical and
// (a bool result); alpha, if given, must be 1 (true).
const OpDef* bool_form(const OpDef& op, const Attrs& attrs) {
  if (&op != &kAdd && &op != &kMul) return nullptr;
  const double alpha = attrs.has("alpha") ? attrs.get_double("alpha") : 1.0;
  check(alpha == 1.0, op.name.c_str(), "alpha must be 1 (true) for bool tensors but got ", alpha);
  return &op == &kAdd ? &kOr : &kAnd;
}

// Binary arithmetic: promote, check broadcasting, dispatch. `float_only`
// ops (true division) compute integers in the default float dtype.
Tensor binary(const OpDef& op, const Tensor& a, const Tensor& b, bool float_only = false, const Attrs& attrs = {}) {
  broadcast_shapes(a.sizes(), b.sizes(), op.name.c_str());
  DType t = result_type(a, b);
  if (float_only && !is_floating(t)) t = default_dtype();
  if (t == kBool)
    if (const OpDef* logical = bool_form(op, attrs)) return call(*logical, {a, b});
  check(t != kBool || op.name == "maximum" || op.name == "minimum", op.name.c_str(),
        "is not supported for bool tensors; convert them with to() first");
  return call(op, {a.to(t), b.to(t)}, attrs);
}

// Ops defined on floating point only (PyTorch has no integer kernel for
// them): integer and bool operands are refused.
Tensor floating_binary(const OpDef& op, const Tensor& a, const Tensor& b) {
  check(is_floating(result_type(a, b)), op.name.c_str(), "expected floating point tensors but got ", a.dtype(),
        " and ", b.dtype());
  return binary(op, a, b);
}

Tensor compare(const OpDef& op, const Tensor& a, const Tensor& b) {
  broadcast_shapes(a.sizes(), b.sizes(), op.name.c_str());
  const DType t = result_type(a, b);
  return call(op, {a.to(t), b.to(t)});
}

// In-place and out= arithmetic: the result type must be castable to the
// destination, whose shape must be the broadcast shape.
const Tensor& binary_into(const OpDef& op, const Tensor& out, const Tensor& a, const Tensor& b, bool float_only,
                          const Attrs& attrs = {}) {
  const Shape s = broadcast_shapes(a.sizes(), b.sizes(), op.name.c_str());
  check(s == out.sizes(), op.name.c_str(), "output with shape ", ops::shape_text(out.sizes()),
        " doesn't match the broadcast shape ", ops::shape_text(s));
  DType t = result_type(a, b);
  if (float_only && !is_floating(t)) t = default_dtype();
  check(ops::can_cast(t, out.dtype()), op.name.c_str(), "result type ", t, " can't be cast to the desired output type ",
        out.dtype());
  if (out.dtype() == kBool)
    if (const OpDef* logical = bool_form(op, attrs)) {
      call_out(*logical, out, {a, b});
      return out;
    }
  call_out(op, out, {a.to(out.dtype()), b.to(out.dtype())}, attrs);
  return out;
}

Attrs alpha_attr(Scalar alpha) { return Attrs{{"alpha", alpha.to_double()}}; }

}  // namespace

// ---- result type

DType result_type(std::span<const Tensor> operands) {
  // Three priority levels: tensors with dims, 0-dim tensors, wrapped numbers.
  // A lower level only matters if its category (bool < int < float) is higher.
  DType level[3] = {kBool, kBool, kBool};
  bool seen[3] = {false, false, false};
  for (const Tensor& t : operands) {
    const int l = t.impl()->wrapped_number ? 2 : (t.dim() == 0 ? 1 : 0);
    DType dt = t.dtype();
    if (l == 2 && is_floating(dt)) dt = default_dtype();
    level[l] = seen[l] ? promote_types(level[l], dt) : dt;
    seen[l] = true;
  }
  auto category = [](DType t) { return is_floating(t) ? 2 : (t == kBool ? 0 : 1); };
  DType r = kBool;
  bool have = false;
  for (int l = 0; l < 3; ++l) {
    if (!seen[l]) continue;
    if (!have) r = level[l], have = true;
    else if (category(level[l]) > category(r)) r = level[l];
  }
  return r;
}

DType result_type(const Tensor& a, const Tensor& b) {
  const Tensor ts[] = {a, b};
  return result_type(ts);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    check(da == db || da == 1 || db == 1, op, "shapes ", ops::shape_text(a), " and ", ops::shape_text(b),
          " cannot be broadcast: size ", da, " vs ", db, " at dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- unary

Tensor neg(const Tensor& x) { return unary_numeric(kNeg, x); }
Tensor abs(const Tensor& x) { return unary_numeric(kAbs, x); }
Tensor sign(const Tensor& x) { return unary_numeric(kSign, x); }
Tensor exp(const Tensor& x) { return unary_float(kExp, x); }
Tensor expm1(const Tensor& x) { return unary_float(kExpm1, x); }
Tensor log(const Tensor& x) { return unary_float(kLog, x); }
Tensor log1p(const Tensor& x) { return unary_float(kLog1p, x); }
Tensor sqrt(const Tensor& x) { return unary_float(kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_float(kRsqrt, x); }
Tensor reciprocal(const Tensor& x) { return unary_float(kReciprocal, x); }
Tensor sin(const Tensor& x) { return unary_float(kSin, x); }
Tensor cos(const Tensor& x) { return unary_float(kCos, x); }
Tensor tanh(const Tensor& x) { return unary_float(kTanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_float(kSigmoid, x); }
Tensor relu(const Tensor& x) { return unary_numeric(kRelu, x); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  check(approximate == "none" || approximate == "tanh", "gelu",
        "expected approximate to be 'none' or 'tanh' but got '", approximate, "'");
  return unary_float(approximate == "tanh" ? kGeluTanh : kGelu, x);
}
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  check(approximate == "none" || approximate == "tanh", "gelu_backward",
        "expected approximate to be 'none' or 'tanh' but got '", approximate, "'");
  check(is_floating(x.dtype()), "gelu_backward", "expected a floating point input but got ", x.dtype());
  return binary(approximate == "tanh" ? kGeluTanhBackward : kGeluBackward, grad, x);
}
Tensor threshold_backward(const Tensor& grad, const Tensor& self, double threshold) {
  check(is_floating(grad.dtype()) && is_floating(self.dtype()), "threshold_backward",
        "expected floating point tensors but got ", grad.dtype(), " and ", self.dtype());
  return binary(kThresholdBackward, grad, self, false, {{"threshold", threshold}});
}
Tensor silu(const Tensor& x) { return unary_float(kSilu, x); }
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return call(kLeakyRelu, {float_input(x)}, {{"negative_slope", negative_slope}});
}
Tensor elu(const Tensor& x, double alpha) { return call(kElu, {float_input(x)}, {{"alpha", alpha}}); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  check(beta != 0, "softplus", "beta must not be 0");
  return call(kSoftplus, {float_input(x)}, {{"beta", beta}, {"threshold", threshold}});
}
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  check(min_val <= max_val, "hardtanh", "min_val (", min_val, ") must not be greater than max_val (", max_val, ")");
  return call(kHardtanh, {float_input(x)}, {{"min_val", min_val}, {"max_val", max_val}});
}
Tensor hardsigmoid(const Tensor& x) { return unary_float(kHardsigmoid, x); }
Tensor hardswish(const Tensor& x) { return unary_float(kHardswish, x); }
Tensor mish(const Tensor& x) { return unary_float(kMish, x); }
Tensor erf(const Tensor& x) { return unary_float(kErf, x); }
Tensor floor(const Tensor& x) { return unary_numeric(kFloor, x); }
Tensor ceil(const Tensor& x) { return unary_numeric(kCeil, x); }
Tensor round(const Tensor& x) { return unary_numeric(kRound, x); }
Tensor square(const Tensor& x) { return unary_numeric(kSquare, x); }
Tensor logical_not(const Tensor& x) { return call(kLogicalNot, {x}); }

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check(min || max, "clamp", "at least one of 'min' or 'max' must not be None");
  check(x.dtype() != kBool, "clamp", "is not supported for bool tensors (got dtype bool)");
  // A float bound on an integer tensor promotes, as in PyTorch.
  DType t = x.dtype();
  if ((min && min->kind() == Scalar::Kind::Float) || (max && max->kind() == Scalar::Kind::Float))
    if (!is_floating(t)) t = default_dtype();
  Attrs a{{"min", min ? min->to_double() : -std::numeric_limits<double>::infinity()},
          {"max", max ? max->to_double() : std::numeric_limits<double>::infinity()}};
  return call(kClamp, {x.to(t)}, a);
}

// Tensor bounds (broadcast with x): as std::min(std::max(x, min), max), so
// a NaN in x stays and a tie passes x (and its gradient) through.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  check(min.defined() || max.defined(), "clamp", "at least one of 'min' or 'max' must not be None");
  check(x.dtype() != kBool, "clamp", "is not supported for bool tensors (got dtype bool)");
  Tensor r = x;
  if (min.defined()) r = where(lt(r, min), min, r);
  if (max.defined()) r = where(lt(max, r), max, r);
  return r;
}

// sgn is sign for real tensors (kiln has no complex dtype).
Tensor sgn(const Tensor& x) { return sign(x); }

// ---- binary

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) { return binary(kAdd, a, b, false, alpha_attr(alpha)); }
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) { return binary(kSub, a, b, false, alpha_attr(alpha)); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(kDiv, a, b, true); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(kPow, a, b); }
Tensor pow(const Tensor& a, Scalar e) { return binary(kPow, a, wrapped_scalar(e)); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(kMinimum, a, b); }
Tensor fmod(const Tensor& a, const Tensor& b) { return binary(kFmod, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return compare(kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(kGe, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare(kAnd, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare(kOr, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return compare(kXor, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check(cond.dtype() == kBool, "where", "expected condition to be a bool tensor but got ", cond.dtype());
  broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  const DType t = result_type(a, b);
  return call(kWhere, {cond, a.to(t), b.to(t)});
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check(mask.dtype() == kBool, "masked_fill", "expected a bool mask but got ", mask.dtype());
  const Shape s = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  check(s == x.sizes(), "masked_fill", "mask of shape ", ops::shape_text(mask.sizes()),
        " does not broadcast to the input's shape ", ops::shape_text(x.sizes()));
  return where(mask, scalar_tensor(value, x.dtype()), x);
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  check(is_floating(start.dtype()), "lerp", "expected floating point tensors but got ", start.dtype());
  return add(start, mul(weight, sub(end, start)));
}
Tensor lerp(const Tensor& start, const Tensor& end, Scalar weight) { return lerp(start, end, wrapped_scalar(weight)); }

Tensor hypot(const Tensor& a, const Tensor& b) { return floating_binary(kHypot, a, b); }
Tensor logaddexp(const Tensor& a, const Tensor& b) { return floating_binary(kLogAddExp, a, b); }

Tensor tan(const Tensor& x) { return unary_float(kTan, x); }
Tensor asin(const Tensor& x) { return unary_float(kAsin, x); }
Tensor acos(const Tensor& x) { return unary_float(kAcos, x); }
Tensor atan(const Tensor& x) { return unary_float(kAtan, x); }
Tensor sinh(const Tensor& x) { return unary_float(kSinh, x); }
Tensor cosh(const Tensor& x) { return unary_float(kCosh, x); }
Tensor asinh(const Tensor& x) { return unary_float(kAsinh, x); }
Tensor acosh(const Tensor& x) { return unary_float(kAcosh, x); }
Tensor atanh(const Tensor& x) { return unary_float(kAtanh, x); }
Tensor atan2(const Tensor& a, const Tensor& b) { return binary(kAtan2, a, b, /*float_only=*/true); }
Tensor log2(const Tensor& x) { return unary_float(kLog2, x); }
Tensor log10(const Tensor& x) { return unary_float(kLog10, x); }
Tensor exp2(const Tensor& x) { return unary_float(kExp2, x); }
Tensor trunc(const Tensor& x) { return unary_numeric(kTrunc, x); }
Tensor frac(const Tensor& x) { return unary_float(kFrac, x); }
Tensor log_sigmoid(const Tensor& x) { return unary_float(kLogSigmoid, x); }
Tensor selu(const Tensor& x) { return unary_float(kSelu, x); }
Tensor copysign(const Tensor& a, const Tensor& b) { return binary(kCopySign, a, b, /*float_only=*/true); }
Tensor remainder(const Tensor& a, const Tensor& b) { return binary(kRemainder, a, b); }
Tensor floor_divide(const Tensor& a, const Tensor& b) { return binary(kFloorDivide, a, b); }
// Composites (each is its ops in a graph): NaN is the one value unequal to itself.
Tensor isnan(const Tensor& x) { return ne(x, x); }
Tensor isinf(const Tensor& x) {
  return is_floating(x.dtype()) ? eq(abs(x), wrapped_scalar(INFINITY))
                                : zeros(x.sizes(), TensorOptions(kBool).device(x.device()));
}
Tensor isfinite(const Tensor& x) {
  return is_floating(x.dtype()) ? lt(abs(x), wrapped_scalar(INFINITY))
                                : ones(x.sizes(), TensorOptions(kBool).device(x.device()));
}

// NaN, +inf and -inf replaced (by default: 0 and the dtype's largest and
// lowest finite values, as PyTorch); integers have none of them (a copy).
// A composite of where()s: its gradient flows where x is finite.
Tensor nan_to_num(const Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  if (!is_floating(x.dtype())) return x.clone();
  const double largest = x.dtype() == kFloat64   ? std::numeric_limits<double>::max()
                         : x.dtype() == kFloat32 ? double(std::numeric_limits<float>::max())
                         : x.dtype() == kFloat16 ? 65504.0
                                                 : 3.3895313892515355e38;  // bfloat16
  Tensor r = where(isnan(x), wrapped_scalar(nan.value_or(0.0)), x);
  r = where(eq(x, wrapped_scalar(INFINITY)), wrapped_scalar(posinf.value_or(largest)), r);
  return where(eq(x, wrapped_scalar(-INFINITY)), wrapped_scalar(neginf.value_or(-largest)), r);
}

namespace {
const bool registered = [] {
  ops::def<&hypot>(kHypot.schema);
  ops::def<&logaddexp>(kLogAddExp.schema);
  ops::def<&tan>(kTan.schema);
  ops::def<&asin>(kAsin.schema);
  ops::def<&acos>(kAcos.schema);
  ops::def<&atan>(kAtan.schema);
  ops::def<&sinh>(kSinh.schema);
  ops::def<&cosh>(kCosh.schema);
  ops::def<&asinh>(kAsinh.schema);
  ops::def<&acosh>(kAcosh.schema);
  ops::def<&atanh>(kAtanh.schema);
  ops::def<&atan2>(kAtan2.schema);
  ops::def<&log2>(kLog2.schema);
  ops::def<&log10>(kLog10.schema);
  ops::def<&exp2>(kExp2.schema);
  ops::def<&trunc>(kTrunc.schema);
  ops::def<&frac>(kFrac.schema);
  ops::def<&log_sigmoid>(kLogSigmoid.schema);
  ops::def<&selu>(kSelu.schema);
  ops::def<&copysign>("copysign.Tensor(Tensor self, Tensor other) -> Tensor");
  ops::def<&remainder>("remainder.Tensor(Tensor self, Tensor other) -> Tensor");
  ops::def<&floor_divide>(kFloorDivide.schema);
  ops::def<static_cast<Tensor (*)(const Tensor&, const Tensor&, const Tensor&)>(&clamp)>(
      "clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor");
  ops::def<&sgn>("sgn(Tensor self) -> Tensor");
  ops::def<&isnan>("isnan(Tensor self) -> Tensor");
  ops::def<&isinf>("isinf(Tensor self) -> Tensor");
  ops::def<&isfinite>("isfinite(Tensor self) -> Tensor");
  ops::def<&nan_to_num>("nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor");
  return true;
}();
}  // namespace

// ---- out= and in-place

Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha) {
  binary_into(kAdd, out, a, b, false, alpha_attr(alpha));
  return out;
}
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha) {
  binary_into(kSub, out, a, b, false, alpha_attr(alpha));
  return out;
}
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_into(kMul, out, a, b, false);
  return out;
}
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_into(kDiv, out, a, b, true);
  return out;
}
Tensor& exp_out(Tensor& out, const Tensor& x) {
  check(is_floating(out.dtype()), "exp", "expected a floating point out= tensor but got ", out.dtype());
  check(out.sizes() == x.sizes(), "exp", "output with shape ", ops::shape_text(out.sizes()),
        " doesn't match the input shape ", ops::shape_text(x.sizes()));
  call_out(kExp, out, {x.to(out.dtype())});
  return out;
}

const Tensor& Tensor::add_(const Tensor& o, Scalar alpha, SourceLocation where) const {
  const detail::ApiCall call(where);
  return binary_into(kAdd, *this, *this, o, false, alpha_attr(alpha));
}
const Tensor& Tensor::add_(Scalar o, SourceLocation where) const {
  const detail::ApiCall call(where);
  return add_(ops::number_beside(*this, o));
}
const Tensor& Tensor::sub_(const Tensor& o, Scalar alpha, SourceLocation where) const {
  const detail::ApiCall call(where);
  return binary_into(kSub, *this, *this, o, false, alpha_attr(alpha));
}
const Tensor& Tensor::mul_(const Tensor& o, SourceLocation where) const {
  const detail::ApiCall call(where);
  return binary_into(kMul, *this, *this, o, false);
}
const Tensor& Tensor::mul_(Scalar o, SourceLocation where) const {
  const detail::ApiCall call(where);
  return mul_(ops::number_beside(*this, o));
}
const Tensor& Tensor::div_(const Tensor& o, SourceLocation where) const {
  const detail::ApiCall call(where);
  return binary_into(kDiv, *this, *this, o, true);
}
const Tensor& Tensor::div_(Scalar o, SourceLocation where) const {
  const detail::ApiCall call(where);
  return div_(ops::number_beside(*this, o));
}
const Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max, SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(clamp(*this, min, max));
}
const Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value, SourceLocation where) const {
  const detail::ApiCall call(where);
  return copy_(masked_fill(*this, mask, value));
}
const Tensor& Tensor::neg_(SourceLocation where) const {
  const detail::ApiCall call(where);
  check(dtype() != kBool, "neg_", "is not supported for bool tensors (got dtype bool)");
  call_out(kNeg, *this, {*this});
  return *this;
}
const Tensor& Tensor::exp_(SourceLocation where) const {
  const detail::ApiCall call(where);
  check(is_floating(dtype()), "exp_", "expected a floating point tensor but got ", dtype());
  call_out(kExp, *this, {*this});
  return *this;
}
const Tensor& Tensor::relu_(SourceLocation where) const {
  const detail::ApiCall call(where);
  check(dtype() != kBool, "relu_", "is not supported for bool tensors (got dtype bool)");
  call_out(kRelu, *this, {*this});
  return *this;
}

// ---- operators

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, ops::number_beside(a, b)); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, ops::number_beside(a, b)); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, ops::number_beside(a, b)); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, ops::number_beside(a, b)); }
Tensor operator+(Scalar a, const Tensor& b) { return add(ops::number_beside(b, a), b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(ops::number_beside(b, a), b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(ops::number_beside(b, a), b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(ops::number_beside(b, a), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, wrapped_scalar(b)); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, wrapped_scalar(b)); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, wrapped_scalar(b)); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, wrapped_scalar(b)); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, wrapped_scalar(b)); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, wrapped_scalar(b)); }
Tensor operator<(Scalar a, const Tensor& b) { return gt(b, wrapped_scalar(a)); }
Tensor operator>(Scalar a, const Tensor& b) { return lt(b, wrapped_scalar(a)); }
Tensor operator<=(Scalar a, const Tensor& b) { return ge(b, wrapped_scalar(a)); }
Tensor operator>=(Scalar a, const Tensor& b) { return le(b, wrapped_scalar(a)); }
Tensor operator==(Scalar a, const Tensor& b) { return eq(b, wrapped_scalar(a)); }
Tensor operator!=(Scalar a, const Tensor& b) { return ne(b, wrapped_scalar(a)); }

}  // namespace kiln
