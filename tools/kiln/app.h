// The whole `kiln` command line as one function, so the argument parser can
// be fuzzed (tests/fuzz/cli_args_fuzz.cpp) without running any command.
#pragma once
#include <string>
#include <vector>

namespace kiln::cli {

// Parses argv and, if run_commands, runs the chosen subcommand. Whatever goes
// wrong ends in one line on stderr naming what was wrong and a non-zero
// return; nothing escapes as an exception.
int run_cli(int argc, const char* const* argv, bool run_commands = true);

// The arguments run_cli was given (a subcommand that starts ranks of itself,
// `kiln train --nproc N`, passes them on).
const std::vector<std::string>& cli_arguments();

}  // namespace kiln::cli
