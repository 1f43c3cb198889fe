// Each subcommand of the `kiln` CLI lives in its own file and registers
// itself on the app here.
#pragma once
#include <CLI/CLI.hpp>

namespace kiln::cli {
void add_info(CLI::App& app);
void add_demo(CLI::App& app);
void add_train(CLI::App& app);
void add_generate(CLI::App& app);
}  // namespace kiln::cli
