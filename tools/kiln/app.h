// The whole `kiln` command line as one function, so the argument parser can
// be fuzzed (tests/fuzz/cli_args_fuzz.cpp) without running any command.
#pragma once

namespace kiln::cli {

// Parses argv and, if run_commands, runs the chosen subcommand. Whatever goes
// wrong ends in one line on stderr naming what was wrong and a non-zero
// return; nothing escapes as an exception.
int run_cli(int argc, const char* const* argv, bool run_commands = true);

}  // namespace kiln::cli
