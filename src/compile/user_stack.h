// The program's own frames of the current call stack, for graph-break logs
// (KILN_LOGS=graph_breaks) and explain(): a break seen inside an op call
// that carries no source location still points at the user's code.
#pragma once
#include <string>
#include <vector>

namespace kiln::compiler::detail {

// Up to max_frames frames, innermost first, leaving out kiln's own library
// and the C/C++ runtimes: "MODULE+0xOFFSET (symbol)" (the symbol where the
// module exports one), offsets as addr2line takes them (-e MODULE).
std::vector<std::string> user_stack(int max_frames);

}  // namespace kiln::compiler::detail
