// The C++ the cpp backend writes for each fusable elementwise op: a call of
// the op's functor (OpDef::pointwise, from src/kernels/cpu/pointwise_math.h,
// whose text is the prelude of every generated source), the same function
// the eager kernel runs.
#pragma once
#include <string>
#include <vector>

#include "graph.h"

namespace kiln::compiler::detail {

// Whether node n's op has a functor that can compute it from its tensor
// inputs and attributes.
bool fusable_pointwise(const TracedNode& n);
// C++ for node n on its operands' expressions; n is fusable_pointwise.
std::string expression(const TracedNode& n, const std::vector<std::string>& operands);
// For an op whose functor has a fast form on part of its range (sin, cos):
// the expression through it, which sets the generated loop's `beyond` for
// an argument outside that range; "" for any other op.
std::string fast_expression(const TracedNode& n, const std::vector<std::string>& operands);
// pointwise_math.h's text (generated/pointwise_math_text.cpp).
extern const char* const kPointwiseMathSource;

}  // namespace kiln::compiler::detail
