// Elementwise ops as calls of their functors (cpp_expressions.h).
#include "cpp_expressions.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>

#include "kernels/cpu/pointwise_math.h"

namespace kiln::compiler::detail {
namespace {

// Attribute `arg` of node n as the float the eager kernel converts it to,
// or nothing when it is neither given nor defaulted.
std::optional<float> float_attribute(const TracedNode& n, const SchemaArg& arg) {
  if (n.attrs.has(arg.name)) return static_cast<float>(n.attrs.get_double(arg.name));
  if (arg.default_value) return static_cast<float>(std::stod(*arg.default_value));
  return std::nullopt;
}

// A float as a C++ literal of exactly that value (hexadecimal: no decimal
// rounding between the eager kernel's float and the generated code's).
std::string float_literal(float v) {
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "(-__builtin_inff())";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(v));
  return v < 0 ? "(" + std::string(buf) + ")" : buf;
}

// The unary functors with a fast form (f_fast on |x| <= kFastMax), by op name.
bool has_fast_form(std::string_view op) {
#define KILN_FAST_FORM(functor, name) \
  if (op == name) return pointwise::kHasFastForm<pointwise::functor>;
  KILN_POINTWISE_UNARY(KILN_FAST_FORM)
#undef KILN_FAST_FORM
  return false;
}

}  // namespace

std::string fast_expression(const TracedNode& n, const std::vector<std::string>& operands) {
  if (operands.size() != 1 || !has_fast_form(n.op->name)) return "";
  return std::string("kiln::pointwise::fast_form<") + n.op->pointwise + ">(" + operands[0] + ", beyond)";
}

bool fusable_pointwise(const TracedNode& n) {
  if (!n.op->pointwise) return false;
  size_t tensors = 0;
  for (const SchemaArg& arg : n.op->parsed.arguments) {
    if (arg.is_tensor()) tensors++;
    else if (arg.type != ArgType::Float || !float_attribute(n, arg)) return false;
  }
  return tensors == n.inputs.size();
}

std::string expression(const TracedNode& n, const std::vector<std::string>& operands) {
  std::string e = std::string(n.op->pointwise) + "::f(";
  const char* sep = "";
  for (const std::string& o : operands) e += sep + o, sep = ", ";
  for (const SchemaArg& arg : n.op->parsed.arguments)
    if (!arg.is_tensor()) e += sep + float_literal(*float_attribute(n, arg)), sep = ", ";
  return e + ")";
}

}  // namespace kiln::compiler::detail
