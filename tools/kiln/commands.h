// Each subcommand of the `kiln` CLI lives in its own file and registers
// itself on the app here. With execute false the subcommand parses and
// checks its flags but does nothing (the argument fuzzer); its callback still
// owns the parsed arguments the flags write into.
#pragma once
#include <CLI/CLI.hpp>

namespace kiln::cli {
void add_info(CLI::App& app, bool execute = true);
void add_demo(CLI::App& app, bool execute = true);
void add_train(CLI::App& app, bool execute = true);
void add_generate(CLI::App& app, bool execute = true);
void add_run(CLI::App& app, bool execute = true);
}  // namespace kiln::cli
