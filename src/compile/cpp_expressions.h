// The C++ the cpp backend writes for each fusable elementwise op, and the
// helpers those expressions call (the prelude of every generated source).
#pragma once
#include <string>

#include "graph.h"

namespace kiln::compiler::detail {

// C++ for one elementwise op on operands a (and b); empty when not fusable.
std::string expression(const TracedNode& n, const std::string& a, const std::string& b);
// How many tensor operands the op's expression takes (1 or 2).
int arity(const std::string& op);
// Static inline functions the expressions call.
extern const char* const kLoopPrelude;

}  // namespace kiln::compiler::detail
